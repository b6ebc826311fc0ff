"""Data-parallel plumbing: the environment, the layout, the process group, DDP.

- :func:`read_dist_env` is the only place that reads ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` (set by torchrun or by
  :mod:`flowsplit.train.launch`).
- :class:`ParallelLayout` turns that and the config into what the loop asks:
  ``ddp_enabled``, ``is_main``, device, backend, threads, per-worker batch, lr.
- :func:`process_group` sets the group up and always tears it down.
- :func:`apply_ddp` wraps a single-device model; model code never sees
  ``torch.distributed``.

Rendezvous: when flowsplit launches its own workers, rank 0 hosts the TCP store
on a socket bound to ``MASTER_ADDR`` only (127.0.0.1 by default), not on every
interface as ``TCPStore`` would. Under torchrun the agent's store is used.
"""

from __future__ import annotations

import io
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel

from flowsplit.errors import ConfigError
from flowsplit.train.config import COMM_HOOKS, TrainConfig
from flowsplit.util import available_cores  # noqa: F401  (its importers' name for it)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job (the fields :class:`DistEnv` reads and
    :class:`ParallelLayout` keeps)."""

    rank: int
    """Global rank (0 when not distributed)."""
    world_size: int
    """Number of processes in the job."""
    local_rank: int
    """Rank on this machine (selects the GPU)."""

    @property
    def is_distributed(self) -> bool:
        """One of several processes (started by torchrun or another launcher)."""
        return self.world_size > 1


@dataclass(frozen=True)
class DistEnv(Ranks):
    """The distributed environment of this process, as the launcher set it."""

    local_world_size: int
    """Processes on this machine (shares out the cores)."""
    master_addr: str
    """Rendezvous host."""
    master_port: int
    """Rendezvous port (0 when not distributed)."""
    restart_count: int
    """How many times torchrun restarted this worker group (0 on the first attempt)."""
    agent_store: bool
    """Whether torchrun's agent hosts the rendezvous store (then workers only connect)."""


def read_dist_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """Read the distributed environment variables; defaults describe one process."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    return DistEnv(
        rank=int(env.get("RANK", "0")),
        world_size=world,
        local_rank=int(env.get("LOCAL_RANK", "0")),
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(env.get("MASTER_PORT", "0")),
        restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
    )


@dataclass(frozen=True)
class ParallelLayout(Ranks):
    """How one training job is laid out over processes, devices and threads."""

    device: str
    """``cpu`` or ``cuda:<local_rank>``."""
    backend: str | None
    """``gloo`` or ``nccl``; ``None`` when not distributed."""
    threads_per_worker: int
    """torch intra-op threads of this worker."""
    global_batch: int
    """Samples per optimiser step over all workers."""
    per_worker_batch: int
    """Samples per step on this worker."""
    lr: float
    """Learning rate actually used (scaled with ``--scale-lr``)."""

    @property
    def ddp_enabled(self) -> bool:
        """DDP wraps the model: the job is distributed."""
        return self.is_distributed

    @property
    def is_main(self) -> bool:
        """Only the main rank logs, evaluates and writes."""
        return self.rank == 0

    @property
    def engine(self) -> str:
        return "ddp" if self.ddp_enabled else "centralised"

    @classmethod
    def from_config(cls, cfg: TrainConfig, env: DistEnv) -> ParallelLayout:
        """Resolve devices, backend, threads, batch and lr; errors say how to fix."""
        has_cuda = torch.cuda.is_available()
        if cfg.device == "cuda" and not has_cuda:
            raise ConfigError("--device cuda, but no CUDA device is visible; use --device cpu")
        use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and has_cuda)
        device = f"cuda:{env.local_rank}" if use_cuda else "cpu"
        backend = None
        if env.world_size > 1:
            backend = cfg.backend if cfg.backend != "auto" else ("nccl" if use_cuda else "gloo")
            if backend == "nccl" and not use_cuda:
                raise ConfigError("--backend nccl needs CUDA tensors; use --backend gloo on CPU")
        threads = cfg.threads or max(1, available_cores() // max(1, env.local_world_size))
        n = env.world_size
        if cfg.scale_lr:
            per_worker, lr = cfg.batch_size, cfg.effective_lr("torch") * n
        else:
            if cfg.batch_size % n:
                raise ConfigError(
                    f"--batch-size {cfg.batch_size} is the global batch and must divide among "
                    f"{n} workers; use a multiple of {n}, or --scale-lr to keep "
                    f"{cfg.batch_size} per worker"
                )
            per_worker, lr = cfg.batch_size // n, cfg.effective_lr("torch")
        return cls(
            world_size=n,
            rank=env.rank,
            local_rank=env.local_rank,
            device=device,
            backend=backend,
            threads_per_worker=threads,
            global_batch=per_worker * n,
            per_worker_batch=per_worker,
            lr=lr,
        )


def _bound_store(env: DistEnv, timeout: timedelta) -> tuple[dist.TCPStore, socket.socket | None]:
    """A TCP store; rank 0 serves it on a socket bound to ``master_addr`` only."""
    if env.rank != 0:
        store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, False, timeout)
        return store, None
    family = socket.AF_INET6 if ":" in env.master_addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((env.master_addr, env.master_port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot bind the rendezvous to {env.master_addr}:{env.master_port} ({exc.strerror}); "
            "is another run using that port?"
        ) from None
    sock.listen(env.world_size)
    store = dist.TCPStore(
        env.master_addr,
        env.master_port,
        env.world_size,
        True,
        timeout,
        master_listen_fd=sock.fileno(),
    )
    return store, sock


@contextmanager
def process_group(
    layout: ParallelLayout, env: DistEnv, *, timeout_s: float = 300.0
) -> Iterator[None]:
    """Initialise the process group for ``layout`` and destroy it on the way out, crash or not."""
    if not layout.ddp_enabled:
        yield
        return
    if layout.device.startswith("cuda"):
        torch.cuda.set_device(layout.device)
    timeout = timedelta(seconds=timeout_s)
    sock = None
    try:
        if env.agent_store:
            # torchrun's agent serves the store and keeps it across restarts: without a
            # per-attempt prefix a restarted group would read the dead group's addresses.
            agent = dist.TCPStore(env.master_addr, env.master_port, env.world_size, False, timeout)
            store = dist.PrefixStore(f"flowsplit/attempt-{env.restart_count}", agent)
        else:
            store, sock = _bound_store(env, timeout)
        dist.init_process_group(
            layout.backend, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout
        )
        yield
        # Every rank leaves together (as torch's own tests do before destroying a group):
        # gloo's threads release a finished collective's tensors after the caller has
        # moved on, and a rank that returned at once (while rank 0 still tested and
        # wrote) could reach interpreter exit first; freeing a Python tensor then killed
        # it with SIGABRT ("terminate called without an active exception"). Only on
        # success: after a failure a peer may never arrive.
        dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        if sock is not None:
            sock.close()


class CommMeter:
    """Bytes and time of the gradient all-reduces of one DDP model.

    Cheap: a counter and one pair of timestamps per bucket (a handful per step).
    Time is measured from launching a bucket's all-reduce to its completion;
    overlapping buckets count once (:meth:`busy_time` merges the intervals).

    *Exposed* communication is the part backward could not hide: DDP launches a
    bucket when its gradients are ready and in a fixed order, so when the last
    bucket is launched every gradient has been computed, and what follows until the
    last all-reduce completes is waiting on the network. :meth:`step_done` (called
    after each ``backward``) adds ``last completion - last launch`` of the step.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.n_bytes = 0
        self.n_calls = 0
        self.exposed_s = 0.0
        self._intervals: list[tuple[float, float]] = []
        self._step_from = 0  # first interval of the current step
        self._last_launch = float("-inf")

    def start(self) -> float:
        """A bucket's all-reduce is about to be launched: its start time."""
        t = time.perf_counter()
        self._last_launch = max(self._last_launch, t)
        return t

    def count(self, nbytes: int) -> None:
        """Add the payload bytes one bucket hands to the collective."""
        self.n_bytes += int(nbytes)
        self.n_calls += 1

    def launched(self, nbytes: int) -> float:
        """:meth:`count` and :meth:`start` in one (the plain all-reduce knows its bytes)."""
        self.count(nbytes)
        return self.start()

    def step_done(self) -> None:
        """Close one optimiser step: add its exposed communication time."""
        done = self._intervals[self._step_from :]
        if done:
            self.exposed_s += max(0.0, max(e for _, e in done) - self._last_launch)
        self._step_from = len(self._intervals)
        self._last_launch = float("-inf")

    def completed(self, start: float) -> None:
        # Runs on the backend's thread; list.append is atomic under the GIL.
        self._intervals.append((start, time.perf_counter()))

    def busy_time(self) -> float:
        """Seconds during which at least one all-reduce was in flight."""
        total, end = 0.0, float("-inf")
        for s, e in sorted(self._intervals):
            if e > end:
                total += e - max(s, end)
                end = e
        return total


POWERSGD_RANK = 2
"""Rank of PowerSGD's low-rank gradient approximation (its paper's small-rank default)."""
POWERSGD_START_STEP = 10
"""Plain all-reduce for the first steps, then PowerSGD (the early phase is the most
sensitive to approximate gradients; PowerSGD's authors warm up the same way)."""


class TimedHookState:
    """State of :func:`timed_comm_hook`: the meter, the kind of hook and its own state."""

    def __init__(self, meter: CommMeter, kind: str = "none", process_group=None):
        if kind not in COMM_HOOKS:
            raise ConfigError(f"--comm-hook must be one of {', '.join(COMM_HOOKS)}, got {kind!r}")
        self.meter = meter
        self.kind = kind
        self.process_group = process_group
        self.powersgd = None
        if kind == "powersgd":
            self.powersgd = powerSGD.PowerSGDState(
                process_group=process_group,
                matrix_approximation_rank=POWERSGD_RANK,
                start_powerSGD_iter=POWERSGD_START_STEP,
                random_seed=0,  # the same low-rank projections on every rank
            )


def timed_comm_hook(state, bucket):
    """DDP communication hook: all-reduce (plain or compressed), measured by ``state.meter``.

    ``state`` is a :class:`TimedHookState`, ``bucket`` a ``dist.GradBucket``; the result
    is a future of the averaged bucket. Bytes are the payload handed to the collectives:
    4 per gradient plain, 2 with fp16/bf16, and PowerSGD's low-rank factors plus the
    tensors it leaves uncompressed (counted as PowerSGD counts them). (No annotations:
    DDP checks them at registration and string annotations fail that check.)
    """
    meter, buf = state.meter, bucket.buffer()
    start = meter.start()
    if state.kind == "none":
        meter.count(buf.numel() * buf.element_size())
        buf.div_(dist.get_world_size())
        fut = dist.all_reduce(buf, async_op=True).get_future()  # of a list [buf]
    elif state.kind in ("fp16", "bf16"):
        meter.count(buf.numel() * 2)
        hook = (
            default_hooks.fp16_compress_hook
            if state.kind == "fp16"
            else (default_hooks.bf16_compress_hook)
        )
        fut = hook(state.process_group, bucket)
    else:
        ps = state.powersgd
        before, warm = ps.total_numel_after_compression, ps.iter < ps.start_powerSGD_iter
        fut = powerSGD.powerSGD_hook(ps, bucket)
        sent = buf.numel() if warm else ps.total_numel_after_compression - before
        meter.count(sent * buf.element_size())

    def done(f: torch.futures.Future) -> torch.Tensor:
        meter.completed(start)
        value = f.value()
        return value[0] if isinstance(value, list) else value

    return fut.then(done)


def apply_ddp(
    model: torch.nn.Module,
    *,
    layout: ParallelLayout,
    comm_meter: CommMeter | None = None,
    bucket_cap_mb: float = 25.0,
    comm_hook: str = "none",
) -> torch.nn.Module:
    """Wrap ``model`` (already on ``layout.device``) for data parallelism.

    ``comm_hook`` chooses how gradients travel: ``none`` (float32 all-reduce), ``fp16``
    / ``bf16`` (cast to 16 bits for the all-reduce, PyTorch's compression hooks) or
    ``powersgd`` (low-rank approximation with error feedback, PyTorch's PowerSGD hook);
    ``bucket_cap_mb`` is DDP's gradient bucket size. Buffers are not re-broadcast each
    step (``forward_sync_buffers=False``): flowsplit's models only have fixed
    input-scaling buffers, synchronised once at wrap time. Returns the model unchanged
    when the layout is not distributed.
    """
    if not layout.ddp_enabled:
        return model
    device_ids = [torch.device(layout.device).index] if layout.device.startswith("cuda") else None
    ddp = DistributedDataParallel(
        model, device_ids=device_ids, forward_sync_buffers=False, bucket_cap_mb=bucket_cap_mb
    )
    if comm_meter is not None or comm_hook != "none":
        state = TimedHookState(comm_meter or CommMeter(), comm_hook, dist.group.WORLD)
        ddp.register_comm_hook(state, timed_comm_hook)
    return ddp


def broadcast_flag(flag: bool, layout: ParallelLayout) -> bool:
    """Rank 0's ``flag`` on every rank (an int tensor: nothing is pickled)."""
    if not layout.ddp_enabled:
        return bool(flag)
    t = torch.tensor([int(flag)], dtype=torch.int64, device=layout.device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def gather_floats(value: float, layout: ParallelLayout) -> list[float]:
    """Every rank's ``value``, by rank, on every rank (a float tensor)."""
    if not layout.ddp_enabled:
        return [float(value)]
    mine = torch.tensor([float(value)], dtype=torch.float64, device=layout.device)
    out = [torch.zeros_like(mine) for _ in range(layout.world_size)]
    dist.all_gather(out, mine)
    return [float(t.item()) for t in out]


def broadcast_checkpoint(ckpt: dict[str, Any] | None, layout: ParallelLayout) -> dict[str, Any]:
    """Rank 0's checkpoint on every rank, so that RUN need not be on a shared disk.

    It travels as the bytes of ``torch.save`` in a uint8 tensor and is read back with
    ``torch.load(weights_only=True)``, the restricted loader that admits tensors and
    plain containers only: what crosses the network is never unpickled freely.
    """
    if not layout.ddp_enabled:
        assert ckpt is not None
        return ckpt
    size = torch.zeros(1, dtype=torch.int64, device=layout.device)
    if layout.is_main:
        buf = io.BytesIO()
        torch.save(ckpt, buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size[0] = payload.numel()
    dist.broadcast(size, src=0)
    if not layout.is_main:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    data = payload.to(layout.device)
    dist.broadcast(data, src=0)
    if layout.is_main:
        return ckpt  # type: ignore[return-value]
    return torch.load(
        io.BytesIO(data.cpu().numpy().tobytes()), map_location="cpu", weights_only=True
    )


def all_reduce_sum(values: list[float], layout: ParallelLayout) -> list[float]:
    """Element-wise sum of ``values`` over ranks."""
    if not layout.ddp_enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=layout.device)
    dist.all_reduce(t)
    return t.tolist()
