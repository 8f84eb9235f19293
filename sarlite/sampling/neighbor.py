"""Distributed neighbour sampling and in-subgraphs over a partitioned graph.

One engine for every graph: as in DGL, a homogeneous graph is the case of one node type
(``"_N"``) and one edge type (``("_N", "_E", "_N")``). The graph ``g`` is a
:class:`sarlite.sampling.DistGraph`. The seeds (global ids, or ``{ntype: type-wise
ids}``) travel as homogeneous ids to the ranks that own them. Each owner samples on its
partition graph seen by type (:class:`LocalTypedGraph`: the partition graph itself when
the graph has no named types) with DGL's own kernel, ``dgl.sampling.sample_neighbors``,
one fanout per edge type. The partition graph holds every in-edge of the owned nodes and
(``num_hops >= 1``, as both writers make it) every out-edge of them, so the owner alone
answers either edge direction. The sampled edges travel back as global homogeneous
``(src, dst, eid)`` rows, and the caller builds the frontier from them (:func:`_frontier`):
a plain graph over global ids without named types, else DGL 2.1's heterograph of
type-wise ids.

Draws come from DGL's random generator: ``dgl.seed(s)`` on every rank makes them
reproducible.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

import dgl
import torch

from ..comm import exchange_sizes, rank, world_size
from ..kv.protocol import KVCall, validated
from ..kv.routing import ask_owners, take_rows
from ..partition import RangePartitionBook
from ..partition.book import DEFAULT_ETYPE, DEFAULT_NTYPE, as_id_tensor, check_ntype

EDGE_DIRS = ("in", "out")
_PROB = "_sarlite_prob"          # the candidate edges' probabilities on the local graph


class LocalTypedGraph:
    """One rank's partition graph by type, in partition-local type-wise ids: what the
    owner samples on.

    Attributes
    ----------
    graph:
        A DGL graph: node ``i`` of type ``t`` is the ``i``-th node of type ``t`` in the
        partition graph's order (the owned nodes of ``t`` first, ascending), edges of
        relation ``c`` in the partition graph's order. Without named types it is the
        partition graph itself (no copy).
    nids:
        ``{ntype: (n_t,)}`` global homogeneous id of each local node.
    eids:
        ``{c_etype: (e_c,)}`` global homogeneous id of each local edge.
    owned:
        ``{ntype: (start, end)}`` homogeneous ids of this partition's nodes of the type
        (the first ``end - start`` local nodes of the type).
    part:
        The partition graph itself (homogeneous local ids, ``ndata[dgl.NID]`` and
        ``edata[dgl.EID]`` global homogeneous ids), for sampling across edge types.

    Raises
    ------
    ValueError
        The partition graph does not list its owned nodes first, in id order (as both
        sarlite's and DGL's writers do).
    """

    def __init__(self, part: dgl.DGLGraph, book: RangePartitionBook):
        self.part = part
        self.owned = {t: tuple(book.typed_node_ranges(t)[book.partid].tolist())
                      for t in book.ntypes}
        if book.has_named_types:
            self.graph, self.nids, self.eids = _by_type(part, book)
        else:                           # the partition graph is its own one-type view
            self.graph = part
            self.nids = {DEFAULT_NTYPE: part.ndata[dgl.NID]}
            self.eids = {DEFAULT_ETYPE: part.edata[dgl.EID]}
        for ntype, (start, end) in self.owned.items():
            if not torch.equal(self.nids[ntype][:end - start], torch.arange(start, end)):
                raise ValueError(f"partition {book.partid}: the partition graph does not "
                                 f"list its owned {ntype!r} nodes first, in id order")

    @functools.cached_property
    def first_owned(self) -> int:
        """The homogeneous id of local node 0 of :attr:`part` (its owned nodes come first,
        in id order; checked once, on first use).

        Raises ``ValueError`` when the partition graph does not list them so."""
        count = sum(end - start for start, end in self.owned.values())
        nid = self.part.ndata[dgl.NID]
        start = int(nid[0]) if count else 0
        if not torch.equal(nid[:count], torch.arange(start, start + count)):
            raise ValueError("the partition graph does not list its owned nodes first, in "
                             "id order")
        return start

    def local_seeds(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{ntype: local ids}`` of owned homogeneous node ids (every type present)."""
        if len(self.owned) == 1:                  # all of them are of the one type
            (ntype, (start, _)), = self.owned.items()
            return {ntype: ids - start}
        return {t: ids[(ids >= start) & (ids < end)] - start
                for t, (start, end) in self.owned.items()}

    def global_rows(self, frontier: dgl.DGLGraph) -> torch.Tensor:
        """``(E, 3)`` global homogeneous ``(src, dst, eid)`` of a frontier sampled on
        :attr:`graph`, edge type by edge type."""
        rows = []
        for c_etype in self.graph.canonical_etypes:
            src, dst = frontier.edges(etype=c_etype)
            eids = frontier.edges[c_etype].data[dgl.EID]
            rows.append(torch.stack([take_rows(self.nids[c_etype[0]], src),
                                     take_rows(self.nids[c_etype[2]], dst),
                                     take_rows(self.eids[c_etype], eids)], 1))
        return rows[0] if len(rows) == 1 else torch.cat(rows)


def _by_type(part: dgl.DGLGraph, book: RangePartitionBook) -> tuple:
    """``(heterograph, nids, eids)`` of :class:`LocalTypedGraph` for named types."""
    nid, eid = part.ndata[dgl.NID], part.edata[dgl.EID]
    node_type, _ = book.map_to_per_ntype(nid)
    position, nids = torch.empty_like(node_type), {}
    for t, ntype in enumerate(book.ntypes):
        mine = (node_type == t).nonzero().squeeze(1)
        position[mine] = torch.arange(mine.numel())
        nids[ntype] = nid[mine]
    edge_type, _ = book.map_to_per_etype(eid)
    src, dst = part.edges()
    edges, eids = {}, {}
    for t, c_etype in enumerate(book.canonical_etypes):
        mine = (edge_type == t).nonzero().squeeze(1)
        edges[c_etype] = (position[src[mine]], position[dst[mine]])
        eids[c_etype] = eid[mine]
    graph = dgl.heterograph(edges, {t: ids.numel() for t, ids in nids.items()})
    return graph, nids, eids


# -- argument checks (local) ---------------------------------------------------------------
def check_fanout(fanout) -> None:
    """Raise ``ValueError`` unless ``fanout`` is an integer >= -1 (-1: all neighbours)."""
    if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < -1:
        raise ValueError(f"fanout must be an integer >= -1 (-1: all neighbours), got "
                         f"{fanout!r}")


def checked_fanouts(g, fanout) -> int | dict:
    """``fanout`` (an int for every edge type) or ``{canonical etype: int}`` naming every
    edge type of ``g`` (DGL's rule). Local; ``ValueError`` otherwise (and
    ``NotImplementedError`` for a type other than ``"_E"`` without named types)."""
    if not isinstance(fanout, Mapping):
        check_fanout(fanout)
        return fanout
    book, out = g.get_partition_book(), {}
    for etype, value in fanout.items():
        check_fanout(value)
        out[book.to_canonical_etype(etype)] = value
    missing = [c for c in g.canonical_etypes if c not in out]
    if missing:
        raise ValueError(f"fanout gives no value for the edge types {missing}; a fanout "
                         f"dict names every edge type (0 samples none of a type)")
    return out


def _ntype(g, ntype) -> str:
    """``ntype`` checked: ``ValueError`` for an unknown type of a graph with named types,
    ``NotImplementedError`` for anything but ``"_N"`` without."""
    if g.get_partition_book().has_named_types:
        return g.ntypes[g.get_ntype_id(ntype)]
    return check_ntype(ntype)


def _checked_seeds(g, seeds) -> torch.Tensor:
    """The distinct seeds (ids, or ``{ntype: type-wise ids}``) as homogeneous ids, in the
    order given (the dict's types in its order, as DGL concatenates them; a repeated seed
    counts once, where it first appears). Local; ``ValueError`` for plain ids on a graph
    with several node types, an unknown type or ids out of range."""
    if not isinstance(seeds, Mapping):
        if len(g.ntypes) != 1:
            raise ValueError(f"seed_nodes: the graph has node types {g.ntypes}; give "
                             f"{{ntype: ids}}")
        seeds = {g.ntypes[0]: seeds}
    book, homo = g.get_partition_book(), []
    named = book.has_named_types
    for ntype, ids in seeds.items():
        ntype = _ntype(g, ntype)
        ids, size = as_id_tensor(ids), g.num_nodes(ntype)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
            of_type = f" of type {ntype!r}" if named else ""
            raise ValueError(f"seed node ids{of_type} must be in [0, {size}), got values "
                             f"in [{int(ids.min())}, {int(ids.max())}]")
        homo.append(book.map_to_homo_nid(ids, ntype) if named else ids)
    return _distinct_in_order(torch.cat(homo) if homo else torch.zeros(0, dtype=torch.int64))


def _distinct_in_order(ids: torch.Tensor) -> torch.Tensor:
    """``ids`` without repeats, each where it first appears."""
    distinct, inverse = torch.unique(ids, return_inverse=True)
    if len(distinct) == len(ids):
        return ids
    first = torch.full((len(distinct),), len(ids), dtype=torch.int64).scatter_reduce(
        0, inverse, torch.arange(len(ids)), "amin")
    return distinct[torch.argsort(first)]


def _prob_etypes(g, prob: str | None) -> list:
    """The edge types that have the edge feature ``prob`` (none for ``None``), each with
    one value per edge. Local; ``ValueError`` when no edge type has it, or for rows of
    another shape."""
    if prob is None:
        return []
    having = [c for c in g.canonical_etypes if prob in g.edges[c].data]
    if not having:
        names = sorted({n for c in g.canonical_etypes for n in g.edges[c].data})
        raise ValueError(f"prob {prob!r} is not an edge feature of the graph (it has "
                         f"{names})")
    for c_etype in having:
        shape = tuple(g.edges[c_etype].data[prob].shape[1:])
        if shape not in ((), (1,)):
            raise ValueError(f"prob feature {prob!r} must hold one value per edge, got "
                             f"rows of shape {shape}")
    return having


def _excluded(g, exclude_edges) -> torch.Tensor | None:
    """``exclude_edges`` (ids, or ``{etype: type-wise ids}``) as homogeneous edge ids
    (``None`` stays ``None``; ids outside the graph exclude nothing). Local."""
    if exclude_edges is None:
        return None
    if not isinstance(exclude_edges, Mapping):
        if len(g.canonical_etypes) != 1:
            raise ValueError(f"exclude_edges: the graph has edge types "
                             f"{g.canonical_etypes}; give {{etype: ids}}")
        exclude_edges = {g.canonical_etypes[0]: exclude_edges}
    book, homo = g.get_partition_book(), []
    for etype, ids in exclude_edges.items():
        c_etype, ids = book.to_canonical_etype(etype), as_id_tensor(ids)
        if book.has_named_types:            # type-wise ids: map those of the type
            ids = ids[(ids >= 0) & (ids < g.num_edges(c_etype))]
            ids = book.map_to_homo_eid(ids, c_etype)
        homo.append(ids)
    return homo[0] if len(homo) == 1 else torch.cat(homo + [torch.zeros(0, dtype=torch.int64)])


def _checked_args(g, seeds, fanout, edge_dir: str, prob: str | None, exclude_edges):
    """``(homogeneous seeds, fanouts, edge types with prob, excluded homogeneous eids)``
    after checking every argument. Local."""
    fanouts = checked_fanouts(g, fanout)
    if edge_dir not in EDGE_DIRS:
        raise ValueError(f"edge_dir must be 'in' or 'out', got {edge_dir!r}")
    return _checked_seeds(g, seeds), fanouts, _prob_etypes(g, prob), \
        _excluded(g, exclude_edges)


# -- the owner's side ----------------------------------------------------------------------
def _candidate_probs(g, local: LocalTypedGraph, seeds: dict, edge_dir: str, prob: str,
                     etypes: list) -> dict:
    """``{c_etype: (e_c,) float32}`` for each of ``etypes``: ``prob`` of the seeds'
    candidate edges, 0 elsewhere.

    Pulls the values by type-wise edge id from ``g.edges[c].data[prob]`` (one pull per
    edge type, in the graph's order) and tells every rank whether any was negative
    (collective: every rank calls it, also with no seeds).

    Raises
    ------
    ValueError
        On every rank, when some rank found a negative value.
    """
    book, out, bad = g.get_partition_book(), {}, False
    for c_etype in etypes:
        ends = seeds[c_etype[2] if edge_dir == "in" else c_etype[0]]
        local_eids = torch.zeros(0, dtype=torch.int64)
        if ends.numel():
            local_eids = (local.graph.in_edges(ends, form="eid", etype=c_etype)
                          if edge_dir == "in" else
                          local.graph.out_edges(ends, form="eid", etype=c_etype))
        eids = local.eids[c_etype][local_eids]
        if book.has_named_types:                    # the data's rows are type-wise
            eids = book.map_to_per_etype(eids)[1]
        values = g.edges[c_etype].data[prob][eids].reshape(-1).float()
        bad = bad or bool((values < 0).any())
        out[c_etype] = torch.zeros(local.graph.num_edges(c_etype), dtype=torch.float32)
        out[c_etype][local_eids] = values
    negative = exchange_sizes([int(bad)] * world_size())
    if any(negative):
        raise ValueError(f"prob feature {prob!r} has negative values on candidate edges "
                         f"of the seeds of rank(s) "
                         f"{[r for r, is_bad in enumerate(negative) if is_bad]}")
    return out


def _across_types(local: LocalTypedGraph, ids: torch.Tensor, fanout: int, edge_dir: str,
                   replace: bool) -> torch.Tensor:
    """``(E, 3)`` global ``(src, dst, eid)`` rows of up to ``fanout`` edges per seed of
    any edge type, sampled on the homogeneous partition graph (DGL 2.1's
    ``sample_neighbors`` on a graph with several edge types). Local."""
    part, start = local.part, local.first_owned
    nid = part.ndata[dgl.NID]
    if not ids.numel():
        return torch.zeros(0, 3, dtype=torch.int64)
    frontier = dgl.sampling.sample_neighbors(part, ids - start, fanout, edge_dir=edge_dir,
                                             replace=replace, copy_ndata=False)
    src, dst = frontier.edges()
    return torch.stack([nid[src], nid[dst], part.edata[dgl.EID][frontier.edata[dgl.EID]]],
                       1)


def _sample_owned(g, requests: list[torch.Tensor], fanout, edge_dir: str, prob: str | None,
                  prob_etypes: list, replace: bool, per_type: bool) -> list[torch.Tensor]:
    """Answer every rank's seeds (homogeneous ids this rank owns) from the local
    partition: ``(E_k, 3)`` global homogeneous ``(src, dst, eid)`` rows for rank ``k``;
    ``fanout`` edges of each type per seed when ``per_type``, else of all types together.
    Collective when ``prob`` is given, else local."""
    local = g.local_typed_partition
    if not per_type and len(local.graph.canonical_etypes) > 1:
        rows = _across_types(local, torch.unique(torch.cat(requests)), fanout, edge_dir,
                             replace)
        return _answers(g.get_partition_book(), rows, requests, edge_dir)
    seeds = local.local_seeds(torch.unique(torch.cat(requests)))
    with local.graph.local_scope():
        if prob is not None:
            probs = _candidate_probs(g, local, seeds, edge_dir, prob, prob_etypes)
            for c_etype, values in probs.items():
                local.graph.edges[c_etype].data[_PROB] = values
        if any(ids.numel() for ids in seeds.values()):
            frontier = dgl.sampling.sample_neighbors(
                local.graph, seeds, fanout, edge_dir=edge_dir,
                prob=None if prob is None else _PROB, replace=replace, copy_ndata=False)
            rows = local.global_rows(frontier)
        else:
            rows = torch.zeros(0, 3, dtype=torch.int64)
    return _answers(g.get_partition_book(), rows, requests, edge_dir)


def _answers(book: RangePartitionBook, rows: torch.Tensor, requests: list[torch.Tensor],
             edge_dir: str) -> list[torch.Tensor]:
    """The ``rows`` whose seed end each rank asked for, grouped by seed in the order that
    rank listed its seeds (as DGL's per-row sampler returns them), each seed's edges in
    ``rows``' order. ``requests[k]``: the distinct ids (owned here) rank ``k`` asked for.
    Local."""
    lo, hi = (int(v) for v in book.node_ranges[book.partid])
    seed_end = (rows[:, 1] if edge_dir == "in" else rows[:, 0]) - lo
    if seed_end.numel() < 2 or bool((seed_end[1:] >= seed_end[:-1]).all()):
        count = torch.bincount(seed_end, minlength=hi - lo)
        return [rows.index_select(0, _grouped_rows(count, asked - lo)) for asked in requests]
    position = torch.full((hi - lo,), -1, dtype=torch.int64)
    answers = []
    for asked in requests:
        position[asked - lo] = torch.arange(len(asked))
        where = position[seed_end]
        mine = torch.nonzero(where >= 0).squeeze(1)
        order = torch.sort(where[mine], stable=True).indices
        answers.append(rows[mine[order]])
        position[asked - lo] = -1
    return answers


def _grouped_rows(count: torch.Tensor, asked: torch.Tensor) -> torch.Tensor:
    """Positions of the rows of each of the distinct local seeds ``asked``, seed after
    seed in that order, in rows that hold each seed's rows together, the seeds ascending
    (as the sampler returns them for ascending seeds); ``count[i]``: the rows of local
    seed ``i``. ``(R,)`` int64, found without a sort (unlike the general case of
    :func:`_answers`)."""
    start = torch.cumsum(count, 0) - count          # where each seed's rows are
    start, count = start[asked], count[asked]
    first = torch.cumsum(count, 0) - count          # where they go
    shift = (start - first).repeat_interleave(count)
    return torch.arange(shift.numel(), dtype=torch.int64) + shift


def _dgl_order(answers: list[torch.Tensor]) -> torch.Tensor:
    """The owners' answers joined as DGL's ``_distributed_access`` merges them: this
    rank's own partition first, then the others by rank."""
    me = rank()
    return torch.cat([answers[me], *(a for k, a in enumerate(answers) if k != me)])


# -- the frontier ----------------------------------------------------------------------------
def _frontier(g, rows: torch.Tensor, excluded: torch.Tensor | None) -> dgl.DGLGraph:
    """The frontier of the global homogeneous ``(src, dst, eid)`` ``rows``, less the
    ``excluded`` edge ids, as DGL 2.1's distributed sampler returns it: without named
    types a graph over all ``g.num_nodes()`` global ids with ``edata[dgl.EID]``; with
    them :func:`_typed_frontier`. Local."""
    if excluded is not None and excluded.numel():
        rows = rows[~torch.isin(rows[:, 2], excluded)]
    if g.get_partition_book().has_named_types:
        return _typed_frontier(g, rows)
    frontier = dgl.graph((rows[:, 0], rows[:, 1]), num_nodes=g.num_nodes())
    frontier.edata[dgl.EID] = rows[:, 2]
    return frontier


def _typed_frontier(g, rows: torch.Tensor) -> dgl.DGLGraph:
    """DGL 2.1's ``_frontier_to_heterogeneous_graph``: a heterograph of type-wise ids with
    every node type (``g.num_nodes(ntype)`` nodes each) but only the edge types that hold
    one of ``rows``, or every edge type when ``rows`` is empty; ``edata[dgl.EID]`` the
    type-wise edge ids. (DGL 2.3 and later keep every edge type.) Local."""
    book = g.get_partition_book()
    src, dst, eids = rows.t().contiguous()
    (etype_ids, eids), (_, src), (_, dst) = (book.map_to_per_etype(eids),
                                             book.map_to_per_ntype(src),
                                             book.map_to_per_ntype(dst))
    present = set(etype_ids.unique().tolist()) or range(len(g.canonical_etypes))
    masks = {c: etype_ids == t for t, c in enumerate(g.canonical_etypes) if t in present}
    frontier = dgl.heterograph({c: (src[m], dst[m]) for c, m in masks.items()},
                               {ntype: g.num_nodes(ntype) for ntype in g.ntypes})
    for c_etype, mine in masks.items():
        frontier.edges[c_etype].data[dgl.EID] = eids[mine]
    return frontier


# -- entry points ----------------------------------------------------------------------------
def _gather_edges(g, seeds, fanout, edge_dir: str, prob: str | None, replace: bool,
                  call: KVCall, exclude_edges=None, per_type: bool = True) -> dgl.DGLGraph:
    """Check, send the seeds to their owners, sample there, build the frontier.
    Collective."""
    def checked():
        if not per_type and prob is not None and len(g.canonical_etypes) > 1:
            raise ValueError("sample_neighbors with prob on a graph of several edge types "
                             "(DGL 2.1 has no such sampling): use sample_etype_neighbors, "
                             "which samples each edge type with its own prob values")
        return _checked_args(g, seeds, fanout, edge_dir, prob, exclude_edges)
    ids, fanouts, prob_etypes, excluded = validated(call, checked)
    per_type = per_type or isinstance(fanouts, Mapping)
    owners = g.get_partition_book().nid2partid(ids)
    answers = ask_owners(ids, owners, lambda requests: _sample_owned(
        g, requests, fanouts, edge_dir, prob, prob_etypes, replace, per_type), call)
    return _frontier(g, _dgl_order(answers), excluded)


def owns_all(g, ids: torch.Tensor) -> bool:
    """Whether this rank owns every node of ``ids`` (global homogeneous ids). Local."""
    book = g.get_partition_book()
    lo, hi = (int(v) for v in book.node_ranges[book.partid])
    return not ids.numel() or (int(ids.min()) >= lo and int(ids.max()) < hi)


def sample_owned_neighbors(g, nodes, fanout, edge_dir: str = "in",
                           replace: bool = False, *, exclude_edges=None) -> dgl.DGLGraph:
    """:func:`sample_neighbors` of seeds this rank owns, **without communication**: the
    owner samples on its local partition as it would for the collective call, so the
    result is the same graph and the same draws of DGL's generator.

    Local: only this rank calls it, and no other rank waits for it. A loader whose ranks
    agreed that all their seeds are their own uses it for the seeds' hop (see
    :class:`~sarlite.sampling.DistNodeDataLoader`). Arguments as
    :func:`sample_neighbors`, without ``prob`` (its values are pulled collectively).

    Raises
    ------
    ValueError
        A seed this rank does not own, or a bad ``fanout``, ``edge_dir`` or seed id.
    """
    ids, fanouts, _, excluded = _checked_args(g, nodes, fanout, edge_dir, None,
                                              exclude_edges)
    if not owns_all(g, ids):
        raise ValueError("sample_owned_neighbors: some seeds belong to another rank; use "
                         "sample_neighbors (a collective) for them")
    rows, = _sample_owned(g, [ids], fanouts, edge_dir, None, [], replace, per_type=True)
    return _frontier(g, rows, excluded)


def sample_neighbors(g, nodes, fanout, edge_dir: str = "in", prob: str | None = None,
                     replace: bool = False, use_graphbolt: bool = False, *,
                     exclude_edges=None) -> dgl.DGLGraph:
    """Sample up to ``fanout`` in- (or out-) edges of every seed node, across partitions.

    ``dgl.distributed.sample_neighbors``'s parameters (DGL 2.1), in its order;
    ``exclude_edges`` is keyword-only.

    Parameters
    ----------
    g:
        The :class:`~sarlite.sampling.DistGraph`.
    nodes:
        Global node ids (tensor, array or list, or ``{ntype: ids}``; duplicates are
        sampled once); may be empty. With named types the ids are type-wise, and a graph
        with several node types needs the dict.
    fanout:
        Edges to pick per seed; ``-1`` picks all of them. An int: as DGL 2.1, on a graph
        with several edge types the seed's edges of all types are one pool to pick from
        (:func:`sample_etype_neighbors` picks per type, as ``DistGraph.sample_neighbors``
        and the loaders do). ``{etype: fanout}`` naming every edge type (0 picks none of
        one): per type (sarlite's; DGL's function takes an int only).
    edge_dir:
        ``"in"``: edges into the seeds; ``"out"``: edges out of them.
    prob:
        Name of an edge feature with one non-negative (or boolean) value per edge: the
        unnormalised chance of picking the edge; 0 never picks it. With several edge
        types, only per type (a fanout dict, or :func:`sample_etype_neighbors`): the
        types without that feature are sampled uniformly (as in DGL); at least one must
        have it.
    replace:
        Sample with replacement (then every seed with a candidate gets ``fanout`` edges).
    use_graphbolt:
        Ignored: DGL picks its GraphBolt sampling kernel with it; sarlite always samples
        with ``dgl.sampling.sample_neighbors`` on the local partition.
    exclude_edges:
        Keyword-only. Global edge ids (tensor, array, list or ``{etype: type-wise ids}``)
        to leave out of the result. As ``dgl.sampling.sample_neighbors`` does in DGL 2.1,
        the edges are sampled first and the excluded ones are dropped from the sample
        afterwards, so a seed may get fewer than ``fanout`` edges (and the random draws
        are those of the same call without ``exclude_edges``). Each rank's list applies
        to its own result only. (DGL 2.1's ``dgl.distributed.sample_neighbors`` has no
        such argument, and its ``DistGraph.sample_neighbors`` accepts it but ignores it.)

    Returns
    -------
    dgl.DGLGraph
        As DGL 2.1's distributed sampler returns it. Without named types: a graph over
        all ``g.num_nodes()`` global node ids holding the sampled edges, with
        ``edata[dgl.EID]`` their global edge ids. With named types: a heterograph with
        every node type (``g.num_nodes(ntype)`` nodes each) but only the edge types that
        hold a sampled edge (after ``exclude_edges``), or every edge type when none does;
        ids type-wise. Without replacement a seed gets ``min(fanout, degree)`` distinct
        edges (of each type, when sampled per type; fewer when some are excluded); a
        seed without candidates gets none. Each seed's edges come together, the seeds in
        the order given (the ``nodes`` dict's types in its order), as DGL's: first the
        seeds this rank owns, then those of each other rank by rank. The order of one
        seed's edges is the sampler's (random in DGL too).

    Collective and blocking: every rank must call it, in the same order and with the same
    ``fanout``, ``edge_dir``, ``prob`` and ``replace``, also with no seeds (two row
    exchanges, plus a pull of ``prob`` values per edge type that has them).

    Raises
    ------
    ValueError
        On the rank that passed them: seed ids outside the graph or of an unknown type,
        a bad ``fanout`` or ``edge_dir``, or a ``prob`` that is not an edge feature with
        one value per edge; on every rank when a candidate edge has a negative ``prob``.
    TypeError
        Non-integer ``exclude_edges`` (on the rank that passed them).
    NotImplementedError
        Without named types: ``nodes``, ``fanout`` or ``exclude_edges`` given for a node
        or edge type other than ``"_N"`` / ``"_E"``.
    CollectiveError
        On the other ranks when one rank's arguments were bad or differ from theirs (the
        check runs before any data moves), or when a rank died.
    """
    call = KVCall(f"sample_neighbors(fanout={fanout!r}, edge_dir={edge_dir!r}, "
                  f"prob={prob!r}, replace={replace!r})", "sample_neighbors")
    return _gather_edges(g, nodes, fanout, edge_dir, prob, replace, call, exclude_edges,
                         per_type=False)


def sample_etype_neighbors(g, nodes, fanout, edge_dir: str = "in", prob: str | None = None,
                           replace: bool = False, etype_sorted: bool = True,
                           use_graphbolt: bool = False, *,
                           exclude_edges=None) -> dgl.DGLGraph:
    """Sample up to ``fanout`` in- (or out-) edges **of each edge type** of every seed, as
    ``dgl.distributed.sample_etype_neighbors`` (DGL 2.1's parameters, in its order).

    ``fanout`` is an int for every edge type or ``{etype: fanout}`` naming every edge
    type; ``etype_sorted`` is ignored (each type is sampled on its own) and so is
    ``use_graphbolt``. Everything else, the result and the errors are those of
    :func:`sample_neighbors`. Collective and blocking, as :func:`sample_neighbors`.
    """
    del etype_sorted, use_graphbolt
    call = KVCall(f"sample_etype_neighbors(fanout={fanout!r}, edge_dir={edge_dir!r}, "
                  f"prob={prob!r}, replace={replace!r})", "sample_neighbors")
    return _gather_edges(g, nodes, fanout, edge_dir, prob, replace, call, exclude_edges)


def in_subgraph(g, nodes) -> dgl.DGLGraph:
    """All in-edges of ``nodes`` (global ids, or ``{ntype: ids}``), as DGL's
    ``dgl.distributed.in_subgraph`` (DGL 2.1's parameters).

    Returns the frontier of :func:`sample_neighbors` with fanout ``-1``: without named
    types a graph over all ``g.num_nodes()`` global node ids with ``edata[dgl.EID]`` the
    global edge ids. Collective and blocking: every rank must call it, in the same order,
    also with no nodes.

    Raises
    ------
    ValueError
        Node ids outside the graph (on the rank that passed them).
    CollectiveError
        On the other ranks when one rank's ids were bad, or a rank died.
    """
    return _gather_edges(g, nodes, -1, "in", None, False,
                         KVCall("in_subgraph", "in_subgraph"))
