"""Memory-budget mode: per layer, one-shot where it fits, sar with a step size where not.

Every worker holds, while it trains, what it held before training (partition, graph,
model), what one training pass adds whatever the mode (activations, gradients, the
per-step aggregates), the optimizer's state, and what the exchange of each layer adds:

* a **one-shot** layer fetches all ``H`` halo rows at once and concatenates them with the
  ``n`` owned rows: ``(n + 2H) * r`` bytes at the layer's peak, where ``r`` is the bytes
  per row the layer moves; it is counted as keeping ``(n + H) * r`` until the backward
  (the layer may keep less: DGL's ``copy_u`` + ``sum`` keeps none, GAT's ``u_mul_e``
  keeps them), and the merged block costs :data:`BLOCK_BYTES_PER_EDGE` per owned edge;
* a **sar** layer with ``R`` rows per step holds ``3 * (depth + 1) * min(R, S) * r``
  (``depth + 1`` steps in flight, each with its rows and, in the backward, their
  gradients and the gradients sent back to us; ``S`` is the largest remote shard, the
  step of whole shards), plus a step's aggregate and its gradient, ``2 * D * r``, where
  ``D`` is every owned destination for a whole shard and at most ``R * E / H`` for a
  chunk (``E`` edges leave the ``H`` halo rows, and a chunk reaches no more destinations
  than it has edges); each chunk size in use keeps its structure,
  :data:`CHUNK_BYTES_PER_EDGE` per edge from a halo row.

A layer's exchange peak comes on top of what the layers before it keep (the forward pass
runs them in order), and the pass's own peak on top of what every layer keeps. The terms
that no formula gives are measured on every rank by one training pass before training,
in the most frugal plan (sar, :data:`CALIBRATION_ROWS` rows per step): its peak resident
growth (Linux's ``VmHWM``, reset first) is what one pass adds beyond the exchange, and
the bytes each layer's forward fetched give ``r`` per layer. The pass changes nothing of
the run: the random state and the model's buffers are restored, and the caller drops the
gradients.

Each layer takes one rung of the ladder: one-shot, sar with whole shards, then sar with
:data:`STEP_ROWS` rows per step (slower and more frugal down the ladder). The plan is the
one with the fewest rungs down in all whose estimate fits the budget, less
:data:`HEADROOM` for what the estimate misses, on every rank. Every rank computes the same
plan from every rank's measurements (one ``all_gather_object``). When even the bottom
rung does not fit, :class:`MemoryBudgetError` names the smallest budget that would.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

import torch

from .. import comm
from ..runtime.resident import peak_resident_bytes, reset_peak, resident_bytes
from .distributed_block import DistributedBlock
from .hetero import HeteroGraphShardManager
from .manager import GraphShardManager
from .sar_op import FETCH_KIND

STEP_ROWS = (8192, 2048, 512)   # sar's rows per step, down the ladder
CALIBRATION_ROWS = STEP_ROWS[-1]
BLOCK_BYTES_PER_EDGE = 48       # one-shot's merged block: COO, in- and out-CSR, int64
CHUNK_BYTES_PER_EDGE = 64       # a chunk size's structure: its blocks plus edge indices
HEADROOM = 0.02                 # share of the budget kept for what the estimate misses
OPTIMIZER_STATES = 2            # Adam keeps two values per parameter
SEARCHED_LAYERS = 6             # up to this many layers, every plan is tried

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2,
          "g": 1000**3, "gb": 1000**3, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "t": 1000**4, "tb": 1000**4, "tib": 2**40}


class MemoryBudgetError(ValueError):
    """No plan fits the budget; the message gives the smallest budget that would."""


def parse_bytes(value) -> int:
    """``value`` in bytes: an integer, or a string such as ``"3GiB"``, ``"512 MiB"``,
    ``"1.5GB"`` (powers of 1024 for KiB/MiB/GiB/TiB, of 1000 for kB/MB/GB/TB).

    Raises
    ------
    ValueError
        Not a positive size.
    """
    if isinstance(value, bool):
        raise ValueError(f"memory_budget must be a size such as '3GiB', got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"memory_budget must be a size such as '3GiB', '512MiB' or a "
                             f"number of bytes, got {value!r}")
        size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise ValueError(f"memory_budget must be positive, got {value!r}")
    return size


def format_bytes(size: float) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


# -- plans ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerChoice:
    """How one layer runs: ``"one-shot"``, or ``"sar"`` with ``max_rows_per_step``."""

    mode: str
    max_rows_per_step: int | None = None

    def __str__(self) -> str:
        if self.mode == "one-shot":
            return "one-shot"
        rows = self.max_rows_per_step
        return "sar, whole shards" if rows is None else f"sar, {rows} rows per step"


LADDER = (LayerChoice("one-shot"), LayerChoice("sar")) + tuple(
    LayerChoice("sar", rows) for rows in STEP_ROWS)


@dataclass(frozen=True)
class RankCosts:
    """One rank's measurements (bytes and rows) that a plan's estimate is made of."""

    rank: int
    resident: int            # resident before training
    pass_growth: int         # peak growth of the calibration pass
    optimizer: int           # the optimizer's state
    row_bytes: tuple[int, ...]   # per layer: bytes per halo row its forward received
    owned: int               # source rows owned
    halo: int                # halo rows (all remote shards)
    remote_edges: int        # owned edges from halo rows
    largest_shard: int       # rows of the largest remote shard
    edges: int               # owned edges
    depth: int               # pipeline depth

    def exchange(self, choice: LayerChoice, row_bytes: int) -> tuple[int, int]:
        """(peak while the layer runs, kept until the backward) of one layer's exchange."""
        if choice.mode == "one-shot":
            return (self.owned + 2 * self.halo) * row_bytes, (self.owned + self.halo) * row_bytes
        if choice.max_rows_per_step is None:
            rows, reached = self.largest_shard, self.owned
        else:
            rows = min(choice.max_rows_per_step, self.largest_shard)
            reached = min(self.owned, -(-rows * self.remote_edges // max(self.halo, 1)))
        return (3 * (self.depth + 1) * rows + 2 * reached) * row_bytes, 0

    def estimate(self, choices: Sequence[LayerChoice]) -> int:
        """Estimated peak resident bytes of training with ``choices``: what one pass adds
        at its end with every layer's kept rows, or, if more, layer ``l``'s exchange peak
        on top of the rows the layers before it keep."""
        costs = [self.exchange(c, r) for c, r in zip(choices, self.row_bytes)]
        kept = [k for _, k in costs]
        during = max((sum(kept[:i]) + peak for i, (peak, _) in enumerate(costs)), default=0)
        block = BLOCK_BYTES_PER_EDGE * self.edges if any(
            c.mode == "one-shot" for c in choices) else 0
        sizes = {c.max_rows_per_step for c in choices if c.mode == "sar"} - {
            None, CALIBRATION_ROWS}             # the calibration's chunks are in the pass
        chunks = CHUNK_BYTES_PER_EDGE * self.remote_edges * len(sizes)
        return (self.resident + self.pass_growth + self.optimizer + block + chunks +
                max(sum(kept), during))


@dataclass(frozen=True)
class MemoryPlan:
    """Each layer's choice, with the estimate of the rank that needs most."""

    budget: int
    layers: tuple[LayerChoice, ...]
    estimate: int
    costs: tuple[RankCosts, ...]

    def describe(self) -> str:
        rows = "; ".join(f"layer {i}: {c}" for i, c in enumerate(self.layers))
        return (f"memory plan for a budget of {format_bytes(self.budget)} per worker: {rows} "
                f"(estimated peak {format_bytes(self.estimate)}, the largest worker)")

    def record(self) -> dict:
        """The plan as ``summary.json`` keeps it: budget, estimate, layers (in words and
        as ``{"mode", "max_rows_per_step"}``) and every rank's measurements."""
        return {"budget_bytes": self.budget, "estimate_bytes": self.estimate,
                "layers": [str(c) for c in self.layers],
                "choices": [asdict(c) for c in self.layers],
                "measured": [asdict(c) for c in self.costs]}

    def graphs(self, graph) -> list:
        """One graph per layer, sharing ``graph``'s shards (a :class:`GraphShardManager`,
        or a :class:`HeteroGraphShardManager` whose relations all take the layer's
        choice): :class:`DistributedBlock` relations (one per relation, shared) for
        one-shot layers, the managers with the layer's rows per step for sar layers. When
        every layer is one-shot the managers' shards are dropped."""
        one_shot = sum(c.mode == "one-shot" for c in self.layers)
        if one_shot == len(self.layers):
            block = _each(graph, lambda m: m.get_full_partition_graph(delete_shard_data=True))
            return [block] * len(self.layers)
        block = _each(graph, DistributedBlock.from_manager) if one_shot else None
        return [block if c.mode == "one-shot" else _each(graph, lambda m, c=c: m.with_options(
            replace(m.engine_options(), max_rows_per_step=c.max_rows_per_step)))
            for c in self.layers]


def _managers(graph) -> list[GraphShardManager]:
    """The relation views of ``graph``: itself for a graph of one relation."""
    return graph.relation_views() if isinstance(graph, HeteroGraphShardManager) else [graph]


def _each(graph, make):
    """``make(graph)``, or a heterogeneous graph of ``make`` of each relation view."""
    return graph.with_relations(make) if isinstance(graph, HeteroGraphShardManager) \
        else make(graph)


def choose(costs: Sequence[RankCosts], budget: int) -> MemoryPlan:
    """The plan for ``budget`` (see the module text); the same on every rank for the same
    ``costs``.

    Of the plans whose estimate fits on every rank, the one with the fewest steps down
    :data:`LADDER` in all (each step costs time), then the lowest estimate. Up to
    :data:`SEARCHED_LAYERS` layers every plan is tried; deeper models take one level for
    every layer.

    Raises
    ------
    MemoryBudgetError
        Even sar with the fewest rows per step in every layer is estimated over the budget.
    """
    num_layers = len(costs[0].row_bytes)

    def worst(levels) -> int:
        return max(c.estimate([LADDER[k] for k in levels]) for c in costs)

    plans = itertools.product(range(len(LADDER)), repeat=num_layers) \
        if num_layers <= SEARCHED_LAYERS else ((k,) * num_layers for k in range(len(LADDER)))
    usable = int(budget * (1 - HEADROOM))
    fitting = [(sum(levels), estimate, levels) for levels in plans
               if (estimate := worst(levels)) <= usable]
    if not fitting:
        _refuse(costs, budget, [LADDER[-1]] * num_layers)
    _, estimate, levels = min(fitting)
    return MemoryPlan(budget, tuple(LADDER[k] for k in levels), estimate, tuple(costs))


def smallest_budget(estimate: int) -> int:
    """The smallest budget, in whole MiB, whose share left after :data:`HEADROOM` holds
    ``estimate`` bytes."""
    return -(-int(estimate / (1 - HEADROOM)) // 2**20) * 2**20


def _refuse(costs: Sequence[RankCosts], budget: int, frugal: list[LayerChoice]):
    need, worst = max((c.estimate(frugal), c.rank) for c in costs)
    rank_costs = next(c for c in costs if c.rank == worst)
    raise MemoryBudgetError(
        f"engine.memory_budget {format_bytes(budget)} is too small: the most frugal plan "
        f"(sar, {STEP_ROWS[-1]} rows per step in every layer) needs about "
        f"{format_bytes(need)} on worker {worst} ({format_bytes(rank_costs.resident)} held "
        f"before training, {format_bytes(rank_costs.pass_growth)} for one training pass), "
        f"plus {HEADROOM:.0%} headroom; set memory_budget to at least "
        f"{smallest_budget(need) // 2**20} MiB, or train on more workers")


# -- measuring ------------------------------------------------------------------------

def measure(graph, layers: Sequence[torch.nn.Module],
            run_pass: Callable[[list], None], model: torch.nn.Module) -> RankCosts:
    """This rank's :class:`RankCosts`, by one training pass in sar with
    :data:`CALIBRATION_ROWS` rows per step (see the module text). ``graph``: a
    :class:`GraphShardManager`, or a :class:`HeteroGraphShardManager` of them (its
    relations' rows and edges are counted together: a layer runs every relation).

    ``layers``: the modules that read the graphs, in the order of ``run_pass``'s list
    (layer ``i`` reads graph ``i``). ``run_pass(graphs)`` runs one forward and backward
    pass with one graph per layer. Collective (``run_pass`` is).
    """
    managers = _managers(graph)
    options = managers[0].engine_options()
    frugal = _each(graph, lambda m: m.with_options(replace(
        m.engine_options(), mode="sar", max_rows_per_step=CALIBRATION_ROWS)))
    per_layer = [0] * len(layers)
    hooks = [hook for i, layer in enumerate(layers) for hook in _count_received(layer, i,
                                                                                per_layer)]
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    try:
        with torch.random.fork_rng(devices=[]):
            resident = resident_bytes()
            reset_peak()
            run_pass([frugal] * len(layers))
            growth = max(0, peak_resident_bytes() - resident)
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    remote = [shard for m in managers for shard in m.shards if shard.src_part != m.plan.me]
    halo = sum(shard.rows.numel() for shard in remote)
    widen = 1 if options.halo_dtype is None else 2      # rows arrive in 16 bits, held in 32
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return RankCosts(
        rank=comm.rank(), resident=resident, pass_growth=growth,
        optimizer=OPTIMIZER_STATES * params,
        row_bytes=tuple(-(-widen * r // halo) if halo else 0 for r in per_layer),
        owned=sum(m.num_src_nodes() for m in managers), halo=halo,
        remote_edges=sum(shard.num_edges for shard in remote),
        largest_shard=max([shard.rows.numel() for shard in remote], default=0),
        edges=sum(m.num_edges() for m in managers), depth=options.pipeline_depth)


def _fetched() -> int:
    """Bytes of rows received by sar's fetches so far."""
    return comm.traffic.snapshot().get(FETCH_KIND, {}).get("received", 0)


def _count_received(layer: torch.nn.Module, i: int, totals: list[int]) -> list:
    """Hooks adding the bytes ``layer``'s forward receives to ``totals[i]``."""
    start = []

    def before(*_):
        start.append(_fetched())

    def after(*_):
        totals[i] += _fetched() - start.pop()

    return [layer.register_forward_pre_hook(before), layer.register_forward_hook(after)]


def plan_memory(graph, layers: Sequence[torch.nn.Module],
                run_pass: Callable[[list], None], model: torch.nn.Module,
                budget) -> MemoryPlan:
    """Measure (:func:`measure`), gather every rank's measurements and choose (:func:`choose`)
    the plan for ``budget`` (bytes or a size such as ``"3GiB"``): the peak resident memory
    each worker may reach while training, for ``graph`` (a :class:`GraphShardManager` or
    a :class:`HeteroGraphShardManager`). Collective: every rank calls it with the same
    budget, before training, and after making the optimizer (and anything else training
    builds once): the calibration counts what the process holds then, and torch's first
    optimizer alone imports modules worth tens of MiB.

    Raises
    ------
    MemoryBudgetError
        No plan fits (the message gives the smallest budget that would); on every rank.
    """
    costs = measure(graph, layers, run_pass, model)
    return choose(comm.all_gather_object(costs, "memory_plan"), parse_bytes(budget))
