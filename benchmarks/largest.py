"""Largest synthetic graph that single-process DGL and sarlite (sar, N=4 and more) can train.

    python -m benchmarks.largest --budget-gib 3          # the reported search
    python -m benchmarks.largest --budget-gib 3 --workers 4 8 --max-rows-per-step 2048
    python -m benchmarks.largest --budget-gib 0.75 --start-nodes 10000   # a quick try

Both get the same memory budget *per process*: DGL's one process and each of sarlite's
four workers. All four workers share this one machine, so the per-process budget is what
makes the comparison meaningful: with B GiB per process, four sarlite workers need 4B
GiB together, which must fit in the machine's memory (24 GB: B <= ~5 GiB). The graph is
the homophilous synthetic graph at average degree 20, 128-d input, trained with 3-layer
GraphSAGE-mean (hidden 256) for one warm-up and one timed epoch. ``--workers`` gives the
sarlite world sizes searched (default 4) and ``--max-rows-per-step`` their
``engine.max_rows_per_step`` (default: whole shards). Each probe records the largest
worker's peak from its start through the warm-up epoch (loading, graph construction,
the first epoch) and during the timed epoch.

Each probe runs in its own process tree under :func:`benchmarks.capped.run_capped`: the
RSS of every process is polled every 0.2 s and the tree is killed when one process passes
the budget ("exceeded cap"); the processes' own RSS high-water marks are checked against
the budget afterwards as well. Generating and partitioning a probe's graph happen in a
separate capped process (machine cap only: that is preparation, not training).

Search: from ``--start-nodes``, double until a probe fails, then bisect until the largest
success and the smallest failure are within ``--precision`` (10%). sarlite's search starts
at DGL's largest size. ``--time-budget`` stops the bisection early (the bracket is then
reported as it stands). Writes ``largest.{json,md}`` into ``--out`` (default
benchmarks/results, where the suite's report finds it) and prints each probe as it ends.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from . import common, records
from .capped import run_capped
from .report import machine

DEGREE, FEAT_DIM, HIDDEN = 20.0, 128, 256
MIN_NODES = 1000
MACHINE_CAP_MIB = 20 * 1024          # never let a probe tree take the whole 24 GB machine


class Search:
    """Probes of one budget; remembers every outcome (for the report)."""

    def __init__(self, args):
        self.args = args
        self.cap_mib = args.budget_gib * 1024
        self.cache = args.cache
        self.log: list[dict] = []
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _prepare(self, nodes: int, parts: int) -> str | None:
        """Generate (and partition) the graph in a capped process; None if that failed."""
        cmd = [sys.executable, "-m", "benchmarks.largest", "--prepare", str(nodes),
               "--parts", str(parts), "--cache", str(self.cache)]
        run = run_capped(cmd, MACHINE_CAP_MIB, MACHINE_CAP_MIB, self.args.probe_timeout,
                         common.bench_env(), cwd=common.ROOT)
        return None if run.status == "ok" else f"preparation {run.status}: {run.output_tail}"

    def probe(self, system: str, nodes: int) -> bool:
        """Train ``system`` (``dgl``, or ``sarN``: sar on N workers) on ``nodes`` nodes
        under the budget."""
        parts = _workers(system)
        entry = {"system": system, "num_nodes": nodes}
        problem = self._prepare(nodes, parts)
        if problem is None:
            graph = common.cached_graph(nodes, DEGREE, FEAT_DIM, cache=self.cache)
            config = graph.with_name(f"{graph.stem}_p{parts}") / "g.json"
            entry.update(self._train(system, graph, config))
        else:
            entry.update(status="failed", detail=problem[-500:])
        ok = entry["status"] == "ok"
        self.log.append(entry)
        print(f"  [{self.elapsed():5.0f} s] {system:4s} {nodes:>9,d} nodes: {entry['status']}"
              f" (peak process {entry.get('peak_process_mib', 0):.0f} MiB, "
              f"{entry.get('seconds', 0):.0f} s)", flush=True)
        return ok

    def _train(self, system: str, graph: Path, config: Path) -> dict:
        worker = ["--model", "sage", "--hidden", str(HIDDEN), "--warmup", "1", "--epochs", "1"]
        result_dir = self.cache / "probe_result"
        shutil.rmtree(result_dir, ignore_errors=True)
        result_dir.mkdir(parents=True)
        if system == "dgl":
            cmd = [sys.executable, "-m", "benchmarks.worker", "--mode", "dgl",
                   "--graph", str(graph)]
        else:
            steps = [] if self.args.max_rows_per_step is None else [
                "--max-rows-per-step", str(self.args.max_rows_per_step)]
            cmd = common.torchrun(_workers(system), "benchmarks.worker",
                                  ["--mode", "sar", "--config", str(config), *steps])
        run = run_capped(cmd + worker + ["--result-dir", str(result_dir)], self.cap_mib,
                         MACHINE_CAP_MIB, self.args.probe_timeout, common.bench_env(),
                         cwd=common.ROOT)
        entry = {"status": run.status, "peak_process_mib": run.peak_process_mib,
                 "seconds": run.seconds}
        workers = common.read_results(result_dir) if run.status == "ok" else []
        if workers:
            hwm = max(max(w["hwm_setup_mib"], w["peak_rss_mib"]) for w in workers)
            entry.update(hwm_mib=hwm, epoch_s=max(w["epoch_times"][0] for w in workers),
                         setup_mib=max(w["hwm_setup_mib"] for w in workers),
                         training_mib=max(w["peak_rss_mib"] for w in workers))
            if hwm > self.cap_mib:       # a burst between two polls
                entry["status"] = "exceeded cap"
        elif run.status == "failed":
            entry["detail"] = run.output_tail[-500:]
        return entry

    def largest(self, system: str, start: int) -> dict:
        """Doubling then bisection; returns ``{"largest", "smallest_failure"}``."""
        lo = hi = None
        nodes = start
        # bracket first: double up from a success, or halve down from a failure
        while (lo is None or hi is None) and MIN_NODES <= nodes <= self.args.max_nodes:
            if self.probe(system, nodes):
                lo, nodes = nodes, nodes * 2
            else:
                hi, nodes = nodes, nodes // 2
        while lo is not None and hi is not None and hi > lo * (1 + self.args.precision):
            if self.elapsed() > self.args.time_budget:
                print(f"  time budget {self.args.time_budget:.0f} s spent: stopping "
                      f"{system} at the bracket [{lo}, {hi})", flush=True)
                break
            mid = (lo + hi) // 2000 * 1000
            if mid in (lo, hi):
                break
            if self.probe(system, mid):
                lo = mid
            else:
                hi = mid
        return {"largest": lo, "smallest_failure": hi}


def _workers(system: str) -> int:
    return 1 if system == "dgl" else int(system[3:])


def write(result: dict, out: Path) -> None:
    """``out/largest.json`` and ``out/largest.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "largest.json").write_text(json.dumps(result, indent=1))
    (out / "largest.md").write_text(markdown(result))


def markdown(result: dict) -> str:
    """``largest.md``: a function of the search's record ``result`` alone."""
    dgl = result["dgl"]
    systems = list(result["ratios"])
    steps = result.get("max_rows_per_step")
    lines = ["# Largest trainable graph", "",
             *(records.header([result["facts"]]) + [
                 "Allocator (both sides): "
                 f"{records.describe_allocator(result['facts']['allocator'])}."]
               if "facts" in result else
               [f"Measured {result['date']} on {result['machine']}."]),
             f"Budget {result['budget_gib']:g} GiB RSS per process (DGL's one process; each "
             f"sarlite worker), homophilous synthetic graph, average "
             f"degree {DEGREE:g}, input width {FEAT_DIM}, GraphSAGE-mean 3 x {HIDDEN}, "
             f"1 warm-up + 1 timed epoch; sarlite in sar mode with "
             f"{'whole shards' if steps is None else f'max_rows_per_step={steps}'}; "
             f"search precision {result['precision']:.0%}; "
             f"{result['seconds']:.0f} s in all.", "",
             f"`{result['command']}`", "",
             "| system | largest graph trained (nodes) | smallest that failed | vs DGL |",
             "|---|---|---|---|",
             f"| DGL, 1 process | {dgl['largest']} | {dgl['smallest_failure']} | 1x |"]
    for system in systems:
        found, ratio = result[system], result["ratios"][system]
        lines.append(f"| sarlite sar, N={_workers(system)} | {found['largest']} | "
                     f"{found['smallest_failure']} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} |")
    lines += ["", "Each probe: the largest worker's peak RSS from its start through the "
              "warm-up epoch (loading, graph construction, the first epoch) and during the "
              "timed epoch (MiB), and the peak process RSS the cap saw.", "",
              "| system | nodes | outcome | start to warm-up peak | timed epoch peak | "
              "peak process RSS (MiB) | epoch (s) | probe (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for p in result["probes"]:
        epoch = f"{p['epoch_s']:.1f}" if "epoch_s" in p else "-"
        peak = max(p.get("peak_process_mib", 0), p.get("hwm_mib", 0))
        setup, train = (f"{p[k]:.0f}" if k in p else "-" for k in ("setup_mib", "training_mib"))
        lines.append(f"| {p['system']} | {p['num_nodes']} | {p['status']} | {setup} | {train} "
                     f"| {peak:.0f} | {epoch} | {p.get('seconds', 0):.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.largest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-gib", type=float, default=3.0,
                        help="RSS budget per process, GiB (default 3)")
    parser.add_argument("--start-nodes", type=int, default=100_000)
    parser.add_argument("--max-nodes", type=int, default=16_000_000)
    parser.add_argument("--precision", type=float, default=0.1,
                        help="stop bisecting when failure/success < 1 + this (default 0.1)")
    parser.add_argument("--time-budget", type=float, default=1200,
                        help="seconds after which no new bisection step starts")
    parser.add_argument("--probe-timeout", type=float, default=600)
    parser.add_argument("--cache", type=Path, default=common.CACHE / "largest",
                        help="graphs and partitions of the probes")
    parser.add_argument("--out", type=Path, default=common.RESULTS,
                        help="where largest.{json,md} go (default benchmarks/results, "
                             "which the suite's report reads)")
    parser.add_argument("--keep-cache", action="store_true",
                        help="keep the probes' graphs (deleted at the end otherwise)")
    parser.add_argument("--workers", type=int, nargs="+", default=[4],
                        help="sarlite world sizes to search (default 4)")
    parser.add_argument("--max-rows-per-step", type=int,
                        help="sarlite's engine.max_rows_per_step (default: whole shards)")
    parser.add_argument("--prepare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare is not None:                     # the capped preparation process
        if args.parts == 1:
            common.cached_graph(args.prepare, DEGREE, FEAT_DIM, cache=args.cache)
        else:
            common.cached_partition(args.prepare, DEGREE, FEAT_DIM, args.parts,
                                    cache=args.cache)
        return
    if args.budget_gib <= 0 or args.start_nodes < MIN_NODES or args.precision <= 0:
        parser.error(f"need --budget-gib > 0, --start-nodes >= {MIN_NODES} and "
                     f"--precision > 0")
    search = Search(args)
    print(f"largest graph search: {args.budget_gib:g} GiB per process", flush=True)
    # both sides under bench_env's fixed mmap threshold (sarlite.init then leaves it)
    facts = records.run_facts(processes=max(args.workers), torch_threads=1,
                              env=common.bench_env())
    dgl = search.largest("dgl", args.start_nodes)
    result = {"budget_gib": args.budget_gib, "precision": args.precision, "dgl": dgl,
              "max_rows_per_step": args.max_rows_per_step, "ratios": {}}
    for workers in args.workers:
        system = f"sar{workers}"
        result[system] = search.largest(system, dgl["largest"] or args.start_nodes)
        result["ratios"][system] = result[system]["largest"] / dgl["largest"] \
            if dgl["largest"] and result[system]["largest"] else None
    result["ratio"] = result["ratios"].get("sar4")       # the suite's target
    result.update(probes=search.log, seconds=search.elapsed(),
                  date=time.strftime("%Y-%m-%d"), machine=machine(), facts=facts,
                  command=common.command_line("benchmarks.largest"))
    write(result, args.out)
    if not args.keep_cache:
        shutil.rmtree(args.cache, ignore_errors=True)
    print(f"DGL {dgl['largest']} nodes; " + ", ".join(
        f"sarlite {s} {result[s]['largest']} nodes ({r if r is None else round(r, 2)}x)"
        for s, r in result["ratios"].items()) + f"; {args.out / 'largest.md'}", flush=True)


if __name__ == "__main__":
    main()
