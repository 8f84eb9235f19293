"""ogbn-products at its real size, from OGB's files on disk: partition and train, sarlite
against DGL in one run.

    python -m benchmarks.products_scale [--data-dir DIR] [--parts 4] [--steps write,partition,train]

``write`` makes a synthetic graph of ogbn-products' size (2,449,029 nodes, 61,859,140
undirected edges stored once, 100 features, 47 classes, OGB's 8/2/90 % sales-ranking
split sizes) in OGB's layout under ``DIR/ogbn_products/`` (once; about 3 GB of csv.gz).
It is a planted-partition graph: each node's class is a community, 85 % of edges stay
inside one. Features are the class centre plus noise, rounded to 2 decimals.

``partition`` runs, each in its own process tree under a memory watcher, "files on disk
to written partitions": ``load_graph("ogbn-products", DIR)`` then sarlite's
``partition_graph`` into ``--parts`` parts (with its default ``metis_max_edges="auto"``,
and with ``None``: METIS on every edge), and the same load then DGL's
``dgl.distributed.partition_graph``. Peak RSS, wall time and edge cut of each.

``train`` runs one warm-up and one timed epoch of GraphSAGE-mean 3 x 256 (the full-batch
literature model) with sarlite sar on ``--parts`` torchrun workers from sarlite's
partitions, and the same model in single-process DGL on the whole graph; the DGL run is
stopped when it passes ``--cap-gib`` and reported as not fitting. Both run in the
environment users have (no allocator variables): sarlite's workers as its launcher starts
them (torch's huge pages on), DGL as installed. Each record stores which.

Results: ``benchmarks/results/products_scale.{json,md}``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from . import common, records
from .capped import run_capped
from .report import machine

NUM_NODES, NUM_EDGES, FEAT_DIM, NUM_CLASSES = 2_449_029, 61_859_140, 100, 47
SPLIT = (0.08, 0.02, 0.90)                 # ogbn-products: 196,615 / 39,323 / 2,213,091
INSIDE = 0.85
SARLITE_RUNS = {"sarlite": "auto", "sarlite-all-edges": None}   # metis_max_edges of each
_ROWS = 1 << 20


# ------------------------------------------------------------------ the synthetic files

def _table_writer(path: Path, codes_chunks, table: list[str] | None = None) -> None:
    """Write rows of table indices as csv lines (fast: no float formatting per value);
    with no ``table``, the integers themselves. OGB's header-less ``csv.gz``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lookup = str if table is None else table.__getitem__
    with gzip.open(path, "wt", compresslevel=1, newline="") as out:
        for codes in codes_chunks:
            out.write("\n".join(",".join(map(lookup, row)) for row in codes.tolist()))
            out.write("\n")


def write_products_like(folder: Path, num_nodes: int = NUM_NODES, num_edges: int = NUM_EDGES,
                        seed: int = 0) -> None:
    """The synthetic graph in OGB's ogbn-products layout (see the module docstring)."""
    def write_ints(path: Path, values: np.ndarray) -> None:      # one integer a line
        column = np.asarray(values, dtype=np.int64).reshape(-1, 1)
        _table_writer(path, (column[lo:lo + _ROWS] for lo in range(0, len(column), _ROWS)))

    rng = np.random.default_rng(seed)
    label = rng.integers(0, NUM_CLASSES, num_nodes)
    members = np.argsort(label, kind="stable")
    counts = np.bincount(label, minlength=NUM_CLASSES)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    raw = folder / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "RELEASE_v1.txt").write_text("# Release note for version 1\n")

    def edge_chunks():
        for lo in range(0, num_edges, _ROWS):
            m = min(_ROWS, num_edges - lo)
            src = rng.integers(0, num_nodes, m)
            cls = label[src]
            dst = members[starts[cls] + (rng.random(m) * counts[cls]).astype(np.int64)]
            out = rng.random(m) >= INSIDE
            dst[out] = rng.integers(0, num_nodes, int(out.sum()))
            yield np.stack([src, dst], 1)
    ids = [str(i) for i in range(num_nodes)]
    _table_writer(raw / "edge.csv.gz", edge_chunks(), ids)

    centres = rng.standard_normal((NUM_CLASSES, FEAT_DIM)).astype(np.float32)
    values = [f"{v / 100:.2f}" for v in range(-500, 501)]

    def feat_chunks():
        for lo in range(0, num_nodes, _ROWS):
            cls = label[lo:lo + _ROWS]
            x = centres[cls] + rng.standard_normal((len(cls), FEAT_DIM), dtype=np.float32)
            yield np.clip(np.rint(x * 100), -500, 500).astype(np.int64) + 500
    _table_writer(raw / "node-feat.csv.gz", feat_chunks(), values)
    write_ints(raw / "node-label.csv.gz", label)
    write_ints(raw / "num-node-list.csv.gz", [num_nodes])
    write_ints(raw / "num-edge-list.csv.gz", [num_edges])
    order = rng.permutation(num_nodes)
    cuts = np.cumsum([int(f * num_nodes) for f in SPLIT])
    for part, ids in (("train", order[:cuts[0]]), ("valid", order[cuts[0]:cuts[1]]),
                      ("test", order[cuts[1]:])):
        write_ints(folder / "split" / "sales_ranking" / f"{part}.csv.gz", np.sort(ids))


# ------------------------------------------------------------------ measured children

def _partition_child(tool: str, data_dir: str, parts: int, out: str, result: str) -> None:
    """Files on disk to written partitions, in this process; writes ``result`` JSON."""
    import logging

    import dgl

    import sarlite
    from sarlite.data import load_graph

    logging.basicConfig(level=logging.INFO, format="  %(message)s", stream=sys.stdout)
    start = time.time()
    g = load_graph("ogbn-products", data_dir)
    loaded = time.time()
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{tool}: loaded {g.num_nodes()} nodes, {g.num_edges()} edges in "
          f"{loaded - start:.0f} s, peak so far {rss_loaded:.2f} GiB", flush=True)
    metis_max_edges = SARLITE_RUNS.get(tool)
    if tool in SARLITE_RUNS:
        sarlite.partition_graph(g, "products", parts, out, metis_max_edges=metis_max_edges)
    else:
        dgl.distributed.partition_graph(g, "products", parts, out, part_method="metis")
    done = time.time()
    Path(result).write_text(json.dumps({
        "tool": tool, "load_s": loaded - start, "partition_s": done - loaded,
        "total_s": done - start, "peak_rss_gib": resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak_after_load_gib": rss_loaded,
        "num_nodes": g.num_nodes(), "num_edges": g.num_edges(),
        "metis_max_edges": metis_max_edges}))


def _parts_dir(work: Path, tool: str, parts: int) -> Path:
    return work / f"parts_{tool}_p{parts}"


def partition(args, work: Path) -> list[dict]:
    """Each of ``args.tools`` from the files on disk to written partitions, into every
    part count of ``args.parts`` (DGL's: the first only), each in a capped process tree."""
    rows = []
    jobs = [(tool, parts) for tool in args.tools for parts in
            (args.parts if tool in SARLITE_RUNS else args.parts[:1])]
    for tool, parts in jobs:
        out, result = _parts_dir(work, tool, parts), work / f"partition_{tool}_p{parts}.json"
        shutil.rmtree(out, ignore_errors=True)
        result.unlink(missing_ok=True)
        print(f"partition: {tool} into {parts} parts ...", flush=True)
        cmd = [sys.executable, "-m", "benchmarks.products_scale", "--child-partition", tool,
               "--data-dir", str(args.data_dir), "--parts", str(parts),
               "--child-out", str(out), "--child-result", str(result)]
        facts = records.run_facts(1, 1, common.user_env(), sarlite_init=False)
        run = run_capped(cmd, args.cap_gib * 1024, args.cap_gib * 1024, args.timeout,
                         common.user_env(), cwd=common.ROOT)
        row = {"tool": tool, "parts": parts, "status": run.status, "facts": facts,
               "watched_peak_gib": run.peak_process_mib / 1024, "wall_s": run.seconds}
        if run.status == "ok":
            row.update(json.loads(result.read_text()))
            from sarlite import partition_report
            row["edge_cut"] = partition_report(str(out / "products.json")).edge_cut
        else:
            row["detail"] = run.output_tail[-800:]
        if tool != "sarlite":
            shutil.rmtree(out, ignore_errors=True)
        print(f"  {row}", flush=True)
        rows.append(row)
    return rows


def _train_runs(args, work: Path) -> dict[str, list[str]]:
    """The command of each system of ``args.systems``: sarlite sar on N torchrun workers
    for each N of ``args.parts`` (from sarlite's N-part partition) and single-process DGL
    with as many torch threads as the largest N's workers use cores."""
    runs = {}
    for parts in args.parts:
        config = _parts_dir(work, "sarlite", parts) / "products.json"
        runs[f"sarlite sar N={parts}"] = common.torchrun(
            parts, "benchmarks.worker", ["--mode", "sar", "--config", str(config)])
    threads = min(max(args.parts), os.cpu_count() or 1)
    runs["dgl"] = [sys.executable, "-m", "benchmarks.worker", "--mode", "dgl", "--dataset",
                   "ogbn-products", "--data-dir", str(args.data_dir),
                   "--threads", str(threads)]
    return {name: cmd for name, cmd in runs.items()
            if name == "dgl" and "dgl" in args.systems
            or name != "dgl" and "sarlite" in args.systems}


def _processes_threads(system: str, args) -> tuple[int, int]:
    """``(processes, torch threads each)`` of a system of :func:`_train_runs`."""
    if system == "dgl":
        return 1, min(max(args.parts), os.cpu_count() or 1)
    return int(system.rsplit("=", 1)[1]), 1


def train(args, work: Path) -> list[dict]:
    model = ["--model", "sage", "--hidden", str(args.hidden), "--num-classes",
             str(NUM_CLASSES), "--warmup", "1", "--epochs", "1"]
    rows = []
    for system, cmd in _train_runs(args, work).items():
        result_dir = work / f"train_{system.replace(' ', '_').replace('=', '')}"
        shutil.rmtree(result_dir, ignore_errors=True)
        result_dir.mkdir(parents=True)
        print(f"train: {system} ...", flush=True)
        # sarlite's workers as its launcher starts them (huge pages on), DGL as installed
        env = common.suite_env(1) if system != "dgl" else common.user_env()
        facts = records.run_facts(*_processes_threads(system, args), env,
                                  sarlite_init=system != "dgl")
        run = run_capped(cmd + model + ["--result-dir", str(result_dir)],
                         args.cap_gib * 1024, args.cap_gib * 1024, args.timeout,
                         env, cwd=common.ROOT)
        row = {"system": system, "status": run.status, "wall_s": run.seconds, "facts": facts,
               "watched_peak_process_gib": run.peak_process_mib / 1024,
               "watched_peak_total_gib": run.peak_total_mib / 1024}
        workers = common.read_results(result_dir) if run.status == "ok" else []
        if workers:
            peaks = [max(w["hwm_setup_mib"], w["peak_rss_mib"]) / 1024 for w in workers]
            row.update(workers=len(workers),
                       epoch_s=max(w["epoch_times"][0] for w in workers),
                       peak_worker_gib=max(peaks), peak_workers_sum_gib=sum(peaks),
                       peak_setup_gib=max(w["hwm_setup_mib"] for w in workers) / 1024,
                       peak_training_gib=max(w["peak_rss_mib"] for w in workers) / 1024)
        else:
            row["detail"] = run.output_tail[-800:]
        print(f"  {row}", flush=True)
        rows.append(row)
    return rows


# ------------------------------------------------------------------ report

def _allocators(rows: list[dict]) -> str:
    """Each trained system's allocator policy, from its facts."""
    said = {}
    for r in rows:
        if "system" in r and r.get("facts"):
            who = "DGL" if r["system"] == "dgl" else "sarlite"
            said.setdefault(who, records.describe_allocator(r["facts"]["allocator"]))
    return "; ".join(f"{who}: {what}" for who, what in said.items()) or "not recorded"


def markdown(result: dict) -> str:
    """products_scale.md from products_scale.json."""
    rows = [*(result.get("partition") or []),
            *(r for entry in (result.get("train") or {}).values() for r in entry["runs"])]
    lines = ["# ogbn-products size from OGB's files: sarlite against DGL", "",
             *records.header([r["facts"] for r in rows if r.get("facts")]),
             "Commands: " + "; then ".join(f"`{c}`" for c in result["commands"]) + ".",
             f"Synthetic planted-partition graph of {result['scale']:g} x ogbn-products' size "
             f"written in OGB's layout ({int(NUM_NODES * result['scale']):,} nodes, "
             f"{int(NUM_EDGES * result['scale']):,} undirected edges stored once, "
             f"{FEAT_DIM} features, {NUM_CLASSES} classes); memory cap "
             f"{result['cap_gib']} GiB per process tree. Environment as users have it "
             f"(allocator: {_allocators(rows)}); sarlite's workers run one torch thread "
             f"each, DGL as many as the most workers use cores.", ""]
    part = result.get("partition")
    if part:
        lines += ["## Files on disk to written partitions", "",
                  "| tool | status | load (s) | partition + write (s) | total (s) | "
                  "peak RSS (GiB) | edge cut |", "|---|---|---|---|---|---|---|"]
        counts = [r.get("parts", result["parts"]) for r in part]     # older records: none
        for r, parts in zip(part, counts):
            name = r["tool"] if r["tool"] == "dgl" else \
                f"{r['tool']} (metis_max_edges={r.get('metis_max_edges')!r})"
            name += f", {parts} parts"
            peak = r.get("peak_rss_gib", r["watched_peak_gib"])
            over = ">" if r["status"] != "ok" else ""
            seconds = [f"{r[k]:.0f}" if k in r else "-" for k in ("load_s", "partition_s")]
            lines.append(f"| {name} | {r['status']} | {seconds[0]} | {seconds[1]} | "
                         f"{r.get('total_s', r['wall_s']):.0f} | {over}{peak:.2f} | "
                         f"{r.get('edge_cut', '-')} |")
        dgls = [(d, n) for d, n in zip(part, counts) if d["tool"] == "dgl"]
        for r, parts in zip(part, counts):      # against DGL's run into as many parts
            dgl = next((d for d, n in dgls if n == parts), None)
            if dgl is None or r["tool"] == "dgl" or r["status"] != "ok":
                continue
            if dgl["status"] == "ok":
                ratio = f"{r['peak_rss_gib'] / dgl['peak_rss_gib']:.2f}x DGL's peak"
            else:
                ratio = (f"< {r['peak_rss_gib'] / dgl['watched_peak_gib']:.2f}x DGL's peak "
                         f"(DGL was stopped at {dgl['watched_peak_gib']:.1f} GiB)")
            lines.append(f"\n{r['tool']}, {parts} parts: {ratio}; goal <= 0.70x and <= 12 GB.")
        lines.append("")
    for hidden, entry in sorted((result.get("train") or {}).items(), key=lambda x: int(x[0])):
        lines += [f"## One epoch of GraphSAGE-mean 3 x {hidden}", "",
                  f"One warm-up and one timed epoch; every process tree capped at "
                  f"{entry['cap_gib']:g} GiB.", "",
                  "| system | status | timed epoch (s) | peak RSS per process (GiB): "
                  "loading + warm-up / timed epoch | peak RSS of all processes (GiB) | "
                  "all processes vs DGL's peak |", "|---|---|---|---|---|---|"]
        dgl = next((r for r in entry["runs"] if r["system"] == "dgl"
                    and r["status"] == "ok"), None)
        for r in entry["runs"]:
            epoch = f"{r['epoch_s']:.0f}" if "epoch_s" in r else "-"
            over = ">" if r["status"] != "ok" else ""
            peak = f"{over}{r.get('peak_worker_gib', r['watched_peak_process_gib']):.2f}"
            if "peak_setup_gib" in r:
                peak += f" ({r['peak_setup_gib']:.2f} / {r['peak_training_gib']:.2f})"
            total = r["watched_peak_total_gib"]
            ratio = f"{total / dgl['watched_peak_total_gib']:.2f}x" \
                if dgl is not None and r["status"] == "ok" else "-"
            lines.append(f"| {r['system']} | {r['status']} | {epoch} | {peak} | "
                         f"{over}{total:.2f} | {ratio} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.products_scale",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=common.CACHE / "ogb",
                        help="where ogbn_products/ is written once and read from")
    parser.add_argument("--parts", type=int, nargs="+", default=[4],
                        help="worker counts: sarlite partitions into each and trains on "
                             "each (default 4)")
    parser.add_argument("--tools", nargs="+", default=[*SARLITE_RUNS, "dgl"],
                        choices=[*SARLITE_RUNS, "dgl"],
                        help="partitioners the partition step measures (default all)")
    parser.add_argument("--systems", nargs="+", default=["sarlite", "dgl"],
                        choices=["sarlite", "dgl"],
                        help="what the train step runs (default both)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of ogbn-products' size to write (a quick try: 0.01; "
                             "use its own --data-dir)")
    parser.add_argument("--steps", default="write,partition,train",
                        help="comma-separated subset of write,partition,train")
    parser.add_argument("--cap-gib", type=float, default=20.0,
                        help="memory cap of each measured process tree (default 20 GiB "
                             "of this 24 GB machine)")
    parser.add_argument("--hidden", type=int, default=256,
                        help="hidden width of the 3-layer GraphSAGE (default 256)")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--out", type=Path, default=common.RESULTS,
                        help="where products_scale.{json,md} go")
    parser.add_argument("--child-partition", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    parser.add_argument("--child-result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_partition:
        _partition_child(args.child_partition, str(args.data_dir), args.parts[0],
                         args.child_out, args.child_result)
        return
    steps = set(args.steps.split(","))
    unknown = steps - {"write", "partition", "train"}
    if unknown:
        parser.error(f"unknown step(s) {sorted(unknown)}")
    folder = args.data_dir / "ogbn_products"
    work = args.data_dir / "products_scale_work"
    work.mkdir(parents=True, exist_ok=True)
    if "write" in steps and not (folder / "RELEASE_v1.txt").is_file():
        print(f"writing the synthetic ogbn_products folder to {folder} ...", flush=True)
        start = time.time()
        partial = folder.with_name("ogbn_products.partial")
        shutil.rmtree(partial, ignore_errors=True)
        write_products_like(partial, int(NUM_NODES * args.scale),
                            int(NUM_EDGES * args.scale))
        os.replace(partial, folder)
        print(f"  written in {time.time() - start:.0f} s", flush=True)
    result_path = args.out / "products_scale.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    command = "python -m benchmarks.products_scale " + " ".join(
        "DIR" if a == str(args.data_dir) else a for a in sys.argv[1:])
    result.update(date=time.strftime("%Y-%m-%d"), machine=machine(), parts=args.parts,
                  cap_gib=args.cap_gib, scale=args.scale,
                  commands=[*result.get("commands", []), command])
    if "partition" in steps:
        result["partition"] = partition(args, work)
    if "train" in steps:          # one entry per model width, so runs of both stay
        trained = result.get("train") if isinstance(result.get("train"), dict) else {}
        trained[str(args.hidden)] = {"cap_gib": args.cap_gib, "runs": train(args, work)}
        result["train"] = trained
    args.out.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(result, indent=1))
    (args.out / "products_scale.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
