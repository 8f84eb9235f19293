"""Compressed halo transport against float32: accuracy, bytes on the wire, epoch time.

    python -m benchmarks.halo_dtype --data-dir ../shared/data [--world-sizes 2 4]
        [--seeds 0 1 2] [--dtypes float32 bfloat16 float16]

For each config (Cora GCN, Citeseer GCN, the synthetic default of ``make demo``), each
world size and each seed, it runs ``sarlite train`` once per ``engine.halo_dtype``, all
in this one invocation, and reports the mean test accuracy at the best validation epoch
over the seeds, the bytes the halo exchanges sent per epoch (``bytes_sent`` of
``metrics.jsonl``, which also holds the small gradient all-reduce) and the median epoch
time. Goal: every reduced type within 0.5 points of float32's mean accuracy. Writes
``benchmarks/results/halo_dtype.md`` and ``.json``.
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

CONFIGS = ("cora_gcn", "citeseer_gcn", "demo")
ROOT = Path(__file__).resolve().parents[1]


def train(config: str, data_dir: str, world: int, seed: int, dtype: str, work: Path) -> dict:
    """One ``sarlite train`` run; its summary figures."""
    out = work / f"{config}_n{world}_s{seed}_{dtype}"
    subprocess.run([sys.executable, "-m", "sarlite.cli", "train", "--config",
                    config, "--nproc", str(world),
                    "--set", f"dataset.data_dir={data_dir}", f"train.out_dir={out}",
                    f"train.seed={seed}", f"engine.halo_dtype={dtype}",
                    f"partition.cache_dir={work}/parts_{config}_n{world}"],
                   check=True, capture_output=True, text=True, timeout=1800,
                   env=common.user_env(), cwd=ROOT)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"test_acc": json.loads((out / "summary.json").read_text())["test_acc_at_best_val"],
            "bytes_per_epoch": statistics.median(r["bytes_sent"] for r in rows),
            "epoch_s": statistics.median(r["epoch_time"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="folder holding planetoid/ ...")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16", "float16"])
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in CONFIGS:
            for world in args.world_sizes:
                for dtype in args.dtypes:
                    runs = [train(config, args.data_dir, world, s, dtype, Path(tmp))
                            for s in args.seeds]
                    results.append({"config": config, "world_size": world, "dtype": dtype,
                                    "runs": runs})
                    print(config, world, dtype, [r["test_acc"] for r in runs], flush=True)
    env = common.user_env()
    data = {"command": common.command_line("benchmarks.halo_dtype"),
            "seeds": args.seeds, "results": results,
            "facts": records.run_facts(processes=max(args.world_sizes), env=env)}
    common.RESULTS.mkdir(exist_ok=True)
    (common.RESULTS / "halo_dtype.json").write_text(json.dumps(data, indent=1))
    (common.RESULTS / "halo_dtype.md").write_text(markdown(data))
    print(markdown(data))


def markdown(data: dict) -> str:
    """``halo_dtype.md``: a function of the record ``data`` (halo_dtype.json) alone."""
    results = data["results"]
    lines = ["| config | N | halo dtype | test acc (mean of seeds) | vs float32 (points) | "
             "bytes/epoch vs float32 | epoch time vs float32 |", "|---|---|---|---|---|---|---|"]
    base = {(r["config"], r["world_size"]): r for r in results if r["dtype"] == "float32"}
    for r in results:
        ref = base.get((r["config"], r["world_size"]))
        if ref is None:
            continue
        acc = statistics.mean(x["test_acc"] for x in r["runs"])
        ref_acc = statistics.mean(x["test_acc"] for x in ref["runs"])
        ratio = lambda key: statistics.median(x[key] for x in r["runs"]) / \
            statistics.median(x[key] for x in ref["runs"])  # noqa: E731
        lines.append(f"| {r['config']} | {r['world_size']} | {r['dtype']} | {acc:.2%} | "
                     f"{100 * (acc - ref_acc):+.2f} | {ratio('bytes_per_epoch'):.3f}x | "
                     f"{ratio('epoch_s'):.2f}x |")
    table = "\n".join(lines)
    header = "\n".join(records.header([data["facts"]]))
    return (
        f"# Compressed halo transport\n\n{header}\nAllocator: "
        f"{records.describe_allocator(data['facts']['allocator'])}.\n\n`{data['command']}` "
        f"(seeds {data['seeds']}); gloo, one thread per process.\n\n"
        "Test accuracy at the best validation epoch (mean over the seeds), the bytes "
        "sent per epoch (halo exchanges plus the small gradient all-reduce) and the median "
        "epoch time, each against float32 halos in the same invocation.\n\n" + table + "\n")


if __name__ == "__main__":
    main()
