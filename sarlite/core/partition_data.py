"""Load this worker's partition as N shards of incoming edges."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import dgl
import torch

from ..comm.context import rank as current_rank
from ..comm.context import world_size
from ..partition import RangePartitionBook, load_partition
from ..partition.book import DEFAULT_ETYPE_STR, DEFAULT_NTYPE


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
        The :class:`~sarlite.RangePartitionBook` of the partitioning.
    shards:
        ``shards[j]`` holds the owned edges (destination in this partition) whose source is
        in partition ``j``; sources and destinations are global ids.
    node_features:
        ``{name: (num_owned, ...)}`` rows of the owned nodes, ``_N/`` prefix removed;
        fields named ``*_mask`` are bool (DGL's files store them as uint8).
    edge_features:
        ``{name: (num_owned_edges, ...)}`` rows of the owned edges **in shard order**
        (shard 0's edges, then shard 1's, ...), the order of ``GraphShardManager.edata``.
    """

    rank: int
    num_parts: int
    node_ranges: torch.Tensor
    partition_book: RangePartitionBook
    shards: list[ShardEdges]
    node_features: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_features: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def owned_range(self) -> tuple[int, int]:
        start, end = self.node_ranges[self.rank].tolist()
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


def load_partition_data(part_config: str | os.PathLike, rank: int | None = None,
                        device: torch.device | str | None = None) -> PartitionData:
    """Load partition ``rank`` (default: this process's rank) of a DGL-format partitioning.

    Reads partitions written by :func:`sarlite.partition_graph` and by
    ``dgl.distributed.partition_graph``. Not a collective: each rank reads its own files.

    Raises
    ------
    ValueError
        A process group exists and its world size differs from the number of partitions,
        or the partition files are inconsistent.
    FileNotFoundError
        The config or a partition file is missing.
    """
    graph, node_feats, edge_feats, book, _, _, _ = load_partition(
        part_config, current_rank() if rank is None else rank)
    num_parts = book.num_partitions()
    if rank is None and world_size() != num_parts:
        raise ValueError(f"world size {world_size()} does not match the {num_parts} "
                         f"partitions of {part_config}: launch one worker per partition "
                         f"(torchrun --nproc_per_node={num_parts}) or repartition")
    part = book.partid
    inner_edge = graph.edata["inner_edge"].bool()
    local_src, local_dst = graph.edges()
    nid = graph.ndata[dgl.NID]
    src = nid[local_src[inner_edge]]
    dst = nid[local_dst[inner_edge]]
    eids = graph.edata[dgl.EID][inner_edge]
    lo, hi = book.node_ranges[part].tolist()
    if dst.numel() and (int(dst.min()) < lo or int(dst.max()) >= hi):
        raise ValueError(f"{part_config}: part {part} has inner edges whose destination it "
                         f"does not own")
    src_part = book.nid2partid(src)
    order = torch.sort(src_part, stable=True).indices
    src, dst, eids, src_part = src[order], dst[order], eids[order], src_part[order]
    bounds = torch.searchsorted(src_part, torch.arange(num_parts + 1)).tolist()
    shards = [ShardEdges(src[a:b], dst[a:b], eids[a:b]) for a, b in zip(bounds, bounds[1:])]

    edge_rows = eids - int(book.edge_ranges[part, 0])
    edge_features = {k: v[edge_rows] for k, v in
                     _strip(edge_feats, DEFAULT_ETYPE_STR + "/").items()}
    node_features = _strip(node_feats, DEFAULT_NTYPE + "/")
    for name, value in node_features.items():
        if value.shape[0] != hi - lo:
            raise ValueError(f"{part_config}: node feature {name!r} of part {part} has "
                             f"{value.shape[0]} rows but the part owns {hi - lo} nodes")
    if device is not None:
        node_features = {k: v.to(device) for k, v in node_features.items()}
        edge_features = {k: v.to(device) for k, v in edge_features.items()}
    return PartitionData(rank=part, num_parts=num_parts, node_ranges=book.node_ranges,
                         partition_book=book, shards=shards, node_features=node_features,
                         edge_features=edge_features)
