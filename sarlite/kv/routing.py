"""Rows between the ranks that ask for them and the ranks that own them.

A row-sharded tensor is split by a partition policy: rank ``p`` owns the contiguous id
range of partition ``p``. Pulling sends each requested id to its owner and brings the row
back (:func:`pull_rows`); pushing sends ``(id, row)`` pairs to the owner; graph queries
such as sampling send ids to their owners and get answers of any length back
(:func:`ask_owners`). All start with :func:`~sarlite.kv.protocol.exchange_ids` (sizes,
then the ids with their header) and then move the rows: a pull's answers in one exchange
(each rank knows how many rows it asked for), a push's and a query's with one more
``all_to_all_rows`` (sizes, then the payload). A rank's own ids never enter the exchange.
Rows travel as raw bytes, so every dtype can be moved (gloo itself lacks some, such as
int16).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from ..comm import all_to_all_rows, rank, start_known_rows, world_size
from ..partition import EdgePartitionPolicy, NodePartitionPolicy
from ..partition.book import as_id_tensor
from .protocol import KVCall, exchange_ids

Policy = NodePartitionPolicy | EdgePartitionPolicy


def checked_ids(ids, size: int, what: str) -> torch.Tensor:
    """``ids`` (tensor, array, list, int or slice) as a 1-D int64 tensor in ``[0, size)``.

    Raises
    ------
    TypeError
        The ids are not integers.
    IndexError
        An id is outside ``[0, size)``.
    """
    if isinstance(ids, slice):
        return torch.arange(*ids.indices(size), dtype=torch.int64)
    ids = as_id_tensor(ids).cpu()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
        raise IndexError(f"{what}: ids must be in [0, {size}), got values in "
                         f"[{int(ids.min())}, {int(ids.max())}]")
    return ids


def _as_bytes(rows: torch.Tensor) -> torch.Tensor:
    """``(n, *row_shape)`` rows as an ``(n, row_bytes)`` uint8 view (a copy if needed)."""
    return rows.reshape(rows.shape[0], math.prod(rows.shape[1:])).contiguous() \
        .view(torch.uint8)


def _from_bytes(data: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Undo :func:`_as_bytes` for rows shaped and typed like ``like``."""
    return data.contiguous().view(like.dtype).reshape((data.shape[0],) + like.shape[1:])


def take_rows(rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``rows[ids]`` for a 1-D int64 ``ids``: ``index_select``, which gathers whole rows
    several times faster than advanced indexing does on CPU (torch 2.2, one thread)."""
    return rows.index_select(0, ids)


def _owner_counts(owner: torch.Tensor) -> list[int]:
    """How many of the ids with owner ranks ``owner`` each rank owns."""
    return torch.bincount(owner, minlength=world_size()).tolist()


def ask_owners(ids: torch.Tensor, owners: torch.Tensor,
               serve: Callable[[list[torch.Tensor]], list[torch.Tensor]],
               call: KVCall) -> list[torch.Tensor]:
    """Send ``ids[i]`` to rank ``owners[i]``, let every rank answer, return the answers.

    The round trip behind every pull and graph query: the checked id exchange
    (:func:`~sarlite.kv.protocol.exchange_ids`), then one ``all_to_all_rows`` of the
    answers. A rank's own ids and its answer to itself stay local.

    Parameters
    ----------
    ids:
        ``(n,)`` int64 ids; may be empty.
    owners:
        ``(n,)`` rank that owns each id, in ``[0, world_size)``.
    serve:
        Called once on every rank with ``requests``: ``requests[k]`` holds the ids rank
        ``k`` sent here (``(n_k,)`` int64, in the order ``k`` listed them). It returns one
        answer per rank: ``answers[k]`` is a tensor of rows for rank ``k`` (any number of
        rows; the trailing shape and dtype must be the same on every rank). ``serve`` may
        itself run collectives, since every rank calls it at the same point.
    call:
        Names the operation in errors (its tag must match on every rank) and the
        traffic counter.

    Returns
    -------
    list[torch.Tensor]
        ``result[j]`` is rank ``j``'s answer to this rank's ids that ``j`` owns.

    Collective and blocking: every rank must call it, also with no ids (two row
    exchanges: the requests, then the answers). Start an operation with
    :func:`~sarlite.kv.protocol.validated` so that a rank whose input is bad still takes
    part in the request exchange.

    Raises
    ------
    CollectiveError
        Another rank's input was bad, it ran a different operation, or a rank died.
    """
    me = rank()
    order = torch.sort(owners, stable=True).indices
    chunks = list(ids[order].split(_owner_counts(owners)))
    mine, chunks[me] = chunks[me], chunks[me][:0]
    requests = exchange_ids(chunks, call)
    requests[me] = mine
    answers = serve(requests)
    own_answer, answers[me] = answers[me], answers[me][:0]
    received = all_to_all_rows(answers, kind=call.kind)
    received[me] = own_answer
    return received


def pull_rows(ids: torch.Tensor, policy: Policy,
              serve: Callable[[torch.Tensor], torch.Tensor], call: KVCall) -> torch.Tensor:
    """Rows ``ids`` (``(n,)`` int64, checked) of a sharded tensor, in the caller's order.

    ``serve(local_ids)`` returns the rows of this rank's shard at those local ids, shape
    ``(k, *row_shape)``, the same ``row_shape`` and dtype on every rank (the shape the
    ranks agreed on when the tensor was made). Other ranks' ids are requested once each
    (duplicates are dropped before they are sent). Each rank knows how many rows it asked
    of each owner, so the answers move without a header exchange, and this rank reads
    its own rows while they travel: one gather from the shard in the caller's order, into
    which the received rows are then copied. Collective and blocking: every rank calls
    it, possibly with no ids (two row exchanges: the ids, then the rows). Returns
    ``(n, *row_shape)``.
    """
    me = rank()
    owner = policy.to_partid(ids)
    own_at = torch.nonzero(owner == me).squeeze(1)
    remote_at = torch.nonzero(owner != me).squeeze(1)
    # sorted ids are grouped by owner in rank order (this rank's group is empty)
    unique, inverse = torch.unique(ids[remote_at], sorted=True, return_inverse=True)
    counts = _owner_counts(policy.to_partid(unique))
    requests = exchange_ids(list(unique.split(counts)), call)    # none from this rank
    pending = start_known_rows([_as_bytes(serve(policy.to_local(asked)))
                                for asked in requests], counts, call.kind)
    like = serve(policy.to_local(ids[:0]))
    if own_at.numel():
        # every position reads a row of the shard; other ranks' rows then overwrite theirs
        local = torch.full_like(ids, 0)
        local[own_at] = policy.to_local(ids[own_at])
        local[remote_at] = int(local[own_at[0]])
        rows = serve(local)
    else:
        rows = like.new_empty((ids.shape[0],) + like.shape[1:])
    return _put_rows(rows, remote_at, _from_bytes(pending.wait(), like), inverse)


def _put_rows(rows: torch.Tensor, at: torch.Tensor, distinct: torch.Tensor,
              inverse: torch.Tensor) -> torch.Tensor:
    """``rows`` with ``rows[at[j]] = distinct[inverse[j]]`` for every ``j``; when each row
    of ``distinct`` is used once (``inverse`` is a permutation) it is copied straight to
    its place, without first gathering them in ``at``'s order."""
    if inverse.numel() == distinct.shape[0]:
        to = torch.empty_like(at).index_copy_(0, inverse, at)
        return rows.index_copy_(0, to, distinct)
    return rows.index_copy_(0, at, take_rows(distinct, inverse))


def push_rows(ids: torch.Tensor, values: torch.Tensor, policy: Policy,
              call: KVCall) -> tuple[torch.Tensor, torch.Tensor]:
    """Send ``values[i]`` to the owner of ``ids[i]``; return what this rank received.

    ``ids`` is ``(n,)`` int64 (checked), ``values`` is ``(n, *row_shape)`` with the same
    row shape and dtype on every rank. Returns ``(local_ids, rows)`` of every pair sent to
    this rank, concatenated in **(source rank, position)** order: all of rank 0's pairs in
    the order rank 0 listed them, then rank 1's, and so on. Collective and blocking.
    """
    me = rank()
    owner = policy.to_partid(ids)
    order = torch.sort(owner, stable=True).indices
    counts = _owner_counts(owner)
    id_chunks = list(ids[order].split(counts))
    row_chunks = list(values[order].split(counts))
    mine_ids, id_chunks[me] = id_chunks[me], id_chunks[me][:0]
    mine_rows, row_chunks[me] = row_chunks[me], row_chunks[me][:0]
    got_ids = exchange_ids(id_chunks, call)
    got_rows = [_from_bytes(got, values) for got in
                all_to_all_rows([_as_bytes(c) for c in row_chunks], kind=call.kind)]
    got_ids[me], got_rows[me] = mine_ids, mine_rows
    return policy.to_local(torch.cat(got_ids)), torch.cat(got_rows)


def last_occurrence(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct ``ids`` (ascending) and the position of the last occurrence of each."""
    unique, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    positions = torch.arange(ids.numel(), dtype=torch.int64)
    last = torch.full((unique.numel(),), -1, dtype=torch.int64)
    return unique, last.scatter_reduce_(0, inverse, positions, "amax")


def sum_duplicates(ids: torch.Tensor,
                   values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct ``ids`` (ascending), the sum of the rows of each (added in position
    order) and how many rows each had."""
    unique, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True,
                                           return_counts=True)
    sums = values.new_zeros((unique.numel(),) + values.shape[1:])
    return unique, sums.index_add_(0, inverse, values), counts
