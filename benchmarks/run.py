"""Benchmark suite: memory, time and traffic of sarlite side by side with single-process DGL.

    python -m benchmarks.run --suite quick          # < 10 min on 2 cores (make bench)
    python -m benchmarks.run --suite full --fresh   # 45-75 min on 2 cores (last two runs: 48, 75)
    python -m benchmarks.run --suite full --cases gat-homophilous-100k --world-sizes 4

For every case of the suite (a graph and a model, see benchmarks/cases.py) it trains, in
this one invocation and with the same initial parameters:

* single-process DGL on the unpartitioned graph (mode ``dgl``), once per thread count
  its comparisons need: a sarlite run on N workers is set against DGL with
  ``min(N, cores)`` torch threads (``OMP_NUM_THREADS`` the same), the cores N one-thread
  workers can use on this machine (run ``dgl T=t``);
* sarlite in modes sar, sa and one-shot on N = 1, 2 and 4 torchrun workers (gloo, one
  thread per worker, METIS partitions made once and cached in benchmarks/results/tmp).
* both sides under the allocator policy ``--allocator`` names (default ``own-defaults``:
  each side as its users have it; ``fixed-both``: glibc's mmap threshold fixed at 128 KiB
  for both; see :data:`benchmarks.common.ALLOCATOR_POLICIES`).
* in the full suite, on the SAGE homophilous and uniform cases, extra runs
  (``--no-extras`` leaves them out): sar on N = 8 (also on the power-law case),
  ``sar-chunked`` (sar with ``max_rows_per_step``) on N = 2, 4, 8 and
  ``sar-bf16``/``sar-fp16`` (16-bit halos) on N = 2, 4; on the GAT case, ``budget`` on
  N = 4: ``engine.memory_budget`` set to 1.05x the larger peak per worker of the sar
  and one-shot runs at N = 4 of the same invocation, so the planner has room for
  one-shot layers (its plan is in the record); on the SAGE and GCN 100k cases,
  ``sar-torch`` and ``one-shot-torch`` on N = 2: sar and one-shot on sarlite's torch
  kernels (``engine.kernels: torch``) instead of DGL's. The variants can also be named
  in ``--modes``. With the extras and the SAGE 100k case, the full suite also makes the
  sampled-training comparison of :mod:`benchmarks.sampled` (sarlite N=2 against
  single-process DGL, three pairs of runs, into ``OUT/sampled``, about two minutes).

A single run's epoch time varies by up to 20% on a shared 2-core machine, more than some
goals' margins, so the full suite makes both runs of each pair a time target compares
three times (``--time-runs``; the pairs are :data:`benchmarks.cases.TIMED_PAIRS`): after
each case's runs, two more rounds of those runs (the first in reverse order, so that
neither run of a pair always runs first), each record's epoch time then being the
median of its runs' (its memory and traffic stay the first run's; every run's figures
and facts are in its record).

Each run is its own set of processes, so a peak is that run's alone. Every record stores
the run's facts (:func:`benchmarks.records.run_facts`: commit, date, machine, software,
threads, allocator) and each worker's own (:func:`benchmarks.records.process_facts`). Per
run it records
the median epoch time over the timed epochs after the warm-up, per-worker memory (RSS
high-water mark, its growth during the timed epochs, and on CUDA the torch allocator's
peak; on CPU torch exposes no allocator counter, so RSS is the measure), the halo bytes
per epoch from sarlite's traffic counters (all workers together) and the analytic lower
bound from the partition (benchmarks/bound.py).

Output, in --out (default benchmarks/results/<suite>): runs/<case>/<run>.json (one per
run, per-worker detail included), summary.md (table with ratios against DGL and against
the bound; targets with PASS/FAIL and margin), summary.json, and plots/<case>.png (memory
per worker and epoch time against N, per mode). The report covers every run JSON in the
directory, so partial runs add to or replace earlier ones (records of another machine,
software or allocator policy go into their own section); --fresh starts empty.
``python -m benchmarks.report --check`` regenerates every summary from its records.
A run that fails or times out is reported as failed and the suite goes on; the exit
status is then 1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from . import common, records
from .bound import expected_bytes, layer_exchanges, lower_bound
from .cases import (BUDGET_MARGIN, EXTRAS, FROM_PEAKS, MODES, SAMPLED_CASE, SUITES,
                    TIMED_PAIRS, VARIANTS, WORLD_SIZES, Case, base_mode)
from .report import HALO_KINDS, dgl_label, write_report

#: ``--time-runs`` when it is not given, per suite
TIME_RUNS_DEFAULT = {"quick": 1, "full": 3}


def _worker_args(case: Case, pipeline_depth: int, device: str,
                 halo_dtype: str = "float32") -> list[str]:
    return ["--model", case.model, "--hidden", str(case.hidden), "--heads", str(case.heads),
            "--num-classes", str(case.num_classes), "--epochs", str(case.epochs),
            "--warmup", str(case.warmup), "--pipeline-depth", str(pipeline_depth),
            "--device", device, "--halo-dtype", halo_dtype]


def summarise(case: Case, mode: str, world: int, workers: list[dict],
              halo_nodes: list[int]) -> dict:
    """One run's record: per-worker maxima, per-epoch time (slowest worker), traffic;
    ``cpu_s_per_epoch`` is the median over the timed epochs of the CPU time all workers
    spent in the epoch together; ``peak_rss_all_mib`` is the sum of the workers' peaks,
    an upper bound on the peak of all workers together (each worker's peak may fall at
    another moment)."""
    epochs = [max(w["epoch_times"][i] for w in workers) for i in range(case.epochs)]
    sent = [w["traffic_per_epoch"] for w in workers]
    halo = sum(v["sent"] for t in sent for k, v in t.items() if k in HALO_KINDS)
    other = sum(v["sent"] for t in sent for k, v in t.items() if k not in HALO_KINDS)
    exchanges = layer_exchanges(case.model, case.feat_dim, case.hidden, case.num_classes,
                                heads=case.heads)

    def top(key):
        values = [w[key] for w in workers if w[key] is not None]
        return max(values) if values else None
    peaks = [max(w["hwm_setup_mib"], w["peak_rss_mib"]) for w in workers]
    return {"case": case.name, "model": case.model, "params": asdict(case), "mode": mode,
            "world_size": world, "run": _label(mode, world),
            "median_epoch_s": statistics.median(epochs), "epoch_times": epochs,
            "peak_rss_mib": max(peaks), "peak_rss_all_mib": sum(peaks),
            "growth_mib": top("growth_mib"),
            "allocator_peak_mib": top("allocator_peak_mib"),
            "allocator_growth_mib": top("allocator_growth_mib"),
            "cpu_steal_pct": top("cpu_steal_pct"),
            "cpu_s_per_epoch": records.cpu_per_epoch(workers, case.epochs),
            "halo_bytes_per_epoch": halo, "other_bytes_per_epoch": other,
            "halo_nodes": halo_nodes, "bound_bytes": lower_bound(halo_nodes, exchanges),
            "expected_bytes": 0 if mode == "dgl" else
            expected_bytes(halo_nodes, exchanges, _layer_modes(mode, workers)),
            "memory_plan": workers[0].get("memory_plan"), "workers": workers}


def _label(mode: str, world: int) -> str:
    """``dgl T=t`` (``world``: DGL's threads) or ``<mode> N=<world>``."""
    return dgl_label(world) if mode == "dgl" else f"{mode} N={world}"


def _file_name(label: str) -> str:
    return label.replace(" ", "_").replace("=", "") + ".json"


def _layer_modes(mode: str, workers: list[dict]) -> str | list[str]:
    """The engine mode of the run, or of each layer where a memory plan chose them."""
    plan = workers[0].get("memory_plan")
    return [c["mode"] for c in plan["choices"]] if plan else base_mode(mode)


def _engine_fields(settings: dict, args) -> dict:
    """The record's engine settings: the invocation's, overridden by the variant's."""
    return {"halo_dtype": args.halo_dtype, "max_rows_per_step": None,
            "memory_budget": None, "kernels": "auto"} | settings


def _peak(runs_dir: Path, run: str) -> float:
    """The peak RSS per worker (MiB) of an earlier run of this case and invocation."""
    path = runs_dir / _file_name(run)
    record = json.loads(path.read_text()) if path.exists() else {}
    if "peak_rss_mib" not in record:
        raise RuntimeError(f"the budget run needs a finished {run} run of this case "
                           f"before it, in the same invocation")
    return record["peak_rss_mib"]


def _settings(mode: str, world: int, runs_dir: Path) -> dict:
    """The variant's engine settings with :data:`FROM_PEAKS` resolved to bytes."""
    settings = dict(VARIANTS[mode].settings) if mode in VARIANTS else {}
    if settings.get("memory_budget") == FROM_PEAKS:
        peak = max(_peak(runs_dir, f"{m} N={world}") for m in ("sar", "one-shot"))
        settings["memory_budget"] = int(BUDGET_MARGIN * peak * 2**20)
    return settings


def _flags(settings: dict) -> list[str]:
    """The worker's command-line arguments for engine settings."""
    return [arg for key, value in settings.items()
            for arg in (f"--{key.replace('_', '-')}", str(value))]


def _halo_nodes(config: Path) -> list[int]:
    from sarlite.partition.report import partition_report
    return partition_report(config).halo_nodes


def run_plan(case: Case, modes: list[str], world_sizes: list[int],
             extras: tuple[tuple[str, tuple[int, ...]], ...] = (),
             cores: int | None = None) -> list[tuple[str, int]]:
    """``(mode or variant, N)`` of every run of ``case``: first ``("dgl", t)`` for each
    thread count ``t = min(N, cores)`` of the sarlite runs (``cores``: this machine's if
    ``None``; with no sarlite run, ``t = 1``), then the selected modes at the selected N,
    then the case's ``extras`` (from :data:`EXTRAS`) not already there; a budget run
    brings the sar and one-shot runs its budget comes from."""
    cores = os.cpu_count() if cores is None else cores
    plan = [(m, n) for n in world_sizes for m in modes if m != "dgl"]
    plan += [(m, n) for m, sizes in extras for n in sizes if (m, n) not in plan]
    rest = [run for run in plan if run[0] != "budget"]
    budget = [run for run in plan if run[0] == "budget"]
    sources = [(m, n) for _, n in budget for m in ("sar", "one-shot") if (m, n) not in rest]
    sarlite = rest + sources + budget
    threads = sorted({min(n, cores) for _, n in sarlite} or {1})
    return [("dgl", t) for t in threads if "dgl" in modes] + sarlite


def timed_runs(plan: list[tuple[str, int]], cores: int | None = None
               ) -> list[tuple[str, int]]:
    """The runs of ``plan`` that a time target compares: both runs of each of
    :data:`TIMED_PAIRS` that ``plan`` holds (DGL's with ``min(2, cores)`` threads), in the
    plan's order."""
    cores = os.cpu_count() if cores is None else cores
    def resolve(run):
        return ("dgl", min(run[1], cores)) if run[0] == "dgl" else run
    timed = {resolve(run) for pair in TIMED_PAIRS for run in pair
             if all(resolve(r) in plan for r in pair)}
    return [run for run in plan if run in timed]


def _threads(mode: str, world: int) -> int:
    """Torch threads per process of a run: ``world`` for DGL, one per sarlite worker."""
    return world if mode == "dgl" else 1


def _run_facts(mode: str, world: int, args) -> tuple[dict, dict]:
    """The environment a run of ``mode`` on ``world`` workers (DGL: threads) gets, and the
    facts its record stores (:func:`benchmarks.records.run_facts`)."""
    threads = _threads(mode, world)
    env = common.suite_env(threads, args.allocator, sarlite=mode != "dgl")
    return env, records.run_facts(processes=1 if mode == "dgl" else world,
                                  torch_threads=threads, env=env, sarlite_init=mode != "dgl")


def _measure(case: Case, mode: str, world: int, args, runs_dir: Path, env: dict) -> dict:
    """One run of ``mode`` on ``world`` workers (DGL: threads) in environment ``env``: its
    record. Raises ``RuntimeError`` or ``subprocess.TimeoutExpired`` when it fails."""
    extra = _worker_args(case, args.pipeline_depth, args.device, args.halo_dtype)
    threads = _threads(mode, world)
    settings = {}
    if mode == "dgl":
        halo = [0]
        graph = common.cached_graph(case.num_nodes, case.avg_degree, case.feat_dim,
                                    case.graph, args.cache)
        workers = common.run_json([sys.executable, "-m", "benchmarks.worker", "--mode",
                                   "dgl", "--graph", str(graph), "--threads",
                                   str(threads), *extra], args.timeout, env=env)
    else:
        _, config = common.cached_partition(case.num_nodes, case.avg_degree, case.feat_dim,
                                            world, case.graph, args.cache)
        halo = _halo_nodes(config)
        settings = _settings(mode, world, runs_dir)
        workers = common.run_json(common.torchrun(
            world, "benchmarks.worker", ["--mode", base_mode(mode), "--config",
                                         str(config), *extra, *_flags(settings)]),
            args.timeout, num_procs=world, env=env)
    record = summarise(case, mode, world, workers, halo)
    record.update(pipeline_depth=args.pipeline_depth, device=args.device, threads=threads,
                  **_engine_fields(settings, args))
    return record


def add_repeat(record: dict, again: dict, facts: dict) -> dict:
    """``record`` with another run of the same configuration (``again``, made with
    ``facts``) in its ``repeats``; its ``median_epoch_s`` and ``cpu_s_per_epoch`` become
    the medians over all its runs (each run's own median epoch). Memory and traffic stay
    the first run's."""
    repeats = record.get("repeats", []) + [
        {key: again[key] for key in ("epoch_times", "median_epoch_s", "cpu_s_per_epoch",
                                     "peak_rss_mib", "growth_mib")} | {"facts": facts}]
    record = record | {"repeats": repeats}
    cpu = [records.first_run(record)[1]] + [r["cpu_s_per_epoch"] for r in repeats]
    return record | {"median_epoch_s": statistics.median(records.run_medians(record)),
                     "cpu_s_per_epoch": statistics.median(cpu)}


def _announce(counter: list[int], total: int, text: str) -> float:
    counter[0] += 1
    print(f"[{counter[0]}/{total}] {text} ...", end=" ", flush=True)
    return time.perf_counter()


def _failed(start: float, err: Exception) -> None:
    print(f"FAILED after {time.perf_counter() - start:.0f} s: "
          f"{str(err).splitlines()[0][:200]}", flush=True)


def run_case(case: Case, plan: list[tuple[str, int]], args, out: Path,
             counter: list[int], total: int) -> bool:
    """The runs ``plan`` of one case, then ``args.time_runs - 1`` more rounds of its
    :func:`timed_runs` (the second round in reverse order, the third forward, ...); each
    record goes to ``out/runs/<case>/``."""
    ok = True
    runs_dir = out / "runs" / case.name
    runs_dir.mkdir(parents=True, exist_ok=True)
    recorded = {}
    for mode, world in plan:
        label = _label(mode, world)
        start = _announce(counter, total, f"{case.name} {label}")
        env, facts = _run_facts(mode, world, args)
        try:
            record = _measure(case, mode, world, args, runs_dir, env)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            ok = False
            record = {"case": case.name, "model": case.model, "mode": mode,
                      "world_size": world, "run": label,
                      "threads": _threads(mode, world), "error": str(err)[-2000:]}
            _failed(start, err)
        else:
            bound = record["bound_bytes"]
            vs = f" ({record['halo_bytes_per_epoch'] / bound:.3f}x bound)" if bound else ""
            print(f"{time.perf_counter() - start:.0f} s: epoch {record['median_epoch_s']:.2f} s, "
                  f"peak {record['peak_rss_mib']:.0f} MiB, growth {record['growth_mib']:.0f} "
                  f"MiB, halo {record['halo_bytes_per_epoch'] / 2**20:.1f} MiB/epoch{vs}, "
                  f"CPU steal {record['cpu_steal_pct']:.0f}%",
                  flush=True)
        record.update(allocator_policy=args.allocator, facts=facts)
        (runs_dir / _file_name(label)).write_text(json.dumps(record, indent=1))
        recorded[mode, world] = record
    timed = timed_runs(plan)
    for round_ in range(2, args.time_runs + 1):
        # every other round in reverse, so that neither run of a pair always goes first
        for mode, world in (timed[::-1] if round_ % 2 == 0 else timed):
            record = recorded[mode, world]
            if "error" in record:
                continue
            start = _announce(counter, total, f"{case.name} {record['run']}, run {round_} "
                              f"of {args.time_runs}")
            env, facts = _run_facts(mode, world, args)
            try:
                again = _measure(case, mode, world, args, runs_dir, env)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                ok = False
                _failed(start, err)
                continue
            record = recorded[mode, world] = add_repeat(record, again, facts)
            print(f"{time.perf_counter() - start:.0f} s: epoch {again['median_epoch_s']:.2f} s "
                  f"(median of the runs so far {record['median_epoch_s']:.2f} s)", flush=True)
            (runs_dir / _file_name(record["run"])).write_text(json.dumps(record, indent=1))
    return ok


def run_sampled(case: Case, args, out: Path) -> bool:
    """The sampled-training comparison on ``case``'s graph (:mod:`benchmarks.sampled`,
    N=2), into ``out/sampled``; whether it finished."""
    from . import sampled
    print(f"sampled training, {case.name}'s graph: DGL and sarlite N=2 ...", flush=True)
    try:
        sampled.main(["--world-size", "2", "--num-nodes", str(case.num_nodes),
                      "--repeats", "3", "--out", str(out / "sampled"), "--cache", str(args.cache),
                      "--timeout", str(args.timeout)])
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"sampled training FAILED: {str(err).splitlines()[0][:200]}", flush=True)
        return False
    return True


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=sorted(SUITES), default="quick",
                        help="which cases (default quick)")
    parser.add_argument("--cases", nargs="+", metavar="NAME",
                        help="only these cases of the suite")
    parser.add_argument("--models", nargs="+", choices=("sage", "gcn", "gat"),
                        help="only cases of these models")
    parser.add_argument("--modes", nargs="+", choices=("dgl",) + MODES + tuple(VARIANTS),
                        default=["dgl", *MODES], help="runs to make (default dgl and the "
                        "three modes; the variants: sar-chunked = sar with "
                        "max_rows_per_step, sar-bf16/sar-fp16 = sar with 16-bit halos, "
                        "budget = engine.memory_budget at 1.05x the larger peak of the "
                        "sar and one-shot runs at the same N, which it then also makes; "
                        "sar-torch/one-shot-torch = on sarlite's torch kernels)")
    parser.add_argument("--no-extras", action="store_true",
                        help="leave out the suite's extra runs (full suite: sar N=8, "
                        "sar-chunked N=2,4,8, sar-bf16/fp16 N=2,4 on the SAGE homophilous "
                        "and uniform cases; sar N=8 on the power-law case; budget N=4 on "
                        "the GAT case; sar-torch and "
                        "one-shot-torch N=2 on the SAGE and GCN 100k cases; the sampled-"
                        "training comparison, sarlite N=2 against DGL, on the SAGE 100k "
                        "graph)")
    parser.add_argument("--world-sizes", nargs="+", type=int, default=list(WORLD_SIZES),
                        metavar="N", help="sarlite worker counts (default 1 2 4)")
    sizes = parser.add_argument_group("overrides for every selected case (tests, tries)")
    sizes.add_argument("--num-nodes", type=int)
    sizes.add_argument("--avg-degree", type=float)
    sizes.add_argument("--hidden", type=int, help="hidden width (per head for GAT)")
    sizes.add_argument("--epochs", type=int, help="timed epochs (>= 3 for reported medians)")
    sizes.add_argument("--warmup", type=int, help="warm-up epochs before timing")
    parser.add_argument("--pipeline-depth", type=int, default=1,
                        help="shards fetched ahead in sar/sa modes (default 1)")
    parser.add_argument("--halo-dtype", choices=("float32", "bfloat16", "float16"),
                        default="float32", help="type halo rows travel in (engine."
                        "halo_dtype); not float32: no longer exact")
    parser.add_argument("--allocator", choices=common.ALLOCATOR_POLICIES,
                        default="own-defaults", help="allocator policy of both sides "
                        "(default own-defaults: sarlite's workers as sarlite.init sets "
                        "glibc, DGL with glibc's defaults; fixed-both: "
                        "MALLOC_MMAP_THRESHOLD_=131072 for both)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: worker r on GPU r mod #GPUs, gloo still carries the "
                             "exchanges; allocator peaks are then measured")
    parser.add_argument("--out", type=Path, help="results folder "
                        "(default benchmarks/results/<suite>)")
    parser.add_argument("--cache", type=Path, default=common.CACHE,
                        help="where generated graphs and partitions are kept")
    parser.add_argument("--fresh", action="store_true",
                        help="empty the results folder first (else runs add up)")
    parser.add_argument("--timeout", type=float, default=1200,
                        help="seconds per run before it is killed and marked failed")
    parser.add_argument("--time-runs", type=int, metavar="K",
                        help="make both runs of each pair a time target compares (sar and "
                        "one-shot N=2 against DGL of equal cores; sar-chunked N=2 against "
                        "sar N=2; sar against sar-whole at N=2 and 4; budget N=4 against "
                        "sar N=4) K times, in rounds after each case's runs, and report "
                        "the median of their epoch times (default: 3 in the full suite, 1 "
                        "in the quick one)")
    return parser


def select(args, parser) -> list[Case]:
    """The suite's cases after the selection and override options."""
    cases = SUITES[args.suite]
    if args.cases:
        unknown = set(args.cases) - {c.name for c in cases}
        if unknown:
            parser.error(f"unknown case(s) {sorted(unknown)} in suite {args.suite}; "
                         f"choose from {[c.name for c in cases]}")
        cases = [c for c in cases if c.name in args.cases]
    if args.models:
        cases = [c for c in cases if c.model in args.models]
    if not cases:
        parser.error("the selection leaves no case to run")
    if any(n < 1 for n in args.world_sizes):
        parser.error("world sizes must be >= 1")
    if args.time_runs is not None and args.time_runs < 1:
        parser.error("--time-runs must be >= 1")
    return [c.with_overrides(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                             hidden=args.hidden, epochs=args.epochs, warmup=args.warmup)
            for c in cases]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    cases = select(args, parser)
    out = args.out or common.RESULTS / args.suite
    if args.fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    plans = {c.name: run_plan(c, args.modes, args.world_sizes,
                              () if args.no_extras else EXTRAS[args.suite].get(c.name, ()))
             for c in cases}
    args.time_runs = args.time_runs or TIME_RUNS_DEFAULT[args.suite]
    total = sum(len(p) + (args.time_runs - 1) * len(timed_runs(p)) for p in plans.values())
    print(f"benchmarks.run: suite {args.suite}, {len(cases)} case(s), {total} runs -> {out}",
          flush=True)
    start = time.perf_counter()
    ok, counter = True, [0]
    for case in cases:
        ok &= run_case(case, plans[case.name], args, out, counter, total)
    if args.suite == "full" and not args.no_extras and \
            any(c.name == SAMPLED_CASE for c in cases):
        ok &= run_sampled(next(c for c in cases if c.name == SAMPLED_CASE), args, out)
    table = write_report(out, args.suite)
    print(f"done in {time.perf_counter() - start:.0f} s; table: {table}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
