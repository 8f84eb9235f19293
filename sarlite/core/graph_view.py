"""The part of ``dgl.DGLGraph`` that unmodified ``dgl.nn`` layers touch.

:class:`DistributedGraph` gives both distributed graph objects (the sequential
:class:`GraphShardManager` and the one-shot :class:`DistributedBlock`) DGL's data views,
sizes, degrees, types and ``local_scope``. Its nodes are this worker's owned nodes; its
edges are the owned edges (every edge into an owned node), in shard order.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager

import dgl
import torch

from ..partition.book import DEFAULT_ETYPE, DEFAULT_NTYPE


class DistributedGraph:
    """Base of the distributed graph objects: views, sizes, degrees and types.

    Subclasses implement ``update_all``, ``apply_edges`` and ``_to``.

    Attributes
    ----------
    node_range:
        ``(start, end)`` global ids of the owned nodes.
    """

    is_block = False

    def __init__(self, node_range: tuple[int, int], in_degrees: torch.Tensor,
                 out_degrees: torch.Tensor, edge_dst: torch.Tensor,
                 edata: dict[str, torch.Tensor] | None = None):
        self.node_range = node_range
        self._in_degrees = in_degrees
        self._out_degrees = out_degrees
        self._edge_dst = edge_dst
        self._ndata: dict[str, torch.Tensor] = {}
        self._edata: dict[str, torch.Tensor] = dict(edata or {})
        self._softmax_graph = None

    # -- data views (src = dst = owned nodes) ------------------------------------------
    @property
    def srcdata(self) -> dict:
        """Data of the source nodes: the owned nodes (same dict as ``dstdata``/``ndata``)."""
        return self._ndata

    @property
    def dstdata(self) -> dict:
        return self._ndata

    @property
    def ndata(self) -> dict:
        return self._ndata

    @property
    def edata(self) -> dict:
        """Data of the owned edges, in shard order."""
        return self._edata

    @contextmanager
    def local_scope(self):
        """Discard every field set or removed inside the ``with`` block, as in DGL."""
        saved_n, saved_e = dict(self._ndata), dict(self._edata)
        try:
            yield
        finally:
            self._ndata.clear()
            self._ndata.update(saved_n)
            self._edata.clear()
            self._edata.update(saved_e)

    def local_var(self) -> "DistributedGraph":
        """A view sharing structure and tensors whose field changes stay local, as in DGL."""
        clone = copy.copy(self)
        clone._ndata, clone._edata = dict(self._ndata), dict(self._edata)
        return clone

    # -- sizes -------------------------------------------------------------------------
    def num_nodes(self, ntype=None) -> int:
        return self.node_range[1] - self.node_range[0]

    def num_src_nodes(self, ntype=None) -> int:
        return self.num_nodes()

    def num_dst_nodes(self, ntype=None) -> int:
        return self.num_nodes()

    def num_edges(self, etype=None) -> int:
        return self._edge_dst.numel()

    number_of_nodes = num_nodes
    number_of_src_nodes = num_src_nodes
    number_of_dst_nodes = num_dst_nodes
    number_of_edges = num_edges

    # -- degrees -----------------------------------------------------------------------
    def in_degrees(self, v=None, etype=None) -> torch.Tensor:
        """Global in-degree of owned nodes (all in-edges are owned): ``(num_nodes,)``."""
        return self._in_degrees if v is None else self._in_degrees[torch.as_tensor(v)]

    def out_degrees(self, u=None, etype=None) -> torch.Tensor:
        """Global out-degree of owned nodes, counting edges into every partition."""
        return self._out_degrees if u is None else self._out_degrees[torch.as_tensor(u)]

    # -- types and placement -----------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._in_degrees.device

    @property
    def idtype(self) -> torch.dtype:
        return torch.int64

    ntypes = srctypes = dsttypes = [DEFAULT_NTYPE]
    etypes = [DEFAULT_ETYPE[1]]
    canonical_etypes = [DEFAULT_ETYPE]
    is_homogeneous = True

    def to(self, device) -> "DistributedGraph":
        """Move structure and data to ``device``; returns ``self`` (in place)."""
        device = torch.device(device)
        self._in_degrees = self._in_degrees.to(device)
        self._out_degrees = self._out_degrees.to(device)
        self._edge_dst = self._edge_dst.to(device)
        for data in (self._ndata, self._edata):
            for key, value in data.items():
                data[key] = value.to(device)
        self._softmax_graph = None
        self._to(device)
        return self

    def _to(self, device) -> None:
        raise NotImplementedError

    # -- attention ---------------------------------------------------------------------
    def edge_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Softmax of per-edge ``logits`` ``(num_edges, ...)`` over each node's in-edges.

        Needs no communication: every in-edge of an owned node is owned.
        """
        if self._softmax_graph is None:
            self._softmax_graph = dgl.graph((self._edge_dst, self._edge_dst),
                                            num_nodes=self.num_dst_nodes(),
                                            device=self._edge_dst.device)
        from .edge_softmax import dgl_edge_softmax
        return dgl_edge_softmax(self._softmax_graph, logits)
