"""DistGraph: DGL's distributed graph facade over one partition per rank and the KV layer.

Each rank loads its own partition (``local_partition``) and puts the owned rows of every
node and edge feature into the KV layer, so ``g.ndata[name][ids]`` works for any global
id. Graph queries that need rows other ranks own (``find_edges``, ``in_degrees``,
``out_degrees``) are collective exchanges, like DistTensor reads. Only homogeneous graphs
are supported.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping
from typing import Any

import dgl
import torch
from dgl.frame import Scheme

from ..comm import rank, world_size
from ..kv import DistTensor, KVStore, init_kvstore
from ..kv.protocol import KVCall, agree, validated
from ..kv.routing import checked_ids, pull_rows, push_rows, sum_duplicates
from ..partition import (DEFAULT_ETYPE, DEFAULT_NTYPE, EdgePartitionPolicy,
                         NodePartitionPolicy, RangePartitionBook, load_partition,
                         read_part_config)
from ..partition.book import DEFAULT_ETYPE_STR


class _DataView(MutableMapping):
    """``g.ndata`` / ``g.edata``: feature name (no ``_N/`` prefix) to :class:`DistTensor`.

    Assigning a :class:`DistTensor` of the matching kind and length adds it; assigning
    anything else is a ``TypeError``/``ValueError``. Deleting only drops the view's entry.
    """

    def __init__(self, kind: str, num_rows: int):
        self._kind, self._num_rows = kind, num_rows
        self._tensors: dict[str, DistTensor] = {}

    def __getitem__(self, name: str) -> DistTensor:
        return self._tensors[name]

    def __setitem__(self, name: str, value: DistTensor) -> None:
        if not isinstance(value, DistTensor):
            raise TypeError(f"{self._kind} data must be a DistTensor, got "
                            f"{type(value).__name__}")
        if value.part_policy.kind != self._kind or len(value) != self._num_rows:
            raise ValueError(f"{self._kind} data {name!r} must be a DistTensor with a "
                             f"{self._kind} partition policy and {self._num_rows} rows, "
                             f"got {value}")
        self._tensors[name] = value

    def __delitem__(self, name: str) -> None:
        del self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        return repr(self._tensors)


def _strip(features: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key.removeprefix(prefix): value for key, value in features.items()}


def _schemes(features: dict[str, torch.Tensor]) -> dict[str, tuple]:
    return {name: (tuple(v.shape[1:]), str(v.dtype)) for name, v in sorted(features.items())}


def _within(ids: torch.Tensor, lo: int, hi: int) -> bool:
    return not ids.numel() or (int(ids.min()) >= lo and int(ids.max()) < hi)


def _covers(ids: torch.Tensor, lo: int, hi: int) -> bool:
    """Whether ``ids`` holds each of ``lo .. hi - 1`` exactly once."""
    return ids.numel() == hi - lo and _within(ids, lo, hi) and \
        bool((torch.bincount(ids - lo, minlength=hi - lo) == 1).all())


class _Loaded:
    """One rank's partition and what is derived from it locally."""

    def __init__(self, part_config, graph_name: str | None):
        meta = read_part_config(part_config)          # NotImplementedError if heterogeneous
        if meta["num_parts"] != world_size():
            raise ValueError(f"{part_config} has {meta['num_parts']} partitions but there "
                             f"are {world_size()} ranks; DistGraph needs one partition per "
                             f"rank (torchrun --nproc_per_node={meta['num_parts']})")
        if graph_name is not None and graph_name != meta["graph_name"]:
            raise ValueError(f"{part_config} holds graph {meta['graph_name']!r}, not "
                             f"{graph_name!r}")
        graph, nfeat, efeat, book, self.graph_name, _, _ = load_partition(part_config, rank())
        self.graph, self.book = graph, book
        self.node_feats = _strip(nfeat, DEFAULT_NTYPE + "/")
        self.edge_feats = _strip(efeat, DEFAULT_ETYPE_STR + "/")
        inner = graph.edata["inner_edge"].bool()
        local_src, local_dst = graph.edges()
        nid = graph.ndata[dgl.NID]
        self.src, dst = nid[local_src[inner]], nid[local_dst[inner]]
        eids = graph.edata[dgl.EID][inner]
        (node_lo, node_hi), (edge_lo, edge_hi) = (book.node_ranges[book.partid].tolist(),
                                                  book.edge_ranges[book.partid].tolist())
        if not (_covers(eids, edge_lo, edge_hi) and _within(dst, node_lo, node_hi)):
            raise ValueError(f"{part_config}: the inner edges of part {book.partid} are not "
                             f"exactly the edges it owns, into nodes it owns")
        self.in_degrees = torch.bincount(dst - node_lo, minlength=node_hi - node_lo)
        self.local_eid = torch.empty(edge_hi - edge_lo, dtype=torch.int64)
        self.local_eid[eids - edge_lo] = inner.nonzero().squeeze(1)

    def record(self) -> tuple:
        return (self.graph_name, self.book.node_ranges.tolist(),
                self.book.edge_ranges.tolist(), _schemes(self.node_feats),
                _schemes(self.edge_feats))


class DistGraph:
    """The whole graph as seen from one rank, as ``dgl.distributed.DistGraph``.

    Parameters
    ----------
    part_config:
        The partition JSON written by :func:`sarlite.partition_graph` or
        ``dgl.distributed.partition_graph``, with one partition per rank.
    graph_name:
        Optional; when given it must equal the name in ``part_config``. (DGL's first
        argument; here the config comes first because there are no servers to ask.)

    Creating it is a **collective** called after ``sarlite.init()`` on every rank: rank
    ``r`` loads partition ``r`` and the ranks check that they loaded the same graph. It
    sets up the default :class:`~sarlite.kv.KVStore` (replacing any earlier one), so that
    DistTensors without a ``part_policy`` are sharded like this graph's nodes or edges.
    ``find_edges``, ``in_degrees``, ``out_degrees`` and ``barrier`` are collectives too:
    every rank calls them in the same order, possibly with no ids. They block and end with
    :class:`~sarlite.comm.CollectiveError` when a rank does not join in time.

    Raises
    ------
    NotImplementedError
        The partitions describe a heterogeneous graph.
    ValueError
        The number of partitions differs from the number of ranks, the ranks loaded
        different graphs, or ``graph_name`` differs.
    FileNotFoundError
        The config or a partition file is missing.
    CollectiveError
        Another rank failed to load its partition (its error is quoted).
    """

    def __init__(self, part_config: str | os.PathLike, graph_name: str | None = None):
        loaded, error = None, None
        try:
            loaded = _Loaded(part_config, graph_name)
        except Exception as err:  # every rank must learn of it, see kv.protocol.agree
            error = err
        agree(f"DistGraph({str(part_config)!r})", loaded and loaded.record(), error)
        self._graph = loaded.graph
        self._graph_name = loaded.graph_name
        self._book: RangePartitionBook = loaded.book
        self._store: KVStore = init_kvstore(self._book)
        self._node_policy = NodePartitionPolicy(self._book)
        self._edge_policy = EdgePartitionPolicy(self._book)
        self._in_degrees, self._local_eid = loaded.in_degrees, loaded.local_eid
        self._out_degrees = self._count_out_degrees(loaded.src)
        self._ndata = _DataView("node", self.num_nodes())
        self._edata = _DataView("edge", self.num_edges())
        for view, features, policy in ((self._ndata, loaded.node_feats, self._node_policy),
                                       (self._edata, loaded.edge_feats, self._edge_policy)):
            for name, rows in sorted(features.items()):
                view[name] = DistTensor((policy.get_size(),) + tuple(rows.shape[1:]),
                                        rows.dtype, name, init_func=lambda *_, r=rows: r,
                                        part_policy=policy)

    def _count_out_degrees(self, src: torch.Tensor) -> torch.Tensor:
        """Out-degree of each owned node: every rank counts the sources of its owned
        edges and adds the counts at the sources' owners (one push)."""
        call = KVCall("DistGraph: counting out-degrees", "graph_degrees")
        nodes, counts, _ = sum_duplicates(src, torch.ones_like(src))
        local, counts = push_rows(nodes, counts, self._node_policy, call)
        degrees = torch.zeros(self._node_policy.get_part_size(), dtype=torch.int64)
        return degrees.index_add_(0, local, counts)

    # -- partition and data ------------------------------------------------------
    @property
    def local_partition(self) -> dgl.DGLGraph:
        """This rank's partition graph exactly as :func:`sarlite.load_partition` returns
        it (owned nodes and edges plus the halo; ndata ``_ID``, ``inner_node``; edata
        ``_ID``, ``inner_edge``, in global ids)."""
        return self._graph

    def get_partition_book(self) -> RangePartitionBook:
        return self._book

    def get_node_partition_policy(self, ntype: str = DEFAULT_NTYPE) -> NodePartitionPolicy:
        self._check_type(ntype, [DEFAULT_NTYPE], "node")
        return self._node_policy

    def get_edge_partition_policy(self, etype=DEFAULT_ETYPE) -> EdgePartitionPolicy:
        self._check_type(etype, [DEFAULT_ETYPE[1], DEFAULT_ETYPE, DEFAULT_ETYPE_STR], "edge")
        return self._edge_policy

    @staticmethod
    def _check_type(given, known: list, what: str) -> None:
        if given is not None and given not in known:
            raise ValueError(f"DistGraph has one {what} type, {known[0]!r}; got {given!r}")

    @property
    def ndata(self) -> _DataView:
        """``{name: DistTensor}`` of node data, ``_N/`` prefix removed."""
        return self._ndata

    @property
    def edata(self) -> _DataView:
        """``{name: DistTensor}`` of edge data, ``_N:_E:_N/`` prefix removed."""
        return self._edata

    def node_attr_schemes(self) -> dict[str, Scheme]:
        """``{name: Scheme(shape=row shape, dtype)}`` of the node data."""
        return {name: Scheme(t.shape[1:], t.dtype) for name, t in self._ndata.items()}

    def edge_attr_schemes(self) -> dict[str, Scheme]:
        """``{name: Scheme(shape=row shape, dtype)}`` of the edge data."""
        return {name: Scheme(t.shape[1:], t.dtype) for name, t in self._edata.items()}

    # -- sizes and types ---------------------------------------------------------
    @property
    def graph_name(self) -> str:
        return self._graph_name

    def rank(self) -> int:
        """The partition (and rank) of this process."""
        return self._book.partid

    @property
    def ntypes(self) -> list[str]:
        return [DEFAULT_NTYPE]

    @property
    def etypes(self) -> list[str]:
        return [DEFAULT_ETYPE[1]]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return [DEFAULT_ETYPE]

    @property
    def idtype(self) -> torch.dtype:
        return torch.int64

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def num_nodes(self, ntype: str | None = None) -> int:
        """Number of nodes of the whole graph."""
        self._check_type(ntype, [DEFAULT_NTYPE], "node")
        return self._node_policy.get_size()

    def num_edges(self, etype=None) -> int:
        """Number of edges of the whole graph."""
        self.get_edge_partition_policy(etype)
        return self._edge_policy.get_size()

    number_of_nodes = num_nodes
    number_of_edges = num_edges

    # -- queries (collective) ----------------------------------------------------
    def find_edges(self, edges, etype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Source and destination global node ids of the global edge ids ``edges``
        (``(n,)`` each, in the order given). Collective; every rank calls it.

        Raises ``IndexError`` on a rank whose ids are out of range (and
        ``CollectiveError`` on the others).
        """
        self.get_edge_partition_policy(etype)
        call = KVCall("DistGraph.find_edges", "graph_find_edges")
        eids = validated(call, lambda: checked_ids(edges, self.num_edges(), call.what))
        ends = pull_rows(eids, self._edge_policy, self._edge_ends, call)
        return ends[:, 0], ends[:, 1]

    def _edge_ends(self, local_eids: torch.Tensor) -> torch.Tensor:
        src, dst = self._graph.find_edges(self._local_eid[local_eids])
        nid = self._graph.ndata[dgl.NID]
        return torch.stack([nid[src], nid[dst]], 1)

    def in_degrees(self, v: Any = dgl.ALL) -> torch.Tensor | int:
        """In-degree of the global node ids ``v`` (all nodes by default); an int for an
        int ``v``. Collective; every rank calls it."""
        return self._degrees(v, self._in_degrees, "in_degrees")

    def out_degrees(self, u: Any = dgl.ALL) -> torch.Tensor | int:
        """Out-degree of the global node ids ``u`` (all nodes by default); an int for an
        int ``u``. Collective; every rank calls it."""
        return self._degrees(u, self._out_degrees, "out_degrees")

    def _degrees(self, nodes, owned: torch.Tensor, name: str) -> torch.Tensor | int:
        call = KVCall(f"DistGraph.{name}", "graph_degrees")
        everything = isinstance(nodes, str) and nodes == dgl.ALL
        ids = validated(call, lambda: checked_ids(slice(None) if everything else nodes,
                                                  self.num_nodes(), call.what))
        degrees = pull_rows(ids, self._node_policy, owned.__getitem__, call)
        return int(degrees[0]) if isinstance(nodes, int) else degrees

    def barrier(self) -> None:
        """Block until every rank has called it. Collective."""
        self._store.barrier()

    def __repr__(self) -> str:
        return (f"DistGraph(graph_name={self._graph_name!r}, num_nodes={self.num_nodes()}, "
                f"num_edges={self.num_edges()}, rank={self.rank()}, "
                f"ndata={sorted(self._ndata)}, edata={sorted(self._edata)})")
