"""SAR's ``sar.core.graphshard`` names, on sarlite's engine."""
from ...core import GraphShard, GraphShardManager

# SAR's construct_full_graph returned a HeteroGraphShardManager even for homogeneous graphs;
# sarlite returns a GraphShardManager, so the name stands for that class (isinstance checks
# and annotations keep working). Heterogeneous partitions are refused when loaded
# (NotImplementedError); they are a later issue.
HeteroGraphShardManager = GraphShardManager

__all__ = ["GraphShard", "GraphShardManager", "HeteroGraphShardManager"]
