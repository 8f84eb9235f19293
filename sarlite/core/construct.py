"""Build the distributed graph objects from a worker's PartitionData."""
from __future__ import annotations

import torch

from ..comm import world_size
from .config import Config, check_depth, check_mode
from .edge_softmax import install_edge_softmax
from .manager import GraphShardManager
from .partition_data import PartitionData
from .shards import build_shards


def construct_full_graph(data: PartitionData, mode: str | None = None,
                         pipeline_depth: int | None = None, device=None):
    """The full graph of this worker: a :class:`GraphShardManager`.

    With ``mode="one-shot"`` (argument or ``sarlite.Config.mode``) it returns the
    :class:`DistributedBlock` of :meth:`GraphShardManager.get_full_partition_graph`
    instead. ``edata`` starts with the partition's edge features (shard order). Installs
    sarlite's ``edge_softmax`` into ``dgl.nn`` (see :mod:`sarlite.core.edge_softmax`).

    Collective: every rank calls it once per graph (it agrees on which rows each rank
    serves to which).

    Raises
    ------
    ValueError
        The world size differs from the number of partitions, or an unknown mode.
    """
    mode = check_mode(Config.mode if mode is None else mode)
    depth = check_depth(Config.pipeline_depth if pipeline_depth is None else pipeline_depth)
    if world_size() != data.num_parts:
        raise ValueError(f"world size {world_size()} does not match the {data.num_parts} "
                         f"partitions: launch one worker per partition")
    device = torch.device(device) if device is not None else torch.device("cpu")
    lo, hi = data.owned_range
    shards, plan, out_degrees = build_shards(data.shards, data.node_ranges,
                                             lambda dst: dst - lo, hi - lo, device)
    in_degrees = torch.zeros(hi - lo, dtype=torch.int64)
    for edges in data.shards:
        in_degrees.index_add_(0, edges.dst - lo, torch.ones_like(edges.dst))
    install_edge_softmax()
    manager = GraphShardManager(
        shards, plan, (lo, hi), in_degrees.to(device), out_degrees,
        {k: v.to(device) for k, v in data.edge_features.items()},
        mode="sar" if mode == "one-shot" else mode, pipeline_depth=depth)
    return manager.get_full_partition_graph() if mode == "one-shot" else manager
