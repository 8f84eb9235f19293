"""``dgl.distributed.nn``: the distributed embedding table."""
from ..kv import DistEmbedding

__all__ = ["DistEmbedding"]
