"""sarlite: exact full-graph GNN training across torchrun workers with DGL layers."""
import os

os.environ.setdefault("DGLBACKEND", "pytorch")

# The DGL start-up hook (SARLITE_DGL_HOOK; see _sarlite_dgl_hook.py). An installed sarlite
# runs it at interpreter start-up; importing it here covers a checkout used from
# PYTHONPATH, where no .pth file runs, when sarlite is imported before dgl.
import _sarlite_dgl_hook  # noqa: E402,F401


def _check_torch_numpy() -> None:
    """Refuse torch < 2.3 beside numpy 2, with one error naming the way out.

    torch 2.2's wheels were built against numpy 1.x: beside numpy 2 they cannot exchange
    arrays (``torch.from_numpy`` raises "Numpy is not available"), so partitioning and
    every reader would fail later, far from the cause. pip can produce this pair (sarlite
    admits both ranges, and other packages may ask for numpy 2).
    """
    import numpy
    import torch
    from packaging.version import Version
    if Version(torch.__version__).release < (2, 3) and Version(numpy.__version__).major >= 2:
        raise ImportError(f"sarlite: torch {torch.__version__} was built for numpy 1.x and "
                          f"cannot use numpy {numpy.__version__}; install numpy<2 "
                          f"(pip install 'numpy>=1.24,<2') or torch>=2.3")


_check_torch_numpy()

from .comm import all_reduce_gradients, finalize, init, sync_params  # noqa: E402
from .core import (DistributedBatchNorm1d, DistributedBlock,  # noqa: E402
                   GraphShardManager, HeteroGraphShardManager,
                   construct_full_graph, construct_mfgs, edge_softmax,
                   install_dgl_dispatch, message_has_parameters, uninstall_dgl_dispatch)
from .partition import (EdgePartitionPolicy, NodePartitionPolicy,  # noqa: E402
                        PartitionData, PartitionReport, RangePartitionBook, load_partition,
                        load_partition_book, load_partition_data, load_partition_feats,
                        partition_graph, partition_report)
from .kv import (DistEmbedding, DistTensor, KVStore, SparseAdagrad,  # noqa: E402
                 SparseAdam)
from .sampling import (DistNeighborSampler, DistNodeDataLoader,  # noqa: E402
                       edge_split, in_subgraph, node_split, sample_neighbors)

from . import distributed  # noqa: E402,F401  (the DGL facade, under its own name)

__version__ = "0.1.0"

__all__ = ["DistEmbedding", "DistNeighborSampler", "DistNodeDataLoader", "DistTensor",
           "DistributedBatchNorm1d", "DistributedBlock", "EdgePartitionPolicy",
           "GraphShardManager", "HeteroGraphShardManager", "KVStore", "NodePartitionPolicy",
           "PartitionData",
           "PartitionReport", "RangePartitionBook", "SparseAdagrad", "SparseAdam",
           "all_reduce_gradients", "construct_full_graph", "construct_mfgs", "edge_softmax",
           "edge_split", "finalize", "in_subgraph", "init", "install_dgl_dispatch",
           "load_partition", "load_partition_book", "load_partition_data", "load_partition_feats",
           "message_has_parameters", "node_split", "partition_graph", "partition_report",
           "sample_neighbors", "sync_params", "uninstall_dgl_dispatch"]


_MOVED = {"DistGraph": "sarlite.distributed.DistGraph (DGL's: joins the process group, "
                       "one-sided reads) or sarlite.sampling.DistGraph (sarlite's: "
                       "collective reads)",
          "initialize": "sarlite.distributed.initialize (DGL's) or sarlite.init"}


def __getattr__(name: str):
    if name in _MOVED:
        raise AttributeError(f"sarlite.{name} is not in sarlite's own namespace: use "
                             f"{_MOVED[name]}")
    raise AttributeError(f"module 'sarlite' has no attribute {name!r}")
