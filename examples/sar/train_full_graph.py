"""Full-graph GraphSAGE written against IntelLabs SAR's API, running on sarlite.

A SAR script switches with one line, ``import sarlite.sar as sar``. Start one process per
partition, each with its rank (no shared filesystem needed when MASTER_ADDR is set):

    python examples/sar/partition_graph.py --partition-out-path out/sar
    for r in 0 1; do
        MASTER_ADDR=127.0.0.1 python examples/sar/train_full_graph.py \
            --partitioning-json-file out/sar/synthetic.json --rank $r --world-size 2 &
    done; wait

Without MASTER_ADDR, rank 0 writes its address to --ip-file and the others read it, as
in SAR. The last line rank 0 prints is ``final: train=... valid=... test=... epoch=...s``.
"""
from argparse import ArgumentParser
import time

import dgl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import sarlite.sar as sar

parser = ArgumentParser(description="Full-graph GraphSAGE on a partitioned graph")
parser.add_argument("--partitioning-json-file", default="", type=str,
                    help="the partition configuration (.json) to train on")
parser.add_argument("--ip-file", default="./ip_file", type=str,
                    help="where rank 0 leaves its address when MASTER_ADDR is not set")
parser.add_argument("--backend", default="gloo", type=str, choices=["gloo", "nccl"])
parser.add_argument("--master-port", default=12345, type=int)
parser.add_argument("--cpu-run", action="store_true", help="stay on the CPU")
parser.add_argument("--train-iters", default=60, type=int)
parser.add_argument("--lr", default=1e-2, type=float)
parser.add_argument("--rank", default=0, type=int)
parser.add_argument("--world-size", default=2, type=int)
parser.add_argument("--hidden-layer-dim", default=64, type=int)


class SAGE(nn.Module):
    def __init__(self, in_dim, hidden_dim, out_dim):
        super().__init__()
        self.layers = nn.ModuleList([dgl.nn.SAGEConv(in_dim, hidden_dim, "mean"),
                                     dgl.nn.SAGEConv(hidden_dim, hidden_dim, "mean"),
                                     dgl.nn.SAGEConv(hidden_dim, out_dim, "mean")])

    def forward(self, graph, h):
        for i, layer in enumerate(self.layers):
            h = layer(graph, h)
            if i + 1 < len(self.layers):
                h = F.relu(h)
        return h


def global_count(tensor):
    """Sum of ``tensor`` over the workers (a collective)."""
    tensor = tensor.clone()
    sar.comm.all_reduce(tensor, dist.ReduceOp.SUM, move_to_comm_device=True)
    return tensor


def main():
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu_run
                          else "cpu")
    master = sar.nfs_ip_init(args.rank, args.ip_file)
    sar.initialize_comms(args.rank, args.world_size, master, args.backend,
                         master_port_number=args.master_port)

    partition = sar.load_dgl_partition_data(args.partitioning_json_file, args.rank, device)
    split = {name: sar.suffix_key_lookup(partition.node_features, f"{name}_mask")
             .nonzero().view(-1).to(device) for name in ("train", "val", "test")}
    labels = sar.suffix_key_lookup(partition.node_features, "labels").long().to(device)
    features = sar.suffix_key_lookup(partition.node_features, "features").to(device)
    num_classes = labels.max() + 1
    sar.comm.all_reduce(num_classes, dist.ReduceOp.MAX, move_to_comm_device=True)
    graph = sar.construct_full_graph(partition).to(device)
    del partition

    torch.manual_seed(0)
    model = SAGE(features.shape[1], args.hidden_layer_dim, int(num_classes)).to(device)
    sar.sync_params(model)
    n_train = int(global_count(torch.tensor([split["train"].numel()])))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    times = []
    for it in range(args.train_iters):
        start = time.time()
        model.train()
        logits = model(graph, features)
        loss = F.cross_entropy(logits[split["train"]], labels[split["train"]],
                               reduction="sum") / n_train
        optimizer.zero_grad()
        loss.backward()
        sar.gather_grads(model)
        optimizer.step()
        times.append(time.time() - start)

        hits = [(logits[idx].argmax(1) == labels[idx]).float().sum() for idx in split.values()]
        sizes = [float(idx.numel()) for idx in split.values()]
        counts = global_count(torch.tensor([*[float(h) for h in hits], *sizes,
                                            float(loss)]))
        train_acc, val_acc, test_acc = (counts[:3] / counts[3:6]).tolist()
        if args.rank == 0:
            print(f"iteration {it:3d} | loss {counts[6].item():.4f} | "
                  f"train {train_acc:.4f} valid {val_acc:.4f} test {test_acc:.4f} | "
                  f"{times[-1]:.3f}s", flush=True)
    if args.rank == 0:
        epoch = sorted(times)[len(times) // 2]
        print(f"final: train={train_acc:.4f} valid={val_acc:.4f} test={test_acc:.4f} "
              f"epoch={epoch:.3f}s", flush=True)


if __name__ == "__main__":
    main()
