"""IntelLabs SAR's data tuples: ``ShardEdgesAndFeatures`` and ``PartitionData``."""
from __future__ import annotations

from typing import NamedTuple

import torch


class ShardEdgesAndFeatures(NamedTuple):
    """The owned edges whose source is in one partition.

    ``edges``: ``(src, dst)``, int64 global node ids of shape ``(E_j,)``;
    ``edge_features``: ``{name: (E_j, ...)}``, with ``dgl.ETYPE`` (all zero: one edge
    type) and the partition's edge features under DGL's keys (``"_N:_E:_N/<name>"``).
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
    ``(start, end)`` global node ids of partition ``j``; ``node_features``: the owned rows
    under DGL's keys (``"_N/features"``, ``"_N/train_mask"``, ... and ``dgl.NTYPE``), masks
    as bool; ``node_type_names`` ``["_N"]``; ``edge_type_names`` ``[("_N", "_E", "_N")]``;
    ``partition_book``: a :class:`sarlite.RangePartitionBook`.

    ``sarlite_data`` is the :class:`sarlite.PartitionData` the graph constructors use (the
    tensors are shared, not copied).
    """

    sarlite_data = None
