"""Wrapped collectives: reductions, broadcasts, object gathers, barriers, shape agreement.

Everything in sarlite that talks to other ranks outside the row exchanges
(:mod:`sarlite.comm.exchange`) goes through these functions, so that each one

* is a **collective** over the default process group: every rank must call it, in the same
  order as its other collectives, also with nothing to contribute;
* blocks until it has completed on this rank, bounded by the process group's timeout
  (``sarlite.init(timeout=...)``, default ``SARLITE_TIMEOUT`` seconds);
* raises :class:`~sarlite.comm.CollectiveError` naming its ``kind``, this rank and the cause
  when a peer died, raised, or did not make the same call in time, instead of a raw
  ``torch.distributed`` traceback;
* records the bytes it moved in :mod:`sarlite.comm.traffic` under ``kind``;
* with no process group, or a world of one rank, returns the local value and communicates
  nothing.
"""
from __future__ import annotations

import hashlib
import pickle

import torch
import torch.distributed as dist

from . import traffic
from .context import settle
from .group import comm_device, rank, world_size
from .errors import disagreement, guarded

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _pickled_size(obj: object) -> int:
    """Bytes of ``obj`` on the wire (torch pickles objects before sending them)."""
    return len(pickle.dumps(obj))


def _comm_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` on the device collectives need, outside autograd."""
    return tensor.detach().to(comm_device(), copy=True).contiguous()


def _check_src(src: int) -> None:
    if not 0 <= src < world_size():
        raise ValueError(f"src must be a rank in [0, {world_size()}), got {src}")


def all_reduce(tensor: torch.Tensor, op: str = "sum", *, kind: str) -> torch.Tensor:
    """Element-wise reduction of ``tensor`` over all ranks.

    Every rank must call it with a tensor of the same shape and dtype. Blocking. The result
    is a new tensor on ``tensor``'s device (``tensor`` itself is not modified) and is not
    differentiable (see :func:`all_reduce_autograd`).

    Parameters
    ----------
    tensor: any shape and dtype the backend reduces.
    op: ``"sum"``, ``"max"`` or ``"min"``.
    kind: names the call in errors and in the traffic counters.

    Raises
    ------
    ValueError
        ``op`` is not one of the above.
    CollectiveError
        The reduction failed (a rank died, or did not call it within the timeout).
    """
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {sorted(_OPS)}, got {op!r}")
    if world_size() == 1:
        return tensor.detach().clone()
    buffer = _comm_copy(tensor)
    guarded(kind, lambda: dist.all_reduce(buffer, op=_OPS[op]))
    traffic.record(kind, _nbytes(buffer), _nbytes(buffer))
    return buffer.to(tensor.device)


class _SumOverRanks(torch.autograd.Function):
    """Sum over ranks; the gradient of each rank's input is the sum over ranks of the
    output gradients (every rank's loss depends on every rank's input)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, kind: str) -> torch.Tensor:
        ctx.kind = kind
        return all_reduce(tensor, "sum", kind=kind)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return all_reduce(grad, "sum", kind=ctx.kind), None


def all_reduce_autograd(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """Differentiable sum of ``tensor`` over all ranks (a new tensor).

    Its backward pass is another collective: the gradient that reaches each rank's
    ``tensor`` is the sum over ranks of the gradients of the result, as if every rank's
    loss were one global loss. Every rank must call it with the same shape and dtype, and
    every rank must then back-propagate through it (or none). Blocking, forward and
    backward.

    Raises
    ------
    CollectiveError
        The reduction (forward or backward) failed.
    """
    if world_size() == 1:
        return tensor.clone()
    return _SumOverRanks.apply(tensor, kind)


def broadcast(tensor: torch.Tensor, src: int = 0, *, kind: str) -> torch.Tensor:
    """Rank ``src``'s ``tensor``, on every rank (a new tensor on ``tensor``'s device).

    Every rank must call it with a tensor of the same shape and dtype (its values are
    ignored on the other ranks). Blocking.

    Raises
    ------
    ValueError
        ``src`` is not a rank.
    CollectiveError
        The broadcast failed (a rank died, or did not call it within the timeout).
    """
    _check_src(src)
    if world_size() == 1:
        return tensor.detach().clone()
    buffer = _comm_copy(tensor)
    guarded(kind, lambda: dist.broadcast(buffer, src=src))
    size, me = _nbytes(buffer), rank()
    traffic.record(kind, size * (world_size() - 1) if me == src else 0,
                   0 if me == src else size)
    return buffer.to(tensor.device)


def all_gather_object(obj: object, kind: str) -> list:
    """Every rank's picklable ``obj``, as a list indexed by rank.

    Every rank must call it. Blocking. Traffic is counted as pickled bytes.

    Raises
    ------
    CollectiveError
        The gather failed (a rank died, or did not call it within the timeout).
    """
    if world_size() == 1:
        return [obj]
    gathered: list = [None] * world_size()
    guarded(kind, lambda: dist.all_gather_object(gathered, obj))
    me = rank()
    traffic.record(kind, _pickled_size(obj) * (world_size() - 1),
                   sum(_pickled_size(other) for peer, other in enumerate(gathered)
                       if peer != me))
    return gathered


def broadcast_object(obj: object, src: int = 0, *, kind: str) -> object:
    """Rank ``src``'s picklable ``obj``, on every rank (``obj`` is ignored elsewhere).

    Every rank must call it with the same ``src``. Blocking. Traffic is counted as pickled
    bytes.

    Raises
    ------
    ValueError
        ``src`` is not a rank.
    CollectiveError
        The broadcast failed (a rank died, or did not call it within the timeout).
    """
    _check_src(src)
    if world_size() == 1:
        return obj
    box = [obj if rank() == src else None]
    guarded(kind, lambda: dist.broadcast_object_list(box, src=src))
    size, me = _pickled_size(box[0]), rank()
    traffic.record(kind, size * (world_size() - 1) if me == src else 0,
                   0 if me == src else size)
    return box[0]


def barrier(kind: str) -> None:
    """Return once every rank has called it. Every rank must call it. Blocking.

    Raises
    ------
    CollectiveError
        A rank died, or did not call it within the timeout.
    """
    if world_size() == 1:
        return
    guarded(kind, dist.barrier)
    traffic.record(kind, 0, 0)                 # no payload; the counter shows the call


def finalize() -> None:
    """Wait for every rank, then take down the default process group (if one exists).

    Collective: every rank must call it. The barrier keeps a rank from tearing the group
    down while another still uses it. After the barrier, :func:`~sarlite.comm.context.settle`
    stops the heartbeat monitor; with gloo it also keeps the group's C++ object alive
    until the process ends and gives gloo's threads a moment to finish. The group is then
    removed from ``torch.distributed``. (The training app also ends its workers with
    ``os._exit`` after ``finalize``, which closes the last window completely.)

    Raises
    ------
    CollectiveError
        A rank died, or did not reach it within the timeout.
    """
    if not dist.is_initialized():
        return
    barrier("finalize")
    settle()
    dist.destroy_process_group()


def _signature(fields: dict[str, torch.Tensor]) -> tuple:
    return tuple(sorted((name, tuple(value.shape[1:]), str(value.dtype))
                        for name, value in fields.items()))


def _digest(signature: tuple) -> int:
    """A 56-bit hash of ``signature`` (exact in an int64 and its negation)."""
    return int.from_bytes(hashlib.blake2b(repr(signature).encode(), digest_size=7).digest(),
                          "big")


def _shape_mismatch(kind: str, signatures: list[tuple]) -> str:
    """The first difference between the ranks' signatures, worded the same on every rank."""
    tables = [{name: (shape, dtype) for name, shape, dtype in sig} for sig in signatures]
    for name in sorted(set().union(*tables)):
        present = disagreement([name in table for table in tables],
                               lambda held: "passed" if held else "missing")
        if present:
            return (f"{kind}: field {name!r} is {present}: every rank must pass the same "
                    f"fields")
        shapes = disagreement([table[name][0] for table in tables])
        if shapes:
            return (f"{kind}: field {name!r} has trailing shape {shapes}: every rank must "
                    f"pass the same feature width")
        dtypes = disagreement([table[name][1] for table in tables])
        if dtypes:
            return (f"{kind}: field {name!r} has dtype {dtypes}: every rank must pass the "
                    f"same dtype")
    return f"{kind}: the ranks passed different fields"       # unreachable in practice


def agree_row_shapes(kind: str, fields: dict[str, torch.Tensor]) -> None:
    """Check that every rank passes the same field names with the same trailing shape
    (``shape[1:]``) and dtype; row counts may differ.

    Every rank must call it, with its own rows of the same fields. Blocking: one
    all-reduce of 16 bytes when the ranks agree (plus an object gather to word the error
    when they do not). Its collectives and traffic are named ``f"{kind}/row_shapes"``.

    Raises
    ------
    ValueError
        On every rank, the same message naming the first field that differs, ``kind``,
        and the shapes (or dtypes, or presence) with the ranks that hold them, e.g.
        ``"update_all: field 'h' has trailing shape (3,) on rank 0 but (4,) on rank 1:
        every rank must pass the same feature width"``.
    CollectiveError
        The check itself failed (a rank died, or did not call it within the timeout).
    """
    if world_size() == 1:
        return
    check = f"{kind}/row_shapes"
    signature = _signature(fields)
    code = _digest(signature)
    extremes = all_reduce(torch.tensor([code, -code], dtype=torch.int64), "max", kind=check)
    if int(extremes[0]) == -int(extremes[1]):              # max == min: the same everywhere
        return
    raise ValueError(_shape_mismatch(kind, all_gather_object(signature, check)))


def scatter_object(objs: list | None, src: int = 0, *, kind: str) -> object:
    """Rank ``src``'s ``objs[r]``, on each rank ``r`` (one picklable object per rank).

    Every rank must call it with the same ``src``; ``objs`` is a list of ``world_size``
    objects on ``src`` and is ignored elsewhere (pass ``None``). Blocking. Traffic is
    counted as pickled bytes: ``src`` sends every other rank's object, each rank receives
    its own (``src``'s own object is not counted).

    Raises
    ------
    ValueError
        ``src`` is not a rank, or on ``src`` ``objs`` is not a list of ``world_size``
        objects.
    CollectiveError
        The scatter failed (a rank died, or did not call it within the timeout).
    """
    _check_src(src)
    me, size = rank(), world_size()
    if me == src and (not isinstance(objs, list) or len(objs) != size):
        raise ValueError(f"scatter_object: rank {src} must pass a list of {size} objects, "
                         f"got {type(objs).__name__}"
                         f"{f' of length {len(objs)}' if isinstance(objs, list) else ''}")
    if size == 1:
        return objs[0]
    box: list = [None]
    guarded(kind, lambda: dist.scatter_object_list(box, objs if me == src else None,
                                                   src=src))
    traffic.record(kind, sum(_pickled_size(obj) for peer, obj in enumerate(objs)
                             if peer != src) if me == src else 0,
                   0 if me == src else _pickled_size(box[0]))
    return box[0]
