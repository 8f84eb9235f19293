"""Neighbour sampling on a DistGraph whose nodes and edges have named types.

The seeds, ``{ntype: type-wise ids}``, travel as homogeneous ids to the ranks that own
them. Each owner samples on its partition graph seen by type (:class:`LocalTypedGraph`,
partition-local type-wise ids) with DGL's own kernel, ``dgl.sampling.sample_neighbors``,
one fanout per edge type; the sampled edges travel back as ``(edge type, src, dst, eid)``
rows of global type-wise ids, and the caller builds a heterograph over every node of the
graph from them, as DGL's distributed sampler returns it. The partition graph holds every
in-edge of the owned nodes and (one hop or more) every out-edge of them, so both edge
directions are answered by the owner alone. Draws come from DGL's random generator:
``dgl.seed(s)`` on every rank makes them reproducible.
"""
from __future__ import annotations

from collections.abc import Mapping

import dgl
import torch

from ..kv.protocol import KVCall, validated
from ..kv.routing import ask_owners
from ..partition import NodePartitionPolicy, RangePartitionBook
from ..partition.book import as_id_tensor


class LocalTypedGraph:
    """One rank's partition graph as a DGL heterograph, in partition-local type-wise ids.

    Attributes
    ----------
    graph:
        The heterograph: node ``i`` of type ``t`` is the ``i``-th node of type ``t`` in
        the partition graph's order (the owned nodes of ``t`` first, ascending), edges of
        relation ``c`` in the partition graph's order.
    nids:
        ``{ntype: (n_t,)}`` global type-wise id of each local node.
    eids:
        ``{c_etype: (e_c,)}`` global type-wise id of each local edge.

    Raises
    ------
    ValueError
        The partition graph does not list its owned nodes first, in id order (as both
        sarlite's and DGL's writers do).
    """

    def __init__(self, part: dgl.DGLGraph, book: RangePartitionBook):
        node_type, typewise = book.map_to_per_ntype(part.ndata[dgl.NID])
        position = torch.empty_like(typewise)
        self.nids: dict[str, torch.Tensor] = {}
        for t, ntype in enumerate(book.ntypes):
            mine = (node_type == t).nonzero().squeeze(1)
            position[mine] = torch.arange(mine.numel())
            self.nids[ntype] = typewise[mine]
            owned = book.partid2nids(book.partid, ntype)
            if not torch.equal(self.nids[ntype][:owned.numel()], owned):
                raise ValueError(f"partition {book.partid}: the partition graph does not "
                                 f"list its owned {ntype!r} nodes first, in id order")
        edge_type, typewise_eids = book.map_to_per_etype(part.edata[dgl.EID])
        src, dst = part.edges()
        edges, self.eids = {}, {}
        for t, c_etype in enumerate(book.canonical_etypes):
            mine = (edge_type == t).nonzero().squeeze(1)
            edges[c_etype] = (position[src[mine]], position[dst[mine]])
            self.eids[c_etype] = typewise_eids[mine]
        self.graph = dgl.heterograph(edges, {t: ids.numel() for t, ids in self.nids.items()})


def _checked_seeds(g, seeds) -> torch.Tensor:
    """The distinct seeds as homogeneous ids, ascending. Local; ``ValueError`` for an
    unknown type, plain ids on a graph with several node types, or ids out of range."""
    if not isinstance(seeds, Mapping):
        if len(g.ntypes) != 1:
            raise ValueError(f"seed_nodes: the graph has node types {g.ntypes}; give "
                             f"{{ntype: ids}}")
        seeds = {g.ntypes[0]: seeds}
    book, homo = g.get_partition_book(), []
    for ntype, ids in seeds.items():
        ntype = g.ntypes[g.get_ntype_id(ntype)]
        ids = torch.unique(as_id_tensor(ids))
        size = g.num_nodes(ntype)
        if ids.numel() and (int(ids[0]) < 0 or int(ids[-1]) >= size):
            raise ValueError(f"seed node ids of type {ntype!r} must be in [0, {size}), got "
                             f"values in [{int(ids[0])}, {int(ids[-1])}]")
        homo.append(book.map_to_homo_nid(ids, ntype))
    return torch.unique(torch.cat(homo)) if homo else torch.zeros(0, dtype=torch.int64)


def _check_fanout(fanout) -> None:
    if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < -1:
        raise ValueError(f"fanout must be an integer >= -1 (-1: all neighbours), got "
                         f"{fanout!r}")


def checked_fanouts(g, fanout) -> int | dict:
    """``fanout`` (an int for every edge type) or ``{canonical etype: int}`` naming every
    edge type of ``g`` (DGL's rule). Local; ``ValueError`` otherwise."""
    if not isinstance(fanout, Mapping):
        _check_fanout(fanout)
        return fanout
    out = {}
    for etype, value in fanout.items():
        _check_fanout(value)
        out[g.to_canonical_etype(etype)] = value
    missing = [c for c in g.canonical_etypes if c not in out]
    if missing:
        raise ValueError(f"fanout gives no value for the edge types {missing}; a fanout "
                         f"dict names every edge type (0 samples none of a type)")
    return out


def _checked_excluded(g, exclude_edges) -> dict | None:
    """``{canonical etype: ids}`` to drop, or ``None``. Local."""
    if exclude_edges is None:
        return None
    if not isinstance(exclude_edges, Mapping):
        if len(g.canonical_etypes) != 1:
            raise ValueError(f"exclude_edges: the graph has edge types "
                             f"{g.canonical_etypes}; give {{etype: ids}}")
        exclude_edges = {g.canonical_etypes[0]: exclude_edges}
    return {g.to_canonical_etype(e): as_id_tensor(ids) for e, ids in exclude_edges.items()}


def _check_options(edge_dir: str, prob) -> None:
    if edge_dir not in ("in", "out"):
        raise ValueError(f"edge_dir must be 'in' or 'out', got {edge_dir!r}")
    if prob is not None:
        raise NotImplementedError(f"prob={prob!r}: sampling with edge probabilities is "
                                  f"supported on graphs without named types only; sample "
                                  f"this graph uniformly (prob=None)")


def _sample_owned(local: LocalTypedGraph, book: RangePartitionBook,
                  requests: list[torch.Tensor], fanout, edge_dir: str,
                  replace: bool) -> list[torch.Tensor]:
    """Answer every rank's seeds (homogeneous ids this rank owns): ``(E_k, 4)`` rows
    ``(edge type id, src, dst, eid)`` of global type-wise ids for rank ``k``. Local."""
    node_type, typewise = book.map_to_per_ntype(torch.unique(torch.cat(requests)))
    seeds = {ntype: NodePartitionPolicy(book, ntype).to_local(typewise[node_type == t])
             for t, ntype in enumerate(book.ntypes)}
    frontier = dgl.sampling.sample_neighbors(local.graph, seeds, fanout, edge_dir=edge_dir,
                                             replace=replace, copy_ndata=False)
    rows, seed_ends = [], []
    for t, c_etype in enumerate(book.canonical_etypes):
        src, dst = frontier.edges(etype=c_etype)
        src, dst = local.nids[c_etype[0]][src], local.nids[c_etype[2]][dst]
        eids = local.eids[c_etype][frontier.edges[c_etype].data[dgl.EID]]
        rows.append(torch.stack([torch.full_like(src, t), src, dst, eids], 1))
        seed_ends.append(book.map_to_homo_nid(dst, c_etype[2]) if edge_dir == "in"
                         else book.map_to_homo_nid(src, c_etype[0]))
    rows, seed_ends = torch.cat(rows), torch.cat(seed_ends)
    return [rows[torch.isin(seed_ends, asked)] for asked in requests]


def _frontier(g, rows: torch.Tensor, excluded: dict | None) -> dgl.DGLGraph:
    """The heterograph over every node of ``g`` holding the sampled ``rows``, less the
    excluded edges, with ``edata[dgl.EID]`` per edge type."""
    edges, eids = {}, {}
    for t, c_etype in enumerate(g.canonical_etypes):
        mine = rows[rows[:, 0] == t]
        if excluded is not None and c_etype in excluded:
            mine = mine[~torch.isin(mine[:, 3], excluded[c_etype])]
        edges[c_etype], eids[c_etype] = (mine[:, 1], mine[:, 2]), mine[:, 3]
    frontier = dgl.heterograph(edges, {ntype: g.num_nodes(ntype) for ntype in g.ntypes})
    for c_etype, ids in eids.items():
        frontier.edges[c_etype].data[dgl.EID] = ids
    return frontier


def sample_typed_neighbors(g, nodes, fanout, edge_dir: str = "in", prob=None,
                           replace: bool = False, exclude_edges=None) -> dgl.DGLGraph:
    """:func:`sarlite.sampling.sample_neighbors` on a graph with named types.

    ``nodes`` is ``{ntype: type-wise ids}`` (plain ids when the graph has one node type),
    ``fanout`` an int for every edge type or ``{etype: int}`` naming every edge type,
    ``exclude_edges`` ``{etype: ids}``. Returns a heterograph with every node type of
    ``g`` (``g.num_nodes(ntype)`` nodes each) and every edge type, holding the sampled
    edges in global type-wise ids, ``edata[dgl.EID]`` their type-wise edge ids.

    Collective and blocking, as the homogeneous sampler: every rank calls it in the same
    order with the same ``fanout``, ``edge_dir`` and ``replace``, also with no seeds.

    Raises
    ------
    ValueError
        On the rank that passed them: unknown types, ids out of range, a bad fanout or
        ``edge_dir``.
    NotImplementedError
        ``prob`` (edge probabilities need a graph without named types).
    CollectiveError
        On the other ranks when one rank's arguments were bad, or a rank died.
    """
    call = KVCall(f"sample_neighbors(fanout={fanout!r}, edge_dir={edge_dir!r}, "
                  f"replace={replace!r})", "sample_neighbors")

    def check():
        _check_options(edge_dir, prob)
        return (_checked_seeds(g, nodes), checked_fanouts(g, fanout),
                _checked_excluded(g, exclude_edges))

    ids, fanouts, excluded = validated(call, check)
    book, local = g.get_partition_book(), g.local_typed_partition
    answers = ask_owners(ids, book.nid2partid(ids), lambda requests: _sample_owned(
        local, book, requests, fanouts, edge_dir, replace), call)
    return _frontier(g, torch.cat(answers), excluded)
