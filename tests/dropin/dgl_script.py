"""A DGL 2.1 distributed training script as DGL's examples write it (no sarlite in it).

Run by tests/test_dropin.py under ``sarlite run`` / ``python -m sarlite.run``: two
epochs of GraphSAGE on DistNodeDataLoader batches plus a DistEmbedding trained by DGL's
SparseAdam; prints one JSON line per rank.
"""
import argparse
import json
import sys

import dgl
import torch
import torch.nn.functional as F
from dgl.distributed import DistEmbedding

import dropin_helper

parser = argparse.ArgumentParser()
parser.add_argument("--graph_name")
parser.add_argument("--ip_config")
parser.add_argument("--part_config")
parser.add_argument("--standalone", action="store_true")
parser.add_argument("--local_rank", type=int)
args = parser.parse_args()

dgl.distributed.initialize(args.ip_config)
if not args.standalone:
    torch.distributed.init_process_group(backend="gloo")
g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
pb = g.get_partition_book()
train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
emb = DistEmbedding(g.num_nodes(), 4, name="emb")
emb_opt = dgl.distributed.optim.SparseAdam([emb], lr=0.01)
layers = dropin_helper.model(g.ndata["feat"].shape[1] + 4, 3)
if not args.standalone:
    layers = torch.nn.parallel.DistributedDataParallel(layers)
opt = torch.optim.Adam(layers.parameters(), lr=0.01)
losses = []
for epoch in range(2):
    for input_nodes, seeds, blocks in dropin_helper.loader(g, train_nid, 8):
        h = torch.cat([g.ndata["feat"][input_nodes], emb(input_nodes)], 1)
        mods = layers.module if hasattr(layers, "module") else layers
        for layer, block in zip(mods, blocks):
            h = layer(block, h)
        loss = F.cross_entropy(h, g.ndata["label"][seeds])
        opt.zero_grad()
        loss.backward()
        opt.step()
        emb_opt.step()
        losses.append(round(loss.item(), 6))
g.barrier()
sys.stdout.write(json.dumps({"rank": g.rank(), "batches": len(losses),  # one write per line
                             "distgraph": type(g).__module__,
                             "loss": losses[-1] if losses else None}) + "\n")
