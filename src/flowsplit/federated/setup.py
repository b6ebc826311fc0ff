"""Building a run from its configuration: data, partition, model, parts, profile, topology.

Every process of the distributed runner calls :func:`prepare_run` with the same
arguments and gets the same :class:`RunSetup` (same partition, same initial
weights, same costs), so nothing but tensors ever needs to cross the network.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowsplit.data.store import Dataset, load_dataset
from flowsplit.errors import ConfigError
from flowsplit.federated.config import SFLConfig
from flowsplit.federated.roles import RunContext, TierModule
from flowsplit.federated.schemes import Scheme, scheme_of
from flowsplit.federated.system.costs import CostMeter
from flowsplit.federated.system.partition import Shards, make_partition
from flowsplit.federated.system.parts import check_cuts, split_model
from flowsplit.federated.system.profile import (
    BlockProfile,
    PartCosts,
    client_memory_bytes,
    profile_model,
)
from flowsplit.federated.system.protocol import AGGREGATOR, CLIENT, SERVER, Address
from flowsplit.federated.system.topology import Topology, assign_clients
from flowsplit.models.base import BlockModel
from flowsplit.models.layers import SeqInput, fit_input_scaler

ModelFn = Callable[..., BlockModel]


@dataclass(frozen=True)
class RegistryModel:
    """A picklable model factory for a registry model (``flowsplit.models.registry``)."""

    name: str
    view: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def resolved_view(self) -> str:
        if self.view:
            return self.view
        from flowsplit.models.registry import default_view

        return default_view(self.name)

    def __call__(self, *, input_shape: tuple[int, ...], n_classes: int) -> BlockModel:
        from flowsplit.models.registry import build_model

        return build_model(
            self.name,
            view=self.resolved_view(),
            input_shape=input_shape,
            n_classes=n_classes,
            **self.options,
        )


@dataclass
class RunSetup:
    """Everything a role needs, identical in every process."""

    config: SFLConfig
    scheme: Scheme
    dataset: Dataset
    view: str
    model: BlockModel
    """The initial global model (seeded)."""
    profile: BlockProfile
    costs: PartCosts
    topology: Topology
    """The topology with shard sizes filled in."""
    assignment: np.ndarray
    shards: Sequence[np.ndarray]
    """Training row indices of each client (a :class:`~flowsplit.federated.system.partition.
    Shards`: index ranges of one array, read from the memory-mapped views when needed)."""

    @property
    def n_samples(self) -> np.ndarray:
        sizes = getattr(self.shards, "sizes", None)
        if sizes is not None:
            return np.asarray(sizes, dtype=np.int64)
        return np.array([len(s) for s in self.shards], dtype=np.int64)

    @property
    def wait_timeout_s(self) -> float:
        """How long a ``--mode dist`` role waits on the rendezvous store or on a peer
        that is not known to be gone: ``--timeout`` for each client and two more, since
        in the worst case a role waits while every client in turn is timed out."""
        return self.config.timeout_s * (2 + self.topology.n_clients)

    def context(self, *, meter_enabled: bool = True, sampled: bool = False) -> RunContext:
        """What every role knows of the run. ``sampled``: the caller runs the sampled
        clients of each round (the simulation, a dist run's worker pool); a process per
        client refuses a sampled config."""
        if not sampled:
            from flowsplit.federated.sampling import sampling_configured

            if sampling_configured(self.config):
                raise ConfigError(
                    "--clients-per-round, --fraction and --select sample clients in "
                    "--mode sim, or in --mode dist with a pool of client workers "
                    "(--client-workers P)"
                )
        # Every field of the context but the meter is this setup's of the same name.
        shared = {f.name: getattr(self, f.name) for f in fields(RunContext) if f.name != "meter"}
        meter = CostMeter(self.topology, enabled=meter_enabled)
        return RunContext(**shared, meter=meter)

    def subset(
        self, clients: np.ndarray, *, topology: Topology | None = None, assignment=None
    ) -> RunSetup:
        """This run restricted to ``clients`` (sorted indices; client ``k`` of the result is
        ``clients[k]``): the topology's rows of them (of ``topology``, a round's network,
        when given; without a trace, which is the run's), their assignment (``assignment``
        when given) and shards. Model, costs and data are shared, not copied."""
        clients = np.asarray(clients, dtype=np.int64)
        topo = subset_topology(self.topology if topology is None else topology, clients)
        shards = self.shards
        shards = (
            shards.take(clients) if isinstance(shards, Shards) else [shards[i] for i in clients]
        )
        chosen = self.assignment[clients] if assignment is None else np.asarray(assignment)
        return replace(self, topology=topo, assignment=chosen, shards=shards)

    def tier_modules(self) -> tuple[TierModule, TierModule, TierModule]:
        """Fresh client, aggregator and server modules with the initial weights."""
        split = split_model(self.model, *self.config.cuts)
        aux_c, aux_g = self.scheme.aux_heads(self.profile, self.config)
        return (
            TierModule(split.client, aux_c),
            TierModule(split.aggregator, aux_g),
            TierModule(split.server),
        )

    def client_data(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``index``'s shard as tensors (rows as stored, labels int64)."""
        rows = self.shards[index]
        x = torch.from_numpy(np.ascontiguousarray(self.dataset.view(self.view)[rows]))
        y = torch.from_numpy(self.dataset.labels[rows].astype(np.int64))
        return x, y

    def eval_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.dataset.split_indices(self.config.eval_split)
        if len(rows) == 0:
            raise ConfigError(
                f"the dataset has no {self.config.eval_split!r} rows to evaluate on; "
                "choose another --eval-split"
            )
        x = torch.from_numpy(np.ascontiguousarray(self.dataset.view(self.view)[rows]))
        return x, torch.from_numpy(self.dataset.labels[rows].astype(np.int64))


def subset_topology(topology: Topology, clients: np.ndarray) -> Topology:
    """``topology`` with only ``clients`` (in that order; aggregators and server kept) and
    no trace (a trace names the clients of the whole topology: apply it first)."""
    clients = np.asarray(clients, dtype=np.int64)
    return replace(
        topology,
        client_speed=np.asarray(topology.client_speed)[clients],
        client_memory=np.asarray(topology.client_memory)[clients],
        client_samples=np.asarray(topology.client_samples)[clients],
        ca_latency=np.asarray(topology.ca_latency)[clients],
        ca_bandwidth=np.asarray(topology.ca_bandwidth)[clients],
        trace=(),
    )


def role_seed(seed: int, address: Address) -> int:
    """The torch seed of one role (dropout masks), the same in every runner."""
    offset = {SERVER: 0, AGGREGATOR: 1_000, CLIENT: 1_000_000}[address[0]]
    return int(seed) * 10_000_019 + offset + int(address[1])


def _fit_input_scaler(model: BlockModel, ds: Dataset, view: str, rows: np.ndarray) -> None:
    # Standardising per-packet features needs statistics of the training rows; the
    # pooled moments of all shards (what clients would report as sums and counts)
    # are the moments of the union, so fitting on the union is the federated result.
    if any(isinstance(m, SeqInput) for m in model.modules()):
        fit_input_scaler(model, torch.from_numpy(np.asarray(ds.view(view)[rows])))


def _resolve_view(ds: Dataset, model_fn: ModelFn, view: str | None) -> str:
    if view is None:
        resolve = getattr(model_fn, "resolved_view", None)
        view = resolve() if resolve else getattr(model_fn, "view", None)
    if view is None:
        raise ConfigError("no dataset view given and the model factory names none")
    if not ds.has_view(view):
        raise ConfigError(
            f"dataset {ds.root} has no view {view!r} (it has {', '.join(ds.views)}); pass --view"
        )
    return view


def _train_rows(ds: Dataset, config: SFLConfig) -> np.ndarray:
    """The training rows, or a seeded subset of ``config.train_limit`` of them."""
    train = ds.split_indices("train")
    if config.train_limit is not None and config.train_limit < len(train):
        pick = np.random.default_rng([config.seed, 17]).choice(
            len(train), config.train_limit, False
        )
        train = np.sort(train[pick])
    return train


def _check_client_memory(topo: Topology, costs: PartCosts, config: SFLConfig) -> None:
    need = client_memory_bytes(costs, config.batch_size)
    short = np.flatnonzero(topo.client_memory < need)
    if len(short):
        raise ConfigError(
            f"client {short[0]} has {topo.client_memory[short[0]] / 2**20:.0f} MiB but the client "
            f"part at cut a={config.cuts[0]} needs about {need / 2**20:.0f} MiB with batch "
            f"{config.batch_size}; choose a smaller a or batch, or give clients more memory"
        )


def _check_faults(topo: Topology, config: SFLConfig) -> None:
    a = topo.n_aggregators
    for j in config.failed_aggregators():
        if j >= a:
            raise ConfigError(f"--fail aggregator:{j}: the topology has aggregators 0..{a - 1}")
    if len(config.capacity) not in (0, 1, a):
        raise ConfigError(
            f"--capacity gives {len(config.capacity)} values for {a} aggregators; "
            "give one for all or one per aggregator"
        )


def prepare_run(
    config: SFLConfig,
    *,
    dataset: str | Path | Dataset,
    model_fn: ModelFn,
    topology: Topology,
    view: str | None = None,
    profile: BlockProfile | None = None,
    assignment: np.ndarray | None = None,
) -> RunSetup:
    """Build the run: partition, initial model, parts' costs, shard sizes in the topology."""
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    view = _resolve_view(ds, model_fn, view)
    train = _train_rows(ds, config)
    meta = ds.meta.iloc[train]
    shards = make_partition(
        config.partition,
        indices=train,
        labels=ds.labels[train],
        meta_sites={c: meta[c].to_numpy() for c in ("group", "source") if c in meta},
        n_clients=topology.n_clients,
        seed=config.seed,
    )
    torch.manual_seed(config.seed)
    model = model_fn(input_shape=ds.view_shape(view), n_classes=ds.n_classes)
    check_cuts(model.n_blocks, *config.cuts)
    _fit_input_scaler(model, ds, view, train)
    profile = profile if profile is not None else profile_model(copy.deepcopy(model))
    scheme = scheme_of(config)
    costs = scheme.part_costs(
        profile,
        *config.cuts,
        aux_mode=config.aux_head,
        aux_max_features=config.aux_max_features,
    )
    if not isinstance(shards, Shards):
        shards = Shards.from_list(shards)
    topo = topology.with_samples(shards.sizes)
    _check_client_memory(topo, costs, config)
    _check_faults(topo, config)
    if assignment is None:
        assignment = assign_clients(topo, config.assign, config.seed)
    assignment = topo.check_assignment(assignment)
    return RunSetup(
        config=config,
        scheme=scheme,
        dataset=ds,
        view=view,
        model=model,
        profile=profile,
        costs=costs,
        topology=topo,
        assignment=assignment,
        shards=shards,
    )
