"""A helper module of a DGL script, with its own ``import dgl`` (as DGL's train_dist.py)."""
import dgl
import torch


def loader(g, nids, batch_size):
    sampler = dgl.dataloading.NeighborSampler([3, 3])
    return dgl.dataloading.DistNodeDataLoader(g, nids, sampler, batch_size=batch_size,
                                              shuffle=False, drop_last=False)


def model(in_feats, classes):
    import dgl.nn.pytorch as dglnn
    return torch.nn.ModuleList([dglnn.SAGEConv(in_feats, 8, "mean"),
                                dglnn.SAGEConv(8, classes, "mean")])
