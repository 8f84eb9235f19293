"""Link prediction with GraphSAGE and uniform negative sampling, written like a DGL
distributed training script, on sarlite.

The graph is partitioned beforehand, one partition per worker, with node data
``features`` and an edge mask ``test_mask`` marking held-out edges (mark both directions
of an undirected edge): they are never message-passing edges, neither in training nor in
evaluation, and evaluation scores them against uniform negative pairs (AUC)::

    torchrun --standalone --nproc_per_node 2 examples/dgl/link_prediction.py \
        --graph_name g --part_config parts/g.json

Each worker trains on its share of the other edges (``edge_split``) with DGL's
``NeighborSampler`` wrapped by ``as_edge_prediction_sampler`` (excluding the batch's own
edges and every held-out edge from its blocks) and ``negative_sampler.Uniform``, through
``DistEdgeDataLoader``; every worker gets the same number of batches (a worker that ran out
of edges gets empty batches and still runs the step: ``dist.mean_loss`` keeps its loss
finite and the gradients exact); gradients are averaged by DDP.
"""
import argparse
import time

import dgl
import dgl.function as fn
import dgl.nn as dglnn
import torch
import torch.distributed
import torch.nn.functional as F
from torch import nn

import sarlite.distributed as dist


class SAGE(nn.Module):
    """GraphSAGE node embeddings over one block per layer, and a score per node pair:
    a linear map of the product of the two embeddings."""

    def __init__(self, in_feats: int, hidden: int, num_layers: int):
        super().__init__()
        sizes = [in_feats] + [hidden] * num_layers
        self.layers = nn.ModuleList(dglnn.SAGEConv(a, b, "mean")
                                    for a, b in zip(sizes[:-1], sizes[1:]))
        self.score = nn.Linear(hidden, 1)

    def forward(self, blocks, x, pair_graph, neg_graph):
        """Scores of the edges of ``pair_graph`` and of ``neg_graph`` (over the nodes of
        the last block's output)."""
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return self._scores(pair_graph, h), self._scores(neg_graph, h)

    def _scores(self, pair_graph, h) -> torch.Tensor:
        with pair_graph.local_scope():
            pair_graph.ndata["h"] = h
            pair_graph.apply_edges(fn.u_mul_v("h", "h", "product"))
            return self.score(pair_graph.edata["product"]).reshape(-1)


def pair_losses(model, g, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair binary cross-entropy of one loader batch, with the positive and negative
    scores. Collective (the feature pull)."""
    input_nodes, pair_graph, neg_graph, blocks = batch
    pos, neg = model(blocks, g.ndata["features"][input_nodes], pair_graph, neg_graph)
    logits = torch.cat([pos, neg])
    targets = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none"), pos, neg


def auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Chance that a positive pair scores above a negative one (ties count half)."""
    if pos.numel() == 0 or neg.numel() == 0:
        return float("nan")
    above = (pos[:, None] > neg[None, :]).float().mean()
    ties = (pos[:, None] == neg[None, :]).float().mean()
    return (above + 0.5 * ties).item()


def evaluate(model, g, test_eids, held_out, num_layers: int, batch_size: int) -> float:
    """AUC of every worker's held-out edges against uniform negatives. Collective."""
    model.eval()
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.MultiLayerFullNeighborSampler(num_layers), exclude=held_out,
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(1))
    loader = dist.DistEdgeDataLoader(g, test_eids, sampler, batch_size=batch_size)
    pos, neg = [], []
    with torch.no_grad():
        for batch in loader:
            _, p, n = pair_losses(model, g, batch)
            pos.append(p)
            neg.append(n)
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, (torch.cat(pos), torch.cat(neg)))
    model.train()
    return auc(torch.cat([p for p, _ in gathered]), torch.cat([n for _, n in gathered]))


def main(args) -> None:
    dist.initialize(args.ip_config)
    g = dist.DistGraph(args.graph_name, part_config=args.part_config)
    rank = g.rank()
    book = g.get_partition_book()
    test_mask = g.edata["test_mask"][torch.arange(g.num_edges())]   # every worker: all
    held_out = test_mask.nonzero().squeeze(1)
    train_eids = dist.edge_split(~test_mask, book, force_even=True)
    test_eids = dist.edge_split(test_mask, book, force_even=True)
    fanouts = [int(f) for f in args.fan_out.split(",")]

    torch.manual_seed(args.seed)
    dgl.seed(args.seed + rank)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(fanouts),
        exclude=lambda eids: torch.cat([eids, held_out]),   # the batch's and held-out edges
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(args.num_negs))
    loader = dist.DistEdgeDataLoader(g, train_eids, sampler, batch_size=args.batch_size,
                                     shuffle=True)
    model = nn.parallel.DistributedDataParallel(
        SAGE(g.ndata["features"].shape[1], args.num_hidden, len(fanouts)))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    epoch_times = []
    for epoch in range(args.num_epochs):
        tic = time.time()
        totals = torch.zeros(2)                             # loss sum, pair count
        for batch in loader:                                # same count on every worker
            losses, _, _ = pair_losses(model, g, batch)
            loss = dist.mean_loss(losses, model)            # 0, not nan, when empty
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            totals += torch.tensor([losses.sum().item(), losses.numel()])
        epoch_times.append(time.time() - tic)
        torch.distributed.all_reduce(totals)
        if rank == 0:
            print(f"Epoch {epoch:03d} | Loss {(totals[0] / totals[1]).item():.4f} "
                  f"| Time {epoch_times[-1]:.3f}s", flush=True)
    test_auc = evaluate(model, g, test_eids, held_out, len(fanouts), args.batch_size_eval)
    steady = epoch_times[1:] or epoch_times
    if rank == 0:
        print(f"Summary | TrainEpochTime(mean) {sum(steady) / len(steady):.4f} "
              f"| TestAUC {test_auc:.4f}", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Distributed GraphSAGE link prediction "
                                                 "on sarlite")
    parser.add_argument("--graph_name", type=str, required=True)
    parser.add_argument("--part_config", type=str, required=True)
    parser.add_argument("--ip_config", type=str, default=None, help="ignored (no servers)")
    parser.add_argument("--num_epochs", type=int, default=5)
    parser.add_argument("--num_hidden", type=int, default=32)
    parser.add_argument("--fan_out", type=str, default="10,10")
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--batch_size_eval", type=int, default=1024)
    parser.add_argument("--num_negs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
