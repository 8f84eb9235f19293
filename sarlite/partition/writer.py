"""``partition_graph``: split a graph into reshuffled partitions on disk (DGL 2.x format)."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import dgl
import torch

from .assign import AUTO, check_method, metis_assignment, metis_edge_budget, random_assignment
from .book import DEFAULT_ETYPE_STR, DEFAULT_NTYPE
from .edgekeys import CHUNK
from .files import naming_full_disk, write_graph, write_json, write_tensors

log = logging.getLogger("sarlite.partition")

_RESERVED = {dgl.NID, dgl.EID, "inner_node", "inner_edge", "part_id"}


def _check_inputs(g: dgl.DGLGraph, graph_name: str, num_parts: int, out_path,
                  part_method: str, objtype: str, num_hops: int, balance_ntypes,
                  metis_max_edges) -> None:
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise NotImplementedError("partition_graph supports homogeneous graphs only, got "
                                  f"node types {g.ntypes} and edge types {g.canonical_etypes}")
    if not isinstance(graph_name, str) or not graph_name or os.sep in graph_name:
        raise ValueError(f"graph_name must be a non-empty file name, got {graph_name!r}")
    if not isinstance(num_parts, int) or not 1 <= num_parts <= max(g.num_nodes(), 1):
        raise ValueError(f"num_parts must be an integer in [1, {g.num_nodes()}] (the number "
                         f"of nodes), got {num_parts!r}")
    check_method(part_method, objtype)
    metis_edge_budget(metis_max_edges, g.num_nodes())
    if not isinstance(num_hops, int) or num_hops < 1:
        raise ValueError(f"num_hops must be a positive integer, got {num_hops!r}")
    if Path(out_path).exists() and not Path(out_path).is_dir():
        raise NotADirectoryError(f"out_path {out_path} exists and is not a directory")
    if balance_ntypes is not None and len(balance_ntypes) != g.num_nodes():
        raise ValueError(f"balance_ntypes has {len(balance_ntypes)} entries but the graph "
                         f"has {g.num_nodes()} nodes")


def _check_dgl_options(num_trainers_per_machine, use_graphbolt: bool, kwargs: dict) -> None:
    """Refuse DGL options whose non-default values sarlite cannot honour."""
    if num_trainers_per_machine != 1:
        raise ValueError(f"partition_graph: num_trainers_per_machine="
                         f"{num_trainers_per_machine!r} is not supported: sarlite runs one "
                         f"trainer per partition; partition into num_parts * "
                         f"num_trainers_per_machine parts and launch that many workers")
    if use_graphbolt:
        raise NotImplementedError(
            "partition_graph: use_graphbolt=True is not supported: sarlite writes DGL "
            "partitions only; convert them with dgl.distributed.dgl_partition_to_graphbolt"
            "(part_config) if DGL's GraphBolt sampler needs them")
    if kwargs:
        hint = " (sarlite's former 'objective' is DGL's 'objtype')" \
            if "objective" in kwargs else ""
        raise TypeError(f"partition_graph got unexpected keyword argument(s) "
                        f"{sorted(kwargs)}{hint}; DGL passes extra keywords to its GraphBolt "
                        f"conversion only, which sarlite does not do")


def _mkdir(path: Path, parents: bool = False) -> None:
    with naming_full_disk(path):
        path.mkdir(parents=parents, exist_ok=True)


def _ranges(ends: torch.Tensor) -> torch.Tensor:
    """``(P, 2)`` ``[start, end)`` pairs from the cumulative part sizes ``ends``."""
    return torch.stack([torch.cat([ends.new_zeros(1), ends[:-1]]), ends], 1)


def _narrow(parts: torch.Tensor, num_parts: int) -> torch.Tensor:
    """Partition ids in the smallest integer type that holds them (less memory per edge)."""
    for dtype in (torch.int8, torch.int16, torch.int32):
        if num_parts <= torch.iinfo(dtype).max:
            return parts.to(dtype)
    return parts


def _relabel(ids: torch.Tensor, order: torch.Tensor, new_id: torch.Tensor) -> torch.Tensor:
    """``new_id[ids[order]]``, chunk by chunk: no temporary as long as the edge list."""
    out = torch.empty(len(order), dtype=torch.int64)
    for lo in range(0, len(order), CHUNK):
        out[lo:lo + CHUNK] = new_id[ids[order[lo:lo + CHUNK]]]
    return out


def _halo_graph(src: torch.Tensor, dst: torch.Tensor, node_ranges: torch.Tensor,
                edge_range: tuple[int, int], part: int, num_hops: int) -> dgl.DGLGraph:
    """The graph stored for partition ``part``, in reshuffled global ids ``src``/``dst``.

    As in DGL, it holds the owned nodes and every node within ``num_hops`` hops of them in
    either direction (the halo), and every edge with an end among the owned nodes or the
    halo nodes closer than ``num_hops`` hops. For one hop that is the owned in-edges
    (``inner_edge = 1``) and the owned nodes' out-edges to the halo (``inner_edge = 0``).
    Owned nodes and edges come first in ascending global id, then the halo, ascending.
    """
    num_nodes = int(node_ranges[-1, 1])
    lo, hi = node_ranges[part].tolist()
    elo, ehi = edge_range
    reached = torch.zeros(num_nodes, dtype=torch.bool)
    reached[lo:hi] = True
    for _ in range(num_hops):
        picked = reached[src] | reached[dst]
        reached[src[picked]] = True
        reached[dst[picked]] = True
    picked[elo:ehi] = False                      # owned edges go first, below
    eids = torch.cat([torch.arange(elo, ehi), picked.nonzero().squeeze(1)])
    del picked
    reached[lo:hi] = False
    halo = reached.nonzero().squeeze(1)
    del reached
    nids = torch.cat([torch.arange(lo, hi), halo])

    def local(ids: torch.Tensor) -> torch.Tensor:
        owned = (ids >= lo) & (ids < hi)
        return torch.where(owned, ids - lo, (hi - lo) + torch.searchsorted(halo, ids))

    part_graph = dgl.graph((local(src[eids]), local(dst[eids])), num_nodes=len(nids))
    part_graph.ndata[dgl.NID] = nids
    part_graph.ndata["inner_node"] = (torch.arange(len(nids)) < hi - lo).to(torch.uint8)
    part_graph.ndata["part_id"] = torch.searchsorted(node_ranges[:, 1].contiguous(), nids,
                                                     right=True)
    part_graph.edata[dgl.EID] = eids
    part_graph.edata["inner_edge"] = (torch.arange(len(eids)) < ehi - elo).to(torch.uint8)
    return part_graph


def partition_graph(g: dgl.DGLGraph, graph_name: str, num_parts: int,
                    out_path: str | os.PathLike, num_hops: int = 1, part_method: str = "metis",
                    balance_ntypes=None, balance_edges: bool = False,
                    return_mapping: bool = False, num_trainers_per_machine: int = 1,
                    objtype: str = "cut", graph_formats=None, use_graphbolt: bool = False,
                    *, seed: int = 0, metis_max_edges: int | str | None = AUTO, **kwargs):
    """Partition ``g`` and save it in DGL 2.x's format, readable by ``dgl.distributed``.

    Nodes are assigned to partitions (METIS k-way on the symmetrised graph, or a balanced
    random split), then renumbered so that partition ``p`` owns one contiguous id range;
    within a partition nodes keep their original relative order. Every edge belongs to the
    partition of its destination and edges are renumbered the same way. All ``g.ndata`` and
    ``g.edata`` fields are saved, rows of owned nodes/edges only.

    The parameters are ``dgl.distributed.partition_graph``'s (DGL 2.1), in its order;
    ``seed`` is sarlite's own and keyword-only. Runs on one process (no collective).

    Parameters
    ----------
    g:
        A homogeneous graph.
    graph_name:
        Name of the JSON file ``<out_path>/<graph_name>.json``.
    num_parts:
        Number of partitions, between 1 and the number of nodes.
    out_path:
        Output directory (created if needed).
    num_hops:
        Hops of halo nodes stored with each partition.
    part_method:
        ``"metis"`` or ``"random"`` (DGL 2.1's two methods).
    balance_ntypes:
        Optional integer class per node (e.g. the train mask) whose classes should be spread
        evenly; combined with ``balance_edges`` into one METIS vertex weight (see
        :func:`sarlite.partition.assign.vertex_weights`).
    balance_edges:
        Also balance the number of owned (in-)edges.
    return_mapping:
        Return ``(orig_nids, orig_eids)``: the original id of every new node and edge id.
    num_trainers_per_machine:
        Must be 1: sarlite runs one trainer per partition. DGL's value above 1 (split each
        partition again by trainer, stored as ``trainer_id``) raises ``ValueError``;
        partition into ``num_parts * num_trainers_per_machine`` parts instead.
    objtype:
        METIS objective: ``"cut"`` (minimise edge cut) or ``"vol"`` (minimise
        communication volume).
    graph_formats:
        Sparse formats (``"coo"``, ``"csr"``, ``"csc"``, a string or a list) the partition
        graphs are saved in, as ``dgl.save_graphs`` takes them; ``None`` lets DGL choose.
    use_graphbolt:
        Must be ``False``: sarlite writes DGL partitions only. ``True`` raises
        ``NotImplementedError``; convert afterwards with
        ``dgl.distributed.dgl_partition_to_graphbolt(part_config)`` if you need both.
    seed:
        Keyword-only (sarlite). Seed of the METIS or random assignment.
    metis_max_edges:
        Keyword-only (sarlite). The most undirected edges METIS reads: a graph with more
        gives METIS a seeded uniform sample of about that many (every edge kept with the
        same probability), and the assignment is used for the whole graph. ``"auto"``
        (default) is ``max(2**24, 8 * num_nodes)``, 16 edge ends per node on average:
        graphs below 2**24 undirected edges are never sampled. ``None`` gives METIS every
        edge; an integer sets the cap. METIS's memory grows faster than its input on
        graphs that coarsen poorly: at ogbn-products' size (a planted-partition graph of
        2.45 M nodes, 61.8 M edges), from files to 4 written parts, every edge took
        18.5 GiB and 214 s, ``"auto"`` (19.6 M edges) 8.3 GiB and 155 s for a cut 0.4 %
        larger (``benchmarks/results/products_scale.md``). The report shows the cut on
        the whole graph.
    kwargs:
        DGL passes these to its GraphBolt conversion only; sarlite accepts none (any
        raises ``TypeError``, so a misspelt argument is never silently ignored).

    Returns
    -------
    (torch.Tensor, torch.Tensor) or None
        ``orig_nids`` of shape ``(N,)`` and ``orig_eids`` of shape ``(E,)`` when asked.

    Raises
    ------
    NotImplementedError
        ``g`` is heterogeneous, or ``use_graphbolt=True``.
    ValueError
        An argument is out of range, or ``num_trainers_per_machine`` is not 1.
    TypeError
        A keyword argument that is not DGL's nor sarlite's.
    NotADirectoryError
        ``out_path`` is a file.
    OSError
        A file cannot be written. A full disk is one error, errno ``ENOSPC``: "no space
        left on device while writing <file>"; no temporary file stays behind, and the
        partition JSON (written last) is absent, so the partial output never looks
        complete.

    Example
    -------
    >>> g = sarlite.data.homophilous_graph(num_nodes=1000)
    >>> orig_nids, _ = sarlite.partition_graph(g, "toy", 2, "out/", return_mapping=True)
    >>> graph, nfeat, efeat, gpb, *_ = sarlite.load_partition("out/toy.json", 0)
    """
    _check_dgl_options(num_trainers_per_machine, use_graphbolt, kwargs)
    _check_inputs(g, graph_name, num_parts, out_path, part_method, objtype, num_hops,
                  balance_ntypes, metis_max_edges)
    out = Path(out_path)
    _mkdir(out, parents=True)
    config = out / f"{graph_name}.json"
    config.unlink(missing_ok=True)   # an old config must not vouch for half-written parts

    start = time.time()
    if part_method == "metis":
        parts = metis_assignment(g, num_parts, None if balance_ntypes is None
                                 else torch.as_tensor(balance_ntypes), balance_edges,
                                 objtype, seed, metis_max_edges)
    else:
        parts = random_assignment(g.num_nodes(), num_parts, seed)
    log.info("assigned %d nodes to %d parts (%s) in %.1fs", g.num_nodes(), num_parts,
             part_method, time.time() - start)

    orig_nids = torch.sort(parts, stable=True).indices
    node_ranges = _ranges(torch.cumsum(torch.bincount(parts, minlength=num_parts), 0))
    new_id = torch.empty_like(orig_nids)
    new_id[orig_nids] = torch.arange(len(orig_nids))
    src, dst = g.edges()
    edge_part = _narrow(parts, num_parts)[dst]
    del parts
    orig_eids = torch.sort(edge_part, stable=True).indices
    edge_ranges = _ranges(torch.cumsum(torch.bincount(edge_part, minlength=num_parts), 0))
    del edge_part
    src = _relabel(src, orig_eids, new_id)
    dst = _relabel(dst, orig_eids, new_id)
    del new_id

    meta = {"graph_name": graph_name, "num_nodes": g.num_nodes(),
            "num_edges": g.num_edges(), "part_method": part_method,
            "num_parts": num_parts, "halo_hops": num_hops,
            "node_map": {DEFAULT_NTYPE: node_ranges.tolist()},
            "edge_map": {DEFAULT_ETYPE_STR: edge_ranges.tolist()},
            "ntypes": {DEFAULT_NTYPE: 0}, "etypes": {DEFAULT_ETYPE_STR: 0}}
    for part in range(num_parts):
        part_dir = out / f"part{part}"
        _mkdir(part_dir)
        elo, ehi = edge_ranges[part].tolist()
        lo, hi = node_ranges[part].tolist()
        write_graph(part_dir / "graph.dgl",
                    _halo_graph(src, dst, node_ranges, (elo, ehi), part, num_hops),
                    graph_formats)
        write_tensors(part_dir / "node_feat.dgl",
                      {f"{DEFAULT_NTYPE}/{k}": v[orig_nids[lo:hi]]
                       for k, v in g.ndata.items() if k not in _RESERVED})
        write_tensors(part_dir / "edge_feat.dgl",
                      {f"{DEFAULT_ETYPE_STR}/{k}": v[orig_eids[elo:ehi]]
                       for k, v in g.edata.items() if k not in _RESERVED})
        meta[f"part-{part}"] = {"node_feats": f"part{part}/node_feat.dgl",
                                "edge_feats": f"part{part}/edge_feat.dgl",
                                "part_graph": f"part{part}/graph.dgl"}
        log.info("wrote part %d/%d: %d nodes, %d edges", part + 1, num_parts, hi - lo,
                 ehi - elo)
    write_json(config, meta)
    log.info("partitioned %s into %d parts in %.1fs: %s", graph_name, num_parts,
             time.time() - start, config)
    if return_mapping:
        return orig_nids, orig_eids
    return None
