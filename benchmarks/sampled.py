"""Sampled mini-batch training: sarlite on N workers against single-process DGL.

    python -m benchmarks.sampled [--world-size 2] [--num-nodes 100000] [--epochs 6]
        [--repeats 1] [--out benchmarks/results/sampled]

The same total work on both sides: the suite's homophilous synthetic graph (average
degree 20, 128 features, 10% training nodes), fanouts 10, 10, a 2-layer GraphSAGE-mean
of width 64, Adam. DGL runs ``dgl.dataloading.DataLoader`` with a ``NeighborSampler``
(prefetching ``feat`` and ``label``) in one process with as many torch threads as
sarlite has workers, and batches of ``--batch-size`` seeds; sarlite runs
``DistNodeDataLoader`` with a ``DistNeighborSampler`` on each of N workers (one thread
each) over the training nodes it owns (``node_split(..., force_even=False)``, so that
the seeds' hop is sampled locally; freed memory kept for reuse, as ``sarlite train``
with sampling: ``SARLITE_MMAP_THRESHOLD``, else ``retain``), with
``--batch-size / N`` seeds per worker and step, so that a step trains on as many seeds in
all as a DGL step.
An epoch's time is the slowest worker's; the median over the epochs after the first is
reported, with where sarlite's steps spend it (sampling and feature pulls in the loader,
forward and backward, gradient all-reduce and optimizer step), the CPU time of all
processes together, in all and in each of those parts, and the input rows (the first
layer's source nodes, all steps and workers together: N workers with 1/N of the seeds
each reach more distinct rows in all than one process with all of them). With
``--repeats`` the two runs are made that many times, in turn, and the report gives each
figure's median and the median of the pairs' ratios. Goal: sarlite at N=2 no slower
than DGL (ratio <= 1.0). Writes ``OUT/summary.md`` and
``OUT/summary.json``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from . import common, records

FANOUTS, HIDDEN = [10, 10], 64


def _model(in_dim: int, num_classes: int):
    import dgl.nn as dglnn
    import torch

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([dglnn.SAGEConv(in_dim, HIDDEN, "mean"),
                                               dglnn.SAGEConv(HIDDEN, num_classes, "mean")])

        def forward(self, blocks, x):
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                x = layer(block, x)
                x = torch.relu(x) if i == 0 else x
            return x
    return SAGE()


PARTS = ("loader", "compute", "step")
#: per part its time and its CPU time (all of the process's threads)
PART_KEYS = tuple(f"{part}{suffix}" for part in PARTS for suffix in ("_s", "_cpu_s"))


def _lap(parts: dict, part: str, since: tuple[float, float]) -> tuple[float, float]:
    """Add the time and CPU time since ``since`` to ``part`` in ``parts``; return now."""
    now = common.clock()
    parts[f"{part}_s"] += now[0] - since[0]
    parts[f"{part}_cpu_s"] += now[1] - since[1]
    return now


def _epochs(loader, model, optimizer, epochs: int, sync=None) -> dict:
    """Train; per epoch its time, the time in the loader, forward+backward and the
    step (gradient all-reduce and optimizer), and the CPU time of the whole process (all
    its threads, gloo's included), in all (``cpu_s``) and in each of those three parts
    (``<part>_cpu_s``): a part's time less its CPU time is waiting."""
    import torch.nn.functional as F
    out = {key: [] for key in ("epoch_s", "cpu_s", "input_rows", *PART_KEYS)}
    for _ in range(epochs):
        parts = dict.fromkeys(PART_KEYS, 0.0)
        rows = 0
        start = mark = common.clock()
        for _, _, blocks in loader:
            mark = _lap(parts, "loader", mark)
            rows += blocks[0].num_src_nodes()
            logits = model(blocks, blocks[0].srcdata["feat"])
            loss = F.cross_entropy(logits, blocks[-1].dstdata["label"].long())
            optimizer.zero_grad()
            loss.backward()
            mark = _lap(parts, "compute", mark)
            if sync is not None:
                sync(model)
            optimizer.step()
            mark = _lap(parts, "step", mark)
        end = common.clock()
        out["epoch_s"].append(end[0] - start[0])
        out["cpu_s"].append(end[1] - start[1])
        out["input_rows"].append(rows)
        for key, value in parts.items():
            out[key].append(value)
    return out


def dgl_worker(args) -> None:
    import dgl
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = dgl.load_graphs(args.graph)[0][0]
    train = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    sampler = dgl.dataloading.NeighborSampler(FANOUTS, prefetch_node_feats=["feat"],
                                              prefetch_labels=["label"])
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=args.batch_size,
                                        shuffle=True)
    model = _model(g.ndata["feat"].shape[1], int(g.ndata["label"].max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    result = _epochs(loader, model, optimizer, args.epochs)
    common.write_result(args.result_dir, 0, result)


def sarlite_worker(args) -> None:
    import torch

    import sarlite
    from sarlite.runtime.allocator import mini_batch_setting
    from sarlite.sampling import DistGraph, node_split
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # as sarlite.runtime.allocator advises for mini-batches (and `sarlite train` does)
    rank, world = sarlite.init(backend="gloo", mmap_threshold=mini_batch_setting())
    data = sarlite.load_partition_data(args.config)
    num_classes = int(sarlite.comm.all_reduce(
        data.node_features["label"].max().reshape(1), "max", kind="benchmark")) + 1
    graph = DistGraph.from_partition_data(data, replace_kvstore=True,
                                          one_sided_reads=args.one_sided)
    # each worker's own training nodes, so that the loader samples their hop locally
    train = node_split(graph.ndata["train_mask"], graph.get_partition_book(),
                       force_even=False)
    sampler = sarlite.DistNeighborSampler(FANOUTS, prefetch_node_feats=["feat"],
                                          prefetch_labels=["label"])
    loader = sarlite.DistNodeDataLoader(graph, train, sampler,
                                        batch_size=args.batch_size // world, shuffle=True)
    model = _model(data.node_features["feat"].shape[1], num_classes)
    sarlite.sync_params(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    result = _epochs(loader, model, optimizer, args.epochs, sarlite.all_reduce_gradients)
    common.write_result(args.result_dir, rank, result)
    sarlite.finalize()


def _summary(ranks: list[dict]) -> dict:
    """Per epoch the slowest rank's times, and the CPU time (in all and per part) and the
    input rows of all ranks together; medians over the epochs after the first."""
    def median(key, over):
        return statistics.median(over(r[key][e] for r in ranks)
                                 for e in range(1, len(ranks[0][key])))
    return {key: median(key, sum if key.endswith("cpu_s") or key == "input_rows" else max)
            for key in ("epoch_s", "cpu_s", "input_rows", *PART_KEYS)}


def _envs(world_size: int) -> dict:
    """Each side's environment: single-process DGL as its users have it with
    ``world_size`` threads, sarlite's workers as its launcher starts them
    (:func:`common.suite_env`, each side under its own default allocator)."""
    return {"dgl": common.suite_env(world_size, sarlite=False),
            "sarlite": common.suite_env(1, sarlite=True)}


def _pair(args, graph, config, common_args: list[str], envs: dict, index: int
          ) -> tuple[dict, dict]:
    """One DGL run and then one sarlite run (environments ``envs``, :func:`_envs`): their
    summaries."""
    print(f"[{index + 1}/{args.repeats}] DGL, 1 process, {args.world_size} threads ...",
          end=" ", flush=True)
    dgl = _summary(common.run_json(
        [sys.executable, "-m", "benchmarks.sampled", "--worker", "dgl", "--graph", str(graph),
         "--threads", str(args.world_size), *common_args], timeout=args.timeout,
        env=envs["dgl"]))
    print(f"epoch {dgl['epoch_s']:.2f} s; sarlite, N={args.world_size} ...", end=" ",
          flush=True)
    ours = _summary(common.run_json(common.torchrun(
        args.world_size, "benchmarks.sampled",
        ["--worker", "sarlite", "--config", str(config), *common_args]),
        timeout=args.timeout, num_procs=args.world_size, env=envs["sarlite"]))
    print(f"epoch {ours['epoch_s']:.2f} s", flush=True)
    return dgl, ours


def _median_of(summaries) -> dict:
    """Each figure's median over several runs' summaries."""
    summaries = list(summaries)
    return {key: statistics.median(s[key] for s in summaries) for key in summaries[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampled", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="seeds per step in all (DGL's batch; split over the workers)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=1,
                        help="pairs of runs (DGL, then sarlite) to make; the report gives "
                        "each figure's median over them and the median of the pairs' "
                        "ratios, which steadies the comparison on a noisy machine")
    parser.add_argument("--out", type=Path, default=common.RESULTS / "sampled")
    parser.add_argument("--cache", type=Path, default=common.CACHE,
                        help="where the generated graph and its partition are kept")
    parser.add_argument("--one-sided", action="store_true",
                        help="sarlite reads features one-sidedly (the DGL facade's store: "
                        "owners answer from serving threads over authenticated sockets) "
                        "instead of with collectives")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds per run before it is killed")
    parser.add_argument("--worker", choices=("dgl", "sarlite"), help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.worker == "dgl":
        dgl_worker(args)
        return 0
    if args.worker == "sarlite":
        sarlite_worker(args)
        return 0
    graph, config = common.cached_partition(args.num_nodes, 20.0, 128, args.world_size,
                                            cache=args.cache)
    common_args = ["--batch-size", str(args.batch_size), "--epochs", str(args.epochs),
                   *(["--one-sided"] if args.one_sided else [])]
    envs = _envs(args.world_size)
    facts = {"dgl": records.run_facts(1, args.world_size, envs["dgl"], sarlite_init=False),
             "sarlite": records.run_facts(args.world_size, 1, envs["sarlite"],
                                          mini_batch=True)}     # as its workers
    pairs = [_pair(args, graph, config, common_args, envs, i) for i in range(args.repeats)]
    ratios = [ours["epoch_s"] / dgl["epoch_s"] for dgl, ours in pairs]
    command = common.command_line("benchmarks.sampled", argv)
    result = {"command": command, "facts": facts,
              "world_size": args.world_size, "num_nodes": args.num_nodes,
              "batch_size": args.batch_size, "repeats": args.repeats,
              "dgl": _median_of(dgl for dgl, _ in pairs),
              "sarlite": _median_of(ours for _, ours in pairs),
              "ratios": ratios, "ratio": statistics.median(ratios)}
    common.write_summary(args.out, result, markdown(result))
    return 0


def _cores(result: dict) -> int:
    """The cores sarlite's one-thread workers could use: N, or the machine's if fewer."""
    facts = result.get("facts", {}).get("sarlite")
    return min(result["world_size"], facts["machine"]["cores"]) if facts else \
        result["world_size"]


def floor(result: dict) -> float | None:
    """The lowest epoch ratio sarlite could reach with this record's work: its input rows
    read at DGL's loader CPU per row, its own forward and backward CPU, DGL's step CPU,
    all of it spread over the workers' cores with none idle, against DGL's epoch. The
    loader is the one part priced at DGL's cost, because it is the one part where
    sarlite's work per row is larger (collectives, Python). ``None`` for a record
    without the CPU columns."""
    dgl, ours = result.get("dgl") or {}, result.get("sarlite") or {}
    if not all(key in side for side in (dgl, ours) for key in ("loader_cpu_s", "input_rows")):
        return None
    loader = dgl["loader_cpu_s"] / dgl["input_rows"] * ours["input_rows"]
    cores = _cores(result)
    return (loader + ours["compute_cpu_s"] + dgl["step_cpu_s"]) / cores / dgl["epoch_s"]


def why(result: dict) -> str:
    """Where the record's sarlite epoch goes against DGL's, in figures: the floor above,
    the loader's CPU per input row against DGL's, the rows against DGL's, and how busy
    the workers' cores were (empty for a record without the CPU columns)."""
    best = floor(result)
    if best is None:
        return ""
    dgl, ours = result["dgl"], result["sarlite"]
    per_row = (ours["loader_cpu_s"] / ours["input_rows"]) / \
        (dgl["loader_cpu_s"] / dgl["input_rows"])
    cores = _cores(result)
    return (f"the floor of this work is {best:.2f}x (sarlite's input rows at DGL's loader "
            f"CPU per row, its own forward and backward, DGL's step, {cores} cores never "
            f"idle); sarlite's loader spent {per_row:.2f}x DGL's CPU per row on "
            f"{ours['input_rows'] / dgl['input_rows']:.2f}x its rows (N workers with 1/N "
            f"of each batch's seeds reach more distinct rows), and its cores were busy "
            f"{ours['cpu_s'] / (cores * ours['epoch_s']):.0%} of the epoch")


def markdown(result: dict) -> str:
    """The summary of a comparison's record (``summary.json``)."""
    facts = result["facts"]
    cores = facts["dgl"]["machine"]["cores"]
    lines = [f"# Sampled training: sarlite N={result['world_size']} against single-process "
             f"DGL", "", f"`{result['command']}`", "",
             *records.header([facts["dgl"], facts["sarlite"]]), "",
             f"Allocator, each side under its own default: DGL: "
             f"{records.describe_allocator(facts['dgl']['allocator'])}; sarlite: "
             f"{records.describe_allocator(facts['sarlite']['allocator'])}.", "",
             f"{result['num_nodes']} nodes, fanouts {FANOUTS}, {result['batch_size']} seeds "
             f"per step in all, 2-layer SAGE-mean {HIDDEN} wide. Seconds per epoch (median "
             f"after the first; the slowest worker's), and the CPU time one epoch took in "
             f"all of its processes and threads together (the machine has "
             f"{cores} cores), in all and for each part (its CPU: all processes' CPU time "
             f"in that part; a worker's time in a part beyond its own CPU time is waiting). "
             f"Input rows: the first layer's source nodes in one epoch, summed over the "
             f"steps and, for sarlite, the workers: the rows whose features the loader "
             f"reads and the first layer transforms. "
             f"{result['repeats']} pair(s) of runs, DGL then sarlite; each figure is its "
             f"median over them.", "",
             "| run | epoch | loader (sampling, pulls) | its CPU | forward + backward | "
             "its CPU | all-reduce + step | its CPU | CPU seconds (all processes) | "
             "input rows | vs DGL |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in (("DGL, 1 process", result["dgl"]),
                    (f"sarlite, N={result['world_size']}", result["sarlite"])):
        parts = " | ".join(f"{r[f'{p}_s']:.3f} | {r[f'{p}_cpu_s']:.3f}" for p in PARTS)
        rows = f"{r['input_rows']:,.0f}" if "input_rows" in r else "-"
        lines.append(f"| {name} | {r['epoch_s']:.3f} | {parts} | {r['cpu_s']:.3f} | "
                     f"{rows} | {r['epoch_s'] / result['dgl']['epoch_s']:.2f}x |")
    where = why(result)
    lines += ["", "Each pair's ratio: " + ", ".join(f"{r:.2f}x" for r in result["ratios"]) +
              f"; median {result['ratio']:.2f}x.", "",
              f"Goal: sarlite N=2 <= 1.0x DGL: "
              f"{'met' if result['ratio'] <= 1.0 else 'not met'} ({result['ratio']:.2f}x)"
              + (f"; {where}." if where else ".")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
