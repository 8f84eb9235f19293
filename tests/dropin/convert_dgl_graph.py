"""SAR's convert_dist_graph on DGL's own standalone DistGraph; prints one JSON line.

``convert_dgl_graph.py PART_CONFIG GRAPH_NAME``"""
import json
import sys

import dgl

import sarlite.sar as sar

config, name = sys.argv[1:3]
dgl.distributed.initialize(None)
dist_g = dgl.distributed.DistGraph(name, part_config=config)
g = sar.convert_dist_graph(dist_g)
sys.stdout.write(json.dumps({
    "dgl": [dist_g.num_nodes(), dist_g.num_edges(), dist_g.ntypes, dist_g.etypes],
    "sar": [g.num_nodes(), g.num_edges(), g.ntypes, g.etypes],
    "type": type(dist_g).__module__}) + "\n")
