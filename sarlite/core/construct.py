"""Build the distributed graph objects from a worker's PartitionData."""
from __future__ import annotations

import torch

from ..comm import world_size
from ..partition import HeteroPartitionData
from .options import EngineOptions, OptionsSource, current
from .distributed_block import DistributedBlock
from .manager import GraphShardManager
from .hetero import HeteroGraphShardManager
from .partition_data import PartitionData
from .shards import assemble_shards, build_shards, global_out_degrees, request_rows


def _settings(data: PartitionData, mode: str, pipeline_depth: int,
              max_collective_rows: int | None, options: OptionsSource | None,
              halo_dtype=None, max_rows_per_step: int | None = None,
              kernels: str | None = None) -> tuple[str, OptionsSource]:
    """The mode that decides the graph's class, and the checked options source."""
    if options is None:
        options = EngineOptions(mode, pipeline_depth, max_collective_rows, halo_dtype,
                                max_rows_per_step, kernels)
    mode = current(options).mode
    if world_size() != data.num_parts:
        raise ValueError(f"world size {world_size()} does not match the {data.num_parts} "
                         f"partitions: launch one worker per partition")
    return mode, options


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


def _checked_seeds(seed_nodes, num_owned: int, what: str) -> torch.Tensor:
    """Sorted unique local seed ids, each in ``[0, num_owned)`` (else ``ValueError``)."""
    seeds = torch.unique(torch.as_tensor(seed_nodes, dtype=torch.int64).reshape(-1))
    if seeds.numel() and (int(seeds[0]) < 0 or int(seeds[-1]) >= num_owned):
        raise ValueError(f"{what} must be local ids in [0, {num_owned}), got values in "
                         f"[{int(seeds[0])}, {int(seeds[-1])}]")
    return seeds


def _relation_graph(data: HeteroPartitionData, c_etype: tuple[str, str, str], mode: str,
                    options: OptionsSource, device):
    """The relation view of ``c_etype`` (see :mod:`sarlite.core.hetero`). Collective."""
    src_type, _, dst_type = c_etype
    edges = data.relations[c_etype]
    dst_lo, dst_hi = data.owned_range(dst_type)
    num_src = data.num_owned_nodes(src_type)
    shards, plan = build_shards([(e.src, e.dst - dst_lo) for e in edges],
                                data.node_ranges[src_type], dst_hi - dst_lo,
                                lambda requested: (requested, num_src), device)
    in_degrees, out_degrees = _relation_degrees(data, c_etype)
    book = data.partition_book
    return _graph(
        mode, options, shards, plan, num_src, dst_hi - dst_lo,
        in_degrees=in_degrees.to(device), out_degrees=out_degrees.to(device),
        edata={k: v[c_etype].to(device) for k, v in data.edge_features.items()
               if c_etype in v},
        edge_ids=torch.cat([e.eids for e in edges]),
        global_counts=(book._num_nodes(src_type), book._num_edges(c_etype)),
        relation=c_etype)


def construct_hetero_graph(data: HeteroPartitionData, mode: str = "sar",
                           pipeline_depth: int = 1, device=None, *,
                           max_collective_rows: int | None = None, halo_dtype=None,
                           max_rows_per_step: int | None = None,
                           kernels: str | None = None,
                           options: OptionsSource | None = None) -> HeteroGraphShardManager:
    """The full heterogeneous graph of this worker (:func:`construct_full_graph` calls it
    for a :class:`~sarlite.partition.HeteroPartitionData`; same arguments). Collective:
    every rank builds every relation, in the same order."""
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options,
                              halo_dtype, max_rows_per_step, kernels)
    device = torch.device(device) if device is not None else torch.device("cpu")
    relations = {c: _relation_graph(data, c, mode, options, device)
                 for c in data.canonical_etypes}
    book = data.partition_book
    return HeteroGraphShardManager(
        relations, {t: data.num_owned_nodes(t) for t in data.ntypes},
        global_counts=(book._num_nodes(), book._num_edges()))


def construct_full_graph(data: PartitionData, mode: str = "sar", pipeline_depth: int = 1,
                         device=None, *, max_collective_rows: int | None = None,
                         halo_dtype=None, max_rows_per_step: int | None = None,
                         kernels: str | None = None, options: OptionsSource | None = None):
    """The full graph of this worker: a :class:`GraphShardManager`.

    ``mode`` is ``"sar"`` (sequential aggregation, rematerialized backward), ``"sa"``
    (sequential, autograd graph kept) or ``"one-shot"``, which returns the
    :class:`DistributedBlock` of :meth:`GraphShardManager.get_full_partition_graph`
    instead. ``pipeline_depth``: shards fetched ahead of the one being aggregated.
    ``max_collective_rows`` (keyword-only): at most this many rows per peer in one
    collective call; larger exchanges are split into several calls, with the same results
    (``None``, the default: one call per exchange). ``halo_dtype`` (keyword-only,
    opt-in): ``torch.bfloat16`` or ``torch.float16`` (or their names) sends halo rows and
    their gradients in that type, half the bytes, computing in the model's dtype; results
    are then close to, not equal to, single-process DGL's (see the README for the
    measured error and accuracy). ``None`` (float32) keeps them exact.
    ``max_rows_per_step`` (keyword-only): fetch, use and free a remote shard's rows in
    chunks of at most this many rows, so a step's transient memory follows the chunk,
    not the partition cut; results stay exact (``None``: a whole shard per ring round).
    ``kernels`` (keyword-only): ``"dgl"`` (DGL's message-passing kernels), ``"torch"``
    (sarlite's, in torch operations: the ones that run on CUDA with the DGL that pip
    installs) or ``None``/``"auto"`` (DGL's on the CPU, torch's on other devices); both
    are exact.
    ``options`` (keyword-only): instead of those six, an
    :class:`~sarlite.core.options.EngineOptions` or a zero-argument
    callable returning one, asked at every ``update_all``/``apply_edges`` (its mode at
    construction picks the class: a one-shot graph stays one). ``edata``
    starts with the partition's edge features (shard order). Attention layers and
    ``dgl.ops`` calls need :func:`sarlite.install_dgl_dispatch` (called once, explicitly).

    On a :class:`~sarlite.partition.HeteroPartitionData` it returns a
    :class:`~sarlite.core.hetero.HeteroGraphShardManager`: one such graph per relation
    (``g[src, rel, dst]``), for ``dgl.nn.HeteroGraphConv`` and ``multi_update_all``.

    Collective: every rank calls it once per graph (it agrees on which rows each rank
    serves to which).

    Raises
    ------
    ValueError
        The world size differs from the number of partitions, or an unknown mode.
    """
    if isinstance(data, HeteroPartitionData):
        return construct_hetero_graph(data, mode, pipeline_depth, device,
                                      max_collective_rows=max_collective_rows,
                                      halo_dtype=halo_dtype,
                                      max_rows_per_step=max_rows_per_step, kernels=kernels,
                                      options=options)
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options,
                              halo_dtype, max_rows_per_step, kernels)
    device = torch.device(device) if device is not None else torch.device("cpu")
    lo, hi = data.owned_range
    shards, plan = build_shards([(e.src, e.dst - lo) for e in data.shards],
                                data.node_ranges, hi - lo,
                                lambda requested: (requested, hi - lo), device)
    out_degrees = global_out_degrees([e.src for e in data.shards], data.node_ranges)
    in_degrees = _in_degrees(data.shards, data.owned_range[0], data.num_owned_nodes)
    return _graph(
        mode, options, shards, plan, hi - lo, hi - lo, node_ranges=data.node_ranges,
        in_degrees=in_degrees.to(device), out_degrees=out_degrees.to(device),
        edata={k: v.to(device) for k, v in data.edge_features.items()},
        edge_ids=torch.cat([e.eids for e in data.shards]),
        global_counts=(data.num_nodes, int(data.partition_book.edge_ranges[-1, 1])))


def _positions(order: torch.Tensor, size: int) -> torch.Tensor:
    """``pos`` with ``pos[order[i]] = i`` (and -1 elsewhere), over ``size`` local ids."""
    pos = torch.full((size,), -1, dtype=torch.int64)
    pos[order] = torch.arange(order.numel())
    return pos


def construct_mfgs(data: PartitionData, seed_nodes, num_layers: int,
                   mode: str = "sar", pipeline_depth: int = 1, device=None, *,
                   max_collective_rows: int | None = None, halo_dtype=None,
                   max_rows_per_step: int | None = None,
                   kernels: str | None = None,
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
    num_layers:
        Number of blocks to build.
    mode, pipeline_depth, device, max_collective_rows, halo_dtype, max_rows_per_step, \
    kernels, options:
        As :func:`construct_full_graph`.

    On a :class:`~sarlite.partition.HeteroPartitionData`, ``seed_nodes`` is
    ``{ntype: local ids}`` and the blocks are heterogeneous
    (:func:`construct_hetero_mfgs`); ranks may seed different types.

    Collective: **every rank must call it**, including ranks with no seeds (2 exchanges per
    layer).
    """
    if isinstance(data, HeteroPartitionData):
        return construct_hetero_mfgs(data, seed_nodes, num_layers, mode, pipeline_depth,
                                     device, max_collective_rows=max_collective_rows,
                                     halo_dtype=halo_dtype,
                                     max_rows_per_step=max_rows_per_step, kernels=kernels,
                                     options=options)
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options,
                              halo_dtype, max_rows_per_step, kernels)
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
    lo, hi = data.owned_range
    num_owned = hi - lo
    seeds = _checked_seeds(seed_nodes, num_owned, "seed_nodes")
    device = torch.device(device) if device is not None else torch.device("cpu")
    out_degrees = global_out_degrees([e.src for e in data.shards], data.node_ranges)
    in_degrees = _in_degrees(data.shards, data.owned_range[0], data.num_owned_nodes)

    blocks, outputs = [], seeds
    for _ in range(num_layers):                       # last layer first
        dst_pos = _positions(outputs, num_owned)
        picked = [dst_pos[e.dst - lo] >= 0 for e in data.shards]
        inputs = []

        def serve(requested, outputs=outputs):
            extra = torch.unique(torch.cat(requested))
            extra = extra[_positions(outputs, num_owned)[extra] < 0]
            inputs.append(torch.cat([outputs, extra]))
            src_pos = _positions(inputs[0], num_owned)
            return [src_pos[rows] for rows in requested], inputs[0].numel()
        shards, plan = build_shards(
            [(e.src[m], dst_pos[e.dst[m] - lo]) for e, m in zip(data.shards, picked)],
            data.node_ranges, outputs.numel(), serve, device)
        mask = torch.cat(picked) if picked else torch.zeros(0, dtype=torch.bool)
        blocks.append(_graph(
            mode, options, shards, plan, inputs[0].numel(), outputs.numel(),
            in_degrees=in_degrees[outputs].to(device),
            out_degrees=out_degrees[inputs[0]].to(device),
            edata={k: v[mask].to(device) for k, v in data.edge_features.items()},
            is_block=True, edge_ids=torch.cat([e.eids[m] for e, m in zip(data.shards, picked)]),
            input_nodes=inputs[0].to(device), output_nodes=outputs.to(device)))
        outputs = inputs[0]
    return blocks[::-1]


def _typed_seeds(data: HeteroPartitionData, seed_nodes) -> dict[str, torch.Tensor]:
    """``{ntype: sorted unique local ids}`` of every node type (empty where none given)."""
    if not isinstance(seed_nodes, dict):
        raise ValueError(f"seed_nodes of a heterogeneous graph must be {{ntype: local ids}} "
                         f"(types {data.ntypes}), got {type(seed_nodes).__name__}")
    unknown = sorted(set(seed_nodes) - set(data.ntypes))
    if unknown:
        raise ValueError(f"seed_nodes names node types {unknown}; the types are "
                         f"{data.ntypes}")
    return {t: _checked_seeds(seed_nodes.get(t, []), data.num_owned_nodes(t),
                              f"seed_nodes[{t!r}]") for t in data.ntypes}


def _relation_degrees(data: HeteroPartitionData, c_etype) -> tuple[torch.Tensor, ...]:
    """``(in-degrees of the owned destination nodes, global out-degrees of the owned
    source nodes)`` along one relation. Collective (the out-degrees)."""
    src_type, _, dst_type = c_etype
    edges = data.relations[c_etype]
    in_degrees = _in_degrees(edges, data.owned_range(dst_type)[0],
                             data.num_owned_nodes(dst_type))
    return in_degrees, global_out_degrees([e.src for e in edges], data.node_ranges[src_type])


def construct_hetero_mfgs(data: HeteroPartitionData, seed_nodes: dict, num_layers: int,
                          mode: str = "sar", pipeline_depth: int = 1, device=None, *,
                          max_collective_rows: int | None = None, halo_dtype=None,
                          max_rows_per_step: int | None = None,
                          kernels: str | None = None,
                          options: OptionsSource | None = None) -> list:
    """Message-flow graphs of a heterogeneous graph (:func:`construct_mfgs` calls it).

    ``seed_nodes`` is ``{ntype: local ids}``; ranks may seed different types, or none.
    Each block is a :class:`~sarlite.core.hetero.HeteroGraphShardManager` with
    ``is_block``: per type, its destination nodes are the nodes whose outputs the next
    block reads (the seeds for the last), its source nodes start with them, and
    ``input_nodes``/``output_nodes`` are ``{ntype: local ids}``. Degrees are global, so
    every output equals the full graph's at that node. Collective: every rank calls it,
    also with no seeds.
    """
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options,
                              halo_dtype, max_rows_per_step, kernels)
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    outputs = _typed_seeds(data, seed_nodes)
    degrees = {c: _relation_degrees(data, c) for c in data.canonical_etypes}
    blocks = []
    for _ in range(num_layers):                       # last layer first
        picked, asked = {}, {}
        for c in data.canonical_etypes:
            lo = data.owned_range(c[2])[0]
            dst_pos = _positions(outputs[c[2]], data.num_owned_nodes(c[2]))
            masks = [dst_pos[e.dst - lo] >= 0 for e in data.relations[c]]
            edges = [(e.src[m], dst_pos[e.dst[m] - lo])
                     for e, m in zip(data.relations[c], masks)]
            picked[c] = (masks, edges)
            asked[c] = request_rows(edges, data.node_ranges[c[0]])
        inputs = {}
        for ntype in data.ntypes:
            wanted = [torch.cat(asked[c][1]) for c in data.canonical_etypes if c[0] == ntype]
            extra = torch.unique(torch.cat(wanted)) if wanted else outputs[ntype][:0]
            extra = extra[_positions(outputs[ntype], data.num_owned_nodes(ntype))[extra] < 0]
            inputs[ntype] = torch.cat([outputs[ntype], extra])
        views = {c: _block_view(data, c, picked[c], asked[c], inputs, outputs, degrees[c],
                                mode, options, device) for c in data.canonical_etypes}
        blocks.append(HeteroGraphShardManager(
            views, {t: v.numel() for t, v in inputs.items()},
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
    src_pos = _positions(inputs[src_type], data.num_owned_nodes(src_type))
    shards, plan = assemble_shards(edges, uniques, [src_pos[rows] for rows in requested],
                                   inputs[src_type].numel(), outputs[dst_type].numel(),
                                   device)
    mask = torch.cat(masks) if masks else torch.zeros(0, dtype=torch.bool)
    in_degrees, out_degrees = degrees
    return _graph(
        mode, options, shards, plan, inputs[src_type].numel(), outputs[dst_type].numel(),
        in_degrees=in_degrees[outputs[dst_type]].to(device),
        out_degrees=out_degrees[inputs[src_type]].to(device),
        edata={k: v[c_etype][mask].to(device) for k, v in data.edge_features.items()
               if c_etype in v},
        is_block=True,
        edge_ids=torch.cat([e.eids[m] for e, m in zip(data.relations[c_etype], masks)]),
        input_nodes=inputs[src_type].to(device), output_nodes=outputs[dst_type].to(device),
        relation=c_etype)
