"""The part of ``dgl.DGLGraph`` that unmodified ``dgl.nn`` layers touch.

:class:`ShardedGraphBase` gives both distributed graph objects (the sequential
:class:`GraphShardManager` and the one-shot :class:`DistributedBlock`) DGL's data views,
sizes, degrees, types and ``local_scope``. For a full graph its nodes are this worker's
owned nodes, ``srcdata``, ``dstdata`` and ``ndata`` are one dict, and its edges are the
owned edges (every edge into an owned node) in shard order. For a message-flow graph of
:func:`sarlite.construct_mfgs` it is a block: destination nodes are a subset of the owned
nodes, source nodes start with them, and ``srcdata``/``dstdata`` are separate. A *relation view* of a heterogeneous
graph (``g[src, rel, dst]``, see :mod:`sarlite.core.hetero`) is a full graph of one
relation: its sources are the owned nodes of type ``src``, its destinations the owned
nodes of type ``dst``, and ``srcdata``/``dstdata`` are separate when the two types differ.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager

import dgl
import torch
from dgl.ops import edge_softmax as dgl_edge_softmax

from ..partition.book import DEFAULT_ETYPE
from .local_blocks import BlockCache, resolve
from .kernels import EdgeIndex
from .kernels import edge_softmax as kernel_edge_softmax


@contextmanager
def restoring(dicts: list[dict]):
    """Put each dict back as it was when the ``with`` block ends (DGL's ``local_scope``)."""
    saved = [(data, dict(data)) for data in dicts]
    try:
        yield
    finally:
        for data, copy_ in saved:
            data.clear()
            data.update(copy_)


class ShardedGraphBase:
    """Base of the distributed graph objects: views, sizes, degrees and types.

    Subclasses implement ``update_all``, ``apply_edges`` and ``_to``.

    Parameters
    ----------
    num_src, num_dst:
        Source and destination node counts (equal, and the same nodes, for a full graph).
    in_degrees:
        ``(num_dst,)`` global in-degrees; ``out_degrees``: ``(num_src,)`` global
        out-degrees.
    edge_dst:
        ``(num_edges,)`` destination index of every edge, in edge order; or a function
        that builds it when asked (a manager's: its shards' destinations, held once
        there), with ``num_edges`` given.
    is_block:
        True for message-flow graphs (separate source and destination data).
    global_counts:
        ``(nodes, edges)`` of the whole graph, for ``batch_num_nodes``/``batch_num_edges``.
    relation:
        The canonical edge type ``(src, rel, dst)`` of a relation view (else the
        homogeneous graph's ``("_N", "_E", "_N")``).
    """

    def __init__(self, num_src: int, num_dst: int, in_degrees: torch.Tensor,
                 out_degrees: torch.Tensor, edge_dst: torch.Tensor,
                 edata: dict[str, torch.Tensor] | None = None, is_block: bool = False,
                 global_counts: tuple[int, int] | None = None,
                 relation: tuple[str, str, str] | None = None, *,
                 num_edges: int | None = None):
        self._global_counts = global_counts
        self._num_src, self._num_dst = num_src, num_dst
        self.is_block = is_block
        self.relation = tuple(relation) if relation is not None else DEFAULT_ETYPE
        self._split = is_block or self.relation[0] != self.relation[2]
        self._in_degrees = in_degrees
        self._out_degrees = out_degrees
        self._edge_dst = edge_dst
        self._num_edges = edge_dst.numel() if num_edges is None else num_edges
        self._srcdata: dict[str, torch.Tensor] = {}
        self._dstdata: dict[str, torch.Tensor] = {} if self._split else self._srcdata
        self._edata: dict[str, torch.Tensor] = dict(edata or {})
        self._softmax_graph = None

    # -- data views ----------------------------------------------------------------------
    @property
    def srcdata(self) -> dict:
        """Data of the source nodes (for a full graph, the same dict as ``dstdata``)."""
        return self._srcdata

    @property
    def dstdata(self) -> dict:
        return self._dstdata

    @property
    def ndata(self) -> dict:
        """Node data of a full graph; blocks (and relations between two node types) have
        ``srcdata``/``dstdata`` only."""
        if self._split:
            raise AttributeError("ndata is not available on a message-flow graph (block) "
                                 "or on a relation between two node types: use srcdata "
                                 "and dstdata")
        return self._srcdata

    @property
    def edata(self) -> dict:
        """Data of the owned edges, in shard order."""
        return self._edata

    def local_scope(self):
        """Discard every field set or removed inside the ``with`` block, as in DGL."""
        return restoring(self._data_dicts())

    def _share_node_data(self, src: dict, dst: dict) -> None:
        """Hold ``src``/``dst`` (a heterogeneous graph's data of this relation's source
        and destination types) as ``srcdata``/``dstdata``: as in DGL, a relation view's
        node data is its types' node data."""
        self._srcdata = src
        self._dstdata = dst if self._split else src

    def _data_dicts(self) -> list[dict]:
        dicts = [self._srcdata, self._edata]
        return dicts + [self._dstdata] if self._split else dicts

    def local_var(self) -> "ShardedGraphBase":
        """A view sharing structure and tensors whose field changes stay local, as in DGL."""
        clone = copy.copy(self)
        clone._srcdata, clone._edata = dict(self._srcdata), dict(self._edata)
        clone._dstdata = dict(self._dstdata) if self._split else clone._srcdata
        return clone

    # -- sizes -------------------------------------------------------------------------
    def num_nodes(self, ntype=None) -> int:
        """Owned nodes of a full graph; source plus destination nodes of a block (DGL); the
        owned nodes of ``ntype`` for a relation between two node types."""
        if self._split and not self.is_block:
            if ntype not in (self.relation[0], self.relation[2]):
                raise ValueError(f"num_nodes: name one of the node types "
                                 f"{[self.relation[0], self.relation[2]]} of relation "
                                 f"{self.relation}")
            return self._num_src if ntype == self.relation[0] else self._num_dst
        return self._num_src + self._num_dst if self.is_block else self._num_src

    def num_src_nodes(self, ntype=None) -> int:
        return self._num_src

    def num_dst_nodes(self, ntype=None) -> int:
        return self._num_dst

    def num_edges(self, etype=None) -> int:
        return self._num_edges

    def _edge_destinations(self) -> torch.Tensor:
        """``(num_edges,)``: the destination of every edge, in edge order."""
        return self._edge_dst() if callable(self._edge_dst) else self._edge_dst

    # -- batch information: one graph, counted over all workers -------------------------
    @property
    def batch_size(self) -> int:
        """1: the distributed graph is one graph (spread over the workers)."""
        return 1

    def batch_num_nodes(self, ntype=None) -> torch.Tensor:
        """``tensor([N])`` with ``N`` the node count of the **whole** graph, as DGL reports
        for the unpartitioned graph (layers that scale by it stay exact)."""
        return torch.tensor([self._global(0)], dtype=torch.int64, device=self.device)

    def batch_num_edges(self, etype=None) -> torch.Tensor:
        """``tensor([E])`` with ``E`` the edge count of the whole graph."""
        return torch.tensor([self._global(1)], dtype=torch.int64, device=self.device)

    def _global(self, which: int) -> int:
        if self._global_counts is None or self.is_block:
            raise NotImplementedError(
                "batch_num_nodes/batch_num_edges are defined for the full graph of "
                "sarlite.construct_full_graph only, not for message-flow graphs")
        return self._global_counts[which]

    number_of_nodes = num_nodes
    number_of_src_nodes = num_src_nodes
    number_of_dst_nodes = num_dst_nodes
    number_of_edges = num_edges

    # -- degrees -----------------------------------------------------------------------
    def in_degrees(self, v=None, etype=None) -> torch.Tensor:
        """Global in-degree of the destination nodes (all their in-edges are owned)."""
        return self._in_degrees if v is None else self._in_degrees[torch.as_tensor(v)]

    def out_degrees(self, u=None, etype=None) -> torch.Tensor:
        """Global out-degree of the source nodes, counting edges into every partition."""
        return self._out_degrees if u is None else self._out_degrees[torch.as_tensor(u)]

    # -- types and placement -----------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._in_degrees.device

    @property
    def idtype(self) -> torch.dtype:
        return torch.int64

    @property
    def srctypes(self) -> list[str]:
        return [self.relation[0]]

    @property
    def dsttypes(self) -> list[str]:
        return [self.relation[2]]

    @property
    def ntypes(self) -> list[str]:
        return sorted({self.relation[0], self.relation[2]})

    @property
    def etypes(self) -> list[str]:
        return [self.relation[1]]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return [self.relation]

    @property
    def is_homogeneous(self) -> bool:
        return self.relation[0] == self.relation[2]

    def to(self, device) -> "ShardedGraphBase":
        """Move structure and data to ``device``; returns ``self`` (in place)."""
        device = torch.device(device)
        self._in_degrees = self._in_degrees.to(device)
        self._out_degrees = self._out_degrees.to(device)
        if not callable(self._edge_dst):
            self._edge_dst = self._edge_dst.to(device)
        for data in self._data_dicts():
            for key, value in data.items():
                data[key] = value.to(device)
        self._softmax_graph = None
        self._to(device)
        return self

    def _to(self, device) -> None:
        raise NotImplementedError

    # -- what sarlite refuses, with the reason ---------------------------------------------
    def __getattr__(self, name: str):
        """Any other ``DGLGraph`` member: refused with one clear ``AttributeError``."""
        if not name.startswith("__") and hasattr(dgl.DGLGraph, name):
            raise AttributeError(
                f"DGLGraph.{name} is not supported on a sarlite distributed graph: each "
                f"worker holds one partition (owned nodes, and the edges into them). Compute "
                f"it on the whole graph before sarlite.partition_graph, or see the guide's "
                f"'Full-graph training' page (docs/guide/full-graph.md, section 'Layers and "
                f"models') for what layers may use")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _graph(self):
        raise NotImplementedError(
            "this DGL function needs a local dgl.DGLGraph and got a sarlite distributed graph. "
            "dgl.ops (gspmm, gsddmm, u_mul_e_sum, ...), dgl.nn.functional.edge_softmax, "
            "dgl.broadcast_nodes and dgl.reverse work on it after "
            "sarlite.install_dgl_dispatch() (undo with sarlite.uninstall_dgl_dispatch()). "
            "Other graph functions and transforms are not supported on a partitioned graph: "
            "apply them before sarlite.partition_graph")

    def add_self_loop(self, *args, **kwargs):
        raise NotImplementedError(
            "add_self_loop/remove_self_loop would change the partitioned structure, so layers "
            "that call them (TWIRLSConv) are not supported; add or remove self-loops with "
            "dgl.add_self_loop(g) before sarlite.partition_graph")

    remove_self_loop = add_self_loop

    def __getitem__(self, key):
        raise NotImplementedError(
            "a sarlite distributed graph has one node and one edge type: g[etype] slicing "
            "is not supported; use the graph itself")

    # -- attention ---------------------------------------------------------------------
    def edge_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Softmax of per-edge ``logits`` ``(num_edges, ...)`` over each node's in-edges,
        on the kernels of :meth:`engine_options`.

        Needs no communication: every in-edge of an owned node is owned.
        """
        if self._softmax_graph is None:      # edges from their destination to it
            edge_dst = self._edge_destinations()
            self._softmax_graph = BlockCache(EdgeIndex(
                edge_dst, edge_dst, self.num_dst_nodes(), self.num_dst_nodes()))
        kernels = resolve(self.engine_options().kernels, self.device)
        if kernels == "torch":
            return kernel_edge_softmax(self._softmax_graph.index, logits)
        return dgl_edge_softmax(self._softmax_graph.get("dgl"), logits)
