"""sarlite: exact full-graph GNN training across torchrun workers with DGL layers."""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")

from .partition import (EdgePartitionPolicy, NodePartitionPolicy,  # noqa: E402
                        PartitionReport, RangePartitionBook, load_partition,
                        load_partition_book, partition_graph, partition_report)

__version__ = "0.1.0"

__all__ = ["EdgePartitionPolicy", "NodePartitionPolicy", "PartitionReport",
           "RangePartitionBook", "load_partition", "load_partition_book",
           "partition_graph", "partition_report"]
