"""engine.memory_budget in the training application: which runs it applies to, and the
per-layer graphs of its plan (see :mod:`sarlite.core.budget`)."""
from __future__ import annotations

import logging
from typing import Callable

from torch import nn

from ..core.budget import MemoryPlan, plan_memory
from .config import Config, ConfigError
from .models import HeteroClassifier, LayeredGNN, Propagated

log = logging.getLogger("sarlite.train")


def check_budget(cfg: Config) -> None:
    """Refuse engine.memory_budget where it has no plan to make (before any collective).

    Raises
    ------
    ConfigError
        model.label_only or model.type=mlp with a budget.
    """
    if cfg.engine.memory_budget is None:
        return
    limits = {"model.label_only (message-flow graphs)": cfg.model.label_only,
              "model.type=mlp (it reads no graph)": cfg.model.type == "mlp"}
    refused = [what for what, on in limits.items() if on]
    if refused:
        raise ConfigError(f"engine.memory_budget plans full-graph training; not with "
                          f"{', '.join(refused)}: leave memory_budget unset and choose "
                          f"engine.mode and engine.max_rows_per_step")


def graph_layers(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` that read graph ``i`` of its forward's list, in order."""
    if isinstance(model, LayeredGNN):
        return list(model.convs)
    if isinstance(model, Propagated):
        return [model.net]
    if isinstance(model, HeteroClassifier) and "layers" in model.replicated:
        return list(model.replicated["layers"])
    raise ConfigError(f"engine.memory_budget has no plan for {type(model).__name__}")


def planned_graphs(cfg: Config, model: nn.Module, graph, run_pass: Callable[[list], None],
                   rank: int) -> tuple[list, MemoryPlan]:
    """The graphs, one per layer, of the plan for ``cfg.engine.memory_budget``, and the
    plan (logged on rank 0). ``run_pass(graphs)``: one training pass, forward and backward,
    whose gradients the caller drops. Collective.

    Raises
    ------
    MemoryBudgetError
        No plan fits; the message gives the smallest budget that would (every rank).
    """
    plan = plan_memory(graph, graph_layers(model), run_pass, model, cfg.engine.memory_budget)
    if rank == 0:
        log.warning("%s", plan.describe())
    return plan.graphs(graph), plan
