"""Shared pieces of the benchmarks: memory probes, models, cached inputs, launching.

Every measured run is its own process (torchrun workers, or one plain process for
single-process DGL), so peak memory is that run's alone.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CACHE = RESULTS / "tmp"


def rss_mib() -> float:
    """Current resident set size of this process, MiB."""
    from sarlite.runtime.resident import resident_bytes
    return resident_bytes() / 2**20


def peak_rss_mib() -> float:
    """High-water mark of the resident set size since start or the last reset, MiB."""
    from sarlite.runtime.resident import peak_resident_bytes
    return peak_resident_bytes() / 2**20


def clock() -> tuple[float, float]:
    """``(wall, CPU)`` seconds now: ``time.perf_counter()`` and the CPU time of this whole
    process (all its threads), for timing a stretch of work by both."""
    return time.perf_counter(), time.process_time()


def cpu_ticks() -> tuple[int, int]:
    """Machine-wide ``(steal, total)`` CPU ticks since boot, from ``/proc/stat``.

    Steal is time the hypervisor gave this virtual machine's CPUs to other guests; a
    share of it during a timed run slows that run for reasons outside the code.
    """
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7], sum(fields[:8])


def reset_peak_rss() -> None:
    """Restart the RSS high-water mark from the current RSS."""
    from sarlite.runtime.resident import reset_peak
    reset_peak()


def build_model(kind: str, in_dim: int, hidden: int, num_classes: int, num_layers: int = 3,
                heads: int = 4, norm=None):
    """A plain ``dgl.nn`` model: ``sage`` (mean), ``gcn`` or ``gat``; ReLU between layers.

    ``norm``: a batch-norm class (``torch.nn.BatchNorm1d``, or sarlite's
    ``DistributedBatchNorm1d`` on workers) applied before each ReLU; ``None``: none.
    """
    import dgl.nn as dglnn
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
            layers = []
            for i, (a, b) in enumerate(zip(dims, dims[1:])):
                last = i == num_layers - 1
                if kind == "sage":
                    layers.append(dglnn.SAGEConv(a, b, "mean"))
                elif kind == "gcn":
                    layers.append(dglnn.GraphConv(a, b, allow_zero_in_degree=True))
                elif kind == "gat":
                    width = a if i == 0 else a * heads
                    layers.append(dglnn.GATConv(width, b, num_heads=1 if last else heads,
                                                allow_zero_in_degree=True))
                else:
                    raise ValueError(f"unknown model {kind!r}")
            self.layers = nn.ModuleList(layers)
            self.norms = nn.ModuleList(
                [] if norm is None else [norm(b * (heads if kind == "gat" else 1))
                                         for b in dims[1:-1]])

        def forward(self, g, x):
            """``g``: one graph, or one per layer (a memory-budget plan's)."""
            graphs = g if isinstance(g, list) else [g] * len(self.layers)
            for i, (layer, graph) in enumerate(zip(self.layers, graphs)):
                x = layer(graph, x)
                x = x.flatten(1) if x.dim() == 3 else x
                if i < len(self.layers) - 1:
                    x = torch.relu(self.norms[i](x) if len(self.norms) else x)
            return x
    return Net()


#: Graph kinds of the suite that are a dataset with options: ``uniform`` is the synthetic
#: graph without homophily, every edge between two uniform nodes (the worst cut for METIS).
GRAPH_KINDS = {"uniform": ("synthetic", {"homophily": 0.0})}


def cached_graph(num_nodes: int, avg_degree: float, feat_dim: int, kind: str = "synthetic",
                 cache: Path = CACHE) -> Path:
    """Path of the saved ``kind`` graph of this size (``dgl.save_graphs``), generated once.

    Files appear under their final name only when complete, so a killed run leaves none.
    """
    import dgl

    from sarlite.data import load_graph

    graph_file = cache / f"{kind}_{num_nodes}_{avg_degree:g}_{feat_dim}.dgl"
    if not graph_file.exists():
        cache.mkdir(parents=True, exist_ok=True)
        dataset, options = GRAPH_KINDS.get(kind, (kind, {}))
        g = load_graph(dataset, num_nodes=num_nodes, avg_degree=avg_degree,
                       feat_dim=feat_dim, **options)
        partial = graph_file.with_suffix(".partial")
        dgl.save_graphs(str(partial), [g])
        os.replace(partial, graph_file)
    return graph_file


def cached_partition(num_nodes: int, avg_degree: float, feat_dim: int, num_parts: int,
                     kind: str = "synthetic", cache: Path = CACHE) -> tuple[Path, Path]:
    """Paths of a saved graph and of its ``num_parts``-way METIS partition, made once."""
    import dgl

    import sarlite

    graph_file = cached_graph(num_nodes, avg_degree, feat_dim, kind, cache)
    config = graph_file.with_name(f"{graph_file.stem}_p{num_parts}") / "g.json"
    if not config.exists():
        g = dgl.load_graphs(str(graph_file))[0][0]
        partial = config.parent.with_name(config.parent.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        sarlite.partition_graph(g, "g", num_parts, partial)
        os.replace(partial, config.parent)
    return graph_file, config


def bench_env() -> dict[str, str]:
    """A fixed mmap threshold and one OpenMP thread: the environment of the studies that
    predate the product's own setting (``largest``, ``rgcn_memory``; :func:`run_json`, the
    suite, runs as users do, :func:`user_env`).

    ``MALLOC_MMAP_THRESHOLD_=131072`` makes glibc return freed tensors to the system at
    once instead of keeping them in its heap, where they would hide the real peak (RSS)
    and inflate the baseline of the next epoch. ``sarlite.init`` now fixes the same
    threshold itself (:mod:`sarlite.runtime.allocator`).
    """
    return dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1",
                DGLBACKEND="pytorch")


def user_env() -> dict[str, str]:
    """The environment users have: no allocator variables (sarlite's workers fix glibc's
    mmap threshold in ``sarlite.init``; single-process DGL keeps glibc's default), DGL's
    backend and one OpenMP thread per process (as torchrun sets it)."""
    from sarlite.runtime.allocator import HUGE_PAGES_ENV
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != HUGE_PAGES_ENV}
    env.update(DGLBACKEND="pytorch", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    return env


#: The suite's allocator policies (``benchmarks.run --allocator``): ``own-defaults``, each
#: side under its users' default (sarlite's workers as its launcher starts them, with
#: torch's huge pages, ``THP_MEM_ALLOC_ENABLE=1``, and sarlite.init fixing glibc's mmap
#: threshold at 128 KiB; single-process DGL with glibc's adaptive threshold and no huge
#: pages), or ``fixed-both``: ``MALLOC_MMAP_THRESHOLD_=131072`` and huge pages for both
#: sides (sarlite.init then leaves the allocator alone, glibc reads the variable itself).
ALLOCATOR_POLICIES = ("own-defaults", "fixed-both")


def command_line(module: str, argv: list[str] | None = None) -> str:
    """``python -m module ARGS`` as a record states it: ``argv`` (default: this process's
    arguments), with every absolute path inside the repository written relative to it, so
    that a committed record names no machine's directories."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python -m", module, *(_repo_relative(a) for a in args)])


def _repo_relative(arg: str) -> str:
    path = Path(arg)
    if not path.is_absolute():
        return arg
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return arg


def suite_env(threads: int = 1, policy: str = "own-defaults",
              sarlite: bool = True) -> dict[str, str]:
    """The environment of one measured process of the suite: :func:`user_env` with
    ``OMP_NUM_THREADS=threads`` and the allocator ``policy`` (:data:`ALLOCATOR_POLICIES`)
    for a sarlite run (``sarlite``) or a DGL one."""
    from sarlite.runtime.allocator import HUGE_PAGES_ENV, launch_environ
    if policy not in ALLOCATOR_POLICIES:
        raise ValueError(f"allocator policy must be one of {ALLOCATOR_POLICIES}, "
                         f"got {policy!r}")
    env = dict(user_env(), OMP_NUM_THREADS=str(threads))
    if policy == "fixed-both":
        env.update({"MALLOC_MMAP_THRESHOLD_": "131072", HUGE_PAGES_ENV: "1"})
    return launch_environ(env) if sarlite else env


def run_json(cmd: list[str], timeout: float, num_procs: int = 1,
             env: dict[str, str] | None = None) -> list[dict]:
    """Run ``cmd`` with ``--result-dir DIR`` appended; return the JSON files it wrote there.
    ``env``: the processes' environment (default :func:`user_env`).

    Each of the run's ``num_procs`` processes writes one ``*.json`` (see
    :func:`write_result`). A run still alive after ``timeout`` seconds is killed with its
    whole process group; if every process had already written its result (it hung while
    exiting, e.g. in gloo's teardown), the results are kept and a warning is printed.

    Raises
    ------
    RuntimeError
        The command exited non-zero (its output tail is in the message).
    subprocess.TimeoutExpired
        It ran past ``timeout`` seconds without writing every result.
    """
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.Popen(cmd + ["--result-dir", out], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=user_env() if env is None else env,
                                cwd=ROOT, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            results = read_results(out)
            if len(results) < num_procs:
                raise
            print(f"  warning: all {num_procs} result(s) written, but the run did not exit "
                  f"within {timeout:.0f} s and was killed; its measurements are kept",
                  file=sys.stderr, flush=True)
            return results
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                               f"{stdout[-3000:]}\n{stderr[-3000:]}")
        return read_results(out)


def read_results(result_dir: str | Path) -> list[dict]:
    """The ``rank<r>.json`` files of one run, in rank order."""
    paths = sorted(Path(result_dir).glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(path.read_text()) for path in paths]


def write_summary(out: Path, data: dict, table: str) -> None:
    """A study's ``out/summary.json`` (``data``) and ``out/summary.md`` (``table``), and
    the table on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(data, indent=1))
    (out / "summary.md").write_text(table)
    print("\n" + table)


def write_result(result_dir: str, rank: int, result: dict) -> None:
    """Save one process's result for :func:`run_json`."""
    (Path(result_dir) / f"rank{rank}.json").write_text(json.dumps(result))


def torchrun(num_procs: int, module: str, args: list[str]) -> list[str]:
    """The command that runs ``python -m module args`` on ``num_procs`` torchrun workers."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={num_procs}", "-m", module, *args]
