"""DistGraph: DGL's distributed graph facade over one partition per rank and the KV layer.

Each rank holds its own partition (a :class:`~sarlite.partition.PartitionData`, loaded by
:func:`~sarlite.partition.load_partition_data`, the one parser of partition files) and
puts the owned rows of every node and edge feature into the default KV store, so
``g.ndata[name][ids]`` works for any global id. Graph queries that need rows other ranks
own (``find_edges``, ``edge_subgraph``, ``in_degrees``, ``out_degrees``,
``sample_neighbors``) are collective exchanges, like DistTensor writes (and reads, unless
the store was made with ``one_sided_reads``, as the DGL facade's is). These are the methods
DGL's samplers call on a graph, so ``dgl.dataloading.NeighborSampler``,
``MultiLayerFullNeighborSampler``, ``as_edge_prediction_sampler`` and
``negative_sampler.Uniform`` run on a DistGraph unchanged. Only homogeneous graphs are
supported.
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
                         NodePartitionPolicy, PartitionData, RangePartitionBook,
                         load_partition_data, require_homogeneous_data)
from ..partition.book import DEFAULT_ETYPE_STR, as_id_tensor
from .neighbor import sample_neighbors


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
    graph ``graph_name`` (when given) partitioned as ``gpb`` (when given).
    ``NotImplementedError`` for a heterogeneous partition."""
    require_homogeneous_data(data, "DistGraph")
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
    """What one rank derives from its partition, without communication.

    ``src``: ``(E_owned,)`` global sources of the owned edges; ``in_degrees``:
    ``(N_owned,)``; ``local_eid``: ``(E_owned,)`` position in the partition graph of each
    owned edge id, in edge id order; ``node_feats``: the data's own tensors;
    ``edge_feats``: ``{name: (E_owned, ...)}`` in edge id order.
    """

    def __init__(self, data: PartitionData):
        book, graph = data.partition_book, data.partition_graph
        (node_lo, node_hi), (edge_lo, edge_hi) = data.owned_range, data.owned_edge_range
        dst = torch.cat([shard.dst for shard in data.shards])
        eids = torch.cat([shard.eids for shard in data.shards])
        self.src = torch.cat([shard.src for shard in data.shards])
        self.in_degrees = torch.bincount(dst - node_lo, minlength=node_hi - node_lo)
        inner = graph.edata["inner_edge"].bool()
        self.local_eid = torch.empty(edge_hi - edge_lo, dtype=torch.int64)
        self.local_eid[graph.edata[dgl.EID][inner] - edge_lo] = inner.nonzero().squeeze(1)
        self.node_feats = data.node_features
        self.edge_feats = {name: _by_id(rows, eids - edge_lo)
                           for name, rows in data.edge_features.items()}
        self.graph, self.book, self.graph_name = graph, book, data.graph_name

    def record(self) -> tuple:
        return (self.graph_name, self.book.node_ranges.tolist(),
                self.book.edge_ranges.tolist(), _schemes(self.node_feats),
                _schemes(self.edge_feats))


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

    Raises
    ------
    NotImplementedError
        The partitions describe a heterogeneous graph.
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
        if store is None:
            store = init_kvstore(local.book, one_sided_reads=one_sided_reads)
        elif one_sided_reads:
            store.enable_one_sided_reads()
        self._store: KVStore = store
        self._node_policy = NodePartitionPolicy(self._book)
        self._edge_policy = EdgePartitionPolicy(self._book)
        self._in_degrees, self._local_eid = local.in_degrees, local.local_eid
        self._out_degrees = self._count_out_degrees(local.src)
        self._ndata = self._add_data("node", local.node_feats, self._node_policy)
        self._edata = self._add_data("edge", local.edge_feats, self._edge_policy)

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

    def edge_subgraph(self, edges, relabel_nodes: bool = True, store_ids: bool = True, *,
                      output_device=None) -> dgl.DGLGraph:
        """The subgraph made of the global edge ids ``edges``, as DGL's
        ``DistGraph.edge_subgraph``.

        Parameters
        ----------
        edges:
            Global edge ids (tensor, array, list, or ``{etype: ids}`` with the graph's one
            edge type); may be empty.
        relabel_nodes:
            ``True``: keep only the end nodes of the edges, renumbered from 0, with their
            global ids in ``ndata[dgl.NID]``. ``False``: a graph over all
            ``num_nodes()`` global node ids.
        store_ids:
            Must be ``True`` (the global edge ids are always in ``edata[dgl.EID]``).
        output_device:
            Device of the returned graph (default: CPU).

        Returns
        -------
        dgl.DGLGraph
            The edges in the order given, ``edata[dgl.EID]`` their global ids.

        Collective and blocking (one :meth:`find_edges`): every rank calls it in the same
        order, also with no edges. Raises ``IndexError`` on a rank whose ids are out of
        range (and ``CollectiveError`` on the others).
        """
        if not store_ids:
            raise ValueError("edge_subgraph always stores the global ids (store_ids=True)")
        edges = self._one_type(edges, "edges")
        src, dst = self.find_edges(edges)           # checks the ids on every rank first
        eids = as_id_tensor(edges)
        subgraph = dgl.graph((src, dst), num_nodes=self.num_nodes())
        subgraph.edata[dgl.EID] = eids
        if relabel_nodes:
            subgraph = dgl.compact_graphs(subgraph)
        return subgraph if output_device is None else subgraph.to(output_device)

    def sample_neighbors(self, seed_nodes, fanout, edge_dir: str = "in", prob=None,
                         exclude_edges=None, replace: bool = False, etype_sorted: bool = True,
                         output_device=None) -> dgl.DGLGraph:
        """Sample up to ``fanout`` in- (or out-) edges of every seed, as DGL's
        ``DistGraph.sample_neighbors``: the method that ``dgl.dataloading.NeighborSampler``
        and ``MultiLayerFullNeighborSampler`` call on a distributed graph.

        Parameters
        ----------
        seed_nodes:
            Global node ids (tensor, array, list, or ``{ntype: ids}`` with the graph's one
            node type); may be empty.
        fanout:
            Edges per seed, ``-1`` for all (or ``{etype: fanout}`` with the one edge type).
        edge_dir, prob, replace:
            As :func:`sarlite.sampling.sample_neighbors`.
        exclude_edges:
            Global edge ids to leave out of the result (as DGL's ``exclude_eids``, e.g. the
            edges of a link-prediction batch): dropped after sampling, as
            ``dgl.sampling.sample_neighbors`` does, so a seed may get fewer than
            ``fanout`` edges; ``None`` excludes nothing.
        etype_sorted:
            Ignored (one edge type).
        output_device:
            Device of the returned graph (default: CPU).

        Returns
        -------
        dgl.DGLGraph
            A graph over all ``num_nodes()`` global node ids holding the sampled edges,
            ``edata[dgl.EID]`` their global edge ids.

        Collective and blocking: every rank calls it in the same order with the same
        ``fanout``, ``edge_dir``, ``prob`` and ``replace`` (a sampler object used the same
        way on every rank does), also with no seeds. Errors as
        :func:`sarlite.sampling.sample_neighbors`.
        """
        del etype_sorted
        nodes = self._one_type(seed_nodes, "seed_nodes", node=True)
        options = {"edge_dir": edge_dir, "prob": prob, "replace": replace}
        if exclude_edges is not None:
            options["exclude_edges"] = self._one_type(exclude_edges, "exclude_edges")
        frontier = sample_neighbors(self, nodes, self._one_type(fanout, "fanout"),
                                    **options)
        return frontier if output_device is None else frontier.to(output_device)

    def _one_type(self, value, what: str, node: bool = False):
        """``value`` itself, or its one entry when it is a ``{type: value}`` dict keyed by
        the graph's one node (``node``) or edge type. Local; ``ValueError`` otherwise."""
        if not isinstance(value, Mapping):
            return value
        if len(value) != 1:
            raise ValueError(f"DistGraph has one {'node' if node else 'edge'} type; "
                             f"{what} has {len(value)} types: {sorted(map(str, value))}")
        (key, entry), = value.items()
        if node:
            self._check_type(key, [DEFAULT_NTYPE], "node")
        else:
            self.to_canonical_etype(key)
        return entry

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        """``("_N", "_E", "_N")`` for the graph's one edge type, given as ``"_E"``,
        ``"_N:_E:_N"`` or the triple; ``ValueError`` for anything else. Local."""
        self._check_type(etype, [DEFAULT_ETYPE[1], DEFAULT_ETYPE, DEFAULT_ETYPE_STR], "edge")
        return DEFAULT_ETYPE

    def get_ntype_id(self, ntype: str | None) -> int:
        """0: the id of the graph's one node type. Local."""
        self._check_type(ntype, [DEFAULT_NTYPE], "node")
        return 0

    def get_etype_id(self, etype) -> int:
        """0: the id of the graph's one edge type. Local."""
        self.to_canonical_etype(etype)
        return 0

    def is_pinned(self) -> bool:
        """``False``: the graph is never in page-locked memory (as DGL's DistGraph)."""
        return False

    @property
    def is_homogeneous(self) -> bool:
        return True

    def barrier(self) -> None:
        """Block until every rank has called it. Collective."""
        self._store.barrier()

    @property
    def _client(self) -> KVStore:
        """The KV store, under the private name DGL's own examples use for
        ``g._client.barrier()`` (a collective here)."""
        return self._store

    def __repr__(self) -> str:
        return (f"DistGraph(graph_name={self._graph_name!r}, num_nodes={self.num_nodes()}, "
                f"num_edges={self.num_edges()}, rank={self.rank()}, "
                f"ndata={sorted(self._ndata)}, edata={sorted(self._edata)})")
