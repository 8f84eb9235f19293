"""Build the distributed graph objects from a worker's PartitionData.

One path for every graph: as in DGL, a homogeneous graph is a heterogeneous graph with one
node type and one edge type. Each relation ``(src, rel, dst)`` becomes one *relation
view* (a :class:`GraphShardManager`, or a :class:`DistributedBlock` in one-shot mode);
a graph of one relation is that view itself, a graph of several a
:class:`HeteroGraphShardManager` over them.
"""
from __future__ import annotations

import torch

from ..comm import world_size
from ..partition import PartitionData
from .options import OptionsSource, current, resolve_options
from .distributed_block import DistributedBlock
from .manager import GraphShardManager
from .hetero import HeteroGraphShardManager
from .kernels import narrow
from .shards import assemble_shards, build_shards, global_out_degrees, request_rows


def _settings(data: PartitionData, options: OptionsSource) -> str:
    """The mode that decides the graph's class; checks one worker per partition."""
    if world_size() != data.num_parts:
        raise ValueError(f"world size {world_size()} does not match the {data.num_parts} "
                         f"partitions: launch one worker per partition")
    return current(options).mode


def _graph(mode: str, options: OptionsSource, shards, plan, num_src: int, num_dst: int,
           node_ranges=None, **common):
    """A :class:`GraphShardManager` (``sar``/``sa``) or, for ``one-shot``, the shards
    merged into a :class:`DistributedBlock` directly."""
    if mode == "one-shot":
        return DistributedBlock.from_shards(shards, plan, num_src, num_dst, **common,
                                            options=options)
    return GraphShardManager(shards, plan, num_src, num_dst, node_ranges=node_ranges,
                             options=options, **common)


def _in_degrees(shards, lo: int, num_owned: int) -> torch.Tensor:
    """``(num_owned,)`` in-degree of every owned node (all its in-edges are owned), from
    the owned edges ``shards`` whose destinations start at global id ``lo``."""
    degrees = torch.zeros(num_owned, dtype=torch.int64)
    for edges in shards:
        degrees.index_add_(0, edges.dst - lo, torch.ones_like(edges.dst))
    return degrees


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else torch.device("cpu")


def _whole(data: PartitionData, views: dict, num_src: dict, **blocks):
    """The graph of one layer: the one relation view of a homogeneous graph, else a
    :class:`HeteroGraphShardManager` over the views (``blocks``: its ``num_dst``,
    ``input_nodes`` and ``output_nodes``, for message-flow graphs)."""
    if data.is_homogeneous:
        return next(iter(views.values()))
    book = data.partition_book
    counts = None if blocks else (book._num_nodes(), book._num_edges())
    return HeteroGraphShardManager(views, num_src, counts, **blocks)


def _relation_degrees(data: PartitionData, c_etype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(in-degrees of the owned destination nodes, global out-degrees of the owned
    source nodes)`` along one relation. Collective (the out-degrees)."""
    src_type, _, dst_type = c_etype
    edges = data.relations[c_etype]
    in_degrees = _in_degrees(edges, data.range_of(dst_type)[0], data.count_of(dst_type))
    return in_degrees, global_out_degrees([e.src for e in edges], data.type_ranges[src_type])


def _relation_graph(data: PartitionData, c_etype: tuple[str, str, str], mode: str,
                    options: OptionsSource, device):
    """The full-graph view of relation ``c_etype``. Collective."""
    src_type, _, dst_type = c_etype
    edges = data.relations[c_etype]
    dst_lo, dst_hi = data.range_of(dst_type)
    num_src = data.count_of(src_type)
    shards, plan = build_shards([(e.src, e.dst - dst_lo) for e in edges],
                                data.type_ranges[src_type], dst_hi - dst_lo,
                                lambda requested: (requested, num_src), device)
    in_degrees, out_degrees = _relation_degrees(data, c_etype)
    book = data.partition_book
    return _graph(
        mode, options, shards, plan, num_src, dst_hi - dst_lo,
        node_ranges=data.type_ranges[src_type] if src_type == dst_type else None,
        in_degrees=in_degrees.to(device), out_degrees=out_degrees.to(device),
        edata={k: v.to(device) for k, v in data.edge_frames[c_etype].items()},
        edge_ids=narrow(torch.cat([e.eids for e in edges]), book._num_edges()),
        global_counts=(book._num_nodes(src_type), book._num_edges(c_etype)),
        relation=c_etype)


def construct_full_graph(data: PartitionData, mode: str | None = None,
                         pipeline_depth: int | None = None, device=None, *,
                         max_collective_rows: int | None = None, halo_dtype=None,
                         max_rows_per_step: int | None = None, kernels: str | None = None,
                         options: OptionsSource | None = None):
    """The full graph of this worker: a :class:`GraphShardManager`.

    The engine's settings come as ``options``, an
    :class:`~sarlite.core.options.EngineOptions` (or a zero-argument callable returning
    one, asked at every ``update_all``/``apply_edges``; its mode at construction picks
    the class: a one-shot graph stays one), or, for convenience, as the keywords of the
    same names: ``mode`` (``"sar"``, the default: sequential aggregation, rematerialized
    backward; ``"sa"``: sequential, autograd graph kept; ``"one-shot"``, which returns the
    :class:`DistributedBlock` of :meth:`GraphShardManager.get_full_partition_graph`
    instead), ``pipeline_depth``, ``max_collective_rows``, ``halo_dtype``,
    ``max_rows_per_step`` and ``kernels`` (see :class:`~sarlite.core.options.EngineOptions`
    for each). A keyword left ``None`` takes the default; passing ``options`` together
    with any of them raises ``ValueError``. ``edata`` starts with the partition's edge
    features (shard order). Attention layers and ``dgl.ops`` calls need
    :func:`sarlite.install_dgl_dispatch` (called once, explicitly).

    A graph of several node or edge types gives a
    :class:`~sarlite.core.hetero.HeteroGraphShardManager`: one such graph per relation
    (``g[src, rel, dst]``), for ``dgl.nn.HeteroGraphConv`` and ``multi_update_all``.

    Collective: every rank calls it once per graph (it agrees on which rows each rank
    serves to which), building every relation in the same order.

    Raises
    ------
    ValueError
        The world size differs from the number of partitions, an invalid setting, or
        ``options`` together with a keyword setting.
    """
    options = resolve_options(options, mode=mode, pipeline_depth=pipeline_depth,
                              max_collective_rows=max_collective_rows, halo_dtype=halo_dtype,
                              max_rows_per_step=max_rows_per_step, kernels=kernels)
    mode = _settings(data, options)
    device = _device(device)
    views = {c: _relation_graph(data, c, mode, options, device)
             for c in data.canonical_etypes}
    return _whole(data, views, {t: data.count_of(t) for t in data.ntypes})


def _positions(order: torch.Tensor, size: int) -> torch.Tensor:
    """``pos`` with ``pos[order[i]] = i`` (and -1 elsewhere), over ``size`` local ids."""
    pos = torch.full((size,), -1, dtype=torch.int64)
    pos[order] = torch.arange(order.numel())
    return pos


def _checked_seeds(seed_nodes, num_owned: int, what: str) -> torch.Tensor:
    """Sorted unique local seed ids, each in ``[0, num_owned)`` (else ``ValueError``)."""
    seeds = torch.unique(torch.as_tensor(seed_nodes, dtype=torch.int64).reshape(-1))
    if seeds.numel() and (int(seeds[0]) < 0 or int(seeds[-1]) >= num_owned):
        raise ValueError(f"{what} must be local ids in [0, {num_owned}), got values in "
                         f"[{int(seeds[0])}, {int(seeds[-1])}]")
    return seeds


def _typed_seeds(data: PartitionData, seed_nodes) -> dict[str, torch.Tensor]:
    """``{ntype: sorted unique local ids}`` of every node type (empty where none given);
    a homogeneous graph's seeds may be given as ids alone."""
    if data.is_homogeneous and not isinstance(seed_nodes, dict):
        seed_nodes = {data.ntypes[0]: seed_nodes}
    if not isinstance(seed_nodes, dict):
        raise ValueError(f"seed_nodes of a heterogeneous graph must be {{ntype: local ids}} "
                         f"(types {data.ntypes}), got {type(seed_nodes).__name__}")
    unknown = sorted(set(seed_nodes) - set(data.ntypes))
    if unknown:
        raise ValueError(f"seed_nodes names node types {unknown}; the types are "
                         f"{data.ntypes}")
    what = (lambda t: "seed_nodes") if data.is_homogeneous else \
        (lambda t: f"seed_nodes[{t!r}]")
    return {t: _checked_seeds(seed_nodes.get(t, []), data.count_of(t), what(t))
            for t in data.ntypes}


def construct_mfgs(data: PartitionData, seed_nodes, num_layers: int,
                   mode: str | None = None, pipeline_depth: int | None = None, device=None,
                   *, max_collective_rows: int | None = None, halo_dtype=None,
                   max_rows_per_step: int | None = None, kernels: str | None = None,
                   options: OptionsSource | None = None) -> list:
    """Message-flow graphs that compute ``num_layers`` layers for ``seed_nodes`` only.

    For label-only training: the last block's destination nodes are the seeds; each earlier
    block's destination nodes are the nodes (on every worker) whose outputs the next block
    reads. Block ``l`` has ``input_nodes`` (its source nodes) and ``output_nodes`` (its
    destination nodes) as local ids of the owned nodes, destinations first among sources
    as in DGL blocks, so ``dgl.nn`` layers take ``h[:num_dst_nodes]`` as destination
    features. Feed ``x[mfgs[0].input_nodes]`` to the first layer; the last layer returns
    rows for ``mfgs[-1].output_nodes`` (the sorted seeds). Degrees are global, so every
    output equals the full-graph output at that node.

    Parameters
    ----------
    seed_nodes:
        Local ids (``0 <= id < num_owned_nodes``) of this worker's seeds; may be empty.
        For a graph of several node types, ``{ntype: local ids}`` (ranks may seed
        different types, or none); the blocks are then
        :class:`~sarlite.core.hetero.HeteroGraphShardManager` with ``is_block``, and
        ``input_nodes``/``output_nodes`` are ``{ntype: local ids}``.
    num_layers:
        Number of blocks to build.
    mode, pipeline_depth, device, max_collective_rows, halo_dtype, max_rows_per_step, \
    kernels, options:
        As :func:`construct_full_graph`.

    Collective: **every rank must call it**, including ranks with no seeds (2 exchanges per
    relation and layer).
    """
    options = resolve_options(options, mode=mode, pipeline_depth=pipeline_depth,
                              max_collective_rows=max_collective_rows, halo_dtype=halo_dtype,
                              max_rows_per_step=max_rows_per_step, kernels=kernels)
    mode = _settings(data, options)
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
    device = _device(device)
    outputs = _typed_seeds(data, seed_nodes)
    degrees = {c: _relation_degrees(data, c) for c in data.canonical_etypes}
    blocks = []
    for _ in range(num_layers):                       # last layer first
        picked, asked = {}, {}
        for c in data.canonical_etypes:
            lo = data.range_of(c[2])[0]
            dst_pos = _positions(outputs[c[2]], data.count_of(c[2]))
            masks = [dst_pos[e.dst - lo] >= 0 for e in data.relations[c]]
            edges = [(e.src[m], dst_pos[e.dst[m] - lo])
                     for e, m in zip(data.relations[c], masks)]
            picked[c] = (masks, edges)
            asked[c] = request_rows(edges, data.type_ranges[c[0]])
        inputs = {}
        for ntype in data.ntypes:
            wanted = [torch.cat(asked[c][1]) for c in data.canonical_etypes if c[0] == ntype]
            extra = torch.unique(torch.cat(wanted)) if wanted else outputs[ntype][:0]
            extra = extra[_positions(outputs[ntype], data.count_of(ntype))[extra] < 0]
            inputs[ntype] = torch.cat([outputs[ntype], extra])
        views = {c: _block_view(data, c, picked[c], asked[c], inputs, outputs, degrees[c],
                                mode, options, device) for c in data.canonical_etypes}
        blocks.append(_whole(
            data, views, {t: v.numel() for t, v in inputs.items()},
            num_dst={t: v.numel() for t, v in outputs.items()},
            input_nodes={t: v.to(device) for t, v in inputs.items()},
            output_nodes={t: v.to(device) for t, v in outputs.items()}))
        outputs = inputs
    return blocks[::-1]


def _block_view(data, c_etype, picked, asked, inputs, outputs, degrees, mode, options,
                device):
    """One relation's block of one layer. Collective (the send counts)."""
    masks, edges = picked
    uniques, requested = asked
    src_type, _, dst_type = c_etype
    src_pos = _positions(inputs[src_type], data.count_of(src_type))
    shards, plan = assemble_shards(edges, uniques, [src_pos[rows] for rows in requested],
                                   inputs[src_type].numel(), outputs[dst_type].numel(),
                                   device)
    mask = torch.cat(masks) if masks else torch.zeros(0, dtype=torch.bool)
    in_degrees, out_degrees = degrees
    return _graph(
        mode, options, shards, plan, inputs[src_type].numel(), outputs[dst_type].numel(),
        in_degrees=in_degrees[outputs[dst_type]].to(device),
        out_degrees=out_degrees[inputs[src_type]].to(device),
        edata={k: v[mask].to(device) for k, v in data.edge_frames[c_etype].items()},
        is_block=True,
        edge_ids=narrow(torch.cat([e.eids[m] for e, m in zip(data.relations[c_etype], masks)]),
                        data.partition_book._num_edges()),
        input_nodes=inputs[src_type].to(device), output_nodes=outputs[dst_type].to(device),
        relation=c_etype)
