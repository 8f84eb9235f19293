"""``dgl.distributed``'s public names for sarlite: a DGL distributed training script
switches to sarlite by changing ``import dgl.distributed as dist`` into
``import sarlite.distributed as dist`` (launched with torchrun instead of DGL's launch.py).

The objects are sarlite's own (same parameters as DGL 2.1's, in DGL's order; sarlite's
extras keyword-only after them), except :class:`DistGraph`, ``node_split`` and
``edge_split``, which first join the process group when the script has not (see
:func:`initialize`). There are only trainers: every distributed operation is a collective
that all ranks call in the same order (sarlite's ``mean_loss`` and ``is_empty_batch`` help
with the empty batches its loaders yield to keep the ranks in step). The names of DGL's
servers, RPC, shared memory and GraphBolt are not provided; asking for one raises
:class:`UnsupportedError` saying why (listed in ``docs/from-dgl.md`` and
:data:`UNSUPPORTED`).
"""
from ..kv import DistEmbedding, DistTensor
from ..partition import (DEFAULT_ETYPE, DEFAULT_NTYPE, EdgePartitionPolicy,
                         NodePartitionPolicy, RangePartitionBook, load_partition,
                         load_partition_book, load_partition_feats, partition_graph)
from ..partition.book import PartitionPolicy
from ..sampling import (DistDataLoader, DistEdgeDataLoader, DistNodeDataLoader,
                        in_subgraph, is_empty_batch, mean_loss, sample_etype_neighbors,
                        sample_neighbors)
from . import nn, optim
from .context import MAX_QUEUE_SIZE, ensure_process_group, exit_client, initialize
from .graph import DistGraph, edge_split, find_edges, node_split
from .mixing import MixedDGLError
from .unsupported import UNSUPPORTED, UnsupportedError, unsupported

#: DGL's abstract partition book; sarlite's one kind of book is the range book
GraphPartitionBook = RangePartitionBook

__all__ = ["DEFAULT_ETYPE", "DEFAULT_NTYPE", "DistDataLoader", "DistEdgeDataLoader",
           "DistEmbedding", "DistGraph", "DistNodeDataLoader", "DistTensor",
           "EdgePartitionPolicy", "GraphPartitionBook", "MAX_QUEUE_SIZE",
           "MixedDGLError", "NodePartitionPolicy", "PartitionPolicy", "RangePartitionBook",
           "UNSUPPORTED", "UnsupportedError", "edge_split", "ensure_process_group", "exit_client",
           "find_edges", "in_subgraph", "initialize", "is_empty_batch", "load_partition",
           "load_partition_book", "load_partition_feats", "mean_loss", "nn", "node_split",
           "optim", "partition_graph", "sample_etype_neighbors", "sample_neighbors"]


def __getattr__(name: str):
    if name in UNSUPPORTED:
        raise unsupported(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
