"""The SAR engine: sharded graphs, sequential aggregation, one-shot blocks."""
from .batchnorm import DistributedBatchNorm1d
from .config import Config
from .construct import construct_full_graph, construct_mfgs
from .distributed_block import DistributedBlock
from .edge_softmax import edge_softmax, install_edge_softmax, uninstall_edge_softmax
from .graph_view import DistributedGraph
from .manager import GraphShardManager
from .message import message_has_parameters
from .partition_data import PartitionData, ShardEdges, load_partition_data
from .shards import GraphShard

__all__ = ["Config", "DistributedBatchNorm1d", "DistributedBlock", "DistributedGraph",
           "GraphShard", "GraphShardManager", "PartitionData", "ShardEdges",
           "construct_full_graph", "construct_mfgs", "edge_softmax", "install_edge_softmax",
           "load_partition_data", "message_has_parameters", "uninstall_edge_softmax"]
