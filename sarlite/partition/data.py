"""Load this worker's partition once: the one parser of partition files for training.

:func:`load_partition_data` reads partition ``rank`` with :func:`load_partition` and
derives what full-graph training (:func:`sarlite.construct_full_graph`) and sampling
(:meth:`sarlite.distributed.DistGraph.from_partition_data`) both use, so that a worker reads its
files and holds its feature rows once.

As in DGL, a homogeneous graph is a heterogeneous graph with one node type and one edge
type (``"_N"`` and ``("_N", "_E", "_N")`` unless named): :class:`PartitionData` holds
every graph by type, in *type-wise* ids (see :mod:`sarlite.partition.book`; for one type
they are the global ids), and gives its per-type values as DGL gives ``g.ndata``: plainly
for a graph of one type, as ``{type: value}`` for a graph of several.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import dgl
import torch

from ..comm.context import rank as current_rank
from ..comm.context import world_size
from .book import RangePartitionBook, _typewise
from .files import load_partition, read_part_config
from .frames import PerType, TypedData
from .owned import ShardEdges, check_owned, group_by_source, owned_edges, strip_masks


@dataclass
class PartitionData:
    """What one worker holds of the partitioned graph, by node type and by relation.

    Attributes
    ----------
    rank, num_parts:
        This worker's partition and the number of partitions.
    partition_book:
        The :class:`~sarlite.RangePartitionBook` of the partitioning.
    type_ranges:
        ``{ntype: (P, 2)}`` int64 ``[start, end)`` of the type-wise ids of ``ntype`` each
        partition owns; this partition's owned nodes of a type are those ids, ascending.
    relations:
        ``{(src, rel, dst): shards}``: ``shards[j]`` holds the owned edges of the relation
        (destination in this partition) whose source is in partition ``j``, as type-wise
        ids; together the shards hold every owned edge of the relation exactly once.
    node_frames:
        ``{ntype: {name: (owned nodes of ntype, ...)}}``, the type prefix removed;
        fields named ``*_mask`` are bool (DGL's files store them as uint8).
    edge_frames:
        ``{(src, rel, dst): {name: rows}}``, rows of the relation's owned edges **in shard
        order** (shard 0's edges, then shard 1's, ...), the order of the graph's ``edata``.
    graph_name:
        The graph's name in the partition config.
    partition_graph:
        The partition graph exactly as :func:`sarlite.load_partition` returns it (owned
        nodes and edges plus the halo; ndata ``_ID``, ``inner_node``; edata ``_ID``,
        ``inner_edge``), always on the CPU; :class:`~sarlite.distributed.DistGraph` samples on it.

    The views below give per-type values as DGL does: for a graph of one node type and
    one edge type the value itself (``data.node_features["feat"]`` is a tensor,
    ``data.owned_range`` a ``(start, end)`` pair, ``data.shards`` the list of shards); for
    a graph of several types a :class:`~sarlite.partition.frames.PerType` ``{type:
    value}``, which may also be called with the type (``data.owned_range("paper")``).
    """

    rank: int
    num_parts: int
    partition_book: RangePartitionBook
    type_ranges: dict[str, torch.Tensor]
    relations: dict[tuple[str, str, str], list[ShardEdges]]
    node_frames: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    edge_frames: dict[tuple[str, str, str], dict[str, torch.Tensor]] = \
        field(default_factory=dict)
    graph_name: str = ""
    partition_graph: dgl.DGLGraph | None = None

    # -- types -------------------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self.type_ranges)

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return list(self.relations)

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type (named or not), as DGL decides it."""
        return len(self.type_ranges) == 1 and len(self.relations) == 1

    def _per_type(self, types, value_of) -> object:
        """``value_of(t)`` for the one type of a homogeneous graph, else ``{t: ...}``."""
        if self.is_homogeneous:
            return value_of(next(iter(types)))
        return PerType({t: value_of(t) for t in types})

    def _by_ntype(self, value_of) -> object:
        return self._per_type(self.type_ranges, value_of)

    def _by_etype(self, value_of) -> object:
        return self._per_type(self.relations, value_of)

    # -- typed accessors: the engine's one path ------------------------------------------
    def range_of(self, ntype: str) -> tuple[int, int]:
        """``[start, end)`` of the type-wise ids of ``ntype`` this partition owns."""
        start, end = self.type_ranges[ntype][self.rank].tolist()
        return start, end

    def count_of(self, ntype: str) -> int:
        """Owned nodes of ``ntype``."""
        start, end = self.range_of(ntype)
        return end - start

    # -- DGL-style views ---------------------------------------------------------------
    @property
    def node_ranges(self):
        """``(P, 2)`` int64 ``[start, end)`` of the ids each partition owns (per type)."""
        return self._by_ntype(lambda t: self.type_ranges[t])

    @property
    def owned_range(self):
        """``[start, end)`` of the ids this partition owns (per type)."""
        return self._by_ntype(self.range_of)

    @property
    def num_owned_nodes(self):
        """Nodes this partition owns (per type)."""
        return self._by_ntype(self.count_of)

    @property
    def shards(self):
        """The owned edges grouped by the partition of their source (per relation)."""
        return self._by_etype(lambda c: self.relations[c])

    @property
    def num_owned_edges(self):
        """Edges this partition owns, those into its nodes (per relation)."""
        return self._by_etype(lambda c: sum(len(s) for s in self.relations[c]))

    @property
    def owned_edge_range(self) -> tuple[int, int]:
        """``[start, end)`` of the global edge ids (all types) this partition owns."""
        start, end = self.partition_book.edge_ranges[self.rank].tolist()
        return start, end

    @property
    def num_nodes(self) -> int:
        """Nodes in the whole graph (all types)."""
        return int(self.partition_book.node_ranges[-1, 1])

    @property
    def node_features(self):
        """``{name: rows}`` of the owned nodes, or ``{name: {ntype: rows}}`` for several
        node types (setting ``data.node_features[name] = {ntype: rows}`` sets them)."""
        if self.is_homogeneous:
            return next(iter(self.node_frames.values()))
        return TypedData(self.node_frames)

    @property
    def edge_features(self):
        """``{name: rows in shard order}``, or ``{name: {c_etype: rows}}`` for several
        relations."""
        if self.is_homogeneous:
            return next(iter(self.edge_frames.values()))
        return TypedData(self.edge_frames)

    def to(self, device) -> "PartitionData":
        """A copy whose node and edge features are on ``device`` (the partition graph
        and the edges stay on the CPU)."""
        return replace(self, node_frames=_moved(self.node_frames, device),
                       edge_frames=_moved(self.edge_frames, device))


def _moved(frames: dict, device) -> dict:
    return {t: {k: v.to(device) for k, v in frame.items()} for t, frame in frames.items()}


def _check_world_size(part_config: str | os.PathLike, num_parts: int) -> None:
    """Raise ``ValueError`` unless there is one process per partition."""
    if world_size() != num_parts:
        raise ValueError(f"world size {world_size()} does not match the {num_parts} "
                         f"partitions of {part_config}: launch one worker per partition "
                         f"(torchrun --nproc_per_node={num_parts}) or repartition")


def load_partition_data(part_config: str | os.PathLike, rank: int | None = None,
                        device: torch.device | str | None = None) -> PartitionData:
    """Load partition ``rank`` (default: this process's rank) of a DGL-format partitioning.

    Reads partitions written by :func:`sarlite.partition_graph` and by
    ``dgl.distributed.partition_graph``, of one node and edge type or several;
    ``device`` moves the node and edge features (the partition graph stays on the CPU).
    Not a collective: each rank reads its own files.

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
    data = partition_data_from(graph, node_feats, edge_feats, book, graph_name,
                               source=str(part_config))
    return data if device is None else data.to(device)


def partition_data_from(graph: dgl.DGLGraph, node_feats: dict, edge_feats: dict,
                        book: RangePartitionBook, graph_name: str, *,
                        source: str = "partition") -> PartitionData:
    """The :class:`PartitionData` of one partition already in memory.

    ``graph``, ``node_feats``, ``edge_feats`` and ``book`` are as
    :func:`~sarlite.partition.load_partition` returns them (or as a ``DistGraph`` holds
    them: its ``local_partition`` and its tensors' local rows): owned node rows in id
    order, owned edge rows in edge-id order, keys ``"<type>/<name>"`` (for a graph of
    one type, the prefix may be absent). ``source`` names the data in error messages.
    Not a collective.

    Raises
    ------
    ValueError
        The inner edges are not exactly the owned edge ids into owned nodes, or a feature
        has the wrong number of rows or names no type of the graph.
    """
    part, num_parts = book.partid, book.num_partitions()
    typed = _typed_owned_edges(graph, book, source)
    relations, edge_rows = {}, {}
    for c_etype in book.canonical_etypes:
        src, dst, eids = typed.pop(c_etype)          # held no longer than needed
        shards = group_by_source(book.nid2partid(src, c_etype[0]), src, dst, eids,
                                 num_parts)
        del src, dst, eids
        relations[c_etype] = shards
        first = int(_typewise(book.typed_edge_ranges(c_etype))[part, 0])
        edge_rows[c_etype] = torch.cat([s.eids for s in shards]) - first
    type_ranges = {t: _typewise(book.typed_node_ranges(t)) for t in book.ntypes}
    owned = {t: int(r[part, 1] - r[part, 0]) for t, r in type_ranges.items()}
    return PartitionData(
        rank=part, num_parts=num_parts, partition_book=book, type_ranges=type_ranges,
        relations=relations, node_frames=_node_frames(source, node_feats, book, owned),
        edge_frames=_edge_frames(source, edge_feats, book, edge_rows),
        graph_name=graph_name, partition_graph=graph)


def _typed_owned_edges(graph: dgl.DGLGraph, book: RangePartitionBook, source: str
                       ) -> dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``{c_etype: (src, dst, eids)}``: the owned edges of each relation in type-wise ids.
    A graph of one node and one edge type has type-wise ids equal to its homogeneous
    ids, so its edges are taken as they are (no per-type copies: at load, the largest
    transient of a worker's memory)."""
    src, dst, eids = owned_edges(graph)
    check_owned(source, book, dst, eids)
    if len(book.ntypes) == 1 and len(book.canonical_etypes) == 1:
        return {book.canonical_etypes[0]: (src, dst, eids)}
    etype, eids = book.map_to_per_etype(eids)
    _, src = book.map_to_per_ntype(src)
    _, dst = book.map_to_per_ntype(dst)
    return {c: (src[etype == t], dst[etype == t], eids[etype == t])
            for t, c in enumerate(book.canonical_etypes)}


def _split_key(key: str, types: list, resolve=lambda kind: kind):
    """``(type, name)`` of a feature key ``"<type>/<name>"``; a key of a graph with one
    type may lack the prefix. ``None`` for a type the graph does not have."""
    kind, _, name = key.rpartition("/")
    try:
        found = resolve(kind) if kind else None
    except (KeyError, ValueError):
        found = None
    if found in types:
        return found, name
    return (types[0], key) if len(types) == 1 else (None, name)


def _node_frames(source: str, feats: dict, book, owned: dict) -> dict:
    """``{ntype: {name: rows}}`` from ``{"<ntype>/<name>": rows}``, rows checked."""
    frames: dict[str, dict] = {t: {} for t in book.ntypes}
    for key, value in feats.items():
        ntype, name = _split_key(key, book.ntypes)
        if ntype is None:
            raise ValueError(f"{source}: node feature {key!r} names no node type of the "
                             f"graph ({book.ntypes})")
        if value.shape[0] != owned[ntype]:
            raise ValueError(f"{source}: node feature {name!r} of part {book.partid} has "
                             f"{value.shape[0]} rows but the part owns {owned[ntype]} "
                             f"{ntype!r} nodes")
        frames[ntype].update(strip_masks({name: value}))
    return frames


def _edge_frames(source: str, feats: dict, book, edge_rows: dict) -> dict:
    """``{c_etype: {name: rows in shard order}}`` from ``{"<etype>/<name>": rows}``."""
    frames: dict[tuple, dict] = {c: {} for c in book.canonical_etypes}
    for key, value in feats.items():
        c_etype, name = _split_key(key, book.canonical_etypes, book.to_canonical_etype)
        if c_etype is None:
            raise ValueError(f"{source}: edge feature {key!r} names no edge type of the "
                             f"graph ({book.canonical_etypes})")
        rows = edge_rows[c_etype]
        if value.shape[0] != rows.numel():
            raise ValueError(f"{source}: edge feature {name!r} of part {book.partid} has "
                             f"{value.shape[0]} rows but the part owns {rows.numel()} "
                             f"{c_etype[1]!r} edges")
        frames[c_etype].update(strip_masks({name: value[rows]}))
    return frames
