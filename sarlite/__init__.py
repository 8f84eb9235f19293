"""sarlite: exact full-graph GNN training across torchrun workers with DGL layers."""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")

from .comm import all_reduce_gradients, finalize, init, sync_params  # noqa: E402
from .core import (Config, DistributedBatchNorm1d, DistributedBlock,  # noqa: E402
                   GraphShardManager, PartitionData, construct_full_graph, construct_mfgs,
                   edge_softmax,
                   install_edge_softmax, load_partition_data, message_has_parameters,
                   uninstall_edge_softmax)
from .partition import (EdgePartitionPolicy, NodePartitionPolicy,  # noqa: E402
                        PartitionReport, RangePartitionBook, load_partition,
                        load_partition_book, partition_graph, partition_report)

__version__ = "0.1.0"

__all__ = ["Config", "DistributedBatchNorm1d", "DistributedBlock", "EdgePartitionPolicy",
           "GraphShardManager", "NodePartitionPolicy", "PartitionData", "PartitionReport",
           "RangePartitionBook", "all_reduce_gradients", "construct_full_graph", "construct_mfgs",
           "edge_softmax", "finalize", "init", "install_edge_softmax", "load_partition",
           "load_partition_book", "load_partition_data", "message_has_parameters",
           "partition_graph", "partition_report", "sync_params", "uninstall_edge_softmax"]
