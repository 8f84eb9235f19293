"""A heterogeneous distributed graph for unmodified ``dgl.nn.HeteroGraphConv``.

:class:`HeteroGraphShardManager` holds one *relation view* per canonical edge type
``(src, rel, dst)``: a :class:`~sarlite.core.manager.GraphShardManager` (modes ``sar`` and
``sa``) or a :class:`~sarlite.core.distributed_block.DistributedBlock` (``one-shot``)
whose sources are this worker's owned nodes of type ``src`` and whose destinations are
its owned nodes of type ``dst``, over the relation's owned edges (those into owned
nodes). ``g[src, rel, dst]`` returns that view, so ``HeteroGraphConv`` runs each
relation's module on it exactly as on a homogeneous distributed graph: a relation's
remote rows are fetched (shard by shard in ``sar``/``sa``) only while that relation's
module runs, never all relations' halos at once.

Node data lives per type (``g.nodes[ntype].data``; ``g.ndata[name]`` is
``{ntype: tensor}`` as in DGL) and, as in DGL, a relation view's ``srcdata``/``dstdata``
are that data of its source and destination types; edge data lives per relation (the
views' ``edata``).
"""
from __future__ import annotations

from types import SimpleNamespace

import dgl
import torch

from ..partition.frames import TypedData
from .graph_view import restoring

_CROSS = ("sum", "mean", "max", "min", "stack")


class _Types:
    """``g.nodes[ntype].data`` / ``g.edges[etype].data``, as DGL's views give them;
    node views are also called for ids: ``g.srcnodes("paper")``."""

    def __init__(self, frame_of, ids_of=None):
        self._frame_of, self._ids_of = frame_of, ids_of

    def __getitem__(self, key) -> SimpleNamespace:
        return SimpleNamespace(data=self._frame_of(key))

    def __call__(self, ntype=None) -> torch.Tensor:
        if self._ids_of is None:
            raise TypeError("edge views are not callable: use g.edges[etype].data")
        return self._ids_of(ntype)


class HeteroGraphShardManager:
    """This worker's part of a heterogeneous graph, behaving like a ``DGLHeteroGraph``
    for ``dgl.nn.HeteroGraphConv`` and for ``multi_update_all``.

    Build it with :func:`sarlite.construct_full_graph` on the
    :class:`~sarlite.partition.PartitionData` of a heterogeneous partitioning, or
    get message-flow graphs (``is_block``: separate source and destination nodes per type,
    ``input_nodes``/``output_nodes`` as ``{ntype: local ids}``) from
    :func:`sarlite.construct_mfgs`.

    **Collectives.** Message passing on a relation view (``update_all``,
    ``apply_edges``) and ``multi_update_all`` are collectives: every rank must run the
    same relations in the same order, also ranks that own no edge of a relation (they
    pass tensors of zero rows).

    Example
    -------
    >>> data = sarlite.load_partition_data("parts/mag.json")      # heterogeneous
    >>> g = sarlite.construct_full_graph(data)
    >>> conv = dgl.nn.HeteroGraphConv({rel: dgl.nn.GraphConv(16, 8)
    ...                                for rel in g.etypes}, aggregate="sum")
    >>> h = conv(g, {ntype: x[ntype] for ntype in g.ntypes})    # {ntype: (owned, 8)}
    """

    is_homogeneous = False

    def __init__(self, relations: dict, num_nodes: dict[str, int],
                 global_counts: tuple[int, int] | None = None, *,
                 num_dst: dict[str, int] | None = None, input_nodes: dict | None = None,
                 output_nodes: dict | None = None):
        self._relations = dict(relations)
        self._num_nodes = dict(num_nodes)
        self.is_block = num_dst is not None
        self._num_dst = dict(num_dst) if self.is_block else self._num_nodes
        self._frames: dict[str, dict] = {t: {} for t in self._num_nodes}
        self._dst_frames = {t: {} for t in self._num_nodes} if self.is_block \
            else self._frames
        self.input_nodes, self.output_nodes = input_nodes, output_nodes
        self._global_counts = global_counts
        by_rel: dict[str, list] = {}
        for c_etype, view in self._relations.items():
            by_rel.setdefault(c_etype[1], []).append(c_etype)
            view._share_node_data(self._frames[c_etype[0]], self._dst_frames[c_etype[2]])
        self._by_rel = by_rel

    # -- types ---------------------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self._num_nodes)

    srctypes = dsttypes = ntypes

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return list(self._relations)

    @property
    def etypes(self) -> list[str]:
        return [c_etype[1] for c_etype in self._relations]

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        """The canonical ``(src, rel, dst)`` of a relation name or canonical tuple.

        Raises ``KeyError`` for an unknown type and ``ValueError`` for a relation name
        that several canonical types share (name it by its tuple)."""
        if isinstance(etype, (tuple, list)) and tuple(etype) in self._relations:
            return tuple(etype)
        found = self._by_rel.get(etype, []) if isinstance(etype, str) else []
        if len(found) == 1:
            return found[0]
        if found:
            raise ValueError(f"edge type {etype!r} is ambiguous ({found}): use the "
                             f"canonical (src, rel, dst)")
        raise KeyError(f"unknown edge type {etype!r}; the edge types are "
                       f"{self.canonical_etypes}")

    def __getitem__(self, key):
        """The relation view ``g[rel]`` / ``g[src, rel, dst]`` (see the module doc)."""
        return self._relations[self.to_canonical_etype(key)]

    def get_ntype_id(self, ntype: str) -> int:
        return self.ntypes.index(ntype)

    def get_etype_id(self, etype) -> int:
        return self.canonical_etypes.index(self.to_canonical_etype(etype))

    # -- sizes and degrees -------------------------------------------------------------
    def _ntype(self, ntype) -> str:
        if ntype is None and len(self._num_nodes) == 1:
            return self.ntypes[0]
        if ntype is None:
            raise ValueError(f"the graph has several node types ({self.ntypes}): pass "
                             f"the node type")
        if ntype not in self._num_nodes:
            raise KeyError(f"unknown node type {ntype!r}; the node types are "
                           f"{self.ntypes}")
        return ntype

    def num_src_nodes(self, ntype=None) -> int:
        """Owned nodes of ``ntype`` (all types when ``None``); a block's source nodes."""
        if ntype is None:
            return sum(self._num_nodes.values())
        return self._num_nodes[self._ntype(ntype)]

    def num_dst_nodes(self, ntype=None) -> int:
        """Owned nodes of ``ntype`` (all types when ``None``); a block's destinations."""
        if ntype is None:
            return sum(self._num_dst.values())
        return self._num_dst[self._ntype(ntype)]

    def num_nodes(self, ntype=None) -> int:
        """Owned nodes of ``ntype`` (all types when ``None``); for a block, source plus
        destination nodes, as DGL counts them."""
        if self.is_block:
            return self.num_src_nodes(ntype) + self.num_dst_nodes(ntype)
        return self.num_src_nodes(ntype)

    number_of_nodes = num_nodes
    number_of_src_nodes = num_src_nodes
    number_of_dst_nodes = num_dst_nodes

    def num_edges(self, etype=None) -> int:
        """Owned edges of ``etype`` (of all relations when ``None``)."""
        if etype is None:
            return sum(view.num_edges() for view in self._relations.values())
        return self[etype].num_edges()

    number_of_edges = num_edges

    def _one_relation(self, etype):
        if etype is None and len(self._relations) == 1:
            return next(iter(self._relations.values()))
        if etype is None:
            raise ValueError("the graph has several edge types: pass etype=")
        return self[etype]

    def in_degrees(self, v=None, etype=None) -> torch.Tensor:
        """Global in-degree along relation ``etype`` of owned destination nodes."""
        return self._one_relation(etype).in_degrees(v)

    def out_degrees(self, u=None, etype=None) -> torch.Tensor:
        """Global out-degree along relation ``etype`` of owned source nodes."""
        return self._one_relation(etype).out_degrees(u)

    def batch_num_nodes(self, ntype=None) -> torch.Tensor:
        """``tensor([N])``: nodes of the whole graph (of all workers)."""
        if self._global_counts is None:
            raise NotImplementedError("batch_num_nodes needs the graph of "
                                      "sarlite.construct_full_graph")
        return torch.tensor([self._global_counts[0]], device=self.device)

    # -- data ----------------------------------------------------------------------------
    @property
    def srcdata(self) -> TypedData:
        return TypedData(self._frames)

    @property
    def dstdata(self) -> TypedData:
        return TypedData(self._dst_frames)

    @property
    def ndata(self) -> TypedData:
        """Node data by type (``g.ndata[name]`` is ``{ntype: tensor}``); blocks have
        ``srcdata``/``dstdata`` only, as in DGL."""
        if self.is_block:
            raise AttributeError("ndata is not available on a message-flow graph (block): "
                                 "use srcdata and dstdata")
        return TypedData(self._frames)

    @property
    def nodes(self) -> _Types:
        """``g.nodes[ntype].data``; ``g.nodes(ntype)``: the ids ``0..n-1`` of the owned
        nodes of ``ntype``. Full graphs only."""
        if self.is_block:
            raise AttributeError("g.nodes[ntype].data is not available on a message-flow "
                                 "graph (block): use srcdata and dstdata")
        return self.srcnodes

    @property
    def srcnodes(self) -> _Types:
        """``g.srcnodes[ntype].data`` (the source nodes' data) and ``g.srcnodes(ntype)``:
        the source nodes' local ids among this worker's owned nodes of ``ntype`` (a full
        graph's ``0..n-1``; a block's ``input_nodes[ntype]``, where a DGL block numbers
        its own nodes ``0..n-1``)."""
        return _Types(lambda ntype: self._frames[self._ntype(ntype)],
                      lambda ntype: self._ids(self.input_nodes, ntype, self._num_nodes))

    @property
    def dstnodes(self) -> _Types:
        """``g.dstnodes[ntype].data`` and ``g.dstnodes(ntype)``: the destination nodes'
        local ids among the owned nodes of ``ntype`` (a block's ``output_nodes[ntype]``)."""
        return _Types(lambda ntype: self._dst_frames[self._ntype(ntype)],
                      lambda ntype: self._ids(self.output_nodes, ntype, self._num_dst))

    def _ids(self, ids: dict | None, ntype, counts: dict) -> torch.Tensor:
        ntype = self._ntype(ntype)
        if ids is None:
            return torch.arange(counts[ntype], device=self.device)
        return ids[ntype]

    @property
    def edata(self) -> TypedData:
        return TypedData({c: view.edata for c, view in self._relations.items()})

    @property
    def edges(self) -> _Types:
        return _Types(lambda etype: self[etype].edata)

    def local_scope(self):
        """Discard every node or edge field set or removed inside the ``with`` block."""
        return restoring(self._all_frames() +
                         [view.edata for view in self._relations.values()])

    def _all_frames(self) -> list[dict]:
        """Every node-data dict: one per type, two per type for a block."""
        frames = list(self._frames.values())
        return frames + list(self._dst_frames.values()) if self.is_block else frames

    @property
    def device(self) -> torch.device:
        view = next(iter(self._relations.values()), None)
        return view.device if view is not None else torch.device("cpu")

    def to(self, device) -> "HeteroGraphShardManager":
        """Move structure and data to ``device``; returns ``self`` (in place)."""
        for view in self._relations.values():
            view.to(device)
        for frame in self._all_frames():
            for name, value in frame.items():
                frame[name] = value.to(device)
        if self.is_block:
            self.input_nodes = {t: v.to(device) for t, v in self.input_nodes.items()}
            self.output_nodes = {t: v.to(device) for t, v in self.output_nodes.items()}
        return self

    # -- relation views ----------------------------------------------------------------
    def relation_views(self) -> list:
        """The relation views, in the order of :attr:`canonical_etypes`."""
        return list(self._relations.values())

    def with_relations(self, make) -> "HeteroGraphShardManager":
        """A graph of the same nodes whose relation view ``c`` is ``make(self[c])`` (for
        example ``view.with_options(...)``); node data is not carried over. Local."""
        num_dst = self._num_dst if self.is_block else None
        return HeteroGraphShardManager(
            {c: make(view) for c, view in self._relations.items()}, self._num_nodes,
            self._global_counts, num_dst=num_dst, input_nodes=self.input_nodes,
            output_nodes=self.output_nodes)

    # -- message passing ---------------------------------------------------------------
    def multi_update_all(self, etype_dict: dict, cross_reducer: str,
                         apply_node_func=None) -> None:
        """Message passing on several relations, results merged per destination type.

        ``etype_dict`` maps an edge type to ``(message_func, reduce_func)``; each relation
        reads its source type's ``g.nodes[src].data`` (and destination's, when the message
        does), and its result is merged per destination type with ``cross_reducer``
        (``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"stack"``, as in DGL) into
        ``g.nodes[dst].data[out_field]``. Collective: every rank passes the same
        relations in the same order.

        Raises
        ------
        ValueError
            An unknown ``cross_reducer``.
        NotImplementedError
            ``apply_node_func`` (apply it to the results afterwards), or a per-relation
            ``apply_node_func``.
        """
        if cross_reducer not in _CROSS:
            raise ValueError(f"cross_reducer must be one of {_CROSS}, got {cross_reducer!r}")
        if apply_node_func is not None:
            raise NotImplementedError("apply_node_func is not supported: apply it to "
                                      "g.nodes[ntype].data after multi_update_all")
        results: dict[str, dict] = {}
        for etype, funcs in etype_dict.items():
            if len(funcs) != 2:
                raise NotImplementedError(f"multi_update_all: {etype!r} has {len(funcs)} "
                                          f"functions; pass (message_func, reduce_func)")
            c_etype = self.to_canonical_etype(etype)
            out = funcs[1].out_field
            results.setdefault(c_etype[2], {}).setdefault(out, []).append(
                self._relation_update(c_etype, *funcs))
        for ntype, fields in results.items():
            for out, values in fields.items():
                self._dst_frames[ntype][out] = _merge(values, cross_reducer)

    def _relation_update(self, c_etype, message_func, reduce_func) -> torch.Tensor:
        """One relation's ``update_all``, reading this graph's node data."""
        view = self._relations[c_etype]       # its node data is this graph's
        with view.local_scope():
            view.update_all(message_func, reduce_func)
            return view.dstdata[reduce_func.out_field]

    def apply_edges(self, func, edges="__ALL__", etype=None) -> None:
        """``apply_edges`` on relation ``etype``, reading this graph's node data; results
        land in ``g.edges[etype].data``. Collective."""
        view = self._one_relation(etype)
        with view.local_scope():
            before = dict(view.edata)
            view.apply_edges(func, edges)
            written = {k: v for k, v in view.edata.items() if before.get(k) is not v}
        view.edata.update(written)

    def __getattr__(self, name: str):
        if not name.startswith("__") and hasattr(dgl.DGLGraph, name):
            raise AttributeError(
                f"DGLGraph.{name} is not supported on a sarlite heterogeneous distributed "
                f"graph: it serves HeteroGraphConv (g[src, rel, dst]), multi_update_all, "
                f"node and edge data by type, sizes and degrees")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _merge(values: list[torch.Tensor], cross_reducer: str) -> torch.Tensor:
    """DGL's cross-type reducers over the per-relation results of one node type."""
    if cross_reducer == "stack":
        return torch.stack(values, 1)
    stacked = torch.stack(values, 0)
    if cross_reducer == "sum":
        return stacked.sum(0)
    if cross_reducer == "mean":
        return stacked.mean(0)
    return stacked.max(0)[0] if cross_reducer == "max" else stacked.min(0)[0]
