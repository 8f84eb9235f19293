"""The benchmark cases and the two suites, ``quick`` and ``full``.

A case is one graph and one model; the suite runs it with single-process DGL and with
sarlite in every selected mode and world size. Sizes follow the issue: input width 128,
GraphSAGE-mean 3 x 256, GCN 3 x 256, GAT 3 layers x 4 heads x 64, 8 classes; the
homophilous graphs at average degree 20 (100k nodes / 2.0M edges and 400k / 8.0M), the
power-law (R-MAT) graph at 100k nodes, 20 edges per node drawn before duplicates go.

What each suite holds was set by its cost on the 2-core machine, measured while other
jobs shared it (so an upper estimate), with one warm-up + three timed epochs per run and
ten runs per case (DGL, then sar/sa/one-shot at N = 1, 2, 4):

* ``quick``: SAGE on the 100k homophilous graph, 314 s in all (about 20-45 s a run).
* ``full``: the quick case plus GCN 100k (about 5 min: runs as SAGE's), GAT 100k (about
  13 min: 90 s for DGL, 57-73 s a run at N=4), SAGE on the 100k power-law graph (about
  4.5 min) and SAGE on the 400k homophilous graph (about 12 min: 63 s for DGL, 85 s a
  run at N=4, including its METIS partitioning): about 40 minutes in all, plus the
  extra runs (:data:`EXTRA_RUNS`: sar N=8, sar-chunked, 16-bit halos) on the SAGE
  homophilous and uniform cases, about 8 minutes per case (measured 2026-11-24: the
  22 runs of both cases, DGL and sar N=2, 4 included, took 691 s), the memory-budget
  run (:data:`BUDGET_RUNS`) on the GAT case, about as long as a GAT run at N=4, and the
  torch-kernel runs (:data:`KERNEL_RUNS`) on the SAGE and GCN 100k cases, about as long
  as their N=2 runs, and sar N=8 on the power-law case (:data:`N8_RUNS`).

Single-process DGL runs once per thread count its comparisons need (``min(N, cores)``
for the sarlite runs' N; on 2 cores: 1 and 2 threads), so each case has one more DGL run
than before.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

MODES = ("sar", "sa", "one-shot")
WORLD_SIZES = (1, 2, 4)
CHUNK_ROWS = 2048       # the chunked runs' engine.max_rows_per_step



@dataclass(frozen=True)
class Variant:
    """An engine mode run with engine settings other than the invocation's."""

    mode: str
    settings: tuple[tuple[str, object], ...]     # (engine field, value)


#: ``memory_budget`` of the ``budget`` runs, resolved by the runner when the run starts:
#: :data:`BUDGET_MARGIN` times the larger peak RSS per worker of the plain ``sar`` and
#: ``one-shot`` runs at the same N in the same invocation (room for one-shot layers).
FROM_PEAKS = "from-peaks"
BUDGET_MARGIN = 1.05

# Engine variants besides the plain modes.
VARIANTS: dict[str, Variant] = {
    "sar-chunked": Variant("sar", (("max_rows_per_step", CHUNK_ROWS),)),
    # the default before steps were sized automatically: a whole shard per ring round
    "sar-whole": Variant("sar", (("max_rows_per_step", "whole"),)),
    "sar-bf16": Variant("sar", (("halo_dtype", "bfloat16"),)),
    "sar-fp16": Variant("sar", (("halo_dtype", "float16"),)),
    "budget": Variant("sar", (("memory_budget", FROM_PEAKS),)),
    "sar-torch": Variant("sar", (("kernels", "torch"),)),
    "one-shot-torch": Variant("one-shot", (("kernels", "torch"),)),
}

# The full suite's extra runs, on the SAGE cases of the homophilous and the uniform graph:
# (mode or variant, world sizes). N=8 runs fine for memory on 2 cores (its epoch times
# are those of 8 processes sharing 2 cores).
EXTRA_RUNS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("sar", (8,)), ("sar-whole", (2, 4)), ("sar-chunked", (2, 4, 8)), ("sar-bf16", (2, 4)),
    ("sar-fp16", (2, 4)))
# The default's N=8 run on the power-law case (the goals' growth at N=8 is set on the
# homophilous, power-law and uniform graphs; the other two have it among EXTRA_RUNS).
N8_RUNS: tuple[tuple[str, tuple[int, ...]], ...] = (("sar", (8,)),)
# The memory-budget mode's run, on the GAT case: there one-shot is faster than sar (on the
# SAGE cases sar is the faster mode, and a budget has nothing to trade).
BUDGET_RUNS: tuple[tuple[str, tuple[int, ...]], ...] = (("budget", (4,)),)
# sarlite's torch kernels (engine.kernels: torch) against DGL's, on the SAGE and GCN 100k
# cases: sar and one-shot at N=2, read against the plain sar and one-shot N=2 runs.
KERNEL_RUNS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("sar-torch", (2,)), ("one-shot-torch", (2,)))
# The pairs of runs the time targets compare (benchmarks/report.py); ``("dgl", 2)`` stands
# for the DGL run of equal cores at N=2. A single run's epoch time varies by up to 20% on
# a shared 2-core machine (the CPU time of one configuration went from 3.95 to 5.30 s per
# epoch within minutes, 2026-11-29), more than the margins the goals leave, so with
# ``--time-runs K`` the suite runs both sides of these pairs K times and reports the
# median of their epoch times.
TIMED_PAIRS: tuple[tuple[tuple[str, int], tuple[str, int]], ...] = (
    (("sar", 2), ("dgl", 2)), (("one-shot", 2), ("dgl", 2)),
    (("sar-chunked", 2), ("sar", 2)), (("sar", 2), ("sar-whole", 2)),
    (("sar", 4), ("sar-whole", 4)), (("budget", 4), ("sar", 4)))


def base_mode(name: str) -> str:
    """The engine mode of a mode or variant name."""
    return VARIANTS[name].mode if name in VARIANTS else name


@dataclass(frozen=True)
class Case:
    """One graph and one model, run side by side in every selected mode and world size.

    ``hidden`` is the width per head for GAT (hidden layers have ``heads`` heads).
    """

    model: str
    graph: str = "synthetic"
    num_nodes: int = 100_000
    avg_degree: float = 20.0
    feat_dim: int = 128
    hidden: int = 256
    heads: int = 4
    num_classes: int = 8
    epochs: int = 3
    warmup: int = 1

    @property
    def well_cut(self) -> bool:
        """Whether METIS cuts this graph well (the homophilous graphs; the uniform random
        graph is the worst cut, the power-law graph close to it)."""
        return self.graph == "synthetic"

    @property
    def name(self) -> str:
        """E.g. ``sage-homophilous-100k``: model, graph and size (so overrides rename it)."""
        graph = "homophilous" if self.graph == "synthetic" else self.graph   # or uniform
        size = f"{self.num_nodes // 1000}k" if self.num_nodes % 1000 == 0 else \
            str(self.num_nodes)
        return f"{self.model}-{graph}-{size}"

    def with_overrides(self, **changes) -> "Case":
        """A copy with the given fields changed (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


SAGE_100K = Case("sage")
GCN_100K = Case("gcn")
GAT_100K = Case("gat", hidden=64)
SAGE_400K = Case("sage", num_nodes=400_000)
SAGE_POWERLAW = Case("sage", graph="powerlaw")
SAGE_UNIFORM = Case("sage", graph="uniform")

SUITES: dict[str, list[Case]] = {
    "quick": [SAGE_100K],
    "full": [SAGE_100K, GCN_100K, GAT_100K, SAGE_POWERLAW, SAGE_UNIFORM, SAGE_400K],
}
# the case whose graph the full suite's sampled-training comparison (benchmarks.sampled,
# sarlite N=2 against single-process DGL) runs on, with the extras
SAMPLED_CASE = SAGE_100K.name
# the extra runs each case of a suite makes besides the plain modes
EXTRAS: dict[str, dict[str, tuple[tuple[str, tuple[int, ...]], ...]]] = {
    "quick": {},
    "full": {SAGE_100K.name: EXTRA_RUNS + KERNEL_RUNS, GCN_100K.name: KERNEL_RUNS,
             SAGE_UNIFORM.name: EXTRA_RUNS, GAT_100K.name: BUDGET_RUNS,
             SAGE_POWERLAW.name: N8_RUNS},
}
