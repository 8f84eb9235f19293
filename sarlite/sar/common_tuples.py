"""IntelLabs SAR's data tuples: ``ShardEdgesAndFeatures`` and ``PartitionData``."""
from __future__ import annotations

from typing import NamedTuple

import torch


class ShardEdgesAndFeatures(NamedTuple):
    """The owned edges whose source is in one partition.

    ``edges``: ``(src, dst)``, int64 global (homogeneous) node ids of shape ``(E_j,)``,
    grouped by edge type in the order of ``edge_type_names``; ``edge_features``:
    ``dgl.ETYPE`` ``(E_j,)``, the edge type id of each edge, and the partition's edge
    features under DGL's keys ``"<src>:<rel>:<dst>/<name>"`` (``"_N:_E:_N/<name>"`` for a
    homogeneous graph), each with the rows of its relation's edges in this shard.
    """

    edges: tuple[torch.Tensor, torch.Tensor]
    edge_features: dict[str, torch.Tensor]


class _PartitionFields(NamedTuple):
    all_shard_edges: list[ShardEdgesAndFeatures]
    node_ranges: list[tuple[int, int]]
    node_features: dict[str, torch.Tensor]
    node_type_names: list[str]
    edge_type_names: list[tuple[str, str, str]]
    partition_book: object


class PartitionData(_PartitionFields):
    """One worker's partition in SAR's shape (from :func:`sar.load_dgl_partition_data`).

    ``all_shard_edges[j]``: the owned edges from partition ``j``; ``node_ranges[j]``:
    ``(start, end)`` global (homogeneous) node ids of partition ``j``, all types;
    ``node_features``: under DGL's keys ``"<ntype>/<name>"`` (``"_N/features"``, or
    ``"paper/features"``, ...) the rows of the owned nodes of that type, masks as bool, and
    ``dgl.NTYPE``: the type id of each owned node, in global id order (within a partition
    the nodes of one type have consecutive ids); ``node_type_names``
    (``["_N"]`` for a homogeneous graph) and ``edge_type_names`` (canonical, ``[("_N",
    "_E", "_N")]``), indexed by those ids; ``partition_book``: a
    :class:`sarlite.RangePartitionBook`.

    ``sarlite_data`` is the :class:`sarlite.PartitionData` the graph constructors use (the
    tensors are shared, not copied).
    """

    sarlite_data = None
