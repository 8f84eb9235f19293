"""Rank 1 ends its script at once; rank 0 reads rows of a tensor rank 1 owns afterwards.

Under ``python script.py`` a script's globals live until the interpreter exits, so rank 1
still answers the read (DGL's one-sided reads, sarlite's exit hook waits for readers).
Prints ``{"rank": r, "rows": [...]}`` on rank 0.
"""
import argparse
import json
import time

import torch

import dgl

parser = argparse.ArgumentParser()
parser.add_argument("--part_config")
args = parser.parse_args()
dgl.distributed.initialize("ip_config.txt")
g = dgl.distributed.DistGraph("toy", part_config=args.part_config)
h = dgl.distributed.DistTensor((g.num_nodes(), 2), torch.float32, "h")
nodes = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool),
                                   g.get_partition_book(), force_even=False)
h[nodes] = torch.stack([nodes.float(), nodes.float()], 1)
g.barrier()
if g.rank() == 0:
    time.sleep(3)                          # rank 1 has left its script by now
    last = torch.tensor([g.num_nodes() - 1])       # owned by the last rank
    print(json.dumps({"rank": 0, "rows": h[last].tolist()}), flush=True)
