"""SAR's ``sar.core``: graph objects, the parameter hint and sampling, on sarlite."""
from .full_partition_block import DistributedBlock
from .graphshard import GraphShard, GraphShardManager, HeteroGraphShardManager
from .sampling import DataLoader, DistNeighborSampler
from .sar_aggregation import message_has_parameters

__all__ = ["DataLoader", "DistNeighborSampler", "DistributedBlock", "GraphShard",
           "GraphShardManager", "HeteroGraphShardManager", "message_has_parameters"]
