"""Distributed neighbour sampling and in-subgraphs over a partitioned graph.

The graph ``g`` is a :class:`sarlite.sampling.DistGraph` (anything with
``local_partition``, ``get_partition_book()``, ``num_nodes()`` and, for ``prob``,
``edata``). Seeds travel to the ranks that own them; each owner samples on its local
partition graph, which holds every in-edge of its nodes and (as ``sarlite.partition_graph``
writes it, ``num_hops >= 1``) every out-edge of its nodes to the halo; the sampled edges
travel back as global ``(src, dst, eid)`` triples.

Sampling uses DGL's own kernel (``dgl.sampling.sample_neighbors``) on the local partition,
so it draws from DGL's random generator: ``dgl.seed(s)`` on every rank makes the results
reproducible.
"""
from __future__ import annotations

import dgl
import torch

from ..comm import exchange_sizes, world_size
from ..kv.protocol import KVCall, validated
from ..kv.routing import ask_owners
from ..partition.book import as_id_tensor, check_etype, check_ntype
from .typed_neighbor import sample_typed_neighbors

EDGE_DIRS = ("in", "out")


def check_fanout(fanout) -> None:
    """Raise ``ValueError`` unless ``fanout`` is an integer >= -1 (-1: all neighbours)."""
    if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < -1:
        raise ValueError(f"fanout must be an integer >= -1 (-1: all neighbours), got "
                         f"{fanout!r}")


def _homogeneous(ids, check_type):
    """``ids``, or the one value of a ``{type: ids}`` dict whose type ``check_type``
    accepts (DGL takes both forms for a homogeneous graph)."""
    if not isinstance(ids, dict):
        return ids
    if len(ids) != 1:
        raise NotImplementedError(f"ids of several types {sorted(map(str, ids))}: sarlite "
                                  f"supports homogeneous graphs only")
    (kind, value), = ids.items()
    check_type(kind)
    return value


def _excluded(exclude_edges) -> torch.Tensor | None:
    """``exclude_edges`` as int64 global edge ids (``None`` stays ``None``)."""
    if exclude_edges is None:
        return None
    return as_id_tensor(_homogeneous(exclude_edges, check_etype))


def _checked_seeds(g, seeds, fanout, edge_dir: str, prob: str | None) -> torch.Tensor:
    """The distinct seeds, ascending, after checking every argument (no communication)."""
    check_fanout(_homogeneous(fanout, check_etype))
    if edge_dir not in EDGE_DIRS:
        raise ValueError(f"edge_dir must be 'in' or 'out', got {edge_dir!r}")
    if prob is not None:
        if prob not in g.edata:
            raise ValueError(f"prob {prob!r} is not an edge feature of the graph (it has "
                             f"{sorted(g.edata)})")
        shape = tuple(g.edata[prob].shape[1:])
        if shape not in ((), (1,)):
            raise ValueError(f"prob feature {prob!r} must hold one value per edge, got "
                             f"rows of shape {shape}")
    ids = torch.unique(as_id_tensor(_homogeneous(seeds, check_ntype)))
    num_nodes = g.num_nodes()
    if ids.numel() and (int(ids[0]) < 0 or int(ids[-1]) >= num_nodes):
        raise ValueError(f"seed node ids must be in [0, {num_nodes}), got values in "
                         f"[{int(ids[0])}, {int(ids[-1])}]")
    return ids


def _candidate_probs(g, part: dgl.DGLGraph, local_seeds: torch.Tensor, edge_dir: str,
                     prob: str) -> torch.Tensor:
    """``(num_local_edges,)`` float32: ``prob`` of the seeds' candidate edges, 0 elsewhere.

    Pulls the values by global edge id from ``g.edata[prob]`` and tells every rank
    whether any was negative (collective: every rank calls it, also with no seeds).

    Raises
    ------
    ValueError
        On every rank, when some rank found a negative value.
    """
    if local_seeds.numel():
        local_eids = (part.in_edges(local_seeds, form="eid") if edge_dir == "in"
                      else part.out_edges(local_seeds, form="eid"))
    else:
        local_eids = torch.zeros(0, dtype=torch.int64)
    values = g.edata[prob][part.edata[dgl.EID][local_eids]].reshape(-1).float()
    negative = exchange_sizes([int(bool((values < 0).any()))] * world_size())
    if any(negative):
        raise ValueError(f"prob feature {prob!r} has negative values on candidate edges "
                         f"of the seeds of rank(s) "
                         f"{[r for r, bad in enumerate(negative) if bad]}")
    out = torch.zeros(part.num_edges(), dtype=torch.float32)
    out[local_eids] = values
    return out


def _sample_owned(g, requests: list[torch.Tensor], fanout: int, edge_dir: str,
                  prob: str | None, replace: bool) -> list[torch.Tensor]:
    """Answer every rank's seeds from the local partition: ``(E_k, 3)`` global
    ``(src, dst, eid)`` rows for rank ``k``. Collective when ``prob`` is given."""
    part, book = g.local_partition, g.get_partition_book()
    lo = int(book.node_ranges[book.partid, 0])
    seeds = torch.unique(torch.cat(requests))
    local_seeds = seeds - lo                 # owned nodes come first, in global id order
    with part.local_scope():
        prob_name = None
        if prob is not None:
            part.edata["_sarlite_prob"] = _candidate_probs(g, part, local_seeds, edge_dir,
                                                           prob)
            prob_name = "_sarlite_prob"
        if local_seeds.numel():
            frontier = dgl.sampling.sample_neighbors(
                part, local_seeds, fanout, edge_dir=edge_dir, prob=prob_name,
                replace=replace, copy_ndata=False)
            src, dst = frontier.edges()
            local_eids = frontier.edata[dgl.EID]      # ids in the partition graph
        else:
            src = dst = local_eids = torch.zeros(0, dtype=torch.int64)
    nid = part.ndata[dgl.NID]
    rows = torch.stack([nid[src], nid[dst], part.edata[dgl.EID][local_eids]], 1)
    seed_end = (rows[:, 1] if edge_dir == "in" else rows[:, 0]) - lo
    asked_by = torch.zeros(int(book.node_ranges[book.partid, 1]) - lo, dtype=torch.bool)
    answers = []
    for asked in requests:
        asked_by[asked - lo] = True
        answers.append(rows[asked_by[seed_end]])
        asked_by[asked - lo] = False
    return answers


def _gather_edges(g, seeds, fanout: int, edge_dir: str, prob: str | None,
                  replace: bool, call: KVCall, exclude_edges=None) -> dgl.DGLGraph:
    ids, excluded = validated(call, lambda: (
        _checked_seeds(g, seeds, fanout, edge_dir, prob), _excluded(exclude_edges)))
    fanout = _homogeneous(fanout, check_etype)
    owners = g.get_partition_book().nid2partid(ids)
    answers = ask_owners(ids, owners, lambda requests: _sample_owned(
        g, requests, fanout, edge_dir, prob, replace), call)
    return _frontier(g, torch.cat(answers), excluded)


def _frontier(g, rows: torch.Tensor, excluded: torch.Tensor | None) -> dgl.DGLGraph:
    """The graph over all of ``g``'s nodes of the sampled ``(src, dst, eid)`` ``rows``,
    less the ``excluded`` edge ids."""
    if excluded is not None and excluded.numel():
        rows = rows[~torch.isin(rows[:, 2], excluded)]
    frontier = dgl.graph((rows[:, 0], rows[:, 1]), num_nodes=g.num_nodes())
    frontier.edata[dgl.EID] = rows[:, 2]
    return frontier


def owns_all(g, ids: torch.Tensor) -> bool:
    """Whether this rank owns every node of ``ids`` (global ids of a homogeneous graph).
    Local."""
    book = g.get_partition_book()
    lo, hi = (int(v) for v in book.node_ranges[book.partid])
    return not ids.numel() or (int(ids.min()) >= lo and int(ids.max()) < hi)


def sample_owned_neighbors(g, nodes, fanout: int, edge_dir: str = "in",
                           replace: bool = False, *, exclude_edges=None) -> dgl.DGLGraph:
    """:func:`sample_neighbors` of seeds this rank owns, **without communication**: the
    owner samples on its local partition as it would for the collective call, so the
    result is the same graph and the same draws of DGL's generator.

    Local: only this rank calls it, and no other rank waits for it. A loader whose ranks
    agreed that all their seeds are their own uses it for the seeds' hop (see
    :class:`~sarlite.sampling.DistNodeDataLoader`). Homogeneous graphs, no ``prob``.

    Raises
    ------
    ValueError
        A seed this rank does not own, or a bad ``fanout`` or ``edge_dir``.
    """
    ids = _checked_seeds(g, nodes, fanout, edge_dir, None)
    if not owns_all(g, ids):
        raise ValueError("sample_owned_neighbors: some seeds belong to another rank; use "
                         "sample_neighbors (a collective) for them")
    rows, = _sample_owned(g, [ids], _homogeneous(fanout, check_etype), edge_dir, None,
                          replace)
    return _frontier(g, rows, _excluded(exclude_edges))


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
        Global node ids (tensor, array or list, or DGL's ``{"_N": ids}``; duplicates are
        sampled once); may be empty. On a graph with named types, ``{ntype: ids}`` of
        type-wise ids (see below).
    fanout:
        Edges to pick per seed; ``-1`` picks all of them (or ``{etype: fanout}``).
    edge_dir:
        ``"in"``: edges into the seeds; ``"out"``: edges out of them.
    prob:
        Name of an edge feature in ``g.edata`` with one non-negative (or boolean) value
        per edge: the unnormalised chance of picking the edge; 0 never picks it.
    replace:
        Sample with replacement (then every seed with a candidate gets ``fanout`` edges).
    use_graphbolt:
        Ignored: DGL picks its GraphBolt sampling kernel with it; sarlite always samples
        with ``dgl.sampling.sample_neighbors`` on the local partition.
    exclude_edges:
        Keyword-only. Global edge ids (tensor, array, list or ``{etype: ids}``) to leave
        out of the result. As ``dgl.sampling.sample_neighbors`` does in DGL 2.1, the
        edges are sampled first and the excluded ones are dropped from the sample
        afterwards, so a seed may get fewer than ``fanout`` edges (and the random draws
        are those of the same call without ``exclude_edges``). Each rank's list applies
        to its own result only. (DGL 2.1's ``dgl.distributed.sample_neighbors`` has no
        such argument, and its ``DistGraph.sample_neighbors`` accepts it but ignores it.)

    Returns
    -------
    dgl.DGLGraph
        A graph over all ``g.num_nodes()`` global node ids holding the sampled edges,
        with ``edata[dgl.EID]`` their global edge ids (as DGL's distributed sampler).
        Without replacement a seed gets ``min(fanout, degree)`` distinct edges (fewer
        when some are excluded); a seed without candidates gets none.

    **Named types** (a heterogeneous partitioning): ``nodes`` is ``{ntype: ids}``,
    ``fanout`` an int or ``{etype: fanout}`` naming every edge type (each edge type is
    sampled on its own: a seed gets up to ``fanout[etype]`` edges of each type),
    ``exclude_edges`` ``{etype: ids}``, every id type-wise; ``prob`` is refused
    (``NotImplementedError``). The result is a heterograph with every node and edge type
    of the graph (see :func:`~sarlite.sampling.typed_neighbor.sample_typed_neighbors`).

    Collective and blocking: every rank must call it, in the same order and with the same
    ``fanout``, ``edge_dir``, ``prob`` and ``replace``, also with no seeds (two row
    exchanges, plus a pull of ``prob`` values when given).

    Raises
    ------
    ValueError
        On the rank that passed them: seed ids outside the graph, a bad ``fanout`` or
        ``edge_dir``, or a ``prob`` that is not an edge feature with one value per edge;
        on every rank when a candidate edge has a negative ``prob``.
    TypeError
        Non-integer ``exclude_edges`` (on the rank that passed them).
    NotImplementedError
        ``nodes`` or ``exclude_edges`` given for a node or edge type other than the
        homogeneous graph's.
    CollectiveError
        On the other ranks when one rank's arguments were bad or differ from theirs (the
        check runs before any data moves), or when a rank died.
    """
    if g.get_partition_book().has_named_types:
        return sample_typed_neighbors(g, nodes, fanout, edge_dir, prob, replace,
                                      exclude_edges)
    call = KVCall(f"sample_neighbors(fanout={fanout!r}, edge_dir={edge_dir!r}, "
                  f"prob={prob!r}, replace={replace!r})", "sample_neighbors")
    return _gather_edges(g, nodes, fanout, edge_dir, prob, replace, call, exclude_edges)


def in_subgraph(g, nodes) -> dgl.DGLGraph:
    """All in-edges of ``nodes`` (global ids, or ``{"_N": ids}``), as DGL's
    ``dgl.distributed.in_subgraph`` (DGL 2.1's parameters).

    Returns a graph over all ``g.num_nodes()`` global node ids with ``edata[dgl.EID]``
    the global edge ids. Collective and blocking: every rank must call it, in the same
    order, also with no nodes.

    Raises
    ------
    ValueError
        Node ids outside the graph (on the rank that passed them).
    CollectiveError
        On the other ranks when one rank's ids were bad, or a rank died.
    """
    if g.get_partition_book().has_named_types:
        return sample_typed_neighbors(g, nodes, -1)
    return _gather_edges(g, nodes, -1, "in", None, False,
                         KVCall("in_subgraph", "in_subgraph"))
