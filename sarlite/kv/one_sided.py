"""One-sided reads: a rank reads rows of a KVStore without their owners calling anything.

DGL's KV servers answer reads whatever the trainers are doing, and DGL scripts read on
some ranks only (``if g.rank() == 0: pred[ids]`` while the others wait in
``torch.distributed.barrier()``). A store made with ``one_sided_reads=True`` (the DGL
facade's :class:`~sarlite.distributed.DistGraph` makes its store so) reads that way:
each rank runs a serving thread (:class:`sarlite.kv.service.RequestService`) that
answers requests for the rows its partition owns, straight from its shards, and
:class:`OneSidedReader` asks the owners for the rows a read needs.

A request names the tensor by :func:`name_code` (the same on every rank) and carries the
owner's global ids, each once and ascending (the owner refuses others, so no answer is
larger than the owner's rows); the owner answers with the raw bytes of those rows. A read
of more rows than one request may carry (:data:`~sarlite.kv.service.MAX_IDS` ids or
:data:`~sarlite.kv.service.MAX_ANSWER_BYTES` bytes) is split into several requests.
Rows this rank owns are read locally, so a read of local rows sends nothing.
Writes stay collective (:meth:`KVStore.push <sarlite.kv.KVStore.push>`).
"""
from __future__ import annotations

import hashlib
import math
import weakref
from datetime import timedelta
from typing import Callable

import torch

from ..comm import CollectiveError
from .routing import Policy, _as_bytes, _from_bytes, take_rows
from .service import ANSWER_RAISED, MAX_ANSWER_BYTES, MAX_IDS, OK, REFUSED, RequestService

UNKNOWN_TENSOR = 1      # status: the owner has no tensor of that code
NOT_OWNED = 2           # status: an id asked is not the owner's, or ids are not ascending

Lookup = Callable[[int], "tuple[torch.Tensor, Policy] | None"]


def name_code(name: str) -> int:
    """A 62-bit code of a tensor name (a hash, equal on every rank and run)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


def _answer(lookup_ref: "weakref.WeakMethod", code: int,
            ids: torch.Tensor) -> tuple[int, torch.Tensor | None]:
    """The owner's side (its serving thread): the bytes of rows ``ids`` of tensor
    ``code``, which may have been deleted, or the store freed, meanwhile."""
    lookup = lookup_ref()
    found = lookup(code) if lookup is not None else None
    if found is None:
        return UNKNOWN_TENSOR, None
    shard, policy = found
    if ids.numel() and not (bool((policy.to_partid(ids) == policy.part_id).all()) and
                            bool((ids[1:] > ids[:-1]).all())):
        return NOT_OWNED, None          # (distinct ascending ids bound the answer's size)
    return OK, _as_bytes(take_rows(shard, policy.to_local(ids))).reshape(-1)


def _answer_for(lookup: Lookup):
    """The serving thread's answer function for ``lookup``'s store (weakly held)."""
    lookup_ref = weakref.WeakMethod(lookup)
    return lambda code, ids: _answer(lookup_ref, code, ids)


class OneSidedReader:
    """Reads rows of one store's tensors from their owners' serving threads.

    Parameters
    ----------
    lookup:
        A bound method of the store: ``lookup(code)`` returns ``(shard, policy)`` of the
        tensor whose :func:`name_code` is ``code`` on this rank, or ``None``. It runs in
        the serving thread; the reader keeps only a weak reference to it, so the store
        can be freed.
    read_timeout:
        Bounds each wait for an owner (default the process group's timeout, as
        :func:`sarlite.init` recorded it: :func:`sarlite.comm.settings`).

    Creating it is a **collective** (every rank, once per store: one address exchange,
    see :class:`~sarlite.kv.service.RequestService`); :meth:`pull` is not.
    """

    def __init__(self, lookup: Lookup, read_timeout: timedelta | None = None):
        self._service = RequestService(_answer_for(lookup), "kv-reads", kind="kv_pull",
                                       timeout=read_timeout)

    @property
    def read_timeout(self) -> timedelta:
        return self._service.timeout

    def pull(self, name: str, shard: torch.Tensor, policy: Policy,
             ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (``(n,)`` int64, checked) of tensor ``name`` in the caller's
        order, duplicates allowed: ``(n, *shard.shape[1:])``, exactly the rows a
        collective pull returns. ``shard`` and ``policy`` are this rank's.

        **Not a collective**: only this rank calls it; each owner of some ``ids``
        answers from its serving thread (each distinct id is asked once). Blocking.

        Raises
        ------
        CollectiveError
            An owner died, did not answer within the timeout, has no tensor ``name``, or
            could not read the rows (the owner and ``name`` named).
        """
        unique, inverse = torch.unique(ids, sorted=True, return_inverse=True)
        parts_count = policy.partition_book.num_partitions()
        counts = torch.bincount(policy.to_partid(unique), minlength=parts_count).tolist()
        chunks = unique.split(counts)          # ascending ids are grouped by owner
        me, code = policy.part_id, name_code(name)
        what = f"one-sided read of {name!r}"
        row_bytes = max(1, math.prod(shard.shape[1:]) * shard.element_size())
        step = max(1, min(MAX_IDS, MAX_ANSWER_BYTES // row_bytes))
        remote = {p: chunk.split(step) for p, chunk in enumerate(chunks)
                  if p != me and chunk.numel()}
        rows = {p: [] for p in remote}
        for round_ in range(max((len(pieces) for pieces in remote.values()), default=0)):
            asks = {p: (code, pieces[round_]) for p, pieces in remote.items()
                    if round_ < len(pieces)}
            for p, answer in self._service.ask(asks, what).items():
                rows[p].append(_rows(what, name, p, asks[p][1].numel(), answer, shard))
        parts = [take_rows(shard, policy.to_local(chunk)) if p == me else
                 rows[p][0] if len(rows[p]) == 1 else torch.cat(rows[p])
                 for p, chunk in enumerate(chunks) if p == me or chunk.numel()]
        return take_rows(torch.cat(parts), inverse)


def _rows(what: str, name: str, owner: int, count: int, answer: tuple[int, torch.Tensor],
          like: torch.Tensor) -> torch.Tensor:
    """The ``count`` rows in owner ``owner``'s answer, shaped and typed like ``like``."""
    status, body = answer
    if status == UNKNOWN_TENSOR:
        raise CollectiveError(f"{what}: rank {owner} has no tensor {name!r}: it was "
                              f"deleted there (a DistTensor that is not persistent is "
                              f"deleted when its object is freed) or never created")
    if status == NOT_OWNED:
        raise CollectiveError(f"{what}: rank {owner} does not own all the ids it was "
                              f"asked for; the ranks' partition books differ")
    if status == REFUSED:
        raise CollectiveError(f"{what}: rank {owner} refused a request beyond its service's "
                              f"limits")
    if status == ANSWER_RAISED:
        raise CollectiveError(f"{what}: rank {owner} failed to read the rows (its "
                              f"output has the traceback)")
    row_bytes = math.prod(like.shape[1:]) * like.element_size()
    if status != OK or body.numel() != count * row_bytes:
        raise CollectiveError(f"{what}: rank {owner} answered status {status} with "
                              f"{body.numel()} bytes for {count} rows of {row_bytes} "
                              f"bytes")
    return _from_bytes(body.reshape(count, row_bytes), like)
