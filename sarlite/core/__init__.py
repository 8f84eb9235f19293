"""The SAR engine: sharded graphs, sequential aggregation, one-shot blocks."""
from ..partition.data import PartitionData, ShardEdges, load_partition_data
from .batchnorm import DistributedBatchNorm1d
from .construct import construct_full_graph, construct_mfgs
from .distributed_block import DistributedBlock
from .dispatch import (edge_softmax, install_dgl_dispatch, uninstall_dgl_dispatch)
from .graph_view import ShardedGraphBase
from .hetero import HeteroGraphShardManager
from .manager import GraphShardManager
from .message import message_has_parameters
from .options import EngineOptions
from .shards import GraphShard

__all__ = ["DistributedBatchNorm1d", "DistributedBlock", "EngineOptions", "GraphShard",
           "GraphShardManager", "HeteroGraphShardManager",
           "PartitionData", "ShardEdges", "ShardedGraphBase", "construct_full_graph",
           "construct_mfgs", "edge_softmax", "install_dgl_dispatch", "load_partition_data",
           "message_has_parameters", "uninstall_dgl_dispatch"]
