"""``node_split`` / ``edge_split``: the share of a boolean mask that one rank trains on.

As in DGL, ``force_even=False`` gives each rank the masked ids its partition owns, and
``force_even=True`` gives every rank the same number of ids (up to one). sarlite's even
split keeps as many owned ids local as any even split can: rank ``r`` keeps
``min(owned_r, quota_r)`` of its own masked ids (the lowest), the remaining ids of
over-full ranks are pooled in ascending order and handed out, in rank order, to the ranks
still short of their quota. The larger quotas (``count // P + 1``) go to the ranks owning
the most masked ids. Every rank computes the same assignment from the whole mask, so no
communication is needed for a plain tensor mask.

On a heterogeneous partition book, ``ntype`` (``etype``) picks the id space: the mask of a
real type has one entry per *type-wise* id of that type, is split by the type-wise ranges
each partition owns (:attr:`~sarlite.partition.PartitionPolicy.ranges`), and the ids
returned are type-wise; the default ``"_N"`` (``"_E"``) splits homogeneous ids of all
types, as in DGL.
"""
from __future__ import annotations

import numpy as np
import torch

from ..comm.context import rank as current_rank
from ..partition import RangePartitionBook
from ..partition.book import (DEFAULT_ETYPE, DEFAULT_NTYPE, EdgePartitionPolicy,
                              NodePartitionPolicy, PartitionPolicy, _is_default_etype)


def _book_of(mask, partition_book: RangePartitionBook | None, what: str
             ) -> RangePartitionBook:
    """The partition book to split ``mask`` with: the given one, else a DistTensor's."""
    if partition_book is not None:
        return partition_book
    if hasattr(mask, "part_policy"):
        return mask.part_policy.partition_book
    raise ValueError(f"{what}_split of a plain tensor needs a partition_book (only a "
                     f"DistTensor mask carries its own)")


def _mask_values(mask, policy: PartitionPolicy, what: str, type_label: str
                 ) -> torch.Tensor:
    """The whole mask as a bool tensor of one entry per id of ``policy``. Pulls every row
    of a DistTensor mask (a collective)."""
    if hasattr(mask, "part_policy"):
        values = mask[torch.arange(mask.shape[0])]
    else:
        values = mask if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask))
    if values.dim() != 1 or values.dtype.is_floating_point or values.is_complex():
        raise TypeError(f"{what}_split needs a 1-D boolean (or 0/1 integer) mask, got "
                        f"dtype {values.dtype} and shape {tuple(values.shape)}")
    if values.numel() != policy.get_size():
        raise ValueError(f"{what}_split: the mask has {values.numel()} entries but "
                         f"{type_label} has {policy.get_size()} {what}s")
    return values.cpu() != 0


def _even_quotas(owned_counts: torch.Tensor) -> torch.Tensor:
    """``(P,)`` ids per rank: ``total // P``, plus one for the ``total % P`` ranks that own
    the most ids (lower rank first on ties)."""
    parts = owned_counts.numel()
    total = int(owned_counts.sum())
    quotas = torch.full((parts,), total // parts, dtype=torch.int64)
    order = torch.sort(-owned_counts, stable=True).indices
    quotas[order[:total % parts]] += 1
    return quotas


def _split(mask: torch.Tensor, ranges: torch.Tensor, part: int, force_even: bool
           ) -> torch.Tensor:
    owned = [mask[lo:hi].nonzero().squeeze(1) + lo for lo, hi in ranges.tolist()]
    if not force_even:
        return owned[part]
    counts = torch.tensor([ids.numel() for ids in owned], dtype=torch.int64)
    quotas = _even_quotas(counts)
    kept = torch.minimum(counts, quotas)
    pool = torch.cat([ids[k:] for ids, k in zip(owned, kept.tolist())])
    short = (quotas - kept).tolist()
    start = sum(short[:part])
    return torch.cat([owned[part][:int(kept[part])], pool[start:start + short[part]]])


def _check_rank(rank: int | None, book: RangePartitionBook) -> int:
    rank = current_rank() if rank is None else rank
    if not isinstance(rank, int) or not 0 <= rank < book.num_partitions():
        raise ValueError(f"rank {rank!r} is out of range: the partition book has "
                         f"{book.num_partitions()} partitions (one rank per partition)")
    return rank


def node_split(nodes, partition_book: RangePartitionBook | None = None,
               ntype: str = DEFAULT_NTYPE, rank: int | None = None, force_even: bool = True,
               node_trainer_ids=None) -> torch.Tensor:
    """The node ids of ``nodes``' true entries that rank ``rank`` should process.

    ``dgl.distributed.node_split``'s parameters (DGL 2.1), in its order.

    Parameters
    ----------
    nodes:
        Boolean (or 0/1 integer) mask with one entry per node id of ``ntype``: a tensor,
        numpy array or a ``DistTensor`` (whose rows are then pulled: a collective that
        every rank must call). For ``"_N"`` it covers all node ids (homogeneous ids, all
        types); for a node type of a heterogeneous graph, the type-wise ids of that type
        (``(number of nodes of ntype,)``).
    partition_book:
        The graph's partition book; optional only for a ``DistTensor`` mask.
    ntype:
        ``"_N"`` (default): homogeneous ids. A node type of the partition book: its
        type-wise ids, split by the type-wise ranges each partition owns.
    rank:
        Whose share to return (default: this process's rank); one rank per partition.
    force_even:
        ``True``: every rank gets ``count // P`` or ``count // P + 1`` ids, as many of
        them owned by the rank as possible (see the module docstring). ``False``: the
        masked ids the rank's partition owns.
    node_trainer_ids:
        Ignored: DGL uses it to split a partition's share between several trainers of one
        machine, and sarlite runs one trainer per partition.

    Notes
    -----
    Which ranks call it: any rank, any number of times, when ``nodes`` is a tensor or
    array (no communication); every rank, in the same order, when it is a ``DistTensor``.

    Returns
    -------
    torch.Tensor
        int64 ids, in the id space of ``ntype`` (type-wise for a real type); over all
        ranks they are exactly the masked ids, each once. Empty for an all-false mask.

    Raises
    ------
    ValueError
        No partition book for a plain tensor, a node type the book does not have, a mask
        whose length is not the number of nodes (of ``ntype``), or a rank outside the
        partitions.
    TypeError
        A float or multi-dimensional mask.
    NotImplementedError
        The book is homogeneous and ``ntype`` is not ``"_N"``.
    """
    book = _book_of(nodes, partition_book, "node")
    policy = NodePartitionPolicy(book, ntype)
    label = "the graph" if ntype == DEFAULT_NTYPE else f"node type {ntype!r}"
    mask = _mask_values(nodes, policy, "node", label)
    return _split(mask, policy.ranges, _check_rank(rank, book), force_even)


def edge_split(edges, partition_book: RangePartitionBook | None = None,
               etype=DEFAULT_ETYPE[1], rank: int | None = None, force_even: bool = True,
               edge_trainer_ids=None) -> torch.Tensor:
    """The edge ids of ``edges``' true entries that rank ``rank`` should process.

    ``dgl.distributed.edge_split``'s parameters (DGL 2.1), in its order. Same as
    :func:`node_split` over edge ids, where an edge is owned by its destination's
    partition: ``etype`` is the homogeneous edge type (``"_E"``, the default;
    ``"_N:_E:_N"`` or ``("_N", "_E", "_N")``), whose mask covers all edge ids, or an
    edge type of the partition book (a relation name that only one canonical type has,
    ``"src:rel:dst"`` or ``(src, rel, dst)``), whose mask covers its type-wise ids and
    whose result is type-wise ids. ``edge_trainer_ids`` is ignored (one trainer per
    partition). Collective only for a ``DistTensor`` mask, as :func:`node_split`.

    Raises
    ------
    ValueError, TypeError, NotImplementedError
        As :func:`node_split`, for the number of edges (of ``etype``) and the edge type
        (also a relation name that several canonical types share).
    """
    book = _book_of(edges, partition_book, "edge")
    policy = EdgePartitionPolicy(book, etype)
    label = "the graph" if _is_default_etype(etype) else \
        f"edge type {':'.join(policy.type_name)!r}"
    mask = _mask_values(edges, policy, "edge", label)
    return _split(mask, policy.ranges, _check_rank(rank, book), force_even)
