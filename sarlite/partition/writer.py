"""``partition_graph``: split a graph into reshuffled partitions on disk (DGL 2.x format)."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import dgl
import torch

from .assign import AUTO, check_method, metis_assignment, metis_edge_budget, random_assignment
from .book import DEFAULT_ETYPE, DEFAULT_ETYPE_STR, DEFAULT_NTYPE
from .atomic import naming_full_disk, write_json
from .files import write_graph, write_tensors
from .integrity import FILES_KEY, file_record, verify_files
from .layout import Layout, halo_graph, layout, narrow, relabel, sort_key

log = logging.getLogger("sarlite.partition")

_RESERVED = {dgl.NID, dgl.EID, "inner_node", "inner_edge", "part_id"}


def _check_inputs(g: dgl.DGLGraph, graph_name: str, num_parts: int, out_path,
                  part_method: str, objtype: str, num_hops: int, balance_ntypes,
                  metis_max_edges) -> None:
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
    if _is_hetero(g):
        _check_typed_balance(g, balance_ntypes)
    elif balance_ntypes is not None and len(balance_ntypes) != g.num_nodes():
        raise ValueError(f"balance_ntypes has {len(balance_ntypes)} entries but the graph "
                         f"has {g.num_nodes()} nodes")


def _is_hetero(g: dgl.DGLGraph) -> bool:
    """Whether ``g`` has several node or edge types (written with its type names)."""
    return len(g.ntypes) > 1 or len(g.canonical_etypes) > 1


def _check_typed_balance(g: dgl.DGLGraph, balance_ntypes) -> None:
    """``balance_ntypes`` of a heterograph: ``None`` or ``{ntype: class per node}``."""
    if balance_ntypes is None:
        return
    if not isinstance(balance_ntypes, dict):
        raise ValueError(f"balance_ntypes of a heterogeneous graph must be a dict "
                         f"{{ntype: class of each node}}, as in DGL; got "
                         f"{type(balance_ntypes).__name__}")
    for ntype, classes in balance_ntypes.items():
        if ntype not in g.ntypes:
            raise ValueError(f"balance_ntypes names node type {ntype!r}, which the graph "
                             f"does not have (its node types are {g.ntypes})")
        if len(classes) != g.num_nodes(ntype):
            raise ValueError(f"balance_ntypes[{ntype!r}] has {len(classes)} entries but "
                             f"the graph has {g.num_nodes(ntype)} {ntype!r} nodes")


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
    partition of its destination and edges are renumbered the same way. All node and edge
    data fields are saved, rows of owned nodes/edges only. Each part's entry in the JSON
    also records its files' sizes and CRC-32s (``sarlite_files``, which DGL ignores), which
    :func:`~sarlite.partition.load_partition` checks.

    A heterograph is partitioned on its homogeneous view, as DGL does, and written in DGL
    2.x's heterogeneous format: inside a partition the new ids are grouped by type, the
    JSON's ``node_map``/``edge_map`` hold each type's range per partition, and features
    are keyed ``"<ntype>/<name>"`` and ``"<src>:<rel>:<dst>/<name>"``. Every part holds
    each node type evenly, up to one node (see ``docs/ARCHITECTURE.md``).

    The parameters are ``dgl.distributed.partition_graph``'s (DGL 2.1), in its order;
    ``seed`` is sarlite's own and keyword-only. Runs on one process (no collective).

    Parameters
    ----------
    g:
        A graph (``dgl.graph``) or a heterograph (``dgl.heterograph``).
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
        :func:`sarlite.partition.assign.vertex_weights`). For a heterograph, as in DGL,
        ``{ntype: class per node of that type}``: each node type is balanced anyway, and
        the classes split a type further; each class then lands evenly, up to one node.
    balance_edges:
        Also balance the number of owned (in-)edges.
    return_mapping:
        Return ``(orig_nids, orig_eids)``: the original id of every new node and edge id;
        for a heterograph ``{ntype: ...}`` and ``{(src, rel, dst): ...}`` of type-wise ids.
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
    (torch.Tensor, torch.Tensor), (dict, dict) or None
        ``orig_nids`` of shape ``(N,)`` and ``orig_eids`` of shape ``(E,)`` when asked
        (dicts of those by type for a heterograph).

    Raises
    ------
    NotImplementedError
        ``use_graphbolt=True``.
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
    types = _Types.of(g)
    view = dgl.to_homogeneous(g) if types.hetero else g
    if part_method == "metis" and types.hetero:
        parts = metis_assignment(view, num_parts, None, balance_edges, objtype, seed,
                                 metis_max_edges, types.balance_classes(g, balance_ntypes))
    elif part_method == "metis":
        parts = metis_assignment(view, num_parts, None if balance_ntypes is None
                                 else torch.as_tensor(balance_ntypes), balance_edges,
                                 objtype, seed, metis_max_edges)
    else:
        parts = random_assignment(view.num_nodes(), num_parts, seed)
    log.info("assigned %d nodes to %d parts (%s) in %.1fs", view.num_nodes(), num_parts,
             part_method, time.time() - start)
    nodes, edges, src, dst = _reshuffle(view, parts, types, num_parts)
    del parts, view

    node_blocks, edge_blocks = nodes.blocks, edges.blocks
    kinds = None
    if types.hetero:
        kinds = (types.node_type[nodes.orig], types.edge_type[edges.orig])
    meta = {"graph_name": graph_name, "num_nodes": g.num_nodes(),
            "num_edges": g.num_edges(), "part_method": part_method,
            "num_parts": num_parts, "halo_hops": num_hops,
            "node_map": dict(zip(types.ntypes, nodes.ranges.tolist())),
            "edge_map": dict(zip(types.etypes, edges.ranges.tolist())),
            "ntypes": {name: t for t, name in enumerate(types.ntypes)},
            "etypes": {name: t for t, name in enumerate(types.etypes)}}
    for part in range(num_parts):
        part_dir = out / f"part{part}"
        _mkdir(part_dir)
        write_graph(part_dir / "graph.dgl",
                    halo_graph(src, dst, node_blocks, tuple(edge_blocks[part].tolist()),
                               part, num_hops, kinds), graph_formats)
        write_tensors(part_dir / "node_feat.dgl", types.node_rows(g, nodes, part))
        write_tensors(part_dir / "edge_feat.dgl", types.edge_rows(g, edges, part))
        meta[f"part-{part}"] = _part_entry(out, part)
        log.info("wrote part %d/%d: %d nodes, %d edges", part + 1, num_parts,
                 *(int(b[part, 1] - b[part, 0]) for b in (node_blocks, edge_blocks)))
    write_json(config, meta)
    for part in range(num_parts):     # the files' checks just made, kept for the next load
        entry = meta[f"part-{part}"]
        verify_files(config, part, entry, {key: out / entry[key] for key in _FILES})
    log.info("partitioned %s into %d parts in %.1fs: %s", graph_name, num_parts,
             time.time() - start, config)
    if return_mapping:
        return types.mapping(nodes, edges)
    return None


_FILES = {"node_feats": "node_feat.dgl", "edge_feats": "edge_feat.dgl",
          "part_graph": "graph.dgl"}


def _part_entry(out: Path, part: int) -> dict:
    """Part ``part``'s JSON entry: its files' paths, relative to ``out``, and their size
    and CRC-32 under ``sarlite_files`` (see :mod:`sarlite.partition.integrity`)."""
    paths = {key: f"part{part}/{name}" for key, name in _FILES.items()}
    return {**paths, FILES_KEY: {key: file_record(out / rel) for key, rel in paths.items()}}


def _reshuffle(view: dgl.DGLGraph, parts: torch.Tensor, types: "_Types", num_parts: int):
    """The node and edge :class:`~sarlite.partition.layout.Layout` of ``view`` (the
    homogeneous view) for the assignment ``parts``, and its edges in new ids."""
    num_ntypes, num_etypes = len(types.ntypes), len(types.etypes)
    nodes = layout(sort_key(parts, types.node_type, num_ntypes, num_parts), num_ntypes,
                   num_parts)
    new_id = torch.empty_like(nodes.orig)
    new_id[nodes.orig] = torch.arange(len(nodes.orig))
    src, dst = view.edges()
    edge_part = narrow(parts, num_parts)[dst]
    edges = layout(sort_key(edge_part, types.edge_type, num_etypes, num_parts), num_etypes,
                   num_parts)
    del edge_part
    return nodes, edges, relabel(src, edges.orig, new_id), relabel(dst, edges.orig, new_id)


@dataclass(frozen=True)
class _Types:
    """The node and edge types of the input graph as the partition files name them.

    A homogeneous graph (one node and one edge type) is written as ``_N`` and
    ``_N:_E:_N`` whatever its types are called; a heterogeneous one with its own type
    names and canonical ``"src:rel:dst"`` edge types. ``node_type``/``edge_type`` give
    the type of each homogeneous-view id (``None`` for one type); ``node_offsets`` and
    ``edge_offsets`` where each type starts in the homogeneous view.
    """

    ntypes: list
    etypes: list
    canonical: list
    node_type: torch.Tensor | None
    edge_type: torch.Tensor | None
    node_offsets: list
    edge_offsets: list

    @property
    def hetero(self) -> bool:
        return self.node_type is not None

    @staticmethod
    def of(g: dgl.DGLGraph) -> "_Types":
        if not _is_hetero(g):
            return _Types([DEFAULT_NTYPE], [DEFAULT_ETYPE_STR], [DEFAULT_ETYPE], None, None,
                          [0], [0])
        ncounts = [g.num_nodes(t) for t in g.ntypes]
        ecounts = [g.num_edges(c) for c in g.canonical_etypes]
        return _Types(list(g.ntypes), [":".join(c) for c in g.canonical_etypes],
                      list(g.canonical_etypes), _type_ids(ncounts), _type_ids(ecounts),
                      _starts(ncounts), _starts(ecounts))

    def balance_classes(self, g: dgl.DGLGraph, balance_ntypes) -> torch.Tensor:
        """The class of every homogeneous-view node of a heterogeneous graph, which each
        part holds evenly. As in DGL, every node type is a class, and
        ``{ntype: classes}`` splits a type further by its classes (e.g. a train mask)."""
        classes, first = [], 0
        for ntype in self.ntypes:
            given = (balance_ntypes or {}).get(ntype)
            own = torch.zeros(g.num_nodes(ntype), dtype=torch.int64) if given is None \
                else torch.unique(torch.as_tensor(given), return_inverse=True)[1]
            classes.append(own + first)
            first += int(own.max()) + 1 if len(own) else 1
        return torch.cat(classes)

    def node_rows(self, g: dgl.DGLGraph, nodes: Layout, part: int) -> dict:
        """``{"<ntype>/<name>": rows}`` of the nodes partition ``part`` owns."""
        frames = [g.ndata] if not self.hetero else [g.nodes[t].data for t in self.ntypes]
        return self._rows(frames, self.ntypes, self.node_offsets, nodes, part)

    def edge_rows(self, g: dgl.DGLGraph, edges: Layout, part: int) -> dict:
        """``{"<src>:<rel>:<dst>/<name>": rows}`` of the edges partition ``part`` owns."""
        frames = [g.edata] if not self.hetero else \
            [g.edges[c].data for c in self.canonical]
        return self._rows(frames, self.etypes, self.edge_offsets, edges, part)

    @staticmethod
    def _rows(frames, names, offsets, ids: Layout, part: int) -> dict:
        rows = {}
        for t, (frame, name, offset) in enumerate(zip(frames, names, offsets)):
            lo, hi = ids.ranges[t, part].tolist()
            own = ids.orig[lo:hi] - offset
            rows.update({f"{name}/{key}": value[own] for key, value in frame.items()
                         if key not in _RESERVED})
        return rows

    def mapping(self, nodes: Layout, edges: Layout):
        """``(orig_nids, orig_eids)`` as DGL returns them: tensors for a homogeneous
        graph, ``{ntype: ...}`` and ``{canonical etype: ...}`` of type-wise ids else."""
        if not self.hetero:
            return nodes.orig, edges.orig
        return ({t: nodes.type_orig(i) - self.node_offsets[i]
                 for i, t in enumerate(self.ntypes)},
                {c: edges.type_orig(i) - self.edge_offsets[i]
                 for i, c in enumerate(self.canonical)})


def _type_ids(counts: list[int]) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))


def _starts(counts: list[int]) -> list[int]:
    return [sum(counts[:i]) for i in range(len(counts))]
