"""Where ``sarlite.core`` found the partition loader; it lives in the partition layer now.

:class:`PartitionData`, :class:`ShardEdges` and :func:`load_partition_data` are defined in
:mod:`sarlite.partition.data` (one parser of partition files for training and sampling);
this module re-exports the same objects.
"""
from ..partition.data import PartitionData, ShardEdges, load_partition_data

__all__ = ["PartitionData", "ShardEdges", "load_partition_data"]
