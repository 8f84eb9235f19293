"""The facade's entry points that may be a script's first collective: they join the
process group first (see :mod:`sarlite.distributed.context`), then run sarlite's own."""
from __future__ import annotations

import os

import torch

from ..partition import RangePartitionBook
from ..partition.book import DEFAULT_ETYPE, DEFAULT_NTYPE
from ..sampling import DistGraph as _DistGraph
from ..sampling import split as _split
from .context import ensure_process_group


class DistGraph(_DistGraph):
    """:class:`sarlite.sampling.DistGraph` that first joins the process group and reads
    one-sidedly.

    As ``dgl.distributed.DistGraph(graph_name, gpb=None, part_config=None)``, after
    :func:`~sarlite.distributed.initialize`: when the script has not called
    ``torch.distributed.init_process_group`` (nor :func:`sarlite.init`), the constructor
    does so with :func:`sarlite.init` and the options given to ``initialize``; a group the
    script made is reused. Then it is :class:`sarlite.sampling.DistGraph`'s constructor
    (a collective every rank calls; keyword-only extras such as ``replace_kvstore`` pass
    through) with ``one_sided_reads=True`` unless the caller says otherwise: reading a
    ``DistTensor`` (``g.ndata[name][ids]``, ``pred[ids]``) is then one-sided as in DGL,
    so a script may read on one rank while the others wait in a barrier. Writes, graph
    queries and sampling stay collectives. Without a launcher the process runs alone and
    ``part_config`` must hold one partition.
    """

    def __init__(self, graph_name: str | os.PathLike, gpb: RangePartitionBook | None = None,
                 part_config: str | os.PathLike | None = None, **kwargs):
        ensure_process_group()
        kwargs.setdefault("one_sided_reads", True)
        super().__init__(graph_name, gpb, part_config, **kwargs)

    @classmethod
    def from_partition_data(cls, data, **kwargs) -> "DistGraph":
        """:meth:`sarlite.sampling.DistGraph.from_partition_data` after joining the process
        group, with ``one_sided_reads=True`` unless the caller says otherwise."""
        ensure_process_group()
        kwargs.setdefault("one_sided_reads", True)
        return super().from_partition_data(data, **kwargs)


def node_split(nodes, partition_book: RangePartitionBook | None = None,
               ntype: str = DEFAULT_NTYPE, rank: int | None = None, force_even: bool = True,
               node_trainer_ids=None) -> torch.Tensor:
    ensure_process_group()      # the default rank is the process group's
    return _split.node_split(nodes, partition_book, ntype, rank, force_even,
                             node_trainer_ids)


def edge_split(edges, partition_book: RangePartitionBook | None = None,
               etype=DEFAULT_ETYPE[1], rank: int | None = None, force_even: bool = True,
               edge_trainer_ids=None) -> torch.Tensor:
    ensure_process_group()
    return _split.edge_split(edges, partition_book, etype, rank, force_even,
                             edge_trainer_ids)


node_split.__doc__ = (_split.node_split.__doc__ or "") + """
    Notes
    -----
    In :mod:`sarlite.distributed` it first joins the process group when none exists
    (see :func:`~sarlite.distributed.initialize`), so that the default ``rank`` is this
    process's.
    """
edge_split.__doc__ = (_split.edge_split.__doc__ or "") + """
    Notes
    -----
    In :mod:`sarlite.distributed` it first joins the process group when none exists.
    """


def find_edges(g: _DistGraph, edge_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src, dst)`` global node ids of the global edge ids ``edge_ids``, as
    ``dgl.distributed.find_edges``: ``g.find_edges(edge_ids)``. Collective: every rank
    calls it in the same order, possibly with no ids."""
    return g.find_edges(edge_ids)
