"""R-GCN on the synthetic ogbn-mag-shaped graph: per-worker memory and epoch time of
sarlite against single-process DGL, side by side in one run.

    python -m benchmarks.rgcn_memory                         # the recorded run
    python -m benchmarks.rgcn_memory --papers 20000 --world-sizes 2 --epochs 2

The graph is ``sarlite.data.mag_like_graph`` with ``--papers`` papers (and, in the
default proportions, 1.25 authors, 0.05 institutions and 0.075 fields of study per
paper, 8 relations). The model is the training app's R-GCN (``model.type: rgcn``): two
``HeteroGraphConv`` layers with a weight per relation, ``--hidden`` wide, and learned input
rows for the featureless types. Each run is its own process(es): DGL on the whole graph,
then sarlite (gloo, one thread per worker, METIS partitions cached in
benchmarks/results/tmp) in the selected modes and world sizes. Memory is the suite's
metric (benchmarks/worker.py): the RSS high-water mark during the timed epochs minus the
RSS before them, the largest over the workers, in the users' environment
(``benchmarks.common.user_env``: sarlite.init fixes glibc's mmap threshold in sarlite's
workers, DGL keeps glibc's defaults; each run's record says so). The issue's goal: sar at
N=4 grows at most 0.35x DGL's.

Writes benchmarks/results/rgcn_memory.json (the command and each run's facts,
:func:`benchmarks.records.run_facts`) and .md (:func:`markdown` of the JSON alone).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from . import common, records

GOAL = 0.35


def _model(hidden: int, num_classes: int, relations, in_dims: dict, owned: dict,
           totals: dict):
    from sarlite.train.config import ModelConfig
    from sarlite.train.models import HeteroClassifier, OwnedEmbeddings
    cfg = ModelConfig(type="rgcn", layers=2, hidden=hidden, dropout=0.0)
    featureless = [t for t in owned if t not in in_dims]
    embeddings = OwnedEmbeddings({t: owned[t] for t in featureless},
                                 {t: totals[t] for t in featureless}, hidden, seed=0)
    return HeteroClassifier(cfg, in_dims, num_classes, relations, "paper", embeddings)


def _load(args):
    """``(graph, x, labels, train mask, model, sync)`` of this process's run."""
    import dgl
    import torch

    import sarlite
    from sarlite.train.models import replicated
    if args.worker == "dgl":
        g = dgl.load_graphs(args.graph)[0][0]
        paper = g.nodes["paper"].data
        totals = {t: g.num_nodes(t) for t in g.ntypes}
        model = _model(args.hidden, args.num_classes, g.canonical_etypes,
                       {"paper": paper["feat"].shape[1]}, {t: (0, n) for t, n in totals.items()},
                       totals)
        return g, {"paper": paper["feat"]}, paper["label"], paper["train_mask"], model, None
    sarlite.init(backend="gloo")
    data = sarlite.load_partition_data(args.config)
    book = data.partition_book
    feats = data.node_features
    g = sarlite.construct_full_graph(data, mode=args.worker)
    model = _model(args.hidden, args.num_classes, data.canonical_etypes,
                   {"paper": feats["feat"]["paper"].shape[1]},
                   {t: data.owned_range(t) for t in data.ntypes},
                   {t: book._num_nodes(t) for t in data.ntypes})
    sarlite.sync_params(replicated(model))
    out = (g, {"paper": feats["feat"]["paper"]}, feats["label"]["paper"],
           feats["train_mask"]["paper"], model,
           lambda: sarlite.all_reduce_gradients(replicated(model)))
    del data
    torch.manual_seed(0)
    return out


def worker(args) -> None:
    """One process: warm-up and timed epochs of full-graph Adam; writes its JSON."""
    import torch
    import torch.nn.functional as F

    from .worker import _Probe
    torch.set_num_threads(1)
    torch.manual_seed(0)
    g, x, labels, mask, model, sync = _load(args)
    mask = mask.bool()
    count = torch.tensor([float(mask.sum())])
    if sync is not None:
        import sarlite
        count = sarlite.comm.all_reduce(count, "sum", kind="benchmark")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    probe, times = _Probe(torch.device("cpu")), []
    for epoch in range(args.warmup + args.epochs):
        if epoch == args.warmup:
            before = probe.start()
        start = time.perf_counter()
        out = model([g, g], x)
        loss = F.cross_entropy(out[mask], labels[mask].long(), reduction="sum") / count
        optimizer.zero_grad()
        loss.backward()
        if sync is not None:
            sync()
        optimizer.step()
        times.append(time.perf_counter() - start)
        del out, loss
    result = probe.stop(before)
    result["epoch_times"] = times[args.warmup:]
    rank = 0
    if sync is not None:
        import sarlite
        rank = sarlite.comm.rank()
    common.write_result(args.result_dir, rank, result)
    if sync is not None:
        sarlite.finalize()


def _inputs(papers: int, world_sizes: list[int], cache: Path) -> tuple[Path, dict]:
    """The saved graph and its partition configs (made once, then cached)."""
    import dgl

    import sarlite
    from sarlite.data.synthetic_hetero import mag_like_sized
    base = cache / f"mag_like_{papers}"
    base.mkdir(parents=True, exist_ok=True)
    graph = base / "graph.dgl"
    g = None
    if not graph.exists():
        g = mag_like_sized(num_nodes=papers, avg_degree=6.0)
        dgl.save_graphs(str(graph), [g])
    configs = {}
    for world in world_sizes:
        config = base / f"parts{world}" / "g.json"
        if not config.exists():
            g = g if g is not None else dgl.load_graphs(str(graph))[0][0]
            sarlite.partition_graph(g, "g", world, config.parent)
        configs[world] = config
    return graph, configs


def _record(workers: list[dict]) -> dict:
    epochs = [max(w["epoch_times"][i] for w in workers)
              for i in range(len(workers[0]["epoch_times"]))]
    return {"median_epoch_s": statistics.median(epochs),
            "growth_mib": max(w["growth_mib"] for w in workers),
            "peak_rss_mib": max(max(w["hwm_setup_mib"], w["peak_rss_mib"]) for w in workers)}


def _sides(rows: list[dict]) -> list[str]:
    """The header of the rows' facts: one machine and software (else ``ValueError``), each
    side's threads and allocator."""
    facts = [r["facts"] for r in rows]
    if len({records.section_key(f) for f in facts}) != 1:
        raise ValueError("rgcn_memory rows from different machines or software")
    sides = []
    for name, side in (("DGL", [f for r, f in zip(rows, facts) if r["run"] == "dgl"]),
                       ("sarlite", [f for r, f in zip(rows, facts) if r["run"] != "dgl"])):
        alloc = {records.describe_allocator(f["allocator"]) for f in side}
        threads = {f["threads"]["torch_per_process"] for f in side}
        if side:
            sides.append(f"{name}: {', '.join(map(str, sorted(threads)))} torch thread(s) "
                         f"per process, {'; '.join(sorted(alloc))}")
    return records.header(facts) + ["Threads and allocator: " + " | ".join(sides) + "."]


def markdown(data: dict) -> str:
    """``rgcn_memory.md``: a function of the record ``data`` (rgcn_memory.json) alone."""
    rows, command = data["rows"], data["command"].strip()
    dgl_row = next(r for r in rows if r["run"] == "dgl")
    lines = ["# R-GCN on the synthetic ogbn-mag-shaped graph: sarlite against DGL", "",
             *_sides(rows), "", f"`{command}`", "",
             "| run | epoch (s) | growth (MiB) | growth / DGL | peak RSS (MiB) |",
             "|---|---|---|---|---|"]
    for r in rows:
        ratio = r["growth_mib"] / dgl_row["growth_mib"] if dgl_row["growth_mib"] else 0.0
        lines.append(f"| {r['run']} | {r['median_epoch_s']:.2f} | {r['growth_mib']:.0f} | "
                     f"{ratio:.3f} | {r['peak_rss_mib']:.0f} |")
    sar4 = next((r for r in rows if r["run"] == "sar N=4"), None)
    if sar4 is not None and dgl_row["growth_mib"]:
        ratio = sar4["growth_mib"] / dgl_row["growth_mib"]
        lines += ["", f"Goal: sar N=4 growth <= {GOAL}x DGL's: {ratio:.3f}x, "
                      f"{'PASS' if ratio <= GOAL else 'FAIL'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--papers", type=int, default=100_000, help="papers in the graph")
    parser.add_argument("--hidden", type=int, default=64, help="hidden width")
    parser.add_argument("--num-classes", type=int, default=8)
    parser.add_argument("--modes", default="sar", help="comma-separated sarlite modes")
    parser.add_argument("--world-sizes", default="1,2,4", help="comma-separated N")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    worlds = [int(n) for n in args.world_sizes.split(",")]
    graph, configs = _inputs(args.papers, worlds, common.CACHE)
    extra = ["--hidden", str(args.hidden), "--num-classes", str(args.num_classes),
             "--warmup", str(args.warmup), "--epochs", str(args.epochs)]
    rows = []
    plan = [("dgl", 1)] + [(m, n) for n in worlds for m in args.modes.split(",")]
    for mode, world in plan:
        label = "dgl" if mode == "dgl" else f"{mode} N={world}"
        print(f"{label} ...", end=" ", flush=True)
        if mode == "dgl":
            cmd = [sys.executable, "-m", "benchmarks.rgcn_memory", "--worker", "dgl",
                   "--graph", str(graph), *extra]
        else:
            cmd = common.torchrun(world, "benchmarks.rgcn_memory",
                                  ["--worker", mode, "--config", str(configs[world]), *extra])
        env = common.user_env()
        facts = records.run_facts(processes=world, torch_threads=1, env=env,
                                  sarlite_init=mode != "dgl")
        row = dict(_record(common.run_json(cmd, args.timeout, num_procs=world, env=env)),
                   run=label, facts=facts)
        print(f"epoch {row['median_epoch_s']:.2f} s, growth {row['growth_mib']:.0f} MiB",
              flush=True)
        rows.append(row)
    command = common.command_line("benchmarks.rgcn_memory", argv)
    out = common.RESULTS / "rgcn_memory"
    data = {"command": command, "papers": args.papers, "hidden": args.hidden, "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    out.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
