"""Pull random rows of a row-sharded DistTensor: time, and bytes moved against the bound.

    python -m benchmarks.kv_pull [--rows 1000000] [--width 128] [--world 4]
                                 [--requests 1000000] [--repeats 5]

A float32 DistTensor of ``rows x width`` is split evenly over ``world`` torchrun workers
(gloo). Every worker asks for ``requests / world`` uniformly random row ids (so
``requests`` rows in all, duplicates included) in one collective pull, ``repeats`` times
after a warm-up; the time of a pull is the slowest worker's. Bytes are the KV traffic
counters (``sarlite.comm.traffic``, kind ``kv_pull``: ids, headers and rows sent to other
workers) plus the two size exchanges of ``world`` int64 per worker that the counters
leave out.

The bound is what any pull must move: each distinct id a worker asks for and does not
own goes to its owner once (8 bytes) and its row comes back once (``width x 4`` bytes).
Sending every requested remote id and row, duplicates included, is shown as well. Writes
``benchmarks/results/kv_pull.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from . import common, records

ID_BYTES = 8


def _even_ranges(total: int, parts: int) -> list[list[int]]:
    cuts = [total * p // parts for p in range(parts + 1)]
    return [[a, b] for a, b in zip(cuts, cuts[1:])]


def worker(args: argparse.Namespace) -> None:
    """One torchrun worker: build the tensor, pull, time, count, check the rows."""
    import torch

    import sarlite
    from sarlite.comm import barrier, traffic
    from sarlite.kv import DistTensor, init_kvstore
    from sarlite.partition import NodePartitionPolicy, RangePartitionBook

    rank, world = sarlite.init()
    torch.set_num_threads(1)
    ranges = _even_ranges(args.rows, world)
    book = RangePartitionBook(rank, world, ranges, [[0, 0]] * world)
    init_kvstore(book)
    table = DistTensor((args.rows, args.width), torch.float32, "table",
                       init_func=lambda shape, dtype, ids: ids.to(dtype).unsqueeze(1)
                       .repeat(1, shape[1]), part_policy=NodePartitionPolicy(book))
    ids = torch.randint(0, args.rows, (args.requests // world,),
                        generator=torch.Generator().manual_seed(rank))
    table[ids[:1000]]                                      # warm-up
    seconds, counted = [], {}
    for _ in range(args.repeats):
        barrier("benchmark")
        traffic.reset()
        start = time.perf_counter()
        rows = table[ids]
        seconds.append(time.perf_counter() - start)
        counted = traffic.snapshot()["kv_pull"]
    lo, hi = ranges[rank]
    remote = ids[(ids < lo) | (ids >= hi)]
    common.write_result(args.result_dir, rank, {
        "seconds": seconds, "sent": counted["sent"], "received": counted["received"],
        "requested": ids.numel(), "remote": remote.numel(),
        "distinct_remote": torch.unique(remote).numel(),
        "correct": bool(torch.equal(rows, ids.to(torch.float32).unsqueeze(1)
                                    .expand(-1, args.width)))})
    sarlite.finalize()


def summarize(args: argparse.Namespace, results: list[dict], facts: dict) -> dict:
    """The record: totals over the workers' ``results`` and the run's ``facts``
    (:func:`benchmarks.records.run_facts`)."""
    row_bytes = args.width * 4
    per_pull = [max(r["seconds"][i] for r in results) for i in range(args.repeats)]
    size_exchanges = args.world * 2 * (args.world - 1) * ID_BYTES
    moved = sum(r["sent"] for r in results) + size_exchanges
    bound = sum(r["distinct_remote"] for r in results) * (ID_BYTES + row_bytes)
    naive = sum(r["remote"] for r in results) * (ID_BYTES + row_bytes)
    return {"rows": args.rows, "width": args.width, "world": args.world,
            "requested_rows": sum(r["requested"] for r in results),
            "remote_rows": sum(r["remote"] for r in results),
            "distinct_remote_rows": sum(r["distinct_remote"] for r in results),
            "seconds_per_pull_median": statistics.median(per_pull),
            "seconds_per_pull": per_pull,
            "bytes_moved": moved, "bytes_counted_kv_pull": moved - size_exchanges,
            "bytes_size_exchanges": size_exchanges, "bytes_bound": bound,
            "bytes_without_dedupe": naive, "moved_over_bound": moved / bound,
            "all_rows_correct": all(r["correct"] for r in results),
            "load_average_1min_at_end": os.getloadavg()[0], "cpus": os.cpu_count(),
            "facts": facts}


def markdown(s: dict) -> str:
    """``kv_pull.md``: a function of the record ``s`` alone."""
    mib = 1024 ** 2
    return "\n".join([
        f"# DistTensor pull: {s['requested_rows']:,} random rows of width {s['width']} "
        f"from {s['rows']:,} rows, {s['world']} workers",
        "",
        *records.header([s["facts"]]),
        f"Allocator: {records.describe_allocator(s['facts']['allocator'])}.",
        "",
        f"`python -m benchmarks.kv_pull --rows {s['rows']} --width {s['width']} --world "
        f"{s['world']} --requests {s['requested_rows']} --repeats "
        f"{len(s['seconds_per_pull'])}` (gloo on CPU, one thread per worker, all workers "
        f"on one machine with {s['cpus']} CPUs; 1-minute load average "
        f"{s['load_average_1min_at_end']:.1f} at the end of the run, the workers' own load "
        f"included). Times depend on the machine's load; bytes are exact.",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| time per pull (slowest worker, median of {len(s['seconds_per_pull'])}) | "
        f"{s['seconds_per_pull_median']:.3f} s "
        f"({s['requested_rows'] / s['seconds_per_pull_median'] / 1e6:.2f} M rows/s) |",
        f"| requested rows not owned by the asking worker | {s['remote_rows']:,} |",
        f"| ... distinct per worker | {s['distinct_remote_rows']:,} |",
        f"| bytes moved between workers | {s['bytes_moved']:,} "
        f"({s['bytes_moved'] / mib:.1f} MiB) |",
        f"| bound: distinct remote rows x (8 B id + {s['width'] * 4} B row) | "
        f"{s['bytes_bound']:,} ({s['bytes_bound'] / mib:.1f} MiB) |",
        f"| **moved / bound** | **{s['moved_over_bound']:.5f}x** (target <= 1.2x) |",
        f"| without dedupe (every remote request, id and row) | "
        f"{s['bytes_without_dedupe']:,} ({s['bytes_without_dedupe'] / s['bytes_bound']:.3f}x "
        f"the bound) |",
        f"| every pulled row correct | {s['all_rows_correct']} |",
        "",
        f"Bytes moved = the `kv_pull` traffic counters ({s['bytes_counted_kv_pull']:,}: ids "
        f"with a 16-byte header per peer, then rows) + the two size exchanges per pull "
        f"({s['bytes_size_exchanges']:,}). Each worker sends each distinct remote id once "
        f"and gets its row once; its own rows never enter the exchange.",
        ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--requests", type=int, default=1_000_000,
                        help="rows pulled in all, split evenly over the workers")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    forwarded = ["--worker", "--rows", str(args.rows), "--width", str(args.width),
                 "--world", str(args.world), "--requests", str(args.requests),
                 "--repeats", str(args.repeats)]
    env = common.user_env()
    facts = records.run_facts(processes=args.world, torch_threads=1, env=env)
    results = common.run_json(common.torchrun(args.world, "benchmarks.kv_pull", forwarded),
                              timeout=1800, num_procs=args.world, env=env)
    summary = summarize(args, results, facts)
    (common.RESULTS / "kv_pull.json").write_text(json.dumps(summary, indent=2) + "\n")
    (common.RESULTS / "kv_pull.md").write_text(markdown(summary))
    print(markdown(summary))


if __name__ == "__main__":
    main()
