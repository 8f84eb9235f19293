"""Partition a graph for the SAR-style scripts in this folder (and for IntelLabs SAR's own).

SAR's scripts look node fields up by suffix: ``features``, ``labels``, ``train_mask``,
``val_mask`` and ``test_mask``. This writes DGL 2.x partitions with those names, like
SAR's ``examples/partition_graph.py`` but with sarlite's datasets (nothing is downloaded):

    python examples/sar/partition_graph.py --dataset-name synthetic --num-partitions 2 \
        --partition-out-path out/sar
    python examples/sar/partition_graph.py --dataset-name cora --data-dir ../shared/data \
        --num-partitions 2 --partition-out-path out/sar-cora

As SAR's script does, the graph is made symmetric, and every node gets a self-loop.
"""
from argparse import ArgumentParser

import dgl
import torch

import sarlite
from sarlite.data import load_graph

parser = ArgumentParser(description="Partition a graph with SAR's field names")
parser.add_argument("--dataset-name", default="synthetic",
                    help="synthetic, powerlaw, or a real dataset read from --data-dir "
                         "(cora, citeseer, ...)")
parser.add_argument("--data-dir", default=None, help="folder holding the real datasets")
parser.add_argument("--num-nodes", default=5000, type=int, help="synthetic graphs only")
parser.add_argument("--num-classes", default=8, type=int, help="synthetic graphs only")
parser.add_argument("--feature-signal", default=0.12, type=float,
                    help="synthetic graphs only: class signal in the features")
parser.add_argument("--num-partitions", default=2, type=int)
parser.add_argument("--partition-out-path", default="./partition_data/")
parser.add_argument("--graph-name", default=None, help="default: the dataset name")


def main():
    args = parser.parse_args()
    sizes = {}
    if args.dataset_name in ("synthetic", "powerlaw"):
        sizes = {"num_nodes": args.num_nodes, "num_classes": args.num_classes}
        if args.dataset_name == "synthetic":
            sizes["feature_signal"] = args.feature_signal
    graph = load_graph(args.dataset_name, args.data_dir, **sizes)
    fields = {"features": graph.ndata["feat"], "labels": graph.ndata["label"],
              **{m: graph.ndata[m] for m in ("train_mask", "val_mask", "test_mask")}}
    src, dst = graph.edges()
    keep = src != dst
    graph = dgl.graph((torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])),
                      num_nodes=graph.num_nodes())
    graph = dgl.add_self_loop(dgl.to_simple(graph))
    graph.ndata.update(fields)
    name = args.graph_name or args.dataset_name
    sarlite.partition_graph(graph, name, args.num_partitions, args.partition_out_path,
                            balance_ntypes=graph.ndata["train_mask"], balance_edges=True)
    print(f"wrote {args.partition_out_path}/{name}.json", flush=True)


if __name__ == "__main__":
    main()
