"""DGL-compatible graph partitioning: assignment, the on-disk format, partition books."""
from .book import (DEFAULT_ETYPE, DEFAULT_NTYPE, EdgePartitionPolicy, NodePartitionPolicy,
                   RangePartitionBook)
from .files import load_partition, load_partition_book, read_part_config
from .report import PartitionReport, partition_report
from .writer import partition_graph

__all__ = ["DEFAULT_ETYPE", "DEFAULT_NTYPE", "EdgePartitionPolicy", "NodePartitionPolicy",
           "PartitionReport", "RangePartitionBook", "load_partition", "load_partition_book",
           "partition_graph", "partition_report", "read_part_config"]
