"""sarlite: exact full-graph GNN training across torchrun workers with DGL layers."""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")

# The DGL start-up hook (SARLITE_DGL_HOOK; see _sarlite_dgl_hook.py). An installed sarlite
# runs it at interpreter start-up; importing it here covers a checkout used from
# PYTHONPATH, where no .pth file runs, when sarlite is imported before dgl.
import _sarlite_dgl_hook  # noqa: E402,F401

from .comm import all_reduce_gradients, finalize, init, sync_params  # noqa: E402
from .core import (DistributedBatchNorm1d, DistributedBlock,  # noqa: E402
                   GraphShardManager, HeteroBatchNorm1d, HeteroGraphShardManager,
                   construct_full_graph, construct_mfgs, edge_softmax,
                   install_dgl_dispatch, message_has_parameters, uninstall_dgl_dispatch)
from .partition import (EdgePartitionPolicy, NodePartitionPolicy,  # noqa: E402
                        PartitionData, PartitionReport, RangePartitionBook, load_partition,
                        load_partition_book, load_partition_data, load_partition_feats,
                        partition_graph, partition_report)
from .kv import (DistEmbedding, DistTensor, KVStore, SparseAdagrad,  # noqa: E402
                 SparseAdam)
from .sampling import (DistNeighborSampler, DistNodeDataLoader,  # noqa: E402
                       in_subgraph, sample_neighbors)
# one implementation of DGL's set-up: initialize() checks the launcher and the first
# collective (DistGraph(...), node_split) joins the process group (sarlite.distributed)
from .distributed import (DistGraph, edge_split, initialize,  # noqa: E402
                          node_split)

__version__ = "0.1.0"

__all__ = ["DistEmbedding", "DistGraph", "DistNeighborSampler", "DistNodeDataLoader", "DistTensor",
           "DistributedBatchNorm1d", "DistributedBlock", "EdgePartitionPolicy",
           "GraphShardManager", "HeteroBatchNorm1d", "HeteroGraphShardManager", "KVStore", "NodePartitionPolicy", "PartitionData",
           "PartitionReport", "RangePartitionBook", "SparseAdagrad", "SparseAdam",
           "all_reduce_gradients", "construct_full_graph", "construct_mfgs", "edge_softmax",
           "edge_split", "finalize", "in_subgraph", "init", "initialize", "install_dgl_dispatch",
           "load_partition", "load_partition_book", "load_partition_data", "load_partition_feats",
           "message_has_parameters", "node_split", "partition_graph", "partition_report",
           "sample_neighbors", "sync_params", "uninstall_dgl_dispatch"]
