"""Every way a DGL script reaches ``dgl.distributed``: prints which module each resolves to."""
import json

import dgl
import dgl.distributed
import dgl.distributed as dist
import dgl.function as fn
import dgl.distributed.optim
from dgl import distributed as from_dgl
from dgl.distributed import DistEmbedding, DistGraph, node_split
from dgl.distributed.nn import DistEmbedding as NNDistEmbedding
from dgl.distributed.optim import SparseAdam
from dgl.dataloading import DistNodeDataLoader, NeighborSampler

import dropin_helper


def where(obj):
    return getattr(obj, "__name__", None) if isinstance(obj, type(json)) else obj.__module__


print(json.dumps({
    "dgl.distributed": where(dgl.distributed),
    "import dgl.distributed as dist": where(dist),
    "from dgl import distributed": where(from_dgl),
    "DistGraph": where(DistGraph),
    "node_split": where(node_split),
    "DistEmbedding": where(DistEmbedding),
    "nn.DistEmbedding": where(NNDistEmbedding),
    "optim.SparseAdam": where(SparseAdam),
    "dgl.distributed.optim.SparseAdam": where(dgl.distributed.optim.SparseAdam),
    "DistNodeDataLoader": where(DistNodeDataLoader),
    "dgl.dataloading.DistEdgeDataLoader": where(dgl.dataloading.DistEdgeDataLoader),
    "helper's dgl.distributed": where(dropin_helper.dgl.distributed),
    "NeighborSampler": where(NeighborSampler),
    "dgl.nn": where(dgl.nn),
    "dgl.function": where(fn),
    "dgl.DGLGraph": where(dgl.DGLGraph),
    "dgl.__version__": dgl.__version__,
}))
