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
from .files import load_partition, read_part_config, require_homogeneous


@dataclass
class ShardEdges:
    """The owned edges whose source lives in one partition, in global ids.

    ``src``, ``dst`` and ``eids`` are int64 tensors of shape ``(E_j,)``.
    """

    src: torch.Tensor
    dst: torch.Tensor
    eids: torch.Tensor

    def __len__(self) -> int:
        return self.src.numel()


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


def _strip(features: dict, prefix: str) -> dict:
    """Drop the type prefix of each key; turn ``*_mask`` fields back into bool.

    DGL's serialisation stores bool tensors as uint8; masks are bool again after loading.
    """
    out = {}
    for key, value in features.items():
        name = key[len(prefix):] if key.startswith(prefix) else key
        out[name] = value.bool() if name.endswith("_mask") and value.dtype == torch.uint8 \
            else value
    return out


def _owned_edges(graph: dgl.DGLGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, dst, eids)``, each ``(E_owned,)`` global ids, of the inner edges."""
    inner = graph.edata["inner_edge"].bool()
    local_src, local_dst = graph.edges()
    nid = graph.ndata[dgl.NID]
    return nid[local_src[inner]], nid[local_dst[inner]], graph.edata[dgl.EID][inner]


def _covers(ids: torch.Tensor, lo: int, hi: int) -> bool:
    """Whether ``ids`` holds each of ``lo .. hi - 1`` exactly once."""
    if ids.numel() != hi - lo:
        return False
    if not ids.numel():
        return True
    if int(ids.min()) < lo or int(ids.max()) >= hi:
        return False
    return bool((torch.bincount(ids - lo, minlength=hi - lo) == 1).all())


def _check_owned(part_config, book: RangePartitionBook, dst: torch.Tensor,
                 eids: torch.Tensor) -> None:
    """Raise ``ValueError`` unless the inner edges are exactly the owned edge ids and
    end in owned nodes."""
    part = book.partid
    lo, hi = book.node_ranges[part].tolist()
    if dst.numel() and (int(dst.min()) < lo or int(dst.max()) >= hi):
        raise ValueError(f"{part_config}: part {part} has inner edges whose destination it "
                         f"does not own")
    edge_lo, edge_hi = book.edge_ranges[part].tolist()
    if not _covers(eids, edge_lo, edge_hi):
        raise ValueError(f"{part_config}: the inner edges of part {part} are not exactly "
                         f"the edge ids [{edge_lo}, {edge_hi}) it owns")


def _shards(book: RangePartitionBook, src: torch.Tensor, dst: torch.Tensor,
            eids: torch.Tensor) -> list[ShardEdges]:
    """The owned edges grouped by the partition of their source (stable within a group)."""
    src_part = book.nid2partid(src)
    order = torch.sort(src_part, stable=True).indices
    src, dst, eids, src_part = src[order], dst[order], eids[order], src_part[order]
    bounds = torch.searchsorted(src_part, torch.arange(book.num_partitions() + 1)).tolist()
    return [ShardEdges(src[a:b], dst[a:b], eids[a:b]) for a, b in zip(bounds, bounds[1:])]


def _node_rows(part_config, node_feats: dict, num_owned: int, part: int) -> dict:
    node_features = _strip(node_feats, DEFAULT_NTYPE + "/")
    for name, value in node_features.items():
        if value.shape[0] != num_owned:
            raise ValueError(f"{part_config}: node feature {name!r} of part {part} has "
                             f"{value.shape[0]} rows but the part owns {num_owned} nodes")
    return node_features


def _edge_rows(part_config, edge_feats: dict, rows: torch.Tensor, part: int) -> dict:
    """Edge features in shard order: ``rows`` are the local (owned) rows, in that order."""
    edge_features = _strip(edge_feats, DEFAULT_ETYPE_STR + "/")
    for name, value in edge_features.items():
        if value.shape[0] != rows.numel():
            raise ValueError(f"{part_config}: edge feature {name!r} of part {part} has "
                             f"{value.shape[0]} rows but the part owns {rows.numel()} edges")
    return {name: value[rows] for name, value in edge_features.items()}


def _check_world_size(part_config: str | os.PathLike) -> None:
    """Raise ``ValueError`` unless there is one process per partition."""
    num_parts = read_part_config(part_config)["num_parts"]
    if world_size() != num_parts:
        raise ValueError(f"world size {world_size()} does not match the {num_parts} "
                         f"partitions of {part_config}: launch one worker per partition "
                         f"(torchrun --nproc_per_node={num_parts}) or repartition")


def load_partition_data(part_config: str | os.PathLike, rank: int | None = None,
                        device: torch.device | str | None = None) -> PartitionData:
    """Load partition ``rank`` (default: this process's rank) of a DGL-format partitioning.

    Reads partitions written by :func:`sarlite.partition_graph` and by
    ``dgl.distributed.partition_graph``; ``device`` moves the node and edge features (the
    partition graph stays on the CPU). Not a collective: each rank reads its own files.

    Raises
    ------
    ValueError
        A process group exists and its world size differs from the number of partitions,
        or the partition files are inconsistent (inner edges that are not exactly the
        owned edge ids into owned nodes, features with the wrong number of rows).
    FileNotFoundError
        The config or a partition file is missing.
    NotImplementedError
        The config describes a heterogeneous graph.
    """
    require_homogeneous(part_config, "load_partition_data")
    if rank is None:
        _check_world_size(part_config)
    graph, node_feats, edge_feats, book, graph_name, _, _ = load_partition(
        part_config, current_rank() if rank is None else rank)
    data = partition_data_from(graph, node_feats, edge_feats, book, graph_name,
                               source=str(part_config))
    if device is None:
        return data
    return replace(data, node_features={k: v.to(device) for k, v in data.node_features.items()},
                   edge_features={k: v.to(device) for k, v in data.edge_features.items()})


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
    src, dst, eids = _owned_edges(graph)
    _check_owned(source, book, dst, eids)
    shards = _shards(book, src, dst, eids)
    lo, hi = book.node_ranges[part].tolist()
    edge_lo = int(book.edge_ranges[part, 0])
    node_features = _node_rows(source, node_feats, hi - lo, part)
    edge_features = _edge_rows(source, edge_feats,
                               torch.cat([s.eids for s in shards]) - edge_lo, part)
    return PartitionData(rank=part, num_parts=num_parts, node_ranges=book.node_ranges,
                         partition_book=book, shards=shards, node_features=node_features,
                         edge_features=edge_features, graph_name=graph_name,
                         partition_graph=graph)
