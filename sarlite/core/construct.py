"""Build the distributed graph objects from a worker's PartitionData."""
from __future__ import annotations

import torch

from ..comm import world_size
from ..partition import HeteroPartitionData, require_homogeneous_data
from .options import EngineOptions, OptionsSource, current
from .distributed_block import DistributedBlock
from .manager import GraphShardManager
from .hetero import HeteroGraphShardManager
from .partition_data import PartitionData
from .shards import build_shards, global_out_degrees


def _settings(data: PartitionData, mode: str, pipeline_depth: int,
              max_collective_rows: int | None, options: OptionsSource | None
              ) -> tuple[str, OptionsSource]:
    """The mode that decides the graph's class, and the checked options source."""
    if options is None:
        options = EngineOptions(mode, pipeline_depth, max_collective_rows)
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


def _owned_in_degrees(data: PartitionData) -> torch.Tensor:
    """``(num_owned,)`` in-degree of every owned node (all its in-edges are owned)."""
    lo, _ = data.owned_range
    degrees = torch.zeros(data.num_owned_nodes, dtype=torch.int64)
    for edges in data.shards:
        degrees.index_add_(0, edges.dst - lo, torch.ones_like(edges.dst))
    return degrees


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
    out_degrees = global_out_degrees([e.src for e in edges], data.node_ranges[src_type])
    in_degrees = torch.zeros(dst_hi - dst_lo, dtype=torch.int64)
    for shard in edges:
        in_degrees.index_add_(0, shard.dst - dst_lo, torch.ones_like(shard.dst))
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
                           max_collective_rows: int | None = None,
                           options: OptionsSource | None = None) -> HeteroGraphShardManager:
    """The full heterogeneous graph of this worker (:func:`construct_full_graph` calls it
    for a :class:`~sarlite.partition.HeteroPartitionData`; same arguments). Collective:
    every rank builds every relation, in the same order."""
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options)
    device = torch.device(device) if device is not None else torch.device("cpu")
    relations = {c: _relation_graph(data, c, mode, options, device)
                 for c in data.canonical_etypes}
    book = data.partition_book
    return HeteroGraphShardManager(
        relations, {t: data.num_owned_nodes(t) for t in data.ntypes},
        global_counts=(book._num_nodes(), book._num_edges()))


def construct_full_graph(data: PartitionData, mode: str = "sar", pipeline_depth: int = 1,
                         device=None, *, max_collective_rows: int | None = None,
                         options: OptionsSource | None = None):
    """The full graph of this worker: a :class:`GraphShardManager`.

    ``mode`` is ``"sar"`` (sequential aggregation, rematerialized backward), ``"sa"``
    (sequential, autograd graph kept) or ``"one-shot"``, which returns the
    :class:`DistributedBlock` of :meth:`GraphShardManager.get_full_partition_graph`
    instead. ``pipeline_depth``: shards fetched ahead of the one being aggregated.
    ``max_collective_rows`` (keyword-only): at most this many rows per peer in one
    collective call; larger exchanges are split into several calls, with the same results
    (``None``, the default: one call per exchange). ``options`` (keyword-only): instead of
    those three, an :class:`~sarlite.core.options.EngineOptions` or a zero-argument
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
                                      options=options)
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options)
    device = torch.device(device) if device is not None else torch.device("cpu")
    lo, hi = data.owned_range
    shards, plan = build_shards([(e.src, e.dst - lo) for e in data.shards],
                                data.node_ranges, hi - lo,
                                lambda requested: (requested, hi - lo), device)
    out_degrees = global_out_degrees([e.src for e in data.shards], data.node_ranges)
    in_degrees = _owned_in_degrees(data)
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
                   max_collective_rows: int | None = None,
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
    mode, pipeline_depth, device, max_collective_rows, options:
        As :func:`construct_full_graph`.

    Collective: **every rank must call it**, including ranks with no seeds (2 exchanges per
    layer).
    """
    require_homogeneous_data(data, "construct_mfgs")
    mode, options = _settings(data, mode, pipeline_depth, max_collective_rows, options)
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
    lo, hi = data.owned_range
    num_owned = hi - lo
    seeds = torch.unique(torch.as_tensor(seed_nodes, dtype=torch.int64).reshape(-1))
    if seeds.numel() and (int(seeds[0]) < 0 or int(seeds[-1]) >= num_owned):
        raise ValueError(f"seed_nodes must be local ids in [0, {num_owned}), got values in "
                         f"[{int(seeds[0])}, {int(seeds[-1])}]")
    device = torch.device(device) if device is not None else torch.device("cpu")
    out_degrees = global_out_degrees([e.src for e in data.shards], data.node_ranges)
    in_degrees = _owned_in_degrees(data)

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
