"""engine.memory_budget: each layer runs one-shot where its estimated peak fits and sar with
fewer rows per step where it does not; the estimate comes from one measured pass, every rank
makes the same plan, a budget no plan fits is refused with the smallest that would, and the
results stay single-process DGL's."""
import dgl.nn as dglnn
import pytest
import torch

import sarlite
from conftest import random_graph
from harness import spawn
from sarlite.core.budget import (LADDER, LayerChoice, MemoryBudgetError, MemoryPlan, RankCosts,
                                 choose, parse_bytes, plan_memory,
                                 smallest_budget)
from sarlite.train import Config

TOL = {"rtol": 1e-4, "atol": 1e-5}
MiB = 2**20


def _costs(rank=0, resident=500 * MiB, halo=40_000, largest=15_000, rows=(512, 1024, 40)):
    return RankCosts(rank=rank, resident=resident, pass_growth=100 * MiB, optimizer=MiB,
                     row_bytes=rows, owned=25_000, halo=halo, remote_edges=3 * halo,
                     largest_shard=largest,
                     edges=500_000, depth=1)


# -- sizes and plans (one process) ----------------------------------------------------

@pytest.mark.parametrize("text,size", [("3GiB", 3 * 2**30), ("512 MiB", 512 * MiB),
                                       ("1.5GB", 1_500_000_000), (4096, 4096), ("77", 77)])
def test_a_budget_is_bytes_or_a_size_with_a_unit(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("bad", ["3 gigs", "-1GiB", 0, "", True])
def test_a_budget_that_is_no_size_is_one_clear_error(bad):
    with pytest.raises(ValueError, match="memory_budget"):
        parse_bytes(bad)


def test_a_budget_above_every_estimate_runs_every_layer_one_shot():
    plan = choose([_costs()], 100 * 2**30)
    assert plan.estimate < plan.budget and plan.layers == (LayerChoice("one-shot"),) * 3


def test_a_tighter_budget_moves_as_few_layers_down_as_fit_and_keeps_cheap_ones_one_shot():
    costs = [_costs()]
    plan = choose(costs, costs[0].estimate([LADDER[0]] * 3) - 30 * MiB)
    assert plan.estimate <= plan.budget
    assert [c.mode for c in plan.layers].count("sar") == 1       # one rung down suffices
    assert plan.layers[2] == LayerChoice("one-shot")       # 40 bytes a row: cheap to keep


def test_the_plan_fits_the_rank_that_needs_most_and_is_the_same_in_any_rank_order():
    costs = [_costs(0), _costs(1, resident=700 * MiB, halo=60_000)]
    budget = costs[1].estimate([LADDER[1]] * 3)
    plan = choose(costs, budget)
    assert plan.layers == choose(costs[::-1], budget).layers
    assert max(c.estimate(plan.layers) for c in costs) <= budget


def test_a_budget_no_plan_fits_names_the_smallest_that_would():
    costs = [_costs(0), _costs(1, resident=900 * MiB)]
    smallest = smallest_budget(costs[1].estimate([LADDER[-1]] * 3))
    with pytest.raises(MemoryBudgetError, match=rf"on worker 1 .* at least {smallest // MiB} "
                                                r"MiB"):
        choose(costs, smallest - MiB)
    assert choose(costs, smallest).estimate <= smallest


@pytest.mark.parametrize("engine,message", [
    ({"mode": "one-shot"}, "leave engine.mode=one-shot unset"),
    ({"max_rows_per_step": 64}, "engine.max_rows_per_step=64"),
    ({"memory_budget": "lots"}, "memory_budget must be a size"),
])
def test_a_budget_with_a_chosen_mode_or_step_or_no_size_is_refused(engine, message):
    with pytest.raises(ValueError, match=message):
        Config.model_validate({"engine": {"memory_budget": "1GiB", **engine}})


def test_a_budget_with_sampled_training_is_refused():
    with pytest.raises(ValueError, match="sampled"):
        Config.model_validate({"model": {"type": "sage"}, "engine": {"memory_budget": "1GiB"},
                               "train": {"sampling": {"fanouts": [5, 5], "batch_size": 8}}})


# -- on workers -----------------------------------------------------------------------

def _gat_layers():
    torch.manual_seed(0)
    return torch.nn.ModuleList([
        dglnn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True),
        dglnn.GATConv(6, 3, num_heads=2, allow_zero_in_degree=True),
        dglnn.GATConv(6, 2, num_heads=1, allow_zero_in_degree=True)])


def _forward(layers, graphs, x):
    for layer, g in zip(layers, graphs):
        x = torch.relu(layer(g, x).flatten(1))
    return x


MIXED = (LayerChoice("sar", 2), LayerChoice("one-shot"), LayerChoice("sar"))


def _mixed_plan_worker(rank, world, config, state):
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    manager = sarlite.construct_full_graph(data)
    graphs = MemoryPlan(1, MIXED, 0, ()).graphs(manager)
    layers = _gat_layers()
    layers.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = _forward(layers, graphs, x)
    out.sum().backward()
    sarlite.all_reduce_gradients(layers)
    return out.detach(), x.grad, [p.grad for p in layers.parameters()], \
        [type(g).__name__ for g in graphs]


def test_a_plan_mixing_one_shot_and_sar_steps_per_layer_gives_single_process_results(tmp_path):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    layers = _gat_layers()
    x = g.ndata["feat"].clone().requires_grad_()
    out = _forward(layers, [g] * 3, x)
    out.sum().backward()
    results = spawn(_mixed_plan_worker, 3, str(tmp_path / "g.json"), layers.state_dict(),
                    timeout=120)
    assert results[0][3] == ["GraphShardManager", "DistributedBlock", "GraphShardManager"]
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig].detach(), **TOL)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), x.grad[orig], **TOL)
    for got, p in zip(results[0][2], layers.parameters()):
        torch.testing.assert_close(got, p.grad, **TOL)


def _planning_worker(rank, world, config, budget):
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    manager = sarlite.construct_full_graph(data)
    layers = _gat_layers()
    norm = torch.nn.BatchNorm1d(4)
    model = torch.nn.ModuleList([layers, norm])
    x = data.node_features["feat"]

    def run_pass(graphs):
        _forward(layers, graphs, norm(x)).sum().backward()
        model.zero_grad(set_to_none=True)

    torch.manual_seed(7)
    try:
        plan = plan_memory(manager, list(layers), run_pass, model, budget)
    except MemoryBudgetError as err:
        return str(err)
    return (plan.layers, torch.rand(3), norm.running_mean.clone(),
            [c.row_bytes for c in plan.costs])


def test_planning_measures_each_layer_and_leaves_the_run_as_it_was(tmp_path):
    g = random_graph(num_nodes=50, num_edges=250)
    sarlite.partition_graph(g, "g", 2, tmp_path)
    results = spawn(_planning_worker, 2, str(tmp_path / "g.json"), "100GiB", timeout=120)
    torch.manual_seed(7)
    untouched = torch.rand(3)
    assert results[0][0] == results[1][0] == (LayerChoice("one-shot"),) * 3
    for _, rand, running_mean, _ in results:
        torch.testing.assert_close(rand, untouched)                # random state as before
        assert torch.equal(running_mean, torch.zeros(4))           # buffers as before
    # GATConv moves its projected features and one attention logit per head (4 bytes each)
    assert results[0][3][0] == ((3 * 2 + 2) * 4, (3 * 2 + 2) * 4, (2 + 1) * 4)


def test_a_budget_below_the_smallest_plan_is_refused_on_every_rank(tmp_path):
    g = random_graph(num_nodes=50, num_edges=250)
    sarlite.partition_graph(g, "g", 2, tmp_path)
    results = spawn(_planning_worker, 2, str(tmp_path / "g.json"), "1MiB", timeout=120)
    assert all("engine.memory_budget 1 MiB is too small" in r and "at least" in r
               for r in results), results

