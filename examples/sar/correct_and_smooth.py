"""Correct and Smooth (Huang et al., 2021) written against IntelLabs SAR's API, on sarlite.

An MLP with ``sar.DistributedBN1D`` (statistics over every worker's nodes) learns from
node features alone; two label propagations over the partitioned graph then spread the
training residuals ("correct") and the labels ("smooth"). Propagation is
``update_all(copy_u, sum)`` on the full graph of ``sar.construct_full_graph``, exact
across workers. Start one process per partition:

    python examples/sar/partition_graph.py --partition-out-path out/sar
    for r in 0 1; do
        MASTER_ADDR=127.0.0.1 python examples/sar/correct_and_smooth.py \
            --partitioning-json-file out/sar/synthetic.json --rank $r --world-size 2 &
    done; wait

Rank 0 ends with ``final: mlp_test=... cs_test=... epoch=...s``.
"""
from argparse import ArgumentParser
import copy
import time

import dgl.function as fn
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import sarlite.sar as sar
from sarlite.sar.distributed_bn import DistributedBN1D, MeanOp, VarOp

parser = ArgumentParser(description="MLP + Correct and Smooth on a partitioned graph")
parser.add_argument("--partitioning-json-file", default="", type=str)
parser.add_argument("--ip-file", default="./ip_file", type=str)
parser.add_argument("--backend", default="gloo", type=str, choices=["gloo", "nccl"])
parser.add_argument("--master-port", default=12345, type=int)
parser.add_argument("--rank", default=0, type=int)
parser.add_argument("--world-size", default=2, type=int)
parser.add_argument("--hidden-layer-dim", default=64, type=int)
parser.add_argument("--dropout", default=0.3, type=float)
parser.add_argument("--lr", default=1e-2, type=float)
parser.add_argument("--epochs", default=60, type=int)
parser.add_argument("--correction-layers", default=20, type=int)
parser.add_argument("--correction-alpha", default=0.8, type=float)
parser.add_argument("--smoothing-layers", default=20, type=int)
parser.add_argument("--smoothing-alpha", default=0.8, type=float)


class MLP(nn.Module):
    def __init__(self, in_dim, hidden, out_dim, dropout):
        super().__init__()
        self.hidden = nn.Linear(in_dim, hidden)
        self.norm = DistributedBN1D(hidden)
        self.out = nn.Linear(hidden, out_dim)
        self.dropout = dropout

    def forward(self, x):
        h = self.norm(F.relu(self.hidden(x)))
        return F.log_softmax(self.out(F.dropout(h, self.dropout, self.training)), dim=-1)


def standardize(x, eps=1e-5):
    """Zero mean and unit variance per column over the nodes of every worker."""
    mean = MeanOp.apply(x)
    return (x - mean) / torch.sqrt(VarOp.apply(x) - mean ** 2 + eps)


@torch.no_grad()
def propagate(graph, y, layers, alpha, clamp=None):
    """``layers`` steps of ``y <- alpha * D^-1/2 A D^-1/2 y + (1 - alpha) * y0``."""
    norm = graph.in_degrees().float().clamp(min=1).pow(-0.5).unsqueeze(1)
    start = (1 - alpha) * y
    for _ in range(layers):
        with graph.local_scope():
            graph.srcdata["h"] = y * norm
            graph.update_all(fn.copy_u("h", "m"), fn.sum("m", "h"))
            y = start + alpha * norm * graph.dstdata["h"]
        if clamp is not None:
            y = y.clamp(*clamp)
    return y


def accuracy(prediction, labels, idx):
    """Global accuracy over the nodes ``idx`` of every worker (a collective)."""
    stats = torch.tensor([float((prediction[idx].argmax(1) == labels[idx]).sum()),
                          float(idx.numel())])
    sar.comm.all_reduce(stats, dist.ReduceOp.SUM)
    return (stats[0] / stats[1]).item()


def main():
    args = parser.parse_args()
    master = sar.nfs_ip_init(args.rank, args.ip_file)
    sar.initialize_comms(args.rank, args.world_size, master, args.backend,
                         master_port_number=args.master_port)
    partition = sar.load_dgl_partition_data(args.partitioning_json_file, args.rank)
    split = {name: sar.suffix_key_lookup(partition.node_features, f"{name}_mask")
             .nonzero().view(-1) for name in ("train", "val", "test")}
    labels = sar.suffix_key_lookup(partition.node_features, "labels").long()
    num_classes = labels.max() + 1
    sar.comm.all_reduce(num_classes, dist.ReduceOp.MAX)
    features = standardize(sar.suffix_key_lookup(partition.node_features, "features"))
    graph = sar.construct_full_graph(partition)
    del partition

    torch.manual_seed(0)
    model = MLP(features.shape[1], args.hidden_layer_dim, int(num_classes), args.dropout)
    sar.sync_params(model)
    n_train = torch.tensor([split["train"].numel()])
    sar.comm.all_reduce(n_train, dist.ReduceOp.SUM)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    best, best_val, times = model, -1.0, []
    for epoch in range(args.epochs):
        start = time.time()
        model.train()
        loss = F.nll_loss(model(features)[split["train"]], labels[split["train"]],
                          reduction="sum") / int(n_train)
        optimizer.zero_grad()
        loss.backward()
        sar.gather_grads(model)
        optimizer.step()
        times.append(time.time() - start)
        model.eval()
        with torch.no_grad():
            val_acc = accuracy(model(features), labels, split["val"])
        if val_acc > best_val:
            best, best_val = copy.deepcopy(model), val_acc
        if args.rank == 0:
            print(f"epoch {epoch:3d} | loss {loss.item():.4f} | valid {val_acc:.4f}",
                  flush=True)

    best.eval()
    with torch.no_grad():
        y_soft = best(features).exp()
    mlp_test = accuracy(y_soft, labels, split["test"])

    train = split["train"]
    truth = F.one_hot(labels[train], int(num_classes)).float()
    error = torch.zeros_like(y_soft)
    error[train] = truth - y_soft[train]
    smoothed = propagate(graph, error, args.correction_layers, args.correction_alpha,
                         clamp=(-1.0, 1.0))
    sigma = error[train].abs().sum().reshape(1)                  # autoscale, as C&S does
    sar.comm.all_reduce(sigma, dist.ReduceOp.SUM)
    scale = (sigma / int(n_train)) / smoothed.abs().sum(1, keepdim=True)
    scale[scale.isinf() | (scale > 1000)] = 1.0
    corrected = y_soft + scale * smoothed
    corrected[corrected.isnan()] = y_soft[corrected.isnan()]
    corrected[train] = truth
    final = propagate(graph, corrected, args.smoothing_layers, args.smoothing_alpha)
    cs_test = accuracy(final, labels, split["test"])
    if args.rank == 0:
        epoch_time = sorted(times)[len(times) // 2]
        print(f"final: mlp_test={mlp_test:.4f} cs_test={cs_test:.4f} "
              f"epoch={epoch_time:.3f}s", flush=True)


if __name__ == "__main__":
    main()
