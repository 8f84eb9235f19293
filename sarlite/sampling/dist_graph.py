"""DistGraph: DGL's distributed graph facade over one partition per rank and the KV layer.

Each rank holds its own partition (a :class:`~sarlite.partition.PartitionData`, as
:func:`~sarlite.partition.load_partition_data`, the one parser of partition files,
returns it) and puts the owned rows of every node and edge feature into the default KV
store, so ``g.ndata[name][ids]`` (``g.nodes[ntype].data[name][ids]`` with types) works for
any global id. Graph queries that need rows other ranks own (``find_edges``,
``edge_subgraph``, ``in_degrees``, ``out_degrees``, ``sample_neighbors``) are collective
exchanges, like DistTensor writes (and reads, unless the store was made with
``one_sided_reads``, as the DGL facade's is). These are the methods DGL's samplers call on
a graph, so ``dgl.dataloading.NeighborSampler``, ``MultiLayerFullNeighborSampler``,
``as_edge_prediction_sampler`` and ``negative_sampler.Uniform`` run on a DistGraph
unchanged.

**Types.** A homogeneous graph has the one node type ``"_N"`` and edge type
``("_N", "_E", "_N")``, and its ids are DGL's homogeneous ids. A graph with types speaks
DGL's *type-wise* ids everywhere (``num_nodes("paper")`` ids of ``paper``, numbered from
0): the data of each type is its own :class:`~sarlite.kv.DistTensor` under the type's
partition policy, and queries name the edge type (``find_edges(eids, etype)``,
``in_degrees(v, etype)``) or take ``{type: ids}`` dicts (``sample_neighbors``,
``edge_subgraph``).
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import dgl
import torch
from dgl.frame import Scheme

from ..comm import rank, world_size
from ..kv import DistTensor, KVStore, current_kvstore, init_kvstore, same_partitioning
from ..kv.protocol import KVCall, agree, validated
from ..kv.routing import checked_ids, pull_rows, push_rows, sum_duplicates
from ..partition import (DEFAULT_ETYPE, DEFAULT_NTYPE, EdgePartitionPolicy,
                         NodePartitionPolicy, PartitionData,
                         RangePartitionBook, load_partition_data)
from ..partition.book import DEFAULT_ETYPE_STR, as_id_tensor
from .neighbor import LocalTypedGraph, sample_etype_neighbors

CanonicalEtype = tuple[str, str, str]


class _DataView(MutableMapping):
    """``g.ndata`` / ``g.edata`` (``g.nodes[ntype].data`` / ``g.edges[etype].data``):
    feature name (no type prefix) to :class:`DistTensor` of one type.

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


class _TypeData:
    """``g.nodes[ntype]`` / ``g.edges[etype]``: ``.data`` is the type's data view."""

    def __init__(self, data: _DataView):
        self.data = data


class _TypeIndex:
    """``g.nodes`` / ``g.edges``: ``[type]`` gives the type's :class:`_TypeData`; the type
    is resolved as the graph's methods resolve it (``ValueError`` when unknown)."""

    def __init__(self, views: dict, resolve):
        self._views, self._resolve = views, resolve

    def __getitem__(self, key) -> _TypeData:
        return _TypeData(self._views[self._resolve(key)])


def _schemes(features: dict[str, torch.Tensor]) -> dict[str, tuple]:
    return {name: (tuple(v.shape[1:]), str(v.dtype)) for name, v in sorted(features.items())}


def _config_argument(graph_name, part_config) -> tuple[str | None, str | os.PathLike]:
    """``(graph_name to check or None, part_config)`` from DGL's arguments, also accepting
    sarlite's shorthand ``DistGraph(part_config)`` (a path or a ``.json`` name alone)."""
    if part_config is not None:
        return graph_name, part_config
    if isinstance(graph_name, os.PathLike) or str(graph_name).endswith(".json"):
        return None, graph_name
    raise ValueError(f"DistGraph({graph_name!r}) needs part_config: sarlite has no servers "
                     f"to fetch the graph from, so pass the partition JSON, "
                     f"DistGraph({graph_name!r}, part_config='out/{graph_name}.json')")


def _check_data(data: PartitionData, graph_name: str | None,
                gpb: RangePartitionBook | None) -> None:
    """Raise ``ValueError`` unless ``data`` is this rank's partition, one per rank, of
    graph ``graph_name`` (when given) partitioned as ``gpb`` (when given)."""
    if data.num_parts != world_size() or data.rank != rank():
        raise ValueError(f"partition {data.rank} of {data.num_parts} cannot be rank "
                         f"{rank()} of {world_size()}; DistGraph needs partition r on rank "
                         f"r, one per rank (torchrun --nproc_per_node={data.num_parts})")
    if data.partition_graph is None:
        raise ValueError("the PartitionData holds no partition graph; load it with "
                         "sarlite.load_partition_data")
    if graph_name is not None and graph_name != data.graph_name:
        raise ValueError(f"the partitions hold graph {data.graph_name!r}, not "
                         f"{graph_name!r}")
    if gpb is not None and not same_partitioning(gpb, data.partition_book):
        raise ValueError(f"gpb {gpb} differs from the partition book of the partitions, "
                         f"{data.partition_book}")


def _by_id(rows: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """Rows reordered so that row ``position[i]`` is ``rows[i]``; ``rows`` itself (no
    copy) when ``position`` is already ``0, 1, ...``."""
    rows = rows.cpu()
    if torch.equal(position, torch.arange(position.numel())):
        return rows
    out = torch.empty_like(rows)
    out[position] = rows
    return out


def _reusable_store(book: RangePartitionBook, replace: bool) -> KVStore | None:
    """The default store to keep using, or ``None`` when a new one must be made. Local.

    Raises ``ValueError`` when the default store is over another partitioning and
    ``replace`` is false.
    """
    store = current_kvstore()
    if replace or store is None:
        return None
    if same_partitioning(store.partition_book, book):
        return store
    old = store.partition_book
    raise ValueError(f"the default KVStore is over another partitioning ({old}, node ranges "
                     f"{old.node_ranges.tolist()}) than this graph ({book}, node ranges "
                     f"{book.node_ranges.tolist()}); pass replace_kvstore=True to make a new "
                     f"default store for this graph (DistTensors made before keep the old "
                     f"one), or call sarlite.kv.init_kvstore(partition_book) first")


class _Local:
    """What one rank derives from its partition, without communication, by type.

    ``ends[c]``: ``(E_c, 2)`` source and destination ids (type-wise for a real type) of
    the owned edges of relation ``c``, in edge id order; ``in_degrees[c]``: ``(N_d,)``
    in-degree of the owned nodes of ``c``'s destination type; ``sources[c]``: the
    sources of those edges; ``node_feats[ntype]`` / ``edge_feats[c]``: ``{name: rows}``
    in id order (the data's own node tensors).
    """

    def __init__(self, data: PartitionData):
        book = self.book = data.partition_book
        relations, self.node_feats, edge_feats = \
            data.relations, data.node_frames, data.edge_frames
        self.ends, self.in_degrees, self.sources, self.edge_feats = {}, {}, {}, {}
        for c_etype, shards in relations.items():
            edges = EdgePartitionPolicy(book, c_etype)
            dst_nodes = NodePartitionPolicy(book, c_etype[2])
            src = torch.cat([shard.src for shard in shards])
            dst = torch.cat([shard.dst for shard in shards])
            position = edges.to_local(torch.cat([shard.eids for shard in shards]))
            ends = torch.empty(edges.get_part_size(), 2, dtype=torch.int64)
            ends[position] = torch.stack([src, dst], 1)
            self.ends[c_etype], self.sources[c_etype] = ends, src
            self.in_degrees[c_etype] = torch.bincount(dst_nodes.to_local(dst),
                                                      minlength=dst_nodes.get_part_size())
            self.edge_feats[c_etype] = {name: _by_id(rows, position)
                                        for name, rows in edge_feats[c_etype].items()}
        self.graph, self.graph_name = data.partition_graph, data.graph_name
        self.typed = book.has_named_types

    def record(self) -> tuple:
        return (self.graph_name, self.book.node_ranges.tolist(),
                self.book.edge_ranges.tolist(), self.book.ntypes,
                self.book.canonical_etypes,
                {t: _schemes(f) for t, f in self.node_feats.items()},
                {":".join(c): _schemes(f) for c, f in self.edge_feats.items()})


class DistGraph:
    """The whole graph as seen from one rank, as ``dgl.distributed.DistGraph``.

    Parameters
    ----------
    graph_name:
        The graph's name; it must equal the name in ``part_config``. (sarlite also takes
        the partition config alone, ``DistGraph("out/g.json")``: a path or a name ending
        in ``.json`` with no ``part_config``.)
    gpb:
        Optional :class:`~sarlite.partition.RangePartitionBook`; when given it must
        describe the partitioning in ``part_config`` (there are no servers to share it
        with, so it is only checked).
    part_config:
        The partition JSON written by :func:`sarlite.partition_graph` or
        ``dgl.distributed.partition_graph``, with one partition per rank. Required: with
        no servers, the graph comes from the files.
    replace_kvstore:
        Keyword-only. Make a new default KV store for this graph even when one exists
        (see below).
    one_sided_reads:
        Keyword-only. Make reads of the graph's store (``g.ndata[name][ids]``, every
        :class:`~sarlite.kv.DistTensor` of the default store) one-sided, as DGL's: the
        ranks that read call them alone and the owners answer from a serving thread
        (see :class:`~sarlite.kv.KVStore`). A reused default store is switched to
        one-sided reads (:meth:`KVStore.enable_one_sided_reads
        <sarlite.kv.KVStore.enable_one_sided_reads>`); ``False`` (default) leaves a
        reused store as it is. Every rank passes the same value. The DGL facade's
        ``sarlite.distributed.DistGraph`` passes ``True``. Graph queries and writes stay
        collective.

    Creating it is a **collective** called after ``sarlite.init()`` on every rank: rank
    ``r`` loads partition ``r`` with :func:`sarlite.load_partition_data` (or takes it
    from :meth:`from_partition_data`) and the ranks check that they hold the same graph.
    ``find_edges``, ``edge_subgraph``, ``in_degrees``, ``out_degrees``,
    ``sample_neighbors`` and ``barrier`` are collectives too: every rank calls them in the
    same order, possibly with no ids. They block and end with
    :class:`~sarlite.comm.CollectiveError` when a rank does not join in time. Sizes, types
    and data schemes are local.

    **The default KV store.** As ``dgl.distributed.initialize`` followed by ``DistGraph``,
    the graph keeps its data in the process's default :class:`~sarlite.kv.KVStore` (the one
    DistTensors without a store use): it **reuses** the default store when that is over an
    equal partition book, **creates and registers** one when there is none, and raises
    ``ValueError`` when the default store is over a *different* partitioning, unless
    ``replace_kvstore=True`` (or an earlier :func:`sarlite.kv.init_kvstore`) replaces it.
    The node and edge features are added to the store under DGL's names
    (``"node~_N:<name>"``, ``"edge~_N:_E:_N:<name>"``) as the very tensors the partition
    data holds where they are contiguous CPU tensors (writes through ``ndata`` change
    them). A later graph over the same partitioning replaces those entries (same shapes
    and dtypes required), so an earlier graph's ``ndata`` then reads the later graph's
    rows, as in DGL. Fields named ``*_mask`` are bool.

    **Types.** On a partitioning with node and edge types (DGL 2.x's heterogeneous
    format), the data of each type is in ``g.nodes[ntype].data`` /
    ``g.edges[etype].data`` (``g.ndata`` / ``g.edata`` only when there is one node / edge
    type, as in DGL), under the policies ``"node~<ntype>"`` / ``"edge~<src:rel:dst>"``;
    every id is type-wise, and the queries take the type (see the module docstring).

    Raises
    ------
    ValueError
        ``part_config`` is missing, the number of partitions differs from the number of
        ranks, the ranks loaded different graphs, ``graph_name`` or ``gpb`` differs, or
        the default KV store is over another partitioning.
    FileNotFoundError
        The config or a partition file is missing.
    CollectiveError
        Another rank failed (its error is quoted).
    """

    def __init__(self, graph_name: str | os.PathLike, gpb: RangePartitionBook | None = None,
                 part_config: str | os.PathLike | None = None, *,
                 replace_kvstore: bool = False, one_sided_reads: bool = False):
        data, error = None, None
        try:
            graph_name, part_config = _config_argument(graph_name, part_config)
            data = load_partition_data(part_config)
        except Exception as err:  # every rank must learn of it, see kv.protocol.agree
            error = err
        self._attach(f"DistGraph(part_config={str(part_config)!r})", data, error,
                     graph_name, gpb, replace_kvstore, one_sided_reads)

    @classmethod
    def from_partition_data(cls, data: PartitionData, *, replace_kvstore: bool = False,
                            one_sided_reads: bool = False) -> DistGraph:
        """The DistGraph of partitions already loaded by
        :func:`sarlite.load_partition_data`, without reading any file again.

        ``data`` is this rank's partition (``data.rank == rank``, one partition per rank).
        Its contiguous CPU feature tensors become the KV store's rows (no copy; edge
        features are reordered from shard order to edge id order, a copy unless already in
        that order), and its partition graph becomes :attr:`local_partition`; the shards
        are not kept. Collective like the constructor, with the same default-store rules
        (``one_sided_reads`` included) and errors (except the file ones).
        """
        graph = cls.__new__(cls)
        graph._attach("DistGraph.from_partition_data", data, None, None, None,
                      replace_kvstore, one_sided_reads)
        return graph

    def _attach(self, what: str, data: PartitionData | None, error: Exception | None,
                graph_name: str | None, gpb: RangePartitionBook | None,
                replace_kvstore: bool, one_sided_reads: bool) -> None:
        """Check ``data`` on every rank, then set the graph up from it. Collective."""
        local, store, record = None, None, None
        if error is None:
            try:
                _check_data(data, graph_name, gpb)
                local = _Local(data)
                store = _reusable_store(local.book, replace_kvstore)
                record = local.record() + ("reuse" if store is not None else "create",
                                           bool(one_sided_reads))
            except Exception as err:  # every rank must learn of it, see kv.protocol.agree
                error = err
        agree(what, record, error)
        self._graph, self._graph_name = local.graph, local.graph_name
        self._book: RangePartitionBook = local.book
        self._typed, self._typed_partition = local.typed, None
        if store is None:
            store = init_kvstore(local.book, one_sided_reads=one_sided_reads)
        elif one_sided_reads:
            store.enable_one_sided_reads()
        self._store: KVStore = store
        self._node_policies = {t: NodePartitionPolicy(self._book, t)
                               for t in self._book.ntypes}
        self._edge_policies = {c: EdgePartitionPolicy(self._book, c)
                               for c in self._book.canonical_etypes}
        self._ends, self._in_degrees = local.ends, local.in_degrees
        self._out_degrees = {c: self._count_out_degrees(src, self._node_policies[c[0]])
                             for c, src in local.sources.items()}
        self._ndata = {t: self._add_data("node", local.node_feats[t], p)
                       for t, p in self._node_policies.items()}
        self._edata = {c: self._add_data("edge", local.edge_feats[c], p)
                       for c, p in self._edge_policies.items()}

    def _add_data(self, kind: str, features: dict[str, torch.Tensor],
                  policy: NodePartitionPolicy | EdgePartitionPolicy) -> _DataView:
        """Put the owned rows of each feature into the store; a view of DistTensors on
        them. Collective (two agreements per feature, in name order)."""
        view = _DataView(kind, policy.get_size())
        for name, rows in sorted(features.items()):
            self._store.add_data(f"{policy.policy_str}:{name}", rows, policy)
            view[name] = DistTensor((policy.get_size(),) + tuple(rows.shape[1:]),
                                    rows.dtype, name, part_policy=policy)
        return view

    @staticmethod
    def _count_out_degrees(src: torch.Tensor, policy: NodePartitionPolicy) -> torch.Tensor:
        """Out-degree (in one relation) of each owned node of ``policy``'s type: every
        rank counts the sources of its owned edges and adds the counts at the sources'
        owners (one push)."""
        call = KVCall("DistGraph: counting out-degrees", "graph_degrees")
        nodes, counts, _ = sum_duplicates(src, torch.ones_like(src))
        local, counts = push_rows(nodes, counts, policy, call)
        degrees = torch.zeros(policy.get_part_size(), dtype=torch.int64)
        return degrees.index_add_(0, local, counts)

    # -- partition and data ------------------------------------------------------
    @property
    def local_partition(self) -> dgl.DGLGraph:
        """This rank's partition graph exactly as :func:`sarlite.load_partition` returns
        it (owned nodes and edges plus the halo; ndata ``_ID``, ``inner_node``; edata
        ``_ID``, ``inner_edge``, in global homogeneous ids; with types also
        ``dgl.NTYPE`` / ``dgl.ETYPE``)."""
        return self._graph

    @property
    def local_typed_partition(self) -> LocalTypedGraph:
        """This rank's partition graph by type (a
        :class:`~sarlite.sampling.neighbor.LocalTypedGraph`, what the owner's sampling
        runs on; without named types it wraps :attr:`local_partition` itself), built on
        first use. Local."""
        if self._typed_partition is None:
            self._typed_partition = LocalTypedGraph(self._graph, self._book)
        return self._typed_partition

    def get_partition_book(self) -> RangePartitionBook:
        return self._book

    def get_node_partition_policy(self, ntype: str | None = DEFAULT_NTYPE
                                  ) -> NodePartitionPolicy:
        """The partition policy of node type ``ntype`` (DistTensors of its nodes). Local."""
        return self._node_policies[self._ntype(ntype)]

    def get_edge_partition_policy(self, etype=DEFAULT_ETYPE) -> EdgePartitionPolicy:
        """The partition policy of edge type ``etype`` (a relation name, ``"src:rel:dst"``
        or tuple). Local."""
        return self._edge_policies[self.to_canonical_etype(etype)]

    def _ntype(self, ntype: str | None) -> str:
        """``ntype`` checked (``None``: the graph's one node type). Local; ``ValueError``
        naming the node types otherwise."""
        if ntype is None and len(self._node_policies) == 1:
            return next(iter(self._node_policies))
        if isinstance(ntype, str) and ntype in self._node_policies:
            return ntype
        if not self._typed:
            raise ValueError(f"DistGraph has one node type, {DEFAULT_NTYPE!r}; got {ntype!r}")
        raise ValueError(f"DistGraph has node types {self.ntypes}; got {ntype!r}"
                         + (": name one" if ntype is None else ""))

    @staticmethod
    def _one_typed(what: str, kind: str, types: list) -> None:
        if len(types) != 1:
            raise ValueError(f"g.{what} only works for a graph with one {kind} type; this "
                             f"one has {types}: use g.{kind}s[{kind[0]}type].data")

    @property
    def ndata(self) -> _DataView:
        """``{name: DistTensor}`` of node data, type prefix removed (a graph with one node
        type only, as in DGL; else ``g.nodes[ntype].data``)."""
        self._one_typed("ndata", "node", self.ntypes)
        return next(iter(self._ndata.values()))

    @property
    def edata(self) -> _DataView:
        """``{name: DistTensor}`` of edge data, type prefix removed (a graph with one edge
        type only, as in DGL; else ``g.edges[etype].data``)."""
        self._one_typed("edata", "edge", self.canonical_etypes)
        return next(iter(self._edata.values()))

    @property
    def nodes(self) -> _TypeIndex:
        """``g.nodes[ntype].data``: ``{name: DistTensor}`` of the nodes of ``ntype``."""
        return _TypeIndex(self._ndata, self._ntype)

    @property
    def edges(self) -> _TypeIndex:
        """``g.edges[etype].data``: ``{name: DistTensor}`` of the edges of ``etype``."""
        return _TypeIndex(self._edata, self.to_canonical_etype)

    def node_attr_schemes(self) -> dict[str, Scheme]:
        """``{name: Scheme(shape=row shape, dtype)}`` of the node data."""
        return {name: Scheme(t.shape[1:], t.dtype) for name, t in self.ndata.items()}

    def edge_attr_schemes(self) -> dict[str, Scheme]:
        """``{name: Scheme(shape=row shape, dtype)}`` of the edge data."""
        return {name: Scheme(t.shape[1:], t.dtype) for name, t in self.edata.items()}

    # -- sizes and types ---------------------------------------------------------
    @property
    def graph_name(self) -> str:
        return self._graph_name

    def rank(self) -> int:
        """The partition (and rank) of this process."""
        return self._book.partid

    @property
    def ntypes(self) -> list[str]:
        return self._book.ntypes

    @property
    def etypes(self) -> list[str]:
        return self._book.etypes

    @property
    def canonical_etypes(self) -> list[CanonicalEtype]:
        return self._book.canonical_etypes

    @property
    def idtype(self) -> torch.dtype:
        return torch.int64

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def num_nodes(self, ntype: str | None = None) -> int:
        """Number of nodes of type ``ntype`` in the whole graph (of all types for
        ``None``)."""
        if ntype is None:
            return sum(p.get_size() for p in self._node_policies.values())
        return self.get_node_partition_policy(ntype).get_size()

    def num_edges(self, etype=None) -> int:
        """Number of edges of type ``etype`` in the whole graph (of all types for
        ``None``)."""
        if etype is None:
            return sum(p.get_size() for p in self._edge_policies.values())
        return self.get_edge_partition_policy(etype).get_size()

    number_of_nodes = num_nodes
    number_of_edges = num_edges

    # -- queries (collective) ----------------------------------------------------
    def find_edges(self, edges, etype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Source and destination global node ids of the global edge ids ``edges``
        (``(n,)`` each, in the order given); with types, type-wise ids of the edge type
        ``etype`` (required when the graph has several) and of its end types.
        Collective; every rank calls it, with the same ``etype``.

        Raises ``IndexError`` on a rank whose ids are out of range (and
        ``CollectiveError`` on the others); ``ValueError`` for an unknown ``etype``.
        """
        c_etype = self.to_canonical_etype(etype)
        policy = self._edge_policies[c_etype]
        call = KVCall(f"DistGraph.find_edges(etype={':'.join(c_etype)!r})",
                      "graph_find_edges")
        eids = validated(call, lambda: checked_ids(edges, policy.get_size(), call.what))
        ends = pull_rows(eids, policy, self._ends[c_etype].__getitem__, call)
        return ends[:, 0], ends[:, 1]

    def in_degrees(self, v: Any = dgl.ALL, *, etype=None) -> torch.Tensor | int:
        """In-degree in edge type ``etype`` (keyword-only, as DGL's DistGraph has none;
        required when the graph has several) of the global ids ``v`` of its destination
        type (all by default); an int for an int ``v``. Collective; every rank calls it,
        with the same ``etype``."""
        c_etype = self.to_canonical_etype(etype)
        return self._degrees(v, c_etype[2], self._in_degrees[c_etype], "in_degrees")

    def out_degrees(self, u: Any = dgl.ALL, *, etype=None) -> torch.Tensor | int:
        """Out-degree in edge type ``etype`` (keyword-only; required when the graph has
        several) of the global ids ``u`` of its source type (all by default); an int for
        an int ``u``. Collective; every rank calls it, with the same ``etype``."""
        c_etype = self.to_canonical_etype(etype)
        return self._degrees(u, c_etype[0], self._out_degrees[c_etype], "out_degrees")

    def _degrees(self, nodes, ntype: str, owned: torch.Tensor, name: str
                 ) -> torch.Tensor | int:
        policy = self._node_policies[ntype]
        call = KVCall(f"DistGraph.{name}", "graph_degrees")
        everything = isinstance(nodes, str) and nodes == dgl.ALL
        ids = validated(call, lambda: checked_ids(slice(None) if everything else nodes,
                                                  policy.get_size(), call.what))
        degrees = pull_rows(ids, policy, owned.__getitem__, call)
        return int(degrees[0]) if isinstance(nodes, int) else degrees

    def edge_subgraph(self, edges, relabel_nodes: bool = True, store_ids: bool = True, *,
                      output_device=None) -> dgl.DGLGraph:
        """The subgraph made of the global edge ids ``edges``, as DGL's
        ``DistGraph.edge_subgraph``.

        Parameters
        ----------
        edges:
            Global edge ids (tensor, array, list), or ``{etype: ids}`` (type-wise ids; the
            form a graph with several edge types needs); may be empty.
        relabel_nodes:
            ``True``: keep only the end nodes of the edges, renumbered from 0 (per type),
            with their global ids in ``ndata[dgl.NID]``. ``False``: a graph over all
            ``num_nodes(ntype)`` global node ids of every type.
        store_ids:
            Must be ``True`` (the global edge ids are always in ``edata[dgl.EID]``).
        output_device:
            Device of the returned graph (default: CPU).

        Returns
        -------
        dgl.DGLGraph
            The edges in the order given, ``edata[dgl.EID]`` their global ids; with types
            a heterograph with every node and edge type of the graph.

        Collective and blocking (one :meth:`find_edges` per edge type): every rank calls
        it in the same order, also with no edges. Raises ``IndexError`` on a rank whose
        ids are out of range, ``ValueError`` on one that names an unknown type (and
        ``CollectiveError`` on the others).
        """
        if not store_ids:
            raise ValueError("edge_subgraph always stores the global ids (store_ids=True)")
        first = self._find_edges_call(self.canonical_etypes[0])
        by_type = validated(first, lambda: self._by_etype(edges, "edges"))
        ends = {c: self.find_edges(ids, c) for c, ids in by_type.items()}
        eids = {c: as_id_tensor(ids) for c, ids in by_type.items()}
        if self._typed:
            subgraph = dgl.heterograph(ends, {t: self.num_nodes(t) for t in self.ntypes})
            for c_etype, ids in eids.items():
                subgraph.edges[c_etype].data[dgl.EID] = ids
        else:
            (src, dst), = ends.values()
            subgraph = dgl.graph((src, dst), num_nodes=self.num_nodes())
            subgraph.edata[dgl.EID] = eids[DEFAULT_ETYPE]
        if relabel_nodes:
            subgraph = dgl.compact_graphs(subgraph)
        return subgraph if output_device is None else subgraph.to(output_device)

    @staticmethod
    def _find_edges_call(c_etype: CanonicalEtype) -> KVCall:
        return KVCall(f"DistGraph.find_edges(etype={':'.join(c_etype)!r})",
                      "graph_find_edges")

    def _by_etype(self, value, what: str) -> dict:
        """``{canonical etype: ids}`` for every edge type of the graph, in its order, from
        ``ids`` (a graph with one edge type) or ``{etype: ids}`` (missing types: no ids).
        Local; ``ValueError`` for an unknown or repeated type, or plain ids on a graph
        with several edge types."""
        if not isinstance(value, Mapping):
            if len(self._edge_policies) != 1:
                raise ValueError(f"{what}: the graph has edge types "
                                 f"{self.canonical_etypes}; give {{etype: ids}}")
            return {self.canonical_etypes[0]: value}
        out = {c: torch.zeros(0, dtype=torch.int64) for c in self.canonical_etypes}
        seen = set()
        for etype, ids in value.items():
            c_etype = self.to_canonical_etype(etype)
            if c_etype in seen:
                raise ValueError(f"{what} names edge type {c_etype} twice")
            seen.add(c_etype)
            out[c_etype] = ids
        return out

    def sample_neighbors(self, seed_nodes, fanout, edge_dir: str = "in", prob=None,
                         exclude_edges=None, replace: bool = False, etype_sorted: bool = True,
                         output_device=None) -> dgl.DGLGraph:
        """Sample up to ``fanout`` in- (or out-) edges of every seed, as DGL's
        ``DistGraph.sample_neighbors``: the method that ``dgl.dataloading.NeighborSampler``
        and ``MultiLayerFullNeighborSampler`` call on a distributed graph.

        Parameters
        ----------
        seed_nodes:
            Global node ids (tensor, array, list), or ``{ntype: ids}`` (type-wise ids; the
            form a graph with several node types needs); may be empty.
        fanout:
            Edges per seed and edge type (as DGL, which calls ``sample_etype_neighbors``
            for a graph with several edge types), ``-1`` for all; with types also
            ``{etype: fanout}`` naming every edge type (DGL's rule).
        edge_dir, prob, replace:
            As :func:`sarlite.sampling.sample_neighbors` (with several edge types, those
            without the ``prob`` feature are sampled uniformly, as in DGL).
        exclude_edges:
            Global edge ids (``{etype: ids}`` with types) to leave out of the result (as
            DGL's ``exclude_eids``, e.g. the edges of a link-prediction batch): dropped
            after sampling, as ``dgl.sampling.sample_neighbors`` does, so a seed may get
            fewer than ``fanout`` edges; ``None`` excludes nothing.
        etype_sorted:
            Ignored (each edge type is sampled on its own).
        output_device:
            Device of the returned graph (default: CPU).

        Returns
        -------
        dgl.DGLGraph
            A graph over all ``num_nodes()`` global node ids holding the sampled edges,
            ``edata[dgl.EID]`` their global edge ids. With named types, as DGL 2.1's: a
            heterograph with every node type (``num_nodes(ntype)`` nodes each) but only
            the edge types that hold a sampled edge (every edge type when none does).

        Collective and blocking: every rank calls it in the same order with the same
        ``fanout``, ``edge_dir``, ``prob`` and ``replace`` (a sampler object used the same
        way on every rank does), also with no seeds. Errors as
        :func:`sarlite.sampling.sample_neighbors`.
        """
        del etype_sorted
        frontier = sample_etype_neighbors(self, seed_nodes, fanout, edge_dir=edge_dir,
                                          prob=prob, replace=replace,
                                          exclude_edges=exclude_edges)
        return frontier if output_device is None else frontier.to(output_device)

    def to_canonical_etype(self, etype) -> CanonicalEtype:
        """The canonical ``(src, rel, dst)`` of ``etype`` (a relation name,
        ``"src:rel:dst"`` or the triple; ``None`` for the graph's one edge type):
        ``("_N", "_E", "_N")`` on a homogeneous graph. Local; ``ValueError`` for an
        unknown or ambiguous type."""
        if etype is None and len(self._edge_policies) == 1:
            return self.canonical_etypes[0]
        if not self._typed:
            if etype in (DEFAULT_ETYPE[1], DEFAULT_ETYPE, DEFAULT_ETYPE_STR):
                return DEFAULT_ETYPE
            raise ValueError(f"DistGraph has one edge type, {DEFAULT_ETYPE[1]!r}; got "
                             f"{etype!r}")
        if etype is None:
            raise ValueError(f"DistGraph has edge types {self.canonical_etypes}: name one "
                             f"(etype=...)")
        return self._book.to_canonical_etype(etype)

    def get_ntype_id(self, ntype: str | None) -> int:
        """The id of node type ``ntype`` (its position in :attr:`ntypes`). Local."""
        return self.ntypes.index(self._ntype(ntype))

    def get_etype_id(self, etype) -> int:
        """The id of edge type ``etype`` (its position in :attr:`canonical_etypes`).
        Local."""
        return self.canonical_etypes.index(self.to_canonical_etype(etype))

    def is_pinned(self) -> bool:
        """``False``: the graph is never in page-locked memory (as DGL's DistGraph)."""
        return False

    @property
    def is_homogeneous(self) -> bool:
        """Whether the graph has one node type and one edge type (as DGL's)."""
        return len(self._node_policies) == 1 and len(self._edge_policies) == 1

    def barrier(self) -> None:
        """Block until every rank has called it. Collective."""
        self._store.barrier()

    @property
    def _client(self) -> KVStore:
        """The KV store, under the private name DGL's own examples use for
        ``g._client.barrier()`` (a collective here)."""
        return self._store

    def __repr__(self) -> str:
        if self._typed:
            data = (f"ntypes={self.ntypes}, etypes={self.canonical_etypes}, "
                    f"ndata={ {t: sorted(v) for t, v in self._ndata.items()} }")
        else:
            data = f"ndata={sorted(self.ndata)}, edata={sorted(self.edata)}"
        return (f"DistGraph(graph_name={self._graph_name!r}, num_nodes={self.num_nodes()}, "
                f"num_edges={self.num_edges()}, rank={self.rank()}, {data})")
