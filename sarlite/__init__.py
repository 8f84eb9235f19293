"""sarlite: exact full-graph GNN training across torchrun workers with DGL layers."""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")

from .comm import all_reduce_gradients, finalize, init, sync_params  # noqa: E402
from .core import (DistributedBatchNorm1d, DistributedBlock,  # noqa: E402
                   GraphShardManager, construct_full_graph, construct_mfgs, edge_softmax,
                   install_dgl_dispatch, message_has_parameters, uninstall_dgl_dispatch)
from .partition import (EdgePartitionPolicy, NodePartitionPolicy,  # noqa: E402
                        PartitionData, PartitionReport, RangePartitionBook, load_partition,
                        load_partition_book, load_partition_data, partition_graph,
                        partition_report)
from .kv import (DistEmbedding, DistTensor, KVStore, SparseAdagrad,  # noqa: E402
                 SparseAdam)
from .sampling import (DistGraph, DistNeighborSampler, DistNodeDataLoader,  # noqa: E402
                       edge_split, in_subgraph, node_split, sample_neighbors)

__version__ = "0.1.0"


def initialize(ip_config: str | None = None, backend: str | None = None,
               timeout: float | None = None, device: str | None = None) -> tuple[int, int]:
    """``dgl.distributed.initialize`` spelled for sarlite: the same as :func:`init`.

    ``ip_config`` is accepted so that DGL scripts run unchanged, and ignored: torchrun's
    environment describes the process group. Collective; see :func:`init`.
    """
    return init(backend=backend, timeout=timeout, device=device)


__all__ = ["DistEmbedding", "DistGraph", "DistNeighborSampler",
           "DistNodeDataLoader", "DistTensor", "DistributedBatchNorm1d", "DistributedBlock",
           "EdgePartitionPolicy", "GraphShardManager", "KVStore", "NodePartitionPolicy",
           "PartitionData", "PartitionReport", "RangePartitionBook", "SparseAdagrad",
           "SparseAdam", "all_reduce_gradients", "construct_full_graph", "construct_mfgs",
           "edge_softmax", "edge_split", "finalize", "in_subgraph", "init", "initialize",
           "install_dgl_dispatch", "load_partition", "load_partition_book",
           "load_partition_data", "message_has_parameters", "node_split", "partition_graph",
           "partition_report", "sample_neighbors", "sync_params", "uninstall_dgl_dispatch"]
