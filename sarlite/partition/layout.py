"""The reshuffled id layout that ``partition_graph`` writes, for one or several types.

Nodes are renumbered so that they are sorted by partition and, inside a partition, by
node type id; within one (partition, type) run they keep their original relative order.
Each edge belongs to the partition of its destination, and edges are renumbered the
same way by (partition, edge type id). A homogeneous graph is the case of one type.

Everything here works on the *homogeneous view* of the graph: node ids ``0..N-1`` that
list the nodes of type 0 first, then those of type 1, and so on (``dgl.to_homogeneous``'s
order), and likewise for edges.
"""
from __future__ import annotations

from dataclasses import dataclass

import dgl
import torch

from .edgekeys import CHUNK

NTYPE_DTYPE = torch.int16        # DGL 2.1's dtypes for dgl.NTYPE and dgl.ETYPE
ETYPE_DTYPE = torch.int32


@dataclass(frozen=True)
class Layout:
    """Where the ids of one kind (nodes or edges) went.

    ``orig[new] = old`` (homogeneous-view ids); ``ranges[t, p]`` is the ``[start, end)``
    of type ``t`` in partition ``p``, in new ids; ``blocks[p]`` is partition ``p``'s whole
    ``[start, end)``.
    """

    orig: torch.Tensor
    ranges: torch.Tensor

    @property
    def blocks(self) -> torch.Tensor:
        return ranges_from_ends(self.ranges[-1, :, 1])

    def type_orig(self, t: int) -> torch.Tensor:
        """The old ids of type ``t`` in the order of its new type-wise ids."""
        return torch.cat([self.orig[lo:hi] for lo, hi in self.ranges[t].tolist()])


def ranges_from_ends(ends: torch.Tensor) -> torch.Tensor:
    """``(P, 2)`` ``[start, end)`` pairs from the cumulative part sizes ``ends``."""
    return torch.stack([torch.cat([ends.new_zeros(1), ends[:-1]]), ends], 1)


def narrow(values: torch.Tensor, bound: int) -> torch.Tensor:
    """``values`` (all below ``bound``) in the smallest integer type that holds them: less
    memory per edge."""
    for dtype in (torch.int8, torch.int16, torch.int32):
        if bound <= torch.iinfo(dtype).max:
            return values.to(dtype)
    return values


def sort_key(part_of: torch.Tensor, types: torch.Tensor | None, num_types: int,
             num_parts: int) -> torch.Tensor:
    """``part * num_types + type`` per id, narrow; ``part_of`` itself for one type."""
    if types is None or num_types == 1:
        return part_of
    return narrow(part_of.to(torch.int64) * num_types + types, num_parts * num_types)


def layout(key: torch.Tensor, num_types: int, num_parts: int) -> Layout:
    """The :class:`Layout` of ids sorted (stably) by ``key`` (see :func:`sort_key`)."""
    orig = torch.sort(key, stable=True).indices
    counts = torch.bincount(key, minlength=num_parts * num_types)
    ends = torch.cumsum(counts, 0)
    ranges = torch.stack([ends - counts, ends], 1).view(num_parts, num_types, 2)
    return Layout(orig, ranges.transpose(0, 1).contiguous())


def relabel(ids: torch.Tensor, order: torch.Tensor, new_id: torch.Tensor) -> torch.Tensor:
    """``new_id[ids[order]]``, chunk by chunk: no temporary as long as the edge list."""
    out = torch.empty(len(order), dtype=torch.int64)
    for lo in range(0, len(order), CHUNK):
        out[lo:lo + CHUNK] = new_id[ids[order[lo:lo + CHUNK]]]
    return out


def halo_graph(src: torch.Tensor, dst: torch.Tensor, node_ranges: torch.Tensor,
               edge_range: tuple[int, int], part: int, num_hops: int,
               types: tuple[torch.Tensor, torch.Tensor] | None = None) -> dgl.DGLGraph:
    """The graph stored for partition ``part``, in reshuffled global ids ``src``/``dst``.

    As in DGL, it holds the owned nodes and every node within ``num_hops`` hops of them in
    either direction (the halo), and every edge with an end among the owned nodes or the
    halo nodes closer than ``num_hops`` hops. For one hop that is the owned in-edges
    (``inner_edge = 1``) and the owned nodes' out-edges to the halo (``inner_edge = 0``).
    Owned nodes and edges come first in ascending global id, then the halo, ascending.
    ``types``: the node type and edge type of every new id, stored as ``dgl.NTYPE`` and
    ``dgl.ETYPE`` (a heterogeneous graph's partition).
    """
    num_nodes = int(node_ranges[-1, 1])
    lo, hi = node_ranges[part].tolist()
    elo, ehi = edge_range
    reached = torch.zeros(num_nodes, dtype=torch.bool)
    reached[lo:hi] = True
    for _ in range(num_hops):
        picked = reached[src] | reached[dst]
        reached[src[picked]] = True
        reached[dst[picked]] = True
    picked[elo:ehi] = False                      # owned edges go first, below
    eids = torch.cat([torch.arange(elo, ehi), picked.nonzero().squeeze(1)])
    del picked
    reached[lo:hi] = False
    halo = reached.nonzero().squeeze(1)
    del reached
    nids = torch.cat([torch.arange(lo, hi), halo])

    def local(ids: torch.Tensor) -> torch.Tensor:
        owned = (ids >= lo) & (ids < hi)
        return torch.where(owned, ids - lo, (hi - lo) + torch.searchsorted(halo, ids))

    part_graph = dgl.graph((local(src[eids]), local(dst[eids])), num_nodes=len(nids))
    part_graph.ndata[dgl.NID] = nids
    part_graph.ndata["inner_node"] = (torch.arange(len(nids)) < hi - lo).to(torch.uint8)
    part_graph.ndata["part_id"] = torch.searchsorted(node_ranges[:, 1].contiguous(), nids,
                                                     right=True)
    part_graph.edata[dgl.EID] = eids
    part_graph.edata["inner_edge"] = (torch.arange(len(eids)) < ehi - elo).to(torch.uint8)
    if types is not None:
        part_graph.ndata[dgl.NTYPE] = types[0][nids].to(NTYPE_DTYPE)
        part_graph.edata[dgl.ETYPE] = types[1][eids].to(ETYPE_DTYPE)
    return part_graph
