"""Memory-budget mode against all-sar and all-one-shot, side by side in one invocation.

    python -m benchmarks.budget [--model gat] [--world-size 4] [--num-nodes 100000]
        [--epochs 4] [--budgets auto | SIZE ...] [--out benchmarks/results/budget]

Runs ``sarlite train`` on the synthetic graph (``dataset.name=synthetic``, average degree
20, 128 features, 8 classes; 3 layers, 64 wide per head with 4 heads for GAT, 256 for SAGE
and GCN) with ``engine.mode=sar``, with ``engine.mode=one-shot`` and with each
``engine.memory_budget``, in the users' environment. ``auto`` budgets come from a first
two-epoch run's measurements (``summary.json``'s ``memory_plan.measured``): the smallest
budget for every layer one-shot, then halfway between those of consecutive rungs of the
ladder (every layer at the same rung), then 3% above the smallest budget of the most
frugal plan (the measurements vary a little from run to run).

Reported per run: the plan, its estimate, the peak resident memory of the largest worker
from the start of training (``training_peak_rss_mib``), the median
training time of an epoch after the first, and the last epoch's loss (equal in every run:
every plan is exact). Goals: every budget run's peak stays under its budget, and a budget
that lets any layer run one-shot is faster than all-sar. Writes ``OUT/summary.md`` and
``OUT/summary.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from . import common, records

FRUGAL_MARGIN = 1.03    # the last auto budget: above the frugal plan's, for run-to-run noise
MODELS = {"gat": {"type": "gat", "layers": 3, "hidden": 64, "heads": 4},
          "sage": {"type": "sage", "layers": 3, "hidden": 256},
          "gcn": {"type": "gcn", "layers": 3, "hidden": 256}}


def _config(args, work: Path) -> Path:
    cfg = {"dataset": {"name": "synthetic", "num_nodes": args.num_nodes, "avg_degree": 20,
                       "num_classes": 8, "feat_dim": 128},
           "partition": {"method": "metis", "cache_dir": str(work / "parts")},
           "model": {**MODELS[args.model], "dropout": 0.5},
           "optim": {"name": "adam", "lr": 0.01},
           "train": {"epochs": args.epochs, "eval_every": 10_000}}
    path = work / "config.yaml"
    path.write_text(json.dumps(cfg))               # JSON is YAML
    return path


def train(config: Path, world: int, out: Path, *sets: str) -> dict:
    """One ``sarlite train`` run; its figures, or ``{"error": its error line}``."""
    done = subprocess.run([sys.executable, "-m", "sarlite.cli", "train", "--config",
                           str(config), "--nproc", str(world), "--set",
                           f"train.out_dir={out}", *sets], capture_output=True, text=True,
                          timeout=3600, env=common.user_env(), cwd=common.ROOT)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        return {"error": (errors or done.stderr.splitlines() or ["no output"])[-1]}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    plan = json.loads((out / "summary.json").read_text()).get("memory_plan")
    return {"plan": plan, "epoch_s": statistics.median(r["train_time"] for r in rows[1:]),
            "epoch_times": [r["train_time"] for r in rows], "loss": rows[-1]["loss"],
            "training_peak_mib": max(max(r["training_peak_rss_mib"]) for r in rows)}


def auto_budgets(measured: list[dict]) -> list[int]:
    """Budgets (bytes) that lead the planner down its ladder (see the module text)."""
    from sarlite.core.budget import LADDER, RankCosts, smallest_budget
    costs = [RankCosts(**{**c, "row_bytes": tuple(c["row_bytes"])}) for c in measured]
    layers = len(costs[0].row_bytes)
    rungs = [smallest_budget(max(c.estimate([rung] * layers) for c in costs))
             for rung in LADDER]
    middle = [(a + b) // 2 for a, b in zip(rungs, rungs[1:]) if a > b]
    return [rungs[0]] + middle + [int(rungs[-1] * FRUGAL_MARGIN)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.budget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="gat")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--num-nodes", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--budgets", nargs="+", default=["auto"],
                        help="engine.memory_budget values, or auto (default)")
    parser.add_argument("--out", type=Path, default=common.RESULTS / "budget")
    args = parser.parse_args(argv)
    from sarlite.core.budget import format_bytes, parse_bytes
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = _config(args, work)
        budgets = [parse_bytes(b) for b in args.budgets if b != "auto"]
        if "auto" in args.budgets:
            probe = train(config, args.world_size, work / "probe", "train.epochs=2",
                          "engine.memory_budget=1TiB")
            budgets += auto_budgets(probe["plan"]["measured"])
        settings = [("sar", "engine.mode=sar"), ("one-shot", "engine.mode=one-shot")] + [
            (f"budget {format_bytes(b)}", f"engine.memory_budget={b}") for b in budgets]
        for i, (name, setting) in enumerate(settings):
            print(f"[{i + 1}/{len(settings)}] {name} ...", end=" ", flush=True)
            run = train(config, args.world_size, work / f"run{i}", setting)
            run["name"] = name
            runs.append(run)
            print(run["error"] if "error" in run else
                  f"epoch {run['epoch_s']:.2f} s, peak {run['training_peak_mib']:.0f} MiB",
                  flush=True)
    data = {"model": args.model, "world_size": args.world_size,
            "num_nodes": args.num_nodes, "runs": runs,
            "command": common.command_line("benchmarks.budget", argv),
            "facts": records.run_facts(processes=args.world_size, env=common.user_env())}
    common.write_summary(args.out, data, report(data))
    return 0


def report(data: dict) -> str:
    """``summary.md``: a function of the record ``data`` (summary.json) alone."""
    from sarlite.core.budget import format_bytes
    runs = data["runs"]
    sar = next(r for r in runs if r["name"] == "sar").get("epoch_s")
    lines = [f"# Memory-budget mode: {data['model']}, {data['num_nodes']} nodes, "
             f"N={data['world_size']}\n",
             *records.header([data["facts"]]),
             f"Allocator: {records.describe_allocator(data['facts']['allocator'])}.\n",
             f"`{data['command']}`\n",
             "| run | plan (layer 0, 1, ...) | estimate | training peak (largest worker) | "
             "under budget | epoch | vs all-sar | last loss |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['name']} | failed: {r['error']} | | | | | | |")
            continue
        plan = r["plan"]
        peak = r["training_peak_mib"]
        vs = f"{r['epoch_s'] / sar:.2f}x" if sar else "-"
        under = "" if plan is None else ("yes" if peak * 2**20 <= plan["budget_bytes"]
                                         else "**no**")
        lines.append(
            f"| {r['name']} | {'; '.join(plan['layers']) if plan else '-'} | "
            f"{format_bytes(plan['estimate_bytes']) if plan else '-'} | "
            f"{peak:.0f} MiB | {under} | {r['epoch_s']:.2f} s | "
            f"{vs} | {r['loss']:.6f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
