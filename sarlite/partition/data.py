"""Load this worker's partition once: the one parser of partition files for training.

:func:`load_partition_data` reads partition ``rank`` with :func:`load_partition` and
derives what full-graph training (:func:`sarlite.construct_full_graph`) and sampling
(:meth:`sarlite.DistGraph.from_partition_data`) both use, so that a worker reads its
files and holds its feature rows once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import dgl
import torch

from ..comm.context import rank as current_rank
from ..comm.context import world_size
from .book import DEFAULT_ETYPE_STR, DEFAULT_NTYPE, RangePartitionBook
from .files import is_heterogeneous, load_partition, read_part_config
from .hetero_data import HeteroPartitionData, hetero_partition_data
from .owned import ShardEdges, check_owned, group_by_source, owned_edges, strip_masks


@dataclass
class PartitionData:
    """What one worker holds of the partitioned graph.

    Attributes
    ----------
    rank, num_parts:
        This worker's partition and the number of partitions.
    node_ranges:
        ``(P, 2)`` int64 ``[start, end)`` of the global node ids each partition owns.
    partition_book:
        The :class:`~sarlite.RangePartitionBook` of the partitioning (``edge_ranges``:
        ``(P, 2)`` ``[start, end)`` of the global edge ids each partition owns).
    shards:
        ``shards[j]`` holds the owned edges (destination in this partition) whose source is
        in partition ``j``; sources, destinations and edge ids are global ids. Together
        the shards hold every owned edge id exactly once.
    node_features:
        ``{name: (num_owned, ...)}`` rows of the owned nodes, ``_N/`` prefix removed;
        fields named ``*_mask`` are bool (DGL's files store them as uint8).
    edge_features:
        ``{name: (num_owned_edges, ...)}`` rows of the owned edges **in shard order**
        (shard 0's edges, then shard 1's, ...), the order of ``GraphShardManager.edata``.
    graph_name:
        The graph's name in the partition config.
    partition_graph:
        The partition graph exactly as :func:`sarlite.load_partition` returns it (owned
        nodes and edges plus the halo; ndata ``_ID``, ``inner_node``; edata ``_ID``,
        ``inner_edge``), always on the CPU; :class:`~sarlite.DistGraph` samples on it.
    """

    rank: int
    num_parts: int
    node_ranges: torch.Tensor
    partition_book: RangePartitionBook
    shards: list[ShardEdges]
    node_features: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_features: dict[str, torch.Tensor] = field(default_factory=dict)
    graph_name: str = ""
    partition_graph: dgl.DGLGraph | None = None

    @property
    def owned_range(self) -> tuple[int, int]:
        """``[start, end)`` of the global node ids this partition owns."""
        start, end = self.node_ranges[self.rank].tolist()
        return start, end

    @property
    def owned_edge_range(self) -> tuple[int, int]:
        """``[start, end)`` of the global edge ids this partition owns."""
        start, end = self.partition_book.edge_ranges[self.rank].tolist()
        return start, end

    @property
    def num_owned_nodes(self) -> int:
        start, end = self.owned_range
        return end - start

    @property
    def num_nodes(self) -> int:
        """Nodes in the whole graph."""
        return int(self.node_ranges[-1, 1])

    @property
    def num_owned_edges(self) -> int:
        return sum(len(shard) for shard in self.shards)


def _node_rows(part_config, node_feats: dict, num_owned: int, part: int) -> dict:
    node_features = strip_masks(node_feats, DEFAULT_NTYPE + "/")
    for name, value in node_features.items():
        if value.shape[0] != num_owned:
            raise ValueError(f"{part_config}: node feature {name!r} of part {part} has "
                             f"{value.shape[0]} rows but the part owns {num_owned} nodes")
    return node_features


def _edge_rows(part_config, edge_feats: dict, rows: torch.Tensor, part: int) -> dict:
    """Edge features in shard order: ``rows`` are the local (owned) rows, in that order."""
    edge_features = strip_masks(edge_feats, DEFAULT_ETYPE_STR + "/")
    for name, value in edge_features.items():
        if value.shape[0] != rows.numel():
            raise ValueError(f"{part_config}: edge feature {name!r} of part {part} has "
                             f"{value.shape[0]} rows but the part owns {rows.numel()} edges")
    return {name: value[rows] for name, value in edge_features.items()}


def _check_world_size(part_config: str | os.PathLike, num_parts: int) -> None:
    """Raise ``ValueError`` unless there is one process per partition."""
    if world_size() != num_parts:
        raise ValueError(f"world size {world_size()} does not match the {num_parts} "
                         f"partitions of {part_config}: launch one worker per partition "
                         f"(torchrun --nproc_per_node={num_parts}) or repartition")


def load_partition_data(part_config: str | os.PathLike, rank: int | None = None,
                        device: torch.device | str | None = None
                        ) -> PartitionData | HeteroPartitionData:
    """Load partition ``rank`` (default: this process's rank) of a DGL-format partitioning.

    Reads partitions written by :func:`sarlite.partition_graph` and by
    ``dgl.distributed.partition_graph``; ``device`` moves the node and edge features (the
    partition graph stays on the CPU). Not a collective: each rank reads its own files.
    A heterogeneous partitioning gives a
    :class:`~sarlite.partition.hetero_data.HeteroPartitionData` (per-type features and
    per-relation shards, in type-wise ids).

    Raises
    ------
    ValueError
        A process group exists and its world size differs from the number of partitions,
        or the partition files are inconsistent (inner edges that are not exactly the
        owned edge ids into owned nodes, features with the wrong number of rows).
    FileNotFoundError
        The config or a partition file is missing.
    """
    meta = read_part_config(part_config)
    if rank is None:
        _check_world_size(part_config, meta["num_parts"])
    graph, node_feats, edge_feats, book, graph_name, _, _ = load_partition(
        part_config, current_rank() if rank is None else rank)
    build = hetero_partition_data if is_heterogeneous(meta) else partition_data_from
    data = build(graph, node_feats, edge_feats, book, graph_name, source=str(part_config))
    if device is None:
        return data
    return replace(data, node_features=_moved(data.node_features, device),
                   edge_features=_moved(data.edge_features, device))


def _moved(features: dict, device) -> dict:
    """``features`` (tensors, or dicts of tensors by type) on ``device``."""
    return {k: _moved(v, device) if isinstance(v, dict) else v.to(device)
            for k, v in features.items()}


def require_homogeneous_data(data, what: str):
    """``data`` unless it is a :class:`HeteroPartitionData`, which ``what`` (the caller's
    name) cannot take yet: then one ``NotImplementedError`` naming the limit."""
    if isinstance(data, HeteroPartitionData):
        raise NotImplementedError(
            f"{what}: the partition of {data.graph_name!r} is heterogeneous (node types "
            f"{data.ntypes}); {what} takes homogeneous graphs only so far. Full-graph "
            f"training takes it: sarlite.construct_full_graph(data)")
    return data


def partition_data_from(graph: dgl.DGLGraph, node_feats: dict, edge_feats: dict,
                        book: RangePartitionBook, graph_name: str, *,
                        source: str = "partition") -> PartitionData:
    """The :class:`PartitionData` of one partition already in memory.

    ``graph``, ``node_feats``, ``edge_feats`` and ``book`` are as
    :func:`~sarlite.partition.load_partition` returns them (or as a ``DistGraph`` holds
    them: its ``local_partition`` and its tensors' local rows): owned node rows in id
    order, owned edge rows in edge-id order, keys with or without DGL's type prefixes.
    ``source`` names the data in error messages. Not a collective.

    Raises
    ------
    ValueError
        The inner edges are not exactly the owned edge ids into owned nodes, or a feature
        has the wrong number of rows.
    """
    part, num_parts = book.partid, book.num_partitions()
    src, dst, eids = owned_edges(graph)
    check_owned(source, book, dst, eids)
    shards = group_by_source(book.nid2partid(src), src, dst, eids, num_parts)
    lo, hi = book.node_ranges[part].tolist()
    edge_lo = int(book.edge_ranges[part, 0])
    node_features = _node_rows(source, node_feats, hi - lo, part)
    edge_features = _edge_rows(source, edge_feats,
                               torch.cat([s.eids for s in shards]) - edge_lo, part)
    return PartitionData(rank=part, num_parts=num_parts, node_ranges=book.node_ranges,
                         partition_book=book, shards=shards, node_features=node_features,
                         edge_features=edge_features, graph_name=graph_name,
                         partition_graph=graph)
