"""A script switched by its import line whose helper module imports DGL's own dgl."""
import sarlite.dgl as dgl

import dropin_helper

dgl.distributed.initialize(None)
print(dropin_helper)
