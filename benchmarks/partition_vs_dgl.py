"""Partition one synthetic graph with sarlite and with DGL, side by side, in one run.

    python -m benchmarks.partition_vs_dgl [--num-nodes 1000000] [--avg-degree 20] [--parts 4]

Each partitioner runs in its own subprocess, so its peak RSS (``ru_maxrss`` of the child)
is its own: graph generation plus partitioning and writing. The generation-only peak is
measured the same way and reported for reference. Prints a markdown table and writes
``benchmarks/results/partition_vs_dgl.json``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.records import run_facts

RESULTS = Path(__file__).resolve().parent / "results"


def _run(tool: str, num_nodes: int, avg_degree: float, parts: int, out: str, queue) -> None:
    import dgl
    import torch

    import sarlite
    from sarlite.data import homophilous_graph

    g = homophilous_graph(num_nodes=num_nodes, avg_degree=avg_degree, feat_dim=16, seed=0)
    start = time.time()
    if tool == "sarlite":
        sarlite.partition_graph(g, "bench", parts, out)
    elif tool == "dgl":
        dgl.distributed.partition_graph(g, "bench", parts, out, part_method="metis")
    seconds = time.time() - start
    cut = None
    if tool != "generate-only":
        cut = sarlite.partition_report(f"{out}/bench.json").edge_cut
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    queue.put({"tool": tool, "seconds": seconds, "peak_rss_gib": peak_gib, "edge_cut": cut,
               "num_edges": g.num_edges(), "torch_threads": torch.get_num_threads()})


def measure(tool: str, num_nodes: int, avg_degree: float, parts: int) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as out:
        proc = ctx.Process(target=_run, args=(tool, num_nodes, avg_degree, parts, out, queue))
        proc.start()
        result = queue.get()
        proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-nodes", type=int, default=1_000_000)
    parser.add_argument("--avg-degree", type=float, default=20.0)
    parser.add_argument("--parts", type=int, default=4)
    args = parser.parse_args()
    rows = []
    for tool in ("generate-only", "sarlite", "dgl"):
        print(f"running {tool} ...", flush=True)
        rows.append(measure(tool, args.num_nodes, args.avg_degree, args.parts))
        print(f"  {rows[-1]}", flush=True)
    ours, dgls = rows[1], rows[2]
    print(f"\n{args.num_nodes} nodes, {rows[0]['num_edges']} edges, {args.parts} parts\n")
    print("| tool | partition time (s) | peak RSS (GiB) | edge cut |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['tool']} | {row['seconds']:.1f} | {row['peak_rss_gib']:.2f} | "
              f"{row['edge_cut'] if row['edge_cut'] is not None else '-'} |")
    print(f"\nsarlite / DGL: time {ours['seconds'] / dgls['seconds']:.2f}x, "
          f"peak RSS {ours['peak_rss_gib'] / dgls['peak_rss_gib']:.2f}x, "
          f"edge cut {ours['edge_cut'] / dgls['edge_cut']:.3f}x")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "partition_vs_dgl.json").write_text(json.dumps(
        {"args": vars(args), "runs": rows,
         "facts": run_facts(processes=1, torch_threads=rows[-1]["torch_threads"])}, indent=2))


if __name__ == "__main__":
    main()
