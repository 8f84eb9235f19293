"""Full-graph GraphSAGE training with sarlite: an unmodified dgl.nn model on N workers.

    sarlite partition --num-nodes 20000 --num-parts 2 --out out/parts
    torchrun --nproc_per_node=2 examples/train_sage_sar.py out/parts/synthetic.json [MODE]

MODE is sar (default), sa or one-shot. Every worker prints nothing but rank 0's epochs.
"""
import sys

import dgl.nn as dglnn
import torch
import torch.nn.functional as F

import sarlite


class SAGE(torch.nn.Module):
    def __init__(self, in_dim, hidden, num_classes):
        super().__init__()
        self.conv1 = dglnn.SAGEConv(in_dim, hidden, "mean")
        self.conv2 = dglnn.SAGEConv(hidden, num_classes, "mean")

    def forward(self, g, x):
        return self.conv2(g, F.relu(self.conv1(g, x)))


def main(part_config: str, mode: str) -> None:
    rank, _ = sarlite.init()
    data = sarlite.load_partition_data(part_config)           # this worker's partition
    g = sarlite.construct_full_graph(data, mode=mode)         # stands in for a DGLGraph
    x, y = data.node_features["feat"], data.node_features["label"]
    train, test = data.node_features["train_mask"], data.node_features["test_mask"]
    num_train = sarlite.comm.all_reduce(train.sum().float(), kind="example")
    num_classes = sarlite.comm.all_reduce(y.max().reshape(1) + 1, "max", kind="example")
    torch.manual_seed(0)
    model = SAGE(x.shape[1], 64, int(num_classes))
    sarlite.sync_params(model)                                # same start on every rank
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(30):
        logits = model(g, x)
        loss = F.cross_entropy(logits[train], y[train], reduction="sum") / num_train
        optimizer.zero_grad()
        loss.backward()
        sarlite.all_reduce_gradients(model)                   # sum over workers
        optimizer.step()
        hits = (logits.argmax(1)[test] == y[test]).sum().float()
        correct, total, loss_sum = sarlite.comm.all_reduce(
            torch.stack([hits, test.sum().float(), loss.detach()]), kind="example")
        if rank == 0:
            print(f"epoch {epoch:2d}  loss {loss_sum.item():.4f}  "
                  f"test acc {(correct / total).item():.3f}", flush=True)
    sarlite.finalize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "sar")
