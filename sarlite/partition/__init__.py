"""DGL-compatible graph partitioning: assignment, the on-disk format, partition books."""
from .book import (DEFAULT_ETYPE, DEFAULT_NTYPE, EdgePartitionPolicy, NodePartitionPolicy,
                   RangePartitionBook)
from .data import PartitionData, ShardEdges, load_partition_data, partition_data_from
from .files import load_partition, load_partition_book, load_partition_feats, read_part_config
from .report import PartitionReport, partition_report
from .writer import partition_graph

__all__ = ["DEFAULT_ETYPE", "DEFAULT_NTYPE", "EdgePartitionPolicy", "NodePartitionPolicy",
           "PartitionData", "PartitionReport", "RangePartitionBook",
           "ShardEdges", "load_partition", "load_partition_book", "load_partition_data",
           "load_partition_feats", "partition_data_from", "partition_graph", "partition_report",
           "read_part_config"]
