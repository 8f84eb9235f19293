"""The owned edges of one partition graph, and its features as loaded, for the partition
loader (:mod:`sarlite.partition.data`)."""
from __future__ import annotations

from dataclasses import dataclass

import dgl
import torch

from .book import RangePartitionBook


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


def strip_masks(features: dict, prefix: str = "") -> dict:
    """Drop ``prefix`` from each key; turn ``*_mask`` fields back into bool.

    DGL's serialisation stores bool tensors as uint8; masks are bool again after loading.
    """
    out = {}
    for key, value in features.items():
        name = key[len(prefix):] if prefix and key.startswith(prefix) else key
        out[name] = value.bool() if name.endswith("_mask") and value.dtype == torch.uint8 \
            else value
    return out


def owned_edges(graph: dgl.DGLGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, dst, eids)``, each ``(E_owned,)`` homogeneous global ids, of the inner
    edges of a partition graph."""
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


def check_owned(part_config, book: RangePartitionBook, dst: torch.Tensor,
                eids: torch.Tensor) -> None:
    """Raise ``ValueError`` unless the inner edges (homogeneous ids) are exactly the owned
    edge ids and end in owned nodes."""
    part = book.partid
    lo, hi = book.node_ranges[part].tolist()
    if dst.numel() and (int(dst.min()) < lo or int(dst.max()) >= hi):
        raise ValueError(f"{part_config}: part {part} has inner edges whose destination it "
                         f"does not own")
    edge_lo, edge_hi = book.edge_ranges[part].tolist()
    if not _covers(eids, edge_lo, edge_hi):
        raise ValueError(f"{part_config}: the inner edges of part {part} are not exactly "
                         f"the edge ids [{edge_lo}, {edge_hi}) it owns")


def group_by_source(src_part: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                    eids: torch.Tensor, num_parts: int) -> list[ShardEdges]:
    """The edges grouped by the partition of their source, ``src_part`` (stable within a
    group): one :class:`ShardEdges` per partition, possibly empty."""
    order = torch.sort(src_part, stable=True).indices
    src, dst, eids, src_part = src[order], dst[order], eids[order], src_part[order]
    bounds = torch.searchsorted(src_part, torch.arange(num_parts + 1)).tolist()
    return [ShardEdges(src[a:b], dst[a:b], eids[a:b]) for a, b in zip(bounds, bounds[1:])]
