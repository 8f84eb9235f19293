"""engine.memory_budget keeps its promise where it binds: on two workers, a budget a
quarter of the way from the smallest that the most frugal plan fits to the smallest that
a generous plan (every layer one-shot, or every layer sar with whole shards) fits makes
the planner choose a frugal plan, and training under that plan stays within the budget.

The measure is the quantity the budget is defined on (:mod:`sarlite.core.budget`): each
worker's peak resident memory (Linux's ``VmHWM``) while training, restarted when training
starts, where ``sarlite train`` restarts it for ``training_peak_rss_mib``. It is a peak
of the absolute resident size, not a time, so other processes' load on the CPUs does not
enter it. The margin is the planner's own: the budget, of which it plans to fill all but
:data:`~sarlite.core.budget.HEADROOM`, the share kept for what its estimate misses. No
timing is asserted, only the harness's timeouts.

The budget comes from the workers' own calibration (the first :func:`plan_memory`, with
a budget every plan fits); :func:`choose` on those measurements is what
:func:`plan_memory` does with the binding budget after measuring, so the plan is the one
a user who set that budget would get, without a second calibration pass to vary it.
On this graph all-one-shot training was measured above that budget (GAT keeps the
fetched rows until the backward): a planner that ignored the budget would fail here.
"""
import pytest
import torch
import torch.nn.functional as F

import sarlite
from conftest import random_graph
from harness import spawn
from sarlite.core.budget import (HEADROOM, LADDER, RankCosts, choose, plan_memory,
                                 smallest_budget)
from sarlite.runtime.resident import peak_resident_bytes, reset_peak
from sarlite.train.config import ModelConfig
from sarlite.train.memory import graph_layers
from sarlite.train.models import build_model

# a uniform random graph cut in two: each worker's halo is about as large as what it
# owns, and GAT layers fetch 1040 bytes per halo row and keep them one-shot
NUM_NODES, NUM_EDGES, FEAT_DIM = 20_000, 200_000, 128
MODEL = {"type": "gat", "layers": 3, "hidden": 64, "heads": 4, "dropout": 0.5}
EPOCHS = 2
ONE_SHOT, WHOLE_SHARDS, FRUGAL = LADDER[0], LADDER[1], LADDER[-1]


def binding_budget(costs: list[RankCosts]) -> int:
    """Bytes a quarter of the way from the smallest budget that the most frugal plan fits
    to the smallest that the all-one-shot or the all-whole-shards plan fits (each for the
    worker that needs most; :func:`smallest_budget` adds the planner's headroom)."""
    layers = len(costs[0].row_bytes)

    def fits(choice) -> int:
        return smallest_budget(max(c.estimate([choice] * layers) for c in costs))
    frugal = fits(FRUGAL)
    return frugal + (min(fits(ONE_SHOT), fits(WHOLE_SHARDS)) - frugal) // 4


def _loss(model, graphs, feats: dict, num_train: float) -> torch.Tensor:
    mask = feats["train_mask"]
    out = model(graphs, feats["feat"])
    return F.cross_entropy(out[mask], feats["label"][mask], reduction="sum") / num_train


def _budgeted_training_worker(rank, world, config):
    """Plan for the binding budget, train ``EPOCHS`` Adam epochs under the plan; the plan
    and this worker's peak resident bytes from the start of training."""
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    manager = sarlite.construct_full_graph(data)
    feats = {"feat": data.node_features["feat"], "label": data.node_features["label"],
             "train_mask": data.node_features["train_mask"].bool()}
    del data                            # as sarlite train does: the graph keeps its part
    num_train = float(sarlite.comm.all_reduce(
        feats["train_mask"].sum().float().reshape(1), "sum", kind="test"))
    torch.manual_seed(0)
    model = build_model(ModelConfig(**MODEL), FEAT_DIM, 3)
    sarlite.sync_params(model)
    # made before planning, as sarlite train makes it: torch's first optimizer imports
    # modules that stay resident (tens of MiB), which the calibration must see
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def calibration(graphs):
        _loss(model, graphs, feats, num_train).backward()
        model.zero_grad(set_to_none=True)

    measured = plan_memory(manager, graph_layers(model), calibration, model, "1TiB").costs
    budget = binding_budget(list(measured))
    plan = choose(measured, budget)
    graphs = plan.graphs(manager)
    reset_peak()                        # training starts: sarlite train restarts it here
    for _ in range(EPOCHS):
        loss = _loss(model, graphs, feats, num_train)
        optimizer.zero_grad()
        loss.backward()
        sarlite.all_reduce_gradients(model)
        optimizer.step()
        del loss
    return plan, peak_resident_bytes()


@pytest.fixture(scope="module")
def budgeted_run(tmp_path_factory):
    """``(plan, [peak resident bytes of each worker while training])``."""
    out = tmp_path_factory.mktemp("budget_promise")
    g = random_graph(num_nodes=NUM_NODES, num_edges=NUM_EDGES, feat_dim=FEAT_DIM)
    sarlite.partition_graph(g, "g", 2, out)
    results = spawn(_budgeted_training_worker, 2, str(out / "g.json"), timeout=480)
    return results[0][0], [peak for _, peak in results]


def test_a_budget_below_the_generous_plans_needs_makes_the_planner_choose_a_frugal_plan(
        budgeted_run):
    plan, _ = budgeted_run
    layers = len(plan.layers)
    assert plan.layers not in ((ONE_SHOT,) * layers, (WHOLE_SHARDS,) * layers), plan.describe()


def test_training_under_a_binding_budget_stays_within_it_on_every_worker(budgeted_run):
    plan, peaks = budgeted_run
    assert max(peaks) <= plan.budget, (
        f"peaks {[p / 2**20 for p in peaks]} MiB over the budget of "
        f"{plan.budget / 2**20:.1f} MiB; {plan.describe()}")


def test_the_estimate_misses_no_more_of_a_workers_peak_than_the_headroom_kept_for_it(
        budgeted_run):
    plan, peaks = budgeted_run
    for costs, peak in zip(sorted(plan.costs, key=lambda c: c.rank), peaks):
        allowed = costs.estimate(plan.layers) + HEADROOM * plan.budget
        assert peak <= allowed, (
            f"worker {costs.rank}: peak {peak / 2**20:.1f} MiB, estimate "
            f"{costs.estimate(plan.layers) / 2**20:.1f} MiB + headroom "
            f"{HEADROOM * plan.budget / 2**20:.1f} MiB; {plan.describe()}")
