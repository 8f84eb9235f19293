"""Node classification with GraphSAGE on sampled blocks, written like a DGL distributed
training script, on sarlite.

The graph is partitioned beforehand, one partition per worker, with DGL's data names
(``features``, ``labels``, ``train_mask``, ``val_mask``, ``test_mask``)::

    python -c "import sarlite; from sarlite.data import homophilous_graph as h; \
        g = h(num_nodes=5000, feat_dim=32, num_classes=4); \
        g.ndata['features'] = g.ndata.pop('feat'); g.ndata['labels'] = g.ndata.pop('label'); \
        sarlite.partition_graph(g, 'g', 2, 'parts')"
    torchrun --standalone --nproc_per_node 2 examples/dgl/node_classification.py \
        --graph_name g --part_config parts/g.json

The shape is that of DGL's distributed guide: ``initialize``, ``DistGraph``,
``node_split``, DGL's ``NeighborSampler``, a distributed node loader, DDP. What differs:
there are no servers (every worker is a trainer holding its partition; ``DistGraph``
joins the process group), and every loader gives every worker the same number of
batches, so a worker that ran out of seeds gets empty batches and still runs the step;
``dist.mean_loss`` keeps that step's loss finite and the gradients exact.
"""
import argparse
import time

import dgl
import dgl.nn as dglnn
import torch
import torch.distributed
import torch.nn.functional as F
from torch import nn

import sarlite.distributed as dist


class SAGE(nn.Module):
    """GraphSAGE over one block per layer."""

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int,
                 dropout: float):
        super().__init__()
        sizes = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList(dglnn.SAGEConv(a, b, "mean")
                                    for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def accuracy(model, g, nids, num_layers: int, batch_size: int) -> float:
    """Accuracy over every worker's ``nids`` with all neighbours. Collective."""
    model.eval()
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(num_layers)
    loader = dist.DistNodeDataLoader(g, nids, sampler, batch_size=batch_size)
    counts = torch.zeros(2)
    with torch.no_grad():
        for input_nodes, seeds, blocks in loader:
            pred = model(blocks, g.ndata["features"][input_nodes])
            labels = g.ndata["labels"][seeds].long()
            counts += torch.tensor([(pred.argmax(1) == labels).sum().item(), seeds.numel()])
    torch.distributed.all_reduce(counts)
    model.train()
    return (counts[0] / counts[1].clamp(min=1)).item()


def main(args) -> None:
    dist.initialize(args.ip_config)
    g = dist.DistGraph(args.graph_name, part_config=args.part_config)
    rank = g.rank()
    book = g.get_partition_book()
    train_nids = dist.node_split(g.ndata["train_mask"], book, force_even=True)
    val_nids = dist.node_split(g.ndata["val_mask"], book, force_even=True)
    test_nids = dist.node_split(g.ndata["test_mask"], book, force_even=True)
    labels = g.ndata["labels"][torch.arange(g.num_nodes())]
    num_classes = int(labels.max()) + 1
    fanouts = [int(f) for f in args.fan_out.split(",")]

    torch.manual_seed(args.seed)
    dgl.seed(args.seed + rank)              # sampling differs per worker, reproducibly
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dist.DistNodeDataLoader(g, train_nids, sampler, batch_size=args.batch_size,
                                     shuffle=True, drop_last=False)
    model = SAGE(g.ndata["features"].shape[1], args.num_hidden, num_classes, len(fanouts),
                 args.dropout)
    model = nn.parallel.DistributedDataParallel(model)      # same start, averaged grads
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    epoch_times = []
    for epoch in range(args.num_epochs):
        tic = time.time()
        totals = torch.zeros(2)                             # loss sum, seed count
        for input_nodes, seeds, blocks in loader:           # same count on every worker
            x = g.ndata["features"][input_nodes]            # collective pulls
            y = g.ndata["labels"][seeds].long()
            losses = F.cross_entropy(model(blocks, x), y, reduction="none")
            loss = dist.mean_loss(losses, model)            # 0, not nan, when empty
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            totals += torch.tensor([losses.sum().item(), losses.numel()])
        epoch_times.append(time.time() - tic)
        torch.distributed.all_reduce(totals)
        line = f"Epoch {epoch:03d} | Loss {(totals[0] / totals[1]).item():.4f}"
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.num_epochs:
            val = accuracy(model, g, val_nids, len(fanouts), args.batch_size_eval)
            line += f" | Val Acc {val:.4f}"
        if rank == 0:
            print(f"{line} | Time {epoch_times[-1]:.3f}s", flush=True)
    test = accuracy(model, g, test_nids, len(fanouts), args.batch_size_eval)
    steady = epoch_times[1:] or epoch_times
    if rank == 0:
        print(f"Summary | TrainEpochTime(mean) {sum(steady) / len(steady):.4f} "
              f"| TestAccuracy {test:.4f}", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Distributed GraphSAGE on sarlite")
    parser.add_argument("--graph_name", type=str, required=True)
    parser.add_argument("--part_config", type=str, required=True)
    parser.add_argument("--ip_config", type=str, default=None, help="ignored (no servers)")
    parser.add_argument("--num_epochs", type=int, default=10)
    parser.add_argument("--num_hidden", type=int, default=64)
    parser.add_argument("--fan_out", type=str, default="10,10")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--batch_size_eval", type=int, default=1024)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
