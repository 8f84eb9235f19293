"""IntelLabs SAR's public API on top of sarlite: ``import sarlite.sar as sar``.

Scripts written for SAR (https://github.com/IntelLabs/SAR) run with that one import
changed; every name maps onto sarlite's engine, which gives single-process DGL's outputs
and gradients in all three modes. Graphs of one node and edge type or several:
``load_dgl_partition_data`` returns SAR's layout for both, and ``construct_full_graph`` /
``construct_mfgs`` give a :class:`GraphShardManager` for one type, a
:class:`HeteroGraphShardManager` (``g[etype]``, ``srcnodes(ntype)``, ...) for several.
What differs from SAR, and why, is in ``docs/from-sar.md``.
"""
from . import comm, config, core, distributed_bn
from .comm import (comm_device, gather_grads, initialize_comms, nfs_ip_init, rank,
                   sync_params, world_size)
from .common_tuples import PartitionData, ShardEdgesAndFeatures
from .config import Config
from .construct_shard_manager import construct_full_graph, construct_mfgs, convert_dist_graph
from .core import (DataLoader, DistNeighborSampler, DistributedBlock, GraphShard,
                   GraphShardManager, HeteroGraphShardManager, message_has_parameters)
from .data_loading import load_dgl_partition_data, suffix_key_lookup
from .distributed_bn import DistributedBN1D
from .edge_softmax import edge_softmax
from .logging_setup import logger, logging_setup
from .patch_dgl import RelGraphConv, patch_dgl, patched_edge_softmax

__all__ = ["comm", "config", "core", "distributed_bn", "Config", "DataLoader", "DistNeighborSampler", "DistributedBN1D",
           "DistributedBlock", "GraphShard", "GraphShardManager", "HeteroGraphShardManager",
           "PartitionData", "RelGraphConv", "ShardEdgesAndFeatures", "comm_device",
           "construct_full_graph", "construct_mfgs", "convert_dist_graph", "edge_softmax",
           "gather_grads", "initialize_comms", "load_dgl_partition_data", "logger",
           "logging_setup", "message_has_parameters", "nfs_ip_init", "patch_dgl",
           "patched_edge_softmax", "rank", "suffix_key_lookup", "sync_params", "world_size"]
