"""``dgl.distributed.optim``: the sparse optimizers of :class:`~sarlite.DistEmbedding`."""
from ..kv import SparseAdagrad, SparseAdam

__all__ = ["SparseAdagrad", "SparseAdam"]
