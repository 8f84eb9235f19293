"""Every loader and store of DGL's distributed API in one process without a launcher
(DGL's standalone mode), on a one-part partitioning; prints one JSON line.

``every_loader.py PART_CONFIG GRAPH_NAME NTYPE`` (the node type to sample from)."""
import json
import sys

import dgl
import torch

config, name, ntype = sys.argv[1:4]
dgl.distributed.initialize(None)
g = dgl.distributed.DistGraph(name, part_config=config)
hetero = len(g.ntypes) > 1


def typed(ids):
    return {ntype: ids} if hetero else ids


out = {"rank": g.rank(), "group": torch.distributed.is_initialized()}
pb = g.get_partition_book()
mask = torch.zeros(g.num_nodes(ntype), dtype=torch.bool)
mask[::2] = True
nids = dgl.distributed.node_split(mask, pb, ntype=ntype)
out["node_split"] = len(nids)
frontier = dgl.distributed.sample_neighbors(g, typed(nids[:5]), 3)
out["sample_neighbors"] = frontier.num_edges()
frontier = dgl.distributed.sample_etype_neighbors(g, typed(nids[:5]), 3)
out["sample_etype_neighbors"] = frontier.num_edges()
sampler = dgl.dataloading.NeighborSampler([4, 4])
batches = list(dgl.dataloading.DistNodeDataLoader(g, typed(nids), sampler, batch_size=8))
out["node_loader"] = len(batches)
etype = g.canonical_etypes[0]
eids = torch.arange(g.num_edges(etype))
edge_sampler = dgl.dataloading.as_edge_prediction_sampler(
    sampler, negative_sampler=dgl.dataloading.negative_sampler.Uniform(1))
edge_loader = dgl.dataloading.DistEdgeDataLoader(
    g, {etype: eids} if hetero else eids, edge_sampler, batch_size=32)
out["edge_loader"] = sum(1 for _ in edge_loader)
out["dataloader"] = sum(1 for _ in dgl.distributed.DistDataLoader(
    torch.arange(50), batch_size=10, collate_fn=lambda ids: ids))
emb = dgl.distributed.DistEmbedding(g.num_nodes(ntype), 4, name="emb")
optimizer = dgl.distributed.optim.SparseAdam([emb], lr=0.1)
before = emb(torch.arange(3)).detach().clone()
emb(torch.arange(3)).sum().backward()
optimizer.step()
out["embedding_moved"] = bool((emb(torch.arange(3)) != before).all())
t = dgl.distributed.DistTensor((g.num_nodes(ntype), 2), torch.float32, name="t")
t[torch.arange(4)] = torch.ones(4, 2)
out["tensor"] = t[torch.arange(5)].sum().item()
sys.stdout.write(json.dumps(out) + "\n")
