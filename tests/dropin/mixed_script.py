"""A script switched by its import line that still takes DistEmbedding from DGL's own."""
import sarlite.dgl as dgl
from dgl.distributed import DistEmbedding

dgl.distributed.initialize(None)
print(DistEmbedding)
