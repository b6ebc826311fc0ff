"""The message protocol shared by the simulated and the distributed runner.

Roles (:mod:`flowsplit.federated.roles`) are written as generator coroutines that
``yield`` :class:`Send` and :class:`Recv` requests. A runner executes them: the
simulation delivers tensors through in-process mailboxes, the distributed runner
through torch.distributed (gloo) point-to-point calls. Because the role code is the
same, both runners train the same way and charge the same bytes.

Every message is a header (:data:`HEADER_NUMEL` int64 values: a code, the payload
dtype, its rank and up to seven dimensions) followed by the payload tensor, so the
receiver can allocate the buffer without unpickling anything. A message's size on
the wire is ``HEADER_NBYTES + payload.nbytes``; both runners charge exactly that.

Addresses are ``(kind, index)`` pairs: ``("server", 0)``, ``("aggregator", j)``,
``("client", i)``. Ranks of the distributed runner: server 0, aggregator ``j`` at
``1 + j``, client ``i`` at ``1 + A + i``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import torch

SERVER, AGGREGATOR, CLIENT = "server", "aggregator", "client"
Address = tuple[str, int]
SERVER_ADDRESS: Address = (SERVER, 0)

# Message types, hops and directions: the keys of every byte count.
ACTIVATIONS, GRADIENTS, LABELS, MODEL, CONTROL = (
    "activations",
    "gradients",
    "labels",
    "model",
    "control",
)
MESSAGE_TYPES = (ACTIVATIONS, GRADIENTS, LABELS, MODEL, CONTROL)
CLIENT_AGGREGATOR, AGGREGATOR_SERVER = "client-aggregator", "aggregator-server"
HOPS = (CLIENT_AGGREGATOR, AGGREGATOR_SERVER)
UP, DOWN = "up", "down"
DIRECTIONS = (UP, DOWN)

# Round phases, for the time accounts of the cost model.
DOWNLOAD, TRAIN, UPLOAD = "download", "train", "upload"

HEADER_NUMEL = 10
MAX_NDIM = HEADER_NUMEL - 3
HEADER_NBYTES = HEADER_NUMEL * 8  # int64
# Payload sizes of the messages the cost model predicts without tensors at hand.
LABEL_BYTES = 8  # int64 per sample
COUNT_BYTES = 8  # one int64 sample count
FLOAT_BYTES = 4  # float32 model states
CODE_DATA, CODE_DROPPED = 0, 1

# Only these dtypes cross the wire (activations, labels, flat model states, counts).
_DTYPES = (torch.float32, torch.int64, torch.float64, torch.float16, torch.bfloat16, torch.uint8)
_DTYPE_CODE = {dt: k for k, dt in enumerate(_DTYPES)}


@dataclass(frozen=True, slots=True)
class Send:
    """Request: send ``tensor`` to ``dst`` (``None`` tells ``dst`` a client was dropped).

    ``client`` is the client the message is on behalf of (its time is charged to that
    client's path); ``phase`` is one of download/train/upload.
    """

    dst: Address
    tensor: torch.Tensor | None
    kind: str
    client: int = -1
    phase: str = TRAIN


@dataclass(frozen=True, slots=True)
class Recv:
    """Request: receive the next message from ``src``; the runner answers with a tensor.

    The answer is ``None`` when ``src`` announced a dropped client, or (distributed
    runner only) when ``src`` was lost: it missed its deadline or its connection closed.
    ``droppable`` marks an aggregator waiting for one of its clients: only such waits
    use the short drop timeout; waits on upper tiers use a long one.
    """

    src: Address
    kind: str
    droppable: bool = False


Coroutine = Generator[Any, Any, Any]
"""A role's step: yields :class:`Send`/:class:`Recv` requests, receives the answers."""


def hop_of(a: Address, b: Address) -> tuple[str, str]:
    """(hop, direction) of a message from ``a`` to ``b``."""
    kinds = (a[0], b[0])
    if kinds == (CLIENT, AGGREGATOR):
        return CLIENT_AGGREGATOR, UP
    if kinds == (AGGREGATOR, CLIENT):
        return CLIENT_AGGREGATOR, DOWN
    if kinds == (AGGREGATOR, SERVER):
        return AGGREGATOR_SERVER, UP
    if kinds == (SERVER, AGGREGATOR):
        return AGGREGATOR_SERVER, DOWN
    raise ValueError(f"no link between {a} and {b}: clients reach the server through aggregators")


def message_nbytes(tensor: torch.Tensor | None) -> int:
    """Bytes a message carrying ``tensor`` puts on the wire (header included)."""
    if tensor is None:
        return HEADER_NBYTES
    return HEADER_NBYTES + tensor.numel() * tensor.element_size()


def encode_header(tensor: torch.Tensor | None) -> torch.Tensor:
    """The int64 header announcing ``tensor`` (or a dropped client when ``None``)."""
    header = torch.zeros(HEADER_NUMEL, dtype=torch.int64)
    if tensor is None:
        header[0] = CODE_DROPPED
        return header
    if tensor.dim() > MAX_NDIM:
        raise ValueError(f"cannot send a {tensor.dim()}-D tensor (at most {MAX_NDIM} dims)")
    if tensor.dtype not in _DTYPE_CODE:
        raise ValueError(f"cannot send dtype {tensor.dtype}")
    header[0] = CODE_DATA
    header[1] = _DTYPE_CODE[tensor.dtype]
    header[2] = tensor.dim()
    if tensor.dim():
        header[3 : 3 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    return header


MAX_NUMEL = 1 << 31
"""Largest tensor a header may announce (elements): a corrupt or hostile header must not
make the receiver allocate without bound."""


def decode_header(header: torch.Tensor) -> tuple[torch.dtype, tuple[int, ...]] | None:
    """(dtype, shape) announced by ``header``, or ``None`` for a dropped-client notice."""
    values = header.tolist()
    if values[0] == CODE_DROPPED:
        return None
    if (
        values[0] != CODE_DATA
        or not 0 <= values[1] < len(_DTYPES)
        or not 0 <= values[2] <= MAX_NDIM
    ):
        raise ValueError(f"corrupt message header {values}")
    ndim = values[2]
    shape = tuple(values[3 : 3 + ndim])
    numel = 1
    for d in shape:
        numel *= d
    if any(d < 0 for d in shape) or numel > MAX_NUMEL:
        raise ValueError(f"corrupt message header {values} (shape {shape})")
    return _DTYPES[values[1]], shape


def rank_of(address: Address, n_aggregators: int) -> int:
    """Rank of ``address`` in the distributed runner."""
    kind, index = address
    if kind == SERVER:
        return 0
    if kind == AGGREGATOR:
        return 1 + index
    return 1 + n_aggregators + index


def address_of(rank: int, n_aggregators: int, last: str = CLIENT) -> Address:
    """Inverse of :func:`rank_of`; ``last``: the kind of the ranks after the aggregators
    (clients, or a pool's workers)."""
    if rank == 0:
        return SERVER_ADDRESS
    if rank <= n_aggregators:
        return (AGGREGATOR, rank - 1)
    return (last, rank - 1 - n_aggregators)
