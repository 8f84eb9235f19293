"""Partition a graph with sarlite and read one partition back, with sarlite and with DGL.

    python examples/partition_graph.py [OUT_DIR]
"""
import sys

import dgl

import sarlite
from sarlite.data import homophilous_graph

out = sys.argv[1] if len(sys.argv) > 1 else "out/example_partitions"
g = homophilous_graph(num_nodes=5000, avg_degree=10, seed=0)
orig_nids, orig_eids = sarlite.partition_graph(g, "example", 2, out, return_mapping=True)
print(sarlite.partition_report(f"{out}/example.json"))

graph, node_feats, edge_feats, book, *_ = sarlite.load_partition(f"{out}/example.json", 0)
lo, hi = book.node_ranges[0].tolist()
assert (node_feats["_N/feat"] == g.ndata["feat"][orig_nids[lo:hi]]).all()
same = dgl.distributed.load_partition(f"{out}/example.json", 0)   # DGL reads it too
print(f"part 0 owns nodes [{lo}, {hi}); DGL sees {same[0].num_nodes()} nodes with halo")
