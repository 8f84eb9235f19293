"""Per-worker memory and epoch time of 3-layer GraphSAGE: DGL vs sarlite, side by side.

    python -m benchmarks.quick_memory [--num-nodes 100000] [--avg-degree 20] [--epochs 3]

Trains a 3-layer GraphSAGE-mean (128-d input, hidden 256) for ``--epochs`` epochs after one
warm-up on the synthetic homophilous graph, with single-process DGL and with sarlite on
N = 1, 2 and 4 torchrun workers in modes sar, sa and one-shot (gloo, one thread per
worker; DGL also gets one thread). For each run it reports the median epoch time, the
per-worker peak RSS, the RSS growth during training, and bytes sent per epoch.

Growth is the peak RSS during the timed epochs minus the RSS just before them, after one
warm-up epoch: the transient memory of a training step (activations, messages, remote
rows, gradients), without one-time costs (sparse formats, optimizer state, code pages).
Every run uses ``MALLOC_MMAP_THRESHOLD_=131072`` so freed tensors leave the RSS instead
of staying in glibc's heap, which would hide the peak. Growth is what the targets compare:
sar at N=4 <= 0.30x DGL's growth, sar at N=2 epoch time <= 1.15x DGL's.
Writes ``benchmarks/results/quick_memory.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import common

MODES = ("sar", "sa", "one-shot")
WORLD_SIZES = (1, 2, 4)


def _train(g, x, labels, train_mask, model, epochs: int, num_train: float, sync) -> dict:
    """Warm-up plus ``epochs`` timed epochs; memory growth measured around them."""
    import torch
    import torch.nn.functional as F

    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train_mask = train_mask.bool()
    times = []
    for epoch in range(epochs + 1):
        if epoch == 1:            # after the warm-up: formats, optimizer state, code pages
            before = common.rss_mib()
            common.reset_peak_rss()
        start = time.perf_counter()
        out = model(g, x)
        loss = F.cross_entropy(out[train_mask], labels[train_mask], reduction="sum")
        optimizer.zero_grad()
        (loss / num_train).backward()
        sync(model)
        optimizer.step()
        times.append(time.perf_counter() - start)
    peak = common.peak_rss_mib()
    return {"epoch_times": times[1:], "rss_before_mib": before, "peak_rss_mib": peak,
            "growth_mib": peak - before}


def worker(args) -> None:
    """One torchrun worker (or the single DGL process when ``--mode dgl``)."""
    import dgl
    import torch

    import sarlite
    from sarlite.comm import traffic

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.mode == "dgl":
        g = dgl.load_graphs(args.graph)[0][0]
        feats = g.ndata
        graph, sync, num_train, rank = g, (lambda m: None), float(feats["train_mask"].sum()), 0
    else:
        sarlite.init()
        rank = torch.distributed.get_rank()
        data = sarlite.load_partition_data(args.config)
        feats = data.node_features
        graph = sarlite.construct_full_graph(data, mode=args.mode,
                                             pipeline_depth=args.pipeline_depth)
        count = feats["train_mask"].sum().float().reshape(1)
        torch.distributed.all_reduce(count)
        sync, num_train = sarlite.all_reduce_gradients, float(count)
    num_classes = 8
    model = common.build_model(args.model, feats["feat"].shape[1], args.hidden, num_classes)
    if args.mode != "dgl":
        sarlite.sync_params(model)
    traffic.reset()
    result = _train(graph, feats["feat"], feats["label"], feats["train_mask"], model,
                    args.epochs, num_train, sync)
    sent = traffic.total()["sent"]
    result.update(rank=rank, bytes_sent_per_epoch=sent / (args.epochs + 1))
    common.write_result(args.result_dir, rank, result)


def _summarise(name: str, per_worker: list[dict]) -> dict:
    return {"run": name,
            "median_epoch_s": common.median([t for w in per_worker for t in w["epoch_times"]
                                             if w["rank"] == 0]),
            "peak_rss_mib": max(w["peak_rss_mib"] for w in per_worker),
            "growth_mib": max(w["growth_mib"] for w in per_worker),
            "mib_sent_per_epoch": max(w["bytes_sent_per_epoch"] for w in per_worker) / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-nodes", type=int, default=100_000)
    parser.add_argument("--avg-degree", type=float, default=20.0)
    parser.add_argument("--feat-dim", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pipeline-depth", type=int, default=1,
                        help="shards fetched ahead in sar/sa modes (default 1)")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=list(WORLD_SIZES))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--timeout", type=float, default=1800)
    # worker-side arguments
    parser.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--graph", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--config", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode is not None:
        worker(args)
        return

    common_args = ["--hidden", str(args.hidden), "--model", args.model,
                   "--epochs", str(args.epochs), "--pipeline-depth", str(args.pipeline_depth)]
    graph, _ = common.cached_partition(args.num_nodes, args.avg_degree, args.feat_dim, 1)
    env_note = f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    print(f"quick_memory: {args.model}, {args.num_nodes} nodes, avg degree "
          f"{args.avg_degree:g}, {args.epochs} epochs ({env_note})", flush=True)
    rows = []
    dgl_run = common.run_json([sys.executable, "-m", "benchmarks.quick_memory",
                               "--mode", "dgl", "--graph", str(graph), *common_args],
                              args.timeout)
    rows.append(_summarise("dgl (1 process)", dgl_run))
    print(f"  {rows[-1]}", flush=True)
    for world in args.world_sizes:
        _, config = common.cached_partition(args.num_nodes, args.avg_degree, args.feat_dim,
                                            world)
        for mode in args.modes:
            per_worker = common.run_json(common.torchrun(
                world, "benchmarks.quick_memory",
                ["--mode", mode, "--config", str(config), *common_args]), args.timeout)
            depth = f" depth {args.pipeline_depth}" if mode != "one-shot" else ""
            rows.append(_summarise(f"sarlite {mode} N={world}{depth}", per_worker))
            print(f"  {rows[-1]}", flush=True)
    base = rows[0]
    print("\n| run | median epoch (s) | time vs DGL | peak RSS/worker (MiB) | "
          "growth/worker (MiB) | growth vs DGL | MiB sent/epoch/worker |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['run']} | {row['median_epoch_s']:.2f} | "
              f"{row['median_epoch_s'] / base['median_epoch_s']:.2f}x | "
              f"{row['peak_rss_mib']:.0f} | {row['growth_mib']:.0f} | "
              f"{row['growth_mib'] / base['growth_mib']:.2f}x | "
              f"{row['mib_sent_per_epoch']:.1f} |")
    common.RESULTS.mkdir(exist_ok=True)
    name = "quick_memory.json" if args.pipeline_depth == 1 else \
        f"quick_memory_depth{args.pipeline_depth}.json"
    (common.RESULTS / name).write_text(json.dumps(
        {"args": {k: v for k, v in vars(args).items() if v is not None}, "runs": rows},
        indent=2))


if __name__ == "__main__":
    main()
