"""The key-value layer: row-sharded tensors, embeddings and their sparse optimizers.

Every process is a torchrun worker that owns one partition and stores the rows of every
tensor that its partition owns; writes by global id are collectives over
``torch.distributed`` (no servers, no RPC), and so are reads, unless the store was made
with ``one_sided_reads=True`` (:mod:`sarlite.kv.one_sided`; the DGL facade's stores are).
See :mod:`sarlite.kv.store` for how the default store is set up.
"""
from .checkpoint import load_dist_tensors, save_dist_tensors
from .dist_tensor import DistTensor
from .embedding import DistEmbedding
from .optim import SparseAdagrad, SparseAdam, SparseOptimizer
from .store import KVStore, current_kvstore, get_kvstore, init_kvstore, same_partitioning

__all__ = ["DistEmbedding", "DistTensor", "KVStore", "SparseAdagrad", "SparseAdam",
           "SparseOptimizer", "current_kvstore", "get_kvstore", "init_kvstore",
           "load_dist_tensors", "same_partitioning", "save_dist_tensors"]
