"""One worker's share of a heterogeneous partitioning, by node type and by relation.

:func:`sarlite.load_partition_data` returns a :class:`HeteroPartitionData` for a partition
config with several node or edge types. Everything in it is in *type-wise* ids (see
:mod:`sarlite.partition.book`): each relation's owned edges (those into nodes this
partition owns) grouped by the partition that owns their source, as the homogeneous
:class:`~sarlite.partition.data.ShardEdges`, and the features of each type as
``{name: {type: rows}}``, mirroring ``DGLHeteroGraph.ndata[name]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import dgl
import torch

from .book import RangePartitionBook, _typewise
from .owned import ShardEdges, check_owned, group_by_source, owned_edges, strip_masks


@dataclass
class HeteroPartitionData:
    """What one worker holds of a heterogeneous partitioned graph.

    Attributes
    ----------
    rank, num_parts:
        This worker's partition and the number of partitions.
    partition_book:
        The heterogeneous :class:`~sarlite.RangePartitionBook`.
    node_ranges:
        ``{ntype: (P, 2)}`` int64 ``[start, end)`` of the type-wise ids each partition
        owns; this partition's owned nodes of a type are those ids, ascending.
    relations:
        ``{(src, rel, dst): shards}``: ``shards[j]`` holds the owned edges of the relation
        whose source is in partition ``j``, as type-wise ids (sources of type ``src``,
        destinations of type ``dst``, edge ids of the relation).
    node_features:
        ``{name: {ntype: (num_owned of ntype, ...)}}`` for the types that have the field;
        ``*_mask`` fields are bool.
    edge_features:
        ``{name: {(src, rel, dst): rows}}``, rows of the owned edges of the relation in
        shard order.
    graph_name, partition_graph:
        As :class:`~sarlite.partition.PartitionData`.
    """

    rank: int
    num_parts: int
    partition_book: RangePartitionBook
    node_ranges: dict[str, torch.Tensor]
    relations: dict[tuple[str, str, str], list[ShardEdges]]
    node_features: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    edge_features: dict[str, dict[tuple, torch.Tensor]] = field(default_factory=dict)
    graph_name: str = ""
    partition_graph: dgl.DGLGraph | None = None

    @property
    def ntypes(self) -> list[str]:
        return self.partition_book.ntypes

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return self.partition_book.canonical_etypes

    def owned_range(self, ntype: str) -> tuple[int, int]:
        """``[start, end)`` of the type-wise ids of ``ntype`` this partition owns."""
        start, end = self.node_ranges[ntype][self.rank].tolist()
        return start, end

    def num_owned_nodes(self, ntype: str) -> int:
        start, end = self.owned_range(ntype)
        return end - start

    def num_owned_edges(self, etype: tuple[str, str, str]) -> int:
        return sum(len(shard) for shard in self.relations[etype])


def hetero_partition_data(graph: dgl.DGLGraph, node_feats: dict, edge_feats: dict,
                          book: RangePartitionBook, graph_name: str, *,
                          source: str = "partition") -> HeteroPartitionData:
    """The :class:`HeteroPartitionData` of one heterogeneous partition in memory, from
    what :func:`~sarlite.partition.load_partition` returns. Not a collective.

    Raises
    ------
    ValueError
        The inner edges are not exactly the owned edge ids into owned nodes, or a feature
        has the wrong number of rows.
    """
    part, num_parts = book.partid, book.num_partitions()
    src, dst, eids = owned_edges(graph)
    check_owned(source, book, dst, eids)
    etype, eids = book.map_to_per_etype(eids)
    _, src = book.map_to_per_ntype(src)
    _, dst = book.map_to_per_ntype(dst)
    relations, edge_rows = {}, {}
    for t, c_etype in enumerate(book.canonical_etypes):
        mine = etype == t
        shards = group_by_source(book.nid2partid(src[mine], c_etype[0]), src[mine],
                                 dst[mine], eids[mine], num_parts)
        relations[c_etype] = shards
        first = int(_typewise(book.typed_edge_ranges(c_etype))[part, 0])
        edge_rows[c_etype] = torch.cat([s.eids for s in shards]) - first
    node_ranges = {t: _typewise(book.typed_node_ranges(t)) for t in book.ntypes}
    return HeteroPartitionData(
        rank=part, num_parts=num_parts, partition_book=book, node_ranges=node_ranges,
        relations=relations,
        node_features=_typed_rows(source, node_feats, book, "node",
                                  {t: int(r[part, 1] - r[part, 0])
                                   for t, r in node_ranges.items()}),
        edge_features=_edge_features(source, edge_feats, book, edge_rows),
        graph_name=graph_name, partition_graph=graph)


def _split_key(key: str) -> tuple[str, str]:
    """``("<type>", "<name>")`` of a feature key ``"<type>/<name>"``."""
    kind, _, name = key.rpartition("/")
    return kind, name


def _typed_rows(source: str, feats: dict, book, what: str, owned: dict) -> dict:
    """``{name: {ntype: rows}}`` from ``{"<ntype>/<name>": rows}``, rows checked."""
    out: dict[str, dict] = {}
    for key, value in strip_masks(feats).items():
        ntype, name = _split_key(key)
        if ntype not in owned:
            raise ValueError(f"{source}: {what} feature {key!r} names no node type of the "
                             f"graph ({book.ntypes})")
        if value.shape[0] != owned[ntype]:
            raise ValueError(f"{source}: {what} feature {key!r} of part {book.partid} has "
                             f"{value.shape[0]} rows but the part owns {owned[ntype]} "
                             f"{ntype!r} nodes")
        out.setdefault(name, {})[ntype] = value
    return out


def _edge_features(source: str, feats: dict, book, edge_rows: dict) -> dict:
    """``{name: {c_etype: rows in shard order}}`` from ``{"<s:r:d>/<name>": rows}``."""
    out: dict[str, dict] = {}
    for key, value in strip_masks(feats).items():
        etype, name = _split_key(key)
        c_etype = book.to_canonical_etype(etype)
        rows = edge_rows[c_etype]
        if value.shape[0] != rows.numel():
            raise ValueError(f"{source}: edge feature {key!r} of part {book.partid} has "
                             f"{value.shape[0]} rows but the part owns {rows.numel()} "
                             f"{etype!r} edges")
        out.setdefault(name, {})[c_etype] = value[rows]
    return out
