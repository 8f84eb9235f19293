"""Label-only training with message-flow graphs in SAR's three modes, on sarlite.

Written against IntelLabs SAR's API (``import sarlite.sar as sar``). ``--train-mode``
picks SAR (sequential aggregation and rematerialization), SA (``sar.Config.disable_sr``:
the forward pass keeps its autograd graph) or one_shot_aggregation (each block fetches all
remote rows at once: ``block.get_full_partition_graph()``). All three give the same
numbers. Start one process per partition:

    python examples/sar/partition_graph.py --partition-out-path out/sar
    for r in 0 1; do
        MASTER_ADDR=127.0.0.1 python examples/sar/train_mfgs.py --train-mode SA \
            --partitioning-json-file out/sar/synthetic.json --rank $r --world-size 2 &
    done; wait

Training blocks compute the training nodes only; evaluation blocks the train, validation
and test nodes. The last line rank 0 prints is ``final: train=... valid=... test=...``.
"""
from argparse import ArgumentParser
import time

import dgl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import sarlite.sar as sar

parser = ArgumentParser(description="GNN training on message-flow graphs")
parser.add_argument("--partitioning-json-file", default="", type=str)
parser.add_argument("--ip-file", default="./ip_file", type=str)
parser.add_argument("--backend", default="gloo", type=str, choices=["gloo", "nccl"])
parser.add_argument("--master-port", default=12345, type=int)
parser.add_argument("--cpu-run", action="store_true")
parser.add_argument("--train-mode", default="SAR", choices=["SAR", "SA", "one_shot_aggregation"])
parser.add_argument("--gnn-layer", default="gat", choices=["gcn", "sage", "gat"])
parser.add_argument("--n-layers", default=2, type=int)
parser.add_argument("--layer-dim", default=64, type=int)
parser.add_argument("--max-collective-size", default=0, type=int,
                    help="rows per peer in one collective call (0: no bound)")
parser.add_argument("--train-iters", default=40, type=int)
parser.add_argument("--lr", default=1e-2, type=float)
parser.add_argument("--rank", default=0, type=int)
parser.add_argument("--world-size", default=2, type=int)


class GNN(nn.Module):
    def __init__(self, kind, n_layers, hidden, in_dim, n_classes):
        super().__init__()
        dims = [in_dim] + [hidden] * (n_layers - 1) + [n_classes]
        make = {"gcn": lambda a, b: dgl.nn.GraphConv(a, b),
                "sage": lambda a, b: dgl.nn.SAGEConv(a, b, "mean"),
                "gat": lambda a, b: dgl.nn.GATConv(a, b, num_heads=2)}[kind]
        self.layers = nn.ModuleList(make(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, blocks, h):
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if h.dim() == 3:                      # GAT: average the heads
                h = h.mean(1)
            if i + 1 < len(self.layers):
                h = F.relu(h)
        return h


def build_blocks(partition, local_ids, n_layers, mode):
    """MFGs for ``local_ids`` (SAR wants global ids: add the partition's first id)."""
    start = partition.node_ranges[sar.rank()][0]
    blocks = sar.construct_mfgs(partition, local_ids + start, n_layers)
    if mode == "one_shot_aggregation":
        blocks = [block.get_full_partition_graph() for block in blocks]
    return blocks


def main():
    args = parser.parse_args()
    sar.patch_dgl()                  # GATConv's edge_softmax on distributed graphs
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu_run
                          else "cpu")
    master = sar.nfs_ip_init(args.rank, args.ip_file)
    sar.initialize_comms(args.rank, args.world_size, master, args.backend,
                         master_port_number=args.master_port)

    partition = sar.load_dgl_partition_data(args.partitioning_json_file, args.rank)
    split = {name: sar.suffix_key_lookup(partition.node_features, f"{name}_mask")
             .nonzero().view(-1) for name in ("train", "val", "test")}
    labels = sar.suffix_key_lookup(partition.node_features, "labels").long().to(device)
    features = sar.suffix_key_lookup(partition.node_features, "features").to(device)
    num_classes = labels.max() + 1
    sar.comm.all_reduce(num_classes, dist.ReduceOp.MAX)

    evaluated = torch.cat(list(split.values()))
    train_blocks = [b.to(device) for b in
                    build_blocks(partition, split["train"], args.n_layers, args.train_mode)]
    eval_blocks = [b.to(device) for b in
                   build_blocks(partition, evaluated, args.n_layers, args.train_mode)]
    # The last block's outputs are the seeds in ascending order: position of each node.
    position = torch.full((features.shape[0],), -1, dtype=torch.long)
    position[eval_blocks[-1].output_nodes.cpu()] = torch.arange(evaluated.numel())
    del partition

    sar.Config.disable_sr = args.train_mode == "SA"        # read at every call
    sar.Config.max_collective_size = args.max_collective_size

    torch.manual_seed(0)
    model = GNN(args.gnn_layer, args.n_layers, args.layer_dim, features.shape[1],
                int(num_classes)).to(device)
    sar.sync_params(model)
    n_train = torch.tensor([split["train"].numel()])
    sar.comm.all_reduce(n_train, dist.ReduceOp.SUM)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    times = []
    for it in range(args.train_iters):
        start = time.time()
        model.train()
        logits = model(train_blocks, features[train_blocks[0].input_nodes])
        target = labels[train_blocks[-1].output_nodes]
        loss = F.cross_entropy(logits, target, reduction="sum") / int(n_train)
        optimizer.zero_grad()
        loss.backward()
        sar.gather_grads(model)
        optimizer.step()
        times.append(time.time() - start)

        model.eval()
        with torch.no_grad():
            predicted = model(eval_blocks, features[eval_blocks[0].input_nodes]).argmax(1)
        stats = []
        for idx in split.values():
            rows = position[idx].to(device)
            stats += [float((predicted[rows] == labels[idx.to(device)]).sum()), idx.numel()]
        stats = torch.tensor(stats + [float(loss)])
        sar.comm.all_reduce(stats, dist.ReduceOp.SUM)
        train_acc, val_acc, test_acc = (stats[0:6:2] / stats[1:6:2]).tolist()
        if args.rank == 0:
            print(f"iteration {it:3d} | {args.train_mode} | loss {stats[6]:.4f} | "
                  f"train {train_acc:.4f} valid {val_acc:.4f} test {test_acc:.4f} | "
                  f"{times[-1]:.3f}s", flush=True)
    if args.rank == 0:
        epoch = sorted(times)[len(times) // 2]
        print(f"final: train={train_acc:.4f} valid={val_acc:.4f} test={test_acc:.4f} "
              f"epoch={epoch:.3f}s", flush=True)


if __name__ == "__main__":
    main()
