"""The checks every KV collective starts with: same call on every rank, valid input.

Every KV operation is a collective, so a rank that finds its own input invalid must still
take part in the exchange, or the other ranks would wait until the process-group timeout.
Two mechanisms make bad input end with one clear error on every rank, without a hang and
before any data changes:

* Row operations (pull, push, optimizer steps, graph queries) start with
  :func:`exchange_ids`: the id exchange carries a two-number header per peer, a status
  (0 = input valid) and a tag naming the operation (a CRC of :attr:`KVCall.what`). A rank
  whose input failed sends only the header; every rank then sees the failure or the tag
  mismatch and raises before any payload moves.
* Set-up operations (creating a tensor, a store, saving, loading) end with :func:`agree`,
  an all-gather of a small record per rank: the ranks compare what they asked for and
  whether their local part succeeded, and every rank raises the same way.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch

from ..comm import CollectiveError, all_gather_object, all_to_all_rows, world_size

T = TypeVar("T")
_OK, _FAILED = 0, 1


@dataclass(frozen=True)
class KVCall:
    """One KV operation: ``what`` names it in errors (and makes its tag), ``kind`` is the
    traffic counter (:mod:`sarlite.comm.traffic`) its bytes are recorded under."""

    what: str
    kind: str

    @property
    def tag(self) -> int:
        return zlib.crc32(self.what.encode())


def exchange_ids(chunks: list[torch.Tensor], call: KVCall,
                 failed: bool = False) -> list[torch.Tensor]:
    """Send the int64 ids ``chunks[k]`` (shape ``(n_k,)``) to rank ``k``; return what each
    rank sent here.

    Collective and blocking: every rank calls it once at the start of the same operation.
    ``failed=True`` marks this rank's input as invalid; it then returns ``[]`` without
    raising (its caller re-raises its own error).

    Raises
    ------
    CollectiveError
        Another rank's input was invalid, another rank is running a different operation
        (its tag differs), or the exchange itself failed (a rank died, or did not call it
        within the process group's timeout).
    """
    header = torch.tensor([_FAILED if failed else _OK, call.tag], dtype=torch.int64)
    try:
        received = all_to_all_rows([torch.cat([header, c]) for c in chunks], kind=call.kind)
    except CollectiveError as err:
        raise CollectiveError(f"{call.what}: {err}") from err
    if failed:
        return []
    for peer, got in enumerate(received):
        status, tag = got[:2].tolist()
        if status != _OK:
            raise CollectiveError(f"{call.what}: rank {peer} passed invalid input (its "
                                  f"own error says what); no rank changed any data")
        if tag != call.tag:
            raise CollectiveError(
                f"{call.what}: rank {peer} is running a different KV operation at this "
                f"point; every rank must call the same DistTensor/KVStore/DistGraph "
                f"operations in the same order")
    return [got[2:] for got in received]


def validated(call: KVCall, check: Callable[[], T]) -> T:
    """Return ``check()``; if it raises, take part in the header exchange as a failed rank
    (so that no other rank waits for this one), then re-raise the error.

    Use it for the local input checks of an operation whose first collective is
    :func:`exchange_ids`; on success the caller must go on to call :func:`exchange_ids`.
    """
    try:
        return check()
    except Exception:
        empty = torch.zeros(0, dtype=torch.int64)
        try:
            exchange_ids([empty] * world_size(), call, failed=True)
        except CollectiveError:
            pass                        # this rank's own error is the one to report
        raise


def agree(what: str, record: object, error: Exception | None = None) -> None:
    """Check that every rank passed an equal ``record`` and that none had an ``error``.

    Collective and blocking (one ``all_gather_object``; nothing when there is one rank).
    ``record`` must be picklable and describe what this rank asked for, e.g.
    ``(name, shape, dtype)``.

    Raises
    ------
    Exception
        This rank's own ``error``, when it is given.
    CollectiveError
        Another rank had an error (its message is included), or the gather failed.
    ValueError
        The ranks passed different records (all of them are listed).
    """
    mine = (None if error is None else f"{type(error).__name__}: {error}", record)
    try:
        gathered = all_gather_object(mine, "kv_agree")
    except CollectiveError as err:
        raise CollectiveError(f"{what}: the ranks could not compare their calls: {err}") \
            from err
    if error is not None:
        raise error
    for peer, (message, _) in enumerate(gathered):
        if message is not None:
            raise CollectiveError(f"{what}: rank {peer} failed: {message}")
    if any(other != record for _, other in gathered):
        listing = "; ".join(f"rank {peer}: {other}" for peer, (_, other) in enumerate(gathered))
        raise ValueError(f"{what}: the ranks asked for different things ({listing}); every "
                         f"rank must make the same call")
