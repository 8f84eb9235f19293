"""Per-worker memory for ogbn-papers100M, projected from measured per-node and per-edge costs.

    python -m benchmarks.papers100m_projection [--workers 4] [--degrees 15,30]
                                               [--sizes 100000,200000,400000]

ogbn-papers100M (111,059,956 nodes; 1,615,685,872 citations, 3,231,371,744 directed edges
once reversed; 128 features; 172 classes) does not fit on one 24 GB machine. This script
measures what sarlite needs instead, on graphs that do fit, and projects:

1. For each size x degree, a homophilous synthetic graph with 128 features is partitioned
   into ``--workers`` parts (METIS) and trained in sar mode on that many torchrun workers
   with SAR's papers100M model: GraphSAGE-mean 3 x 256 with batch norm, 172 classes; one
   warm-up and one timed epoch, in the environment users have.
2. Each worker's peak RSS (high-water mark over loading, the warm-up and the timed epoch)
   is fitted by least squares as ``base + a * owned_nodes + b * owned_edges``, with the
   counts of that worker's partition. The halo has no term of its own: in these graphs it
   grows with the edges (a separate term came out negative, the two being collinear), and
   a sar worker holds one remote shard's rows at a time, so its cost is folded into the
   per-edge one. A graph whose cut differs from these (METIS on papers100M) shifts that
   share; the largest residual of the fit is printed.
3. For P = 16, 32, 64 and 128 workers, papers100M gives each worker N/P owned nodes and
   E/P owned (in-)edges. SAR's published peaks for the same model (~95/47/25 GB per
   machine at 32/64/128 machines) are printed beside the projection.

Writes ``benchmarks/results/papers100m_projection.{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from . import common, records
from .capped import run_capped

PAPERS = {"num_nodes": 111_059_956, "num_edges": 3_231_371_744, "feat_dim": 128,
          "num_classes": 172}
SAR_PUBLISHED_GB = {32: 95, 64: 47, 128: 25}    # IntelLabs SAR README, 3 x 256 SAGE + BN
WORKER_COUNTS = (16, 32, 64, 128)
FEAT_DIM, HIDDEN = 128, 256


def measure(nodes: int, degree: float, workers: int, cache: Path, timeout: float) -> list:
    """One run: per worker, its partition counts and its peak RSS (MiB)."""
    from sarlite import partition_report

    _, config = common.cached_partition(nodes, degree, FEAT_DIM, workers, cache=cache)
    report = partition_report(str(config))
    result_dir = cache / "result"
    shutil.rmtree(result_dir, ignore_errors=True)
    result_dir.mkdir(parents=True)
    cmd = common.torchrun(workers, "benchmarks.worker", [
        "--mode", "sar", "--config", str(config), "--model", "sage", "--hidden", str(HIDDEN),
        "--num-classes", str(PAPERS["num_classes"]), "--batch-norm", "--warmup", "1",
        "--epochs", "1", "--result-dir", str(result_dir)])
    facts = records.run_facts(workers, 1, common.user_env())
    run = run_capped(cmd, 20 * 1024, 20 * 1024, timeout, common.user_env(), cwd=common.ROOT)
    if run.status != "ok":
        raise RuntimeError(f"{nodes} nodes, degree {degree}: {run.status}\n"
                           f"{run.output_tail[-2000:]}")
    rows = []
    for w in common.read_results(result_dir):
        r = w["rank"]
        rows.append({"num_nodes": nodes, "degree": degree, "rank": r,
                     "owned_nodes": report.owned_nodes[r], "owned_edges": report.owned_edges[r],
                     "halo_nodes": report.halo_nodes[r], "epoch_s": w["epoch_times"][0],
                     "peak_mib": max(w["hwm_setup_mib"], w["peak_rss_mib"]), "facts": facts})
    return rows


def fit(rows: list[dict]) -> dict:
    """Least-squares ``peak_mib ~ base + node * owned_nodes + edge * owned_edges``."""
    x = np.array([[1.0, r["owned_nodes"], r["owned_edges"]] for r in rows])
    y = np.array([r["peak_mib"] for r in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    return {"base_mib": coef[0], "mib_per_node": coef[1], "mib_per_edge": coef[2],
            "max_abs_residual_mib": float(np.abs(residual).max())}


def project(model: dict) -> list[dict]:
    out = []
    for p in WORKER_COUNTS:
        nodes, edges = PAPERS["num_nodes"] / p, PAPERS["num_edges"] / p
        mib = model["base_mib"] + model["mib_per_node"] * nodes + model["mib_per_edge"] * edges
        out.append({"workers": p, "owned_nodes": nodes, "owned_edges": edges,
                    "gib": mib / 1024, "sar_published_gb": SAR_PUBLISHED_GB.get(p)})
    return out


def markdown(result: dict) -> str:
    """papers100m_projection.md from papers100m_projection.json."""
    m = result["fit"]
    facts = [r["facts"] for r in result["runs"] if r.get("facts")]
    allocator = records.describe_allocator(facts[0]["allocator"]) if facts else "not recorded"
    lines = ["# ogbn-papers100M: per-worker memory projected from measurements", "",
             *records.header(facts),
             f"Command: `{result['command']}`; {result['seconds']:.0f} s. Allocator: "
             f"{allocator}; engine options: the defaults.", "",
             f"Runs: sarlite sar on {result['workers']} torchrun workers, GraphSAGE-mean "
             f"3 x {HIDDEN} with batch norm, {FEAT_DIM} features, "
             f"{PAPERS['num_classes']} classes, homophilous synthetic graphs; peak RSS per "
             f"worker over loading, a warm-up and a timed epoch (environment as users have "
             f"it).", "", "| nodes | avg degree | rank | owned nodes | owned edges | "
             "halo nodes | peak (MiB) | epoch (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        lines.append(f"| {r['num_nodes']} | {r['degree']:g} | {r['rank']} | "
                     f"{r['owned_nodes']} | {r['owned_edges']} | {r['halo_nodes']} | "
                     f"{r['peak_mib']:.0f} | {r['epoch_s']:.1f} |")
    lines += ["", f"Fit: peak = {m['base_mib']:.0f} MiB + {m['mib_per_node'] * 1024:.2f} KiB "
              f"per owned node + {m['mib_per_edge'] * 2**20:.0f} B per owned edge (the halo "
              f"folded in; largest residual {m['max_abs_residual_mib']:.0f} MiB).", "",
              f"Projection for ogbn-papers100M ({PAPERS['num_nodes']:,} nodes, "
              f"{PAPERS['num_edges']:,} directed edges), 3 x {HIDDEN} SAGE with batch norm, "
              f"one worker per machine:", "",
              "| workers | owned nodes | owned edges | sarlite per worker (GiB) | "
              "SAR published (GB per machine) |", "|---|---|---|---|---|"]
    for r in result["projection"]:
        sar = "-" if r["sar_published_gb"] is None else f"~{r['sar_published_gb']}"
        lines.append(f"| {r['workers']} | {r['owned_nodes']:,.0f} | {r['owned_edges']:,.0f} | "
                     f"{r['gib']:.1f} | {sar} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.papers100m_projection",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sizes", default="100000,200000,400000",
                        help="node counts, comma-separated")
    parser.add_argument("--degrees", default="15,30", help="average degrees, comma-separated")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--cache", type=Path, default=common.CACHE / "papers100m")
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    degrees = [float(d) for d in args.degrees.split(",")]
    if len(sizes) < 2 or len(degrees) < 2:
        parser.error("need at least two sizes and two degrees to fit per-node and per-edge "
                     "costs")
    start = time.time()
    rows = []
    for nodes in sizes:
        for degree in degrees:
            print(f"measuring {nodes} nodes, degree {degree:g} ...", flush=True)
            rows += measure(nodes, degree, args.workers, args.cache, args.timeout)
            print(f"  peaks {[round(r['peak_mib']) for r in rows[-args.workers:]]} MiB",
                  flush=True)
    model = fit(rows)
    result = {"command": common.command_line("benchmarks.papers100m_projection"),
              "workers": args.workers, "runs": rows, "fit": model,
              "projection": project(model), "papers100m": PAPERS,
              "seconds": time.time() - start}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "papers100m_projection.json").write_text(json.dumps(result, indent=1))
    (args.out / "papers100m_projection.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
