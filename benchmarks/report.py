"""The suite's report: markdown table, targets with PASS/FAIL and margin, JSON, PNG plots.

    python -m benchmarks.report OUT [--suite NAME]   # rewrite OUT's summary from its records
    python -m benchmarks.report --check              # every committed summary, regenerated

Reads every run record in ``<out>/runs/*/*.json`` (written by :mod:`benchmarks.run`) and,
when present, the sampled-training comparison ``<out>/sampled/summary.json`` and the
largest-graph results (:data:`LARGEST`). The summary is a function of these files alone
(no clock, no reading of this machine), so ``--check`` can regenerate it and compare.
Records of different machines, software or allocator policies go into separate sections,
each under its own header (:func:`benchmarks.records.split`).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from . import common, records as run_records, sampled as sampled_study
from .cases import CHUNK_ROWS

HALO_KINDS = ("sar_fetch", "sar_grad", "oneshot_fetch", "oneshot_grad")
# the largest-graph searches the targets read (benchmarks.largest; relative to RESULTS):
# whole shards at N=4, 2048-row steps at N=4, and at N=8 (at 2.4 GiB per process: eight
# workers at the goal's 3 GiB need more memory than the 24 GiB machine has)
LARGEST = ("largest.json", "largest_steps/largest.json", "largest_steps_n8/largest.json")
LARGEST_GOALS = {"sar4": 3.5, "sar8": 6.0}
GOAL_BUDGET_GIB = 3.0
SAMPLED_GOAL = 1.0
#: a suite folder's sampled-training comparison (the full suite makes one; see
#: benchmarks.run), whose markdown is regenerated from it like a study's
SUITE_SAMPLED = "sampled/summary.json"
# issue 33's goals at equal cores: sar N=2 epoch against DGL (well-cut graphs, others),
# sar's peak per worker at N=4 on the 400k-node graph, sar's growth per worker at N=4, 8
EPOCH_GOAL_WELL_CUT, EPOCH_GOAL_OTHER = 0.8, 1.0
PEAK_GOAL_N4, PEAK_GOAL_NODES = 0.35, 400_000
GROWTH_GOALS = {4: 0.28, 8: 0.16}
MIB = 2 ** 20


def _wire_factor(record: dict) -> float:
    """Bytes per halo value against float32's: 0.5 for runs whose halos travel in 16 bits
    (``--halo-dtype``), 1 otherwise."""
    return 0.5 if record.get("halo_dtype", "float32") in ("bfloat16", "float16") else 1.0


def machine() -> str:
    """One line describing this machine and the software stack (for studies that do not
    store :func:`benchmarks.records.run_facts` yet)."""
    import dgl
    import torch
    m = run_records.machine_facts()
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return (f"{m['cores']} cores ({m['cpu_model']}), {m['memory_gib']:.0f} GiB RAM{gpu}; "
            f"Python {platform.python_version()}, torch {torch.__version__}, "
            f"dgl {dgl.__version__}")


def dgl_label(threads: int) -> str:
    """The run name of single-process DGL with ``threads`` torch threads."""
    return f"dgl T={threads}"


_ORDER = ("dgl", "sar", "sa", "one-shot", "sar-whole", "sar-chunked", "sar-bf16",
          "sar-fp16", "budget", "sar-torch", "one-shot-torch")


def load_records(out: Path) -> list[dict]:
    """Every run record under ``out/runs``: by case, then DGL first, then by N and mode."""
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/*.json"))]
    return sorted(records, key=lambda r: (r["case"], r["mode"] != "dgl", r["world_size"],
                                          _ORDER.index(r["mode"])))


def _find(records, case, run):
    return next((r for r in records if r["case"] == case and r["run"] == run
                 and "error" not in r), None)


def _cores(record: dict) -> int | None:
    facts = record.get("facts")
    return facts["machine"]["cores"] if facts else None


def dgl_threads_for(world: int, cores: int | None) -> int:
    """DGL's threads for a sarlite run on ``world`` one-thread workers on ``cores`` cores:
    ``min(world, cores)``, the cores those workers can use (``cores`` unknown: 1, the
    records that predate the rule ran DGL on one thread)."""
    return 1 if cores is None else min(world, cores)


def baseline(records: list[dict], record: dict | None) -> dict | None:
    """The DGL run ``record`` is compared with: same case, ``dgl_threads_for`` its N
    threads (a DGL record is its own baseline)."""
    if record is None:
        return None
    threads = dgl_threads_for(record["world_size"], _cores(record)) \
        if record["mode"] != "dgl" else record.get("threads", 1)
    return next((r for r in records if r["case"] == record["case"] and r["mode"] == "dgl"
                 and r.get("threads", 1) == threads and "error" not in r), None)


@dataclass
class Target:
    """One target check: ``measured`` against ``limit`` (``at_most`` or at least);
    ``why``: what the same records say about a miss (figures, no judgement; empty where
    the records hold nothing more), shown beside a FAIL."""

    target: str
    case: str
    measured: float | None
    limit: float
    at_most: bool = True
    why: str = ""

    @property
    def status(self) -> str:
        if self.measured is None:
            return "not measured"
        ok = self.measured <= self.limit if self.at_most else self.measured >= self.limit
        return "PASS" if ok else "FAIL"

    @property
    def margin(self) -> str:
        if self.measured is None:
            return "-"
        rel = (self.limit - self.measured) / self.limit
        rel = rel if self.at_most else -rel
        return f"{abs(rel):.0%} {'inside' if rel >= 0 else 'outside'} the limit"


def _ratio(a, b, key):
    if a is None or b is None or a.get(key) is None or not b.get(key):
        return None
    return a[key] / b[key]


def _vs_dgl(records, case: str, run: str, key: str) -> float | None:
    """``key`` of run ``run`` of ``case`` over its equal-cores DGL baseline's."""
    record = _find(records, case, run)
    return _ratio(record, baseline(records, record), key)


def _well_cut(records, case: str) -> bool:
    from .cases import Case
    params = next((r["params"] for r in records if r["case"] == case and "params" in r), {})
    return Case(**params).well_cut if params else False


def case_targets(records: list[dict], case: str) -> list[Target]:
    """The issue's goals for one case, each against DGL at equal cores (:func:`baseline`):
    sar N=2 epoch, sar growth per worker at N=4 and 8 (SAGE and GCN; GAT against
    one-shot), sar's peak per worker at N=4 on the 400k-node graph, one-shot N=2 epoch,
    the step and budget goals where those runs exist, halo bytes against the bound."""
    model = next(r["model"] for r in records if r["case"] == case)
    well = _well_cut(records, case)
    epoch_goal = EPOCH_GOAL_WELL_CUT if well else EPOCH_GOAL_OTHER
    out = [Target(f"sar N=2 epoch <= {epoch_goal:g}x DGL ("
                  f"{'well-cut graph' if well else 'bad cut'}, equal cores)", case,
                  _vs_dgl(records, case, "sar N=2", "median_epoch_s"), epoch_goal,
                  why=_epoch_why(records, case, epoch_goal))]
    if model in ("sage", "gcn"):
        out += [Target(f"sar N={n} growth/worker <= {goal:g}x DGL growth (default options, "
                       f"equal cores)", case,
                       _vs_dgl(records, case, f"sar N={n}", "growth_mib"), goal)
                for n, goal in GROWTH_GOALS.items()
                if n == 4 or _find(records, case, f"sar N={n}")]
    else:
        out.append(Target("sar N=4 growth/worker <= 0.4x one-shot N=4", case,
                          _ratio(_find(records, case, "sar N=4"),
                                 _find(records, case, "one-shot N=4"), "growth_mib"), 0.4,
                          why=_share_why(records, case, 0.4)))
    nodes = next((r["params"]["num_nodes"] for r in records
                  if r["case"] == case and "params" in r), 0)
    if nodes >= PEAK_GOAL_NODES:
        out.append(Target(f"sar N=4 peak RSS/worker <= {PEAK_GOAL_N4:g}x DGL's peak "
                          f"(equal cores)", case,
                          _vs_dgl(records, case, "sar N=4", "peak_rss_mib"), PEAK_GOAL_N4))
    out += _step_targets(records, case, model)
    out += _auto_step_targets(records, case)
    out += _budget_targets(records, case)
    out.append(Target("one-shot N=2 epoch time <= 1.05x DGL (equal cores)", case,
                      _vs_dgl(records, case, "one-shot N=2", "median_epoch_s"), 1.05))
    ratios = [r["halo_bytes_per_epoch"] / r["bound_bytes"] / _wire_factor(r)
              for r in records
              if r["case"] == case and "error" not in r and r.get("bound_bytes")]
    if model in ("sage", "gcn"):
        out.append(Target("halo bytes within +-2% of the bound (x0.5 for 16-bit halos): "
                          "worst abs(bytes/bound - 1)", case,
                          max((abs(x - 1) for x in ratios), default=None), 0.02))
    else:
        out.append(Target("halo bytes <= 1.5x the bound (worst run)", case,
                          max(ratios, default=None), 1.5))
    return out


def _epoch_why(records, case: str, limit: float) -> str:
    """The sar N=2 epoch against DGL, taken apart with the case's one-core runs:

    sar N=2 / DGL T=2 = (sar N=1 / DGL T=1) x (DGL's speed-up from its second thread) /
    (sar's speed-up from its second worker),

    so the limit needs that speed-up of sar's; with the work (CPU s/epoch) at N=2 and
    N=1, and how busy the two workers were (the rest is waiting). From the runs' first
    rounds, which ran minutes apart (later rounds ran apart from the one-core runs, and a
    shared host's speed drifts), then each round's ratio. Empty without the N=1 runs."""
    two, one = _find(records, case, "sar N=2"), _find(records, case, "sar N=1")
    dgl_two, dgl_one = baseline(records, two), baseline(records, one)
    if None in (two, one, dgl_two, dgl_one) or dgl_one is dgl_two:
        return ""
    (t2, cpu2), (t1, cpu1) = run_records.first_run(two), run_records.first_run(one)
    d1, d2 = run_records.first_run(dgl_one)[0], run_records.first_run(dgl_two)[0]
    own, dgl_gain = t1 / d1, d1 / d2
    text = (f"first round: sar N=1 runs at {own:.2f}x DGL T=1; DGL's second thread makes it "
            f"{dgl_gain:.2f}x faster, sar's second worker {t1 / t2:.2f}x (the limit needs "
            f"{own * dgl_gain / limit:.2f}x)")
    if cpu2 and cpu1:
        text += (f"; CPU s/epoch {cpu2:.2f} at N=2 against {cpu1:.2f} at N=1, the two "
                 f"workers busy {cpu2 / (2 * t2):.0%} of the epoch")
    rounds = [a / b for a, b in zip(run_records.run_medians(two),
                                    run_records.run_medians(dgl_two))]
    if len(rounds) > 1:
        text += "; each round's ratio: " + ", ".join(f"{r:.2f}" for r in rounds)
    return text


def _share_why(records, case: str, limit: float) -> str:
    """sar N=4's growth per worker against a quarter of sar N=1's (each worker's share of
    one process's transient memory: the layers' own tensors, split by owned nodes), and
    the limit in the same terms. Empty without those runs."""
    four, one = _find(records, case, "sar N=4"), _find(records, case, "sar N=1")
    one_shot = _find(records, case, "one-shot N=4")
    if None in (four, one, one_shot):
        return ""
    share = one["growth_mib"] / 4
    return (f"sar N=4 grows {four['growth_mib']:.0f} MiB per worker, "
            f"{four['growth_mib'] / share:.2f}x a quarter of sar N=1's {one['growth_mib']:.0f} "
            f"MiB (one process's transient memory split over four workers); the limit, "
            f"{limit * one_shot['growth_mib']:.0f} MiB, is "
            f"{limit * one_shot['growth_mib'] / share:.2f}x that quarter")


def _chunks_why(records, case: str) -> str:
    """The memory the fixed chunks buy over the default's automatic steps at N=4 (none
    when their growth is equal: the default meets the growth goal without them)."""
    chunked, auto = _find(records, case, "sar-chunked N=4"), _find(records, case, "sar N=4")
    if None in (chunked, auto):
        return ""
    return (f"the chunks are an option (engine.max_rows_per_step); at N=4 they grow "
            f"{chunked['growth_mib']:.0f} MiB per worker against the default's "
            f"{auto['growth_mib']:.0f} MiB")


def targets(records: list[dict], largest: list[dict] = (),
            sampled: dict | None = None) -> list[Target]:
    """Evaluate the issue's targets on whatever runs are present, the largest-graph
    results ``largest`` and the sampled-training comparison ``sampled``."""
    out = []
    for case in dict.fromkeys(r["case"] for r in records):
        out += case_targets(records, case)
    return out + study_targets(largest, sampled)


def study_targets(largest: list[dict] = (), sampled: dict | None = None) -> list[Target]:
    """The goals measured by the largest-graph searches and the sampled comparison."""
    out = []
    for result in largest:
        out += largest_targets(result)
    if sampled is not None:
        out.append(Target(f"sampled training, sarlite N={sampled['world_size']} epoch <= "
                          f"{SAMPLED_GOAL:g}x single-process DGL (2-layer SAGE, fanouts "
                          f"10,10; benchmarks.sampled)", f"{sampled['num_nodes']} nodes",
                          sampled["ratio"], SAMPLED_GOAL, why=sampled_study.why(sampled)))
    return out


def largest_targets(result: dict) -> list[Target]:
    """The largest-graph goals one search (``benchmarks.largest``'s JSON) measured: the
    ratio of each sarlite system to DGL, labelled with its budget and step size."""
    ratios = result.get("ratios") or {"sar4": result.get("ratio")}
    steps = result.get("max_rows_per_step")
    where = f"{result['budget_gib']:g} GiB per process, " + (
        f"{steps}-row steps" if steps else "whole shards")
    if result["budget_gib"] != GOAL_BUDGET_GIB:
        where += f" (the goal is set at {GOAL_BUDGET_GIB:g} GiB)"
    return [Target(f"largest graph, sarlite N={system[3:]} sar / DGL >= {goal:g}x", where,
                   ratios[system], goal, at_most=False)
            for system, goal in LARGEST_GOALS.items() if ratios.get(system) is not None]


def _auto_step_targets(records, case: str) -> list[Target]:
    """The default's cost in time, where the case has ``sar-whole`` runs: sar's epoch with
    its automatic steps against whole shards (the default before them), at N=2 and 4."""
    return [Target(f"sar N={n} epoch time <= 1.10x sar-whole N={n} (the default's "
                   f"automatic steps against whole shards)", case,
                   _ratio(_find(records, case, f"sar N={n}"),
                          _find(records, case, f"sar-whole N={n}"), "median_epoch_s"), 1.10)
            for n in (2, 4) if _find(records, case, f"sar-whole N={n}")]


def _step_targets(records, case: str, model: str) -> list[Target]:
    """The bounded-step goals, where the case has chunked runs (``sar-chunked``): growth
    at N=4 and N=8 against DGL's, and the chunks' epoch time against the default's
    automatic steps."""
    chunked = {n: f"sar-chunked N={n}" for n in (2, 4, 8)}
    if not any(_find(records, case, run) for run in chunked.values()):
        return []
    if model == "gat":
        return [Target("sar-chunked N=4 growth/worker <= 0.6x one-shot N=4", case,
                       _ratio(_find(records, case, chunked[4]),
                              _find(records, case, "one-shot N=4"), "growth_mib"), 0.6)]
    return [Target("sar-chunked N=4 growth/worker <= 0.28x DGL growth", case,
                   _vs_dgl(records, case, chunked[4], "growth_mib"), 0.28),
            Target("sar-chunked N=8 growth/worker <= 0.16x DGL growth", case,
                   _vs_dgl(records, case, chunked[8], "growth_mib"), 0.16),
            Target("sar-chunked N=2 epoch time <= 1.05x sar N=2 (the cost of chunks of "
                   f"{CHUNK_ROWS} rows against the default's automatic steps)", case,
                   _ratio(_find(records, case, chunked[2]), _find(records, case, "sar N=2"),
                          "median_epoch_s"), 1.05, why=_chunks_why(records, case))]


def _budget_targets(records, case: str) -> list[Target]:
    """The memory-budget goals, where the case has a ``budget`` run: its peak per worker
    within the budget in every one of its runs, and its epoch faster than all-sar's at
    the same N."""
    runs = [r for r in records if r["case"] == case and r["mode"] == "budget"
            and "error" not in r]
    out = []
    for run in runs:
        n = run["world_size"]
        peak = max([run["peak_rss_mib"]] + [r["peak_rss_mib"] for r in run.get("repeats", [])])
        out.append(Target(f"budget N={n} peak RSS/worker <= engine.memory_budget (every run)",
                          case, peak * 2**20 / run["memory_budget"], 1.0))
        out.append(Target(f"budget N={n} epoch time < sar N={n} (plan: "
                          f"{'; '.join(run['memory_plan']['layers'])})", case,
                          _ratio(run, _find(records, case, f"sar N={n}"), "median_epoch_s"),
                          1.0))
    return out


def kernel_ratios(records: list[dict]) -> list[str]:
    """A table of each torch-kernel run's epoch time against the same mode and N on DGL's
    kernels (no goal: the issue asks for the ratio)."""
    lines = []
    for run in records:
        if not run["mode"].endswith("-torch") or "error" in run:
            continue
        base = run["mode"][:-len("-torch")]
        dgl = _find(records, run["case"], f"{base} N={run['world_size']}")
        ratio = _ratio(run, dgl, "median_epoch_s")
        lines.append(f"| {run['case']} | {base} N={run['world_size']} | "
                     f"{_fmt(dgl and dgl['median_epoch_s'])} | {run['median_epoch_s']:.2f} | "
                     f"{_fmt(ratio, '.2f', 'x')} |")
    if not lines:
        return []
    return ["### Torch kernels against DGL's", "",
            "Epoch time (s) of the same run on DGL's kernels and on sarlite's "
            "(engine.kernels: torch).", "",
            "| case | run | DGL's kernels | torch kernels | torch / DGL |",
            "|---|---|---|---|---|"] + lines + [""]


def _fmt(value, spec=".2f", suffix=""):
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _runs(record: dict) -> str:
    """`` (k)`` after an epoch time that is the median of ``k`` runs, else nothing."""
    repeats = record.get("repeats", [])
    return f" ({len(repeats) + 1})" if repeats else ""


def _all_facts(record: dict) -> list[dict]:
    """The facts of every run behind ``record``: its own, then its repeats'."""
    return [f for f in [record.get("facts")] + [r["facts"] for r in record.get("repeats", [])]
            if f]


def _peak_all(record: dict) -> float:
    """Sum of the workers' peaks (MiB): an upper bound on all workers' peak together."""
    if "peak_rss_all_mib" in record:
        return record["peak_rss_all_mib"]
    return sum(max(w["hwm_setup_mib"], w["peak_rss_mib"]) for w in record["workers"])


def table(records: list[dict]) -> list[str]:
    """The runs table: each sarlite run beside its equal-cores DGL run (column "DGL")."""
    cuda = any(r.get("allocator_peak_mib") is not None for r in records)
    lines = ["| case | run | DGL | epoch (s) | vs DGL | peak/worker (MiB) | vs DGL peak | "
             "peak all workers (MiB) | vs DGL peak | growth/worker (MiB) | vs DGL growth |"
             + (" allocator peak/worker (MiB) |" if cuda else "") +
             " halo MiB/epoch | bound MiB/epoch | vs bound | expected vs bound | "
             "other MiB/epoch | CPU s/epoch | CPU steal % |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if cuda else "") +
             "---|---|---|---|---|---|---|"]
    width = 18 + cuda
    for r in records:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['run']} | FAILED: "
                         f"{r['error'].splitlines()[0][:80]} |" + " |" * (width - 3))
            continue
        dgl = baseline(records, r) if r["mode"] != "dgl" else None
        bound = r["bound_bytes"]
        expected = r["expected_bytes"] * _wire_factor(r) / bound if bound else None
        depth = r.get("pipeline_depth", 1)
        run = r["run"] + (f" (depth {depth})" if depth != 1 and r["mode"] in ("sar", "sa")
                          else "")
        alloc = f" {_fmt(r['allocator_peak_mib'], '.0f')} |" if cuda else ""
        all_vs = _peak_all(r) / dgl["peak_rss_mib"] if dgl else None
        lines.append(
            f"| {r['case']} | {run} | {dgl['run'] if dgl else '-'} | "
            f"{r['median_epoch_s']:.2f}{_runs(r)} | "
            f"{_fmt(_ratio(r, dgl, 'median_epoch_s'), suffix='x')} | "
            f"{r['peak_rss_mib']:.0f} | {_fmt(_ratio(r, dgl, 'peak_rss_mib'), suffix='x')} | "
            f"{_peak_all(r):.0f} | {_fmt(all_vs, suffix='x')} | "
            f"{r['growth_mib']:.0f} | {_fmt(_ratio(r, dgl, 'growth_mib'), suffix='x')} |{alloc} "
            f"{r['halo_bytes_per_epoch'] / MIB:.1f} | {bound / MIB:.1f} | "
            f"{_fmt(r['halo_bytes_per_epoch'] / bound if bound else None, '.3f', 'x')} | "
            f"{_fmt(expected, '.3f', 'x')} | "
            f"{r['other_bytes_per_epoch'] / MIB:.2f} | "
            f"{_fmt(r.get('cpu_s_per_epoch'), '.2f')} | "
            f"{_fmt(r.get('cpu_steal_pct'), '.0f')} |")
    return lines


def plot_case(case: str, records: list[dict], path: Path) -> None:
    """Peak RSS, growth and epoch time against N, one line per mode, each DGL run (one
    per thread count) as a level."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in records if r["case"] == case and "error" not in r]
    dgls = [r for r in runs if r["mode"] == "dgl"]
    panels = (("peak_rss_mib", "peak RSS per worker (MiB)"),
              ("growth_mib", "training growth per worker (MiB)"),
              ("median_epoch_s", "median epoch time (s)"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, title) in zip(axes, panels):
        for mode in _ORDER[1:]:
            points = sorted((r["world_size"], r[key]) for r in runs if r["mode"] == mode)
            if points:
                ax.plot(*zip(*points), marker="o", label=f"sarlite {mode}")
        for i, dgl in enumerate(dgls):
            ax.axhline(dgl[key], color="black", linestyle=("--", ":", "-.")[i % 3],
                       label=f"DGL, 1 process, {dgl.get('threads', 1)} thread(s)")
        ax.set_xlabel("workers N")
        ax.set_xticks(sorted({r["world_size"] for r in runs if r["mode"] != "dgl"}) or [1])
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.suptitle(case)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


NOTES = """\
Definitions. DGL: single-process DGL on the whole graph; `dgl T=t` ran with t torch
threads (torch.set_num_threads and OMP_NUM_THREADS). Each sarlite run is compared with
the DGL run named in column "DGL" (equal cores, see the section's header). Epoch time:
median over the timed epochs (after the warm-up) of the slowest worker's epoch; "t (k)":
the median of k runs' epoch times (the runs the time targets compare; see the runner's
--time-runs; their CPU s/epoch is the median of the k runs' too, their memory and traffic
the first run's). Peak RSS
per worker: the largest worker's RSS high-water mark over the whole run. Peak all
workers: the sum of the workers' high-water marks, an upper bound on the RSS of all
workers together (each worker's peak may fall at another moment); both are set against
DGL's whole-process peak. Growth: peak RSS during the timed epochs minus the RSS just
before them, i.e. the transient memory of a training step (activations, messages,
fetched rows, gradients) without one-time costs (graph, sparse formats, optimizer state,
code). Allocator peak (CUDA runs only): torch.cuda.max_memory_allocated; torch has no
CPU allocator counter, so on CPU the RSS is the measure. Halo MiB/epoch: bytes sent by
all workers together in the halo exchanges (sarlite.comm.traffic kinds sar_fetch,
sar_grad, oneshot_fetch, oneshot_grad); other: the gradient all-reduce. Bound: sum over
partitions of halo nodes x sum over layers of the width each layer moves x 4 bytes x
(forward + backward where the moved tensor needs a gradient); see benchmarks/bound.py.
"Expected vs bound" is what the mode sends by construction: 1.0 except sar on GAT, whose
u_mul_e backward refetches the rows it aggregates (up to 1.5; see benchmarks/bound.py and
each record's commit), halved for 16-bit halos (the sar-bf16 / sar-fp16 runs).
sar-chunked: sar with engine.max_rows_per_step (see benchmarks/cases.py). budget: sar with
engine.memory_budget at 1.05x the larger peak of the sar and one-shot runs at the same N
(each layer one-shot or sar with a step size, as the plan in its record says).
sar-torch / one-shot-torch: sar / one-shot on sarlite's torch kernels (engine.kernels:
torch) instead of DGL's. CPU s/epoch: the CPU time of all the run's processes (all their
threads) in one timed epoch, median over the epochs: the work done, where the epoch time
also holds waiting (for another rank, or for a core when the workers outnumber the
machine's cores) ("-": not recorded). CPU steal %: share of the machine's CPU time
during the timed epochs that the hypervisor gave to other guests (/proc/stat); a run
with steal was slowed by its neighbours, so compare its times with care ("-": not
recorded)."""


def _one(values: set, what: str) -> str:
    """The one value a section's records share; refuses a mix."""
    if len(values) != 1:
        raise ValueError(f"records under one header differ in {what}: {sorted(values)}")
    return next(iter(values))


def section_header(records: list[dict]) -> list[str]:
    """The lines that say what a section's records are: machine, software, commits and
    dates, the threads of each side and the rule pairing them, each side's allocator.

    Raises
    ------
    ValueError
        Records of one side differ in threads or allocator (no one header fits them).
    """
    facts = [f for r in records for f in _all_facts(r)]
    lines = run_records.header(facts)
    if not facts:
        return lines + ["DGL ran on one thread, sarlite's workers on one thread each."]
    cores = facts[0]["machine"]["cores"]
    sar = [r for r in records if r["mode"] != "dgl" and r.get("facts")]
    dgl = [r for r in records if r["mode"] == "dgl" and r.get("facts")]
    worker_threads = _one({r["facts"]["threads"]["torch_per_process"] for r in sar} or {1},
                          "sarlite's threads per worker")
    lines.append(
        f"Threads: sarlite's workers {worker_threads} torch thread(s) each (gloo); `dgl T=t`: "
        f"single-process DGL with t torch threads and OMP_NUM_THREADS=t (runs here: "
        f"{', '.join(sorted({r['run'] for r in dgl})) or 'none'}). Rule: sarlite on N "
        f"one-thread workers is compared with `dgl T=min(N, {cores})`: on this {cores}-core "
        f"machine N workers use min(N, {cores}) cores, so both sides have the same cores.")
    policy = _one({r.get("allocator_policy") for r in records}, "allocator policy")
    sides = [(name, _one({run_records.describe_allocator(r["facts"]["allocator"])
                          for r in side}, f"{name}'s allocator"))
             for name, side in (("DGL", dgl), ("sarlite's workers", sar)) if side]
    lines.append(f"Allocator policy `{policy}`: " +
                 "; ".join(f"{name}: {what}" for name, what in sides) + ".")
    return lines


def target_table(checks: list[Target]) -> list[str]:
    """The targets as a markdown table; beside a FAIL, what its records say about the miss
    (:attr:`Target.why`)."""
    return ["| target | case | measured | limit | result | margin | a miss, in the same "
            "records' figures |", "|---|---|---|---|---|---|---|"] + [
        f"| {t.target} | {t.case} | {_fmt(t.measured, '.3f')} | {t.limit:g} | {t.status} | "
        f"{t.margin} | {(t.why if t.status == 'FAIL' else '') or '-'} |" for t in checks]


def _section(records: list[dict], title: str) -> tuple[list[str], list[Target]]:
    """One section's markdown (header, targets, runs) and its targets."""
    checks = [t for case in dict.fromkeys(r["case"] for r in records)
              for t in case_targets(records, case)]
    lines = [f"## {title}", ""] + section_header(records) + [
        "", "### Targets", ""] + target_table(checks)
    lines += ["", "### Runs", ""] + table(records) + [""] + kernel_ratios(records)
    return lines, checks


def _study_facts(result: dict) -> list[dict]:
    """A study record's run facts: one run's (a largest-graph search), or each side's
    (the sampled comparison stores ``{"dgl": facts, "sarlite": facts}``); none when the
    record predates them."""
    facts = result.get("facts")
    if not facts:
        return []
    return [facts] if "machine" in facts else list(facts.values())


def _study_section(largest: list[dict], sampled: dict | None) -> list[str]:
    """The goals measured by other studies, each with what its own record says about it."""
    checks = study_targets(largest, sampled)
    if not checks:
        return []
    lines = ["## Goals measured by other studies", "",
             "Each study has its own record and header: the largest-graph searches "
             "(benchmarks.largest) and the sampled comparison (benchmarks.sampled)."]
    for name, result in [("largest-graph search", r) for r in largest] + \
            ([("sampled comparison", sampled)] if sampled else []):
        facts = _study_facts(result)
        lines.append(f"- {name}: " + (" ".join(run_records.header(facts)) if facts else
                                      "machine and settings not recorded."))
    return lines + [""] + target_table(checks) + [""]


def _plot_names(sections: list[list[dict]]) -> list[dict[str, str]]:
    """Per section, ``{case: plot file name}`` (``<case>.png``; ``<case>-<i>.png`` from
    the second section on)."""
    return [{case: f"{case}.png" if i == 0 else f"{case}-{i + 1}.png"
             for case in dict.fromkeys(r["case"] for r in section)}
            for i, section in enumerate(sections)]


def render(out: Path, suite: str) -> tuple[str, dict, list[tuple[list[dict], dict]]]:
    """``summary.md``'s text, ``summary.json``'s data and ``(records, plot names)`` per
    section, from the files under ``out`` and :data:`LARGEST` alone.

    Raises
    ------
    ValueError
        Records that one header cannot describe (see :func:`section_header`).
    """
    records = load_records(out)
    largest = [json.loads(path.read_text()) for path in
               (common.RESULTS / name for name in LARGEST) if path.exists()]
    sampled_file = out / SUITE_SAMPLED
    sampled = json.loads(sampled_file.read_text()) if sampled_file.exists() else None
    sections = run_records.split(records)
    plots = _plot_names(sections)
    lines = [f"# Benchmark suite `{suite}`", "",
             f"Command: `python -m benchmarks.run --suite {suite}` (plus any selection); "
             f"regenerate with `python -m benchmarks.report {out.name}`.", ""]
    data = {"suite": suite, "sections": []}
    for i, section in enumerate(sections):
        title = "Runs" if len(sections) == 1 else f"Runs, section {i + 1}"
        body, checks = _section(section, title)
        lines += body + ["### Plots", ""] + \
            [f"![{case}](plots/{name})" for case, name in plots[i].items()] + [""]
        data["sections"].append({
            "header": section_header(section),
            "targets": [dict(asdict(t), status=t.status, margin=t.margin) for t in checks],
            "runs": [{k: v for k, v in r.items() if k not in ("workers", "facts")}
                     for r in section]})
    lines += _study_section(largest, sampled)
    data["study_targets"] = [dict(asdict(t), status=t.status, margin=t.margin)
                             for t in study_targets(largest, sampled)]
    lines += [NOTES, ""]
    if largest:
        lines += ["Largest graph searches: " + ", ".join(
            f"[{name.replace('.json', '.md')}](../{name.replace('.json', '.md')})"
            for name in LARGEST if (common.RESULTS / name).exists()) + ".", ""]
    if sampled is not None:
        # named, not linked: the docs site includes this file from elsewhere, where a
        # relative link to the folder beside it has no page to point to
        lines += ["Sampled training: its own table is `sampled/summary.md`, in this "
                  "results folder.", ""]
    return "\n".join(lines), data, list(zip(sections, plots))


def _json_text(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def write_report(out: Path, suite: str) -> Path:
    """Write ``summary.md``, ``summary.json`` and ``plots/*.png`` into ``out``; returns
    the markdown path."""
    text, data, sections = render(out, suite)
    (out / "plots").mkdir(exist_ok=True)
    for section, names in sections:
        for case, name in names.items():
            plot_case(case, section, out / "plots" / name)
    path = out / "summary.md"
    path.write_text(text)
    (out / "summary.json").write_text(_json_text(data))
    return path


def suite_dirs(results: Path = common.RESULTS) -> list[Path]:
    """Every suite folder ``results/<suite>`` with run records (``runs/*/*.json``); not
    the cache of graphs and partitions (``tmp``)."""
    return sorted(p.parent for p in results.glob("*/runs")
                  if p.parent.name != common.CACHE.name and any(p.glob("*/*.json")))


def _suite_name(out: Path) -> str:
    summary = out / "summary.json"
    return json.loads(summary.read_text()).get("suite", out.name) if summary.exists() \
        else out.name


def check_suite(out: Path) -> list[str]:
    """The differences between ``out``'s committed summary and one regenerated from its
    records, and of the studies it holds (its sampled comparison, :data:`SUITE_SAMPLED`;
    :func:`check_studies`) (``[]``: none; plots are not compared, they are images of the
    same data)."""
    text, data, _ = render(out, _suite_name(out))
    problems = []
    for name, want in (("summary.md", text), ("summary.json", _json_text(data))):
        path = out / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.read_text() != want:
            problems.append(f"{path}: differs from the summary regenerated from its records")
    return problems + check_studies(out)


def _check_file(path: Path, want: str) -> list[str]:
    if not path.exists():
        return [f"{path}: missing"]
    return [] if path.read_text() == want else \
        [f"{path}: differs from the text regenerated from its record"]


def check_studies(results: Path = common.RESULTS) -> list[str]:
    """The studies whose markdown is a function of their committed JSON: each present
    ``(json, md)`` pair of :func:`study_renderers`, regenerated and compared."""
    problems = []
    for name, (md_name, render_md) in study_renderers().items():
        source = results / name
        if source.exists():
            problems += _check_file(results / md_name, render_md(json.loads(source.read_text())))
    return problems


def _faults_report(result: dict) -> str:
    """``tests/faults.py``'s ``report`` (that script is not in a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("faults_script",
                                                  common.ROOT / "tests" / "faults.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)     # its dataclasses look their module up
    spec.loader.exec_module(sys.modules[spec.name])
    return module.report(result)


def study_renderers() -> dict:
    """``{json path: (markdown path, function of the JSON's data -> markdown)}`` for the
    single-record studies under benchmarks/results (paths relative to it)."""
    from . import (accuracy_parity, budget, halo_dtype, kv_pull, largest, layer_memory,
                   papers100m_projection, products_scale, rgcn_memory, sampled,
                   time_to_accuracy)
    searches = {name: (name.replace(".json", ".md"), largest.markdown) for name in LARGEST}
    return {"kv_pull.json": ("kv_pull.md", kv_pull.markdown),
            "rgcn_memory.json": ("rgcn_memory.md", rgcn_memory.markdown),
            "halo_dtype.json": ("halo_dtype.md", halo_dtype.markdown),
            "accuracy_parity.json": ("accuracy_parity.md", accuracy_parity.markdown),
            "budget/summary.json": ("budget/summary.md", budget.report),
            "layer_memory/summary.json": ("layer_memory/summary.md", layer_memory.report),
            "faults/faults.json": ("faults/faults.md", _faults_report),
            "products_scale.json": ("products_scale.md", products_scale.markdown),
            "papers100m_projection.json": ("papers100m_projection.md",
                                           papers100m_projection.markdown),
            "sampled/summary.json": ("sampled/summary.md", sampled.markdown),
            "time_to_accuracy.json": ("time_to_accuracy.md", time_to_accuracy.markdown),
            **searches}


def unexplained(results: Path = common.RESULTS) -> list[str]:
    """Markdown files under ``results`` that no check regenerates: hand-written notes, or
    summaries whose records are gone."""
    studies = [md for md, _ in study_renderers().values()]
    known = set(studies) | {str(out.relative_to(results) / md) for out in suite_dirs(results)
                            for md in ("summary.md", *studies)}
    return [f"{path}: not generated from a record (no check regenerates it)"
            for path in sorted(results.glob("**/*.md"))
            if path.relative_to(results).parts[0] != common.CACHE.name
            and str(path.relative_to(results)) not in known]


def check_all(results: Path = common.RESULTS) -> list[str]:
    """Every committed summary under ``results``, regenerated from its records: the
    suite folders (:func:`check_suite`) and the single-record studies
    (:func:`check_studies`), and no markdown besides (:func:`unexplained`); the problems
    found (``[]``: none)."""
    problems = [p for out in suite_dirs(results) for p in check_suite(out)]
    return problems + check_studies(results) + unexplained(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path,
                        help="a suite's results folder (relative to benchmarks/results or "
                             "a path) whose summary to rewrite from its records")
    parser.add_argument("--suite", help="the suite's name in the title (default: the "
                                        "summary's, else the folder's)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate every committed summary under benchmarks/results "
                             "from its records and fail on a difference")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_all()
        print("\n".join(problems) if problems else "every summary matches its records")
        return 1 if problems else 0
    if args.out is None:
        parser.error("name a results folder, or --check")
    out = args.out if args.out.exists() else common.RESULTS / args.out
    print(write_report(out, args.suite or _suite_name(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
