"""Bounded exchange steps (``max_rows_per_step``): a remote shard's rows are fetched, used
and freed in chunks of at most that many rows, in forward, in the rematerialized backward
and for the gradients sent back, and every result stays single-process DGL's.

The whole layer matrix also runs in tiny chunks in sar mode (tests/test_exactness.py); these
tests pin sa mode in chunks, the bound itself, its combination with the other options, and
the chunks' structure.
"""
import dgl.nn as dglnn
import pytest
import torch

import sarlite
from conftest import random_graph
import gat_case
from harness import spawn
from sarlite.core.kernels import EdgeIndex
from sarlite.core.shards import GraphShard

TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.mark.parametrize("engine", [
    {"mode": "sar", "max_rows_per_step": 3},
    {"mode": "sa", "max_rows_per_step": 3},
    {"mode": "sar", "max_rows_per_step": 3, "max_collective_rows": 1},
    {"mode": "sar", "max_rows_per_step": 3, "pipeline_depth": 0},
], ids=["sar", "sa", "with-collective-bound", "depth0"])
def test_every_exchange_moves_at_most_the_bound_and_results_stay_exact(tmp_path, engine):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    conv, out, xgrad = gat_case.reference(g)
    results = spawn(gat_case.worker, 3, str(tmp_path / "g.json"), conv.state_dict(), engine,
                    timeout=120)
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig], **TOL)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), xgrad[orig], **TOL)
    torch.testing.assert_close(results[0][2], conv.fc.weight.grad, **TOL)
    sizes = [s for r in results for s in r[3]]
    bound = engine.get("max_collective_rows") or engine["max_rows_per_step"]
    assert len(sizes) > 12 and max(sizes) <= bound     # many steps, none above the bound


def _sage_mean_pass(data, state, rows, depth=None):
    """A SAGE-mean layer's forward and backward on the full graph with ``rows`` per step
    (and ``depth`` steps fetched ahead): ``(graph, layer, output, input gradient)``."""
    g = sarlite.construct_full_graph(data, max_rows_per_step=rows, pipeline_depth=depth)
    conv = dglnn.SAGEConv(4, 3, "mean")
    conv.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    return g, conv, out.detach(), x.grad


def _sage_mean_in_steps(rank, world, config, state, rows, depth):
    _, _, out, xgrad = _sage_mean_pass(sarlite.load_partition_data(config), state, rows,
                                       depth)
    return out, xgrad


# steps of one row, fetched 0, 1 and 2 ahead, reuse their buffers after 1, 2 and 3 steps
@pytest.mark.parametrize("rows,depth", [(1, 1), (1000, 1), (1, 0), (1, 2)])
def test_copy_u_backward_without_refetch_also_returns_gradients_in_steps(tmp_path, rows,
                                                                         depth):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 2, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    conv = dglnn.SAGEConv(4, 3, "mean")
    x = g.ndata["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    results = spawn(_sage_mean_in_steps, 2, str(tmp_path / "g.json"), conv.state_dict(),
                    rows, depth, timeout=120)
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig].detach(), **TOL)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), x.grad[orig], **TOL)


def _fetched_twice(rank, world, config, depth):
    """Every remote step's fetched rows, as fetched without and with reuse: ``(values,
    storage addresses)`` for each; the rows are held to the end."""
    from sarlite.core.sar_op import ShardSet
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data, max_rows_per_step=2, pipeline_depth=depth)
    graph = ShardSet(tuple(g.shards), g.plan, g.in_degrees(), g.engine_options())
    x = data.node_features["feat"]
    runs = []
    for reuse in (False, True):
        held = [(rows.clone(), rows) for step, _, (rows,) in
                graph.fetched([x], "test", reuse=reuse) if step.round_ > 0]
        runs.append(([v for v, _ in held], [r.untyped_storage().data_ptr() for _, r in held]))
    return runs


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_reused_steps_receive_into_depth_plus_one_buffers_and_fetch_the_same_rows(
        tmp_path, depth):
    g = random_graph(num_nodes=40, num_edges=200)
    sarlite.partition_graph(g, "g", 2, tmp_path, part_method="random")
    for fresh, reused in spawn(_fetched_twice, 2, str(tmp_path / "g.json"), depth,
                               timeout=120):
        assert len(fresh[0]) > depth + 2                     # many remote steps
        for a, b in zip(fresh[0], reused[0]):
            torch.testing.assert_close(a, b)
        assert len(set(fresh[1])) == len(fresh[1])           # held: all distinct
        assert reused[1][depth + 1:] == reused[1][:-(depth + 1)]
        assert len(set(reused[1])) == depth + 1


def _sent_back(rank, world, config, state, depth):
    """Storage addresses of the gradients every remote step of a SAGE-mean backward, in
    steps of two rows, sends back to their owner."""
    from unittest import mock

    from sarlite.core.shards import RingPlan
    sent, original = [], RingPlan.return_grad

    def spy(plan, grad_rows, step, *args, **kwargs):
        if step.round_ > 0:
            sent.append(grad_rows.untyped_storage().data_ptr())
        return original(plan, grad_rows, step, *args, **kwargs)

    with mock.patch.object(RingPlan, "return_grad", spy):
        _sage_mean_pass(sarlite.load_partition_data(config), state, 2, depth)
    return sent


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_gradients_sent_back_in_steps_rotate_through_depth_plus_one_buffers(tmp_path, depth):
    g = random_graph(num_nodes=40, num_edges=200)
    sarlite.partition_graph(g, "g", 2, tmp_path, part_method="random")
    state = dglnn.SAGEConv(4, 3, "mean").state_dict()
    for sent in spawn(_sent_back, 2, str(tmp_path / "g.json"), state, depth, timeout=120):
        assert len(sent) > depth + 2                         # many remote steps
        assert sent[depth + 1:] == sent[:-(depth + 1)] and len(set(sent)) == depth + 1


def _shard(num_rows=7, num_dst=5, num_edges=30, seed=0) -> GraphShard:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_rows, (num_edges,), generator=gen)
    dst = torch.randint(0, num_dst, (num_edges,), generator=gen)
    return GraphShard(1, torch.arange(num_rows) * 3, EdgeIndex(src, dst, num_rows, num_dst),
                      (10, 10 + num_edges))


def test_chunks_split_a_shard_by_source_row_order_edges_by_destination_and_reach_only_theirs():
    shard = _shard()
    src, dst = shard.index.src, shard.index.dst
    chunks = shard.chunks(3, 4)              # rows 0-2, 3-5, 6, none
    assert [c.index.num_src for c in chunks] == [3, 3, 1, 0]
    assert torch.equal(torch.cat([c.edge_index for c in chunks]).sort().values,
                       torch.arange(shard.num_edges))
    for c, chunk in enumerate(chunks):
        # by destination; a destination's edges in shard order (as one DGL graph sums them)
        key = dst[chunk.edge_index] * shard.num_edges + chunk.edge_index
        assert torch.equal(key, key.sort().values)
        c_src, c_dst = chunk.index.src, chunk.index.dst
        assert torch.equal(c_src + 3 * c, src[chunk.edge_index])
        assert torch.equal(chunk.dst_index[c_dst], dst[chunk.edge_index])
        assert torch.equal(chunk.dst_index, dst[chunk.edge_index].unique())  # reached only
        assert torch.equal(chunk.rows, shard.rows[3 * c:3 * c + 3])
        assert chunk.edge_slice == shard.edge_slice


def test_one_chunk_is_the_shard_itself_and_chunks_are_built_once():
    shard = _shard()
    assert shard.chunks(100, 1) == (shard,)
    assert shard.chunks(2, 4) is shard.chunks(2, 4)


def test_max_rows_per_step_must_be_a_positive_integer():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_rows_per_step must be a positive integer"):
            sarlite.core.EngineOptions(max_rows_per_step=bad)


def test_the_yaml_engine_section_takes_max_rows_per_step():
    from sarlite.train.config import EngineConfig
    assert EngineConfig(max_rows_per_step=4096).max_rows_per_step == 4096
    with pytest.raises(ValueError, match="max_rows_per_step"):
        EngineConfig(max_rows_per_step=0)


def test_the_default_step_size_is_auto_and_none_means_whole_shards():
    from sarlite.core import EngineOptions
    assert EngineOptions().max_rows_per_step == "auto"
    assert EngineOptions(max_rows_per_step=None).max_rows_per_step == "whole"
    assert EngineOptions(max_rows_per_step="whole").max_rows_per_step == "whole"
    with pytest.raises(ValueError, match="'auto'"):
        EngineOptions(max_rows_per_step="half")


def test_auto_steps_are_a_third_of_the_fewest_rows_along_the_edges_else_a_twelfth():
    from sarlite.core.options import (AUTO_STEP_DIVISOR, AUTO_STEP_DIVISOR_PER_DESTINATION,
                                      AUTO_STEP_FLOOR, step_rows)
    assert (AUTO_STEP_DIVISOR, AUTO_STEP_DIVISOR_PER_DESTINATION) == (3, 12)
    for along_edges, divisor in ((True, 3), (False, 12)):
        assert step_rows("auto", (100, 50), along_edges) == AUTO_STEP_FLOOR  # small graphs
        big = (AUTO_STEP_FLOOR * divisor * 3, AUTO_STEP_FLOOR * divisor * 2)
        assert step_rows("auto", big, along_edges) == AUTO_STEP_FLOOR * 2  # the fewest rows
        assert step_rows("whole", big, along_edges) is None
        assert step_rows(7, big, along_edges) == 7


def _default_and_whole(rank, world, config, state):
    data = sarlite.load_partition_data(config)
    outs = []
    for rows in (None, "whole"):                 # the default (auto), then whole shards
        g, conv, out, xgrad = _sage_mean_pass(data, state, rows)
        sarlite.all_reduce_gradients(conv)
        steps = sarlite.core.sar_op.ShardSet(tuple(g.shards), g.plan, g.in_degrees(),
                                            g.engine_options(), along_edges=True).steps
        outs.append((out, xgrad, conv.fc_neigh.weight.grad, len(steps)))
    return outs


def test_by_default_a_bad_cut_runs_in_steps_and_gives_the_whole_shard_results(tmp_path):
    from sarlite.core.options import AUTO_STEP_DIVISOR, AUTO_STEP_FLOOR
    num_nodes = 2 * AUTO_STEP_FLOOR * AUTO_STEP_DIVISOR + 600   # > floor x divisor per rank
    g = random_graph(num_nodes=num_nodes, num_edges=4 * num_nodes)
    sarlite.partition_graph(g, "g", 2, tmp_path, part_method="random")
    torch.manual_seed(0)
    state = dglnn.SAGEConv(4, 3, "mean").state_dict()
    (auto, whole), _ = spawn(_default_and_whole, 2, str(tmp_path / "g.json"), state,
                             timeout=180)
    assert whole[3] == 2 and auto[3] > 2           # a remote shard of > 1024 rows, in steps
    for got, want in zip(auto[:3], whole[:3]):
        torch.testing.assert_close(got, want, **TOL)


def test_a_sparse_chunk_adds_copied_rows_along_its_edges_into_the_shard_accumulator():
    chunk = _shard(num_rows=7, num_dst=40, num_edges=30).chunks(3, 3)[0]
    rows = torch.randn(chunk.index.num_src, 4)
    out = torch.zeros(40, 4)
    assert chunk.add_copied(out, rows)
    want = torch.zeros(40, 4).index_add_(
        0, chunk.dst_index[chunk.index.dst.long()], rows[chunk.index.src.long()])
    torch.testing.assert_close(out, want)
    grad = torch.randn(40, 4)
    back = torch.zeros(chunk.index.num_src, 4).index_add_(
        0, chunk.index.src.long(), grad[chunk.dst_index[chunk.index.dst.long()]])
    torch.testing.assert_close(chunk.copied_back(grad), back)


def test_a_chunk_keeps_its_edge_matrix_for_every_step_and_a_whole_shard_does_not():
    shard = _shard(num_rows=7, num_dst=40, num_edges=30)
    chunk = shard.chunks(3, 3)[0]
    first = chunk.edge_matrix(torch.float32, 40)
    chunk.add_copied(torch.zeros(40, 4), torch.randn(chunk.index.num_src, 4))
    chunk.copied_back(torch.randn(40, 4))
    assert chunk.edge_matrix(torch.float32, 40) is first          # built once, then kept
    assert chunk.edge_matrix(torch.float64, 40).dtype == torch.float64
    assert shard.edge_matrix(torch.float32, 40) is not shard.edge_matrix(torch.float32, 40)


def test_a_chunk_with_many_edges_per_destination_leaves_the_sum_to_its_block():
    chunk = _shard(num_rows=7, num_dst=2, num_edges=60).chunks(4, 2)[0]   # ~17 per dst
    out = torch.zeros(2, 4)
    assert not chunk.add_copied(out, torch.randn(chunk.index.num_src, 4))
    assert torch.equal(out, torch.zeros(2, 4))


def test_a_chunk_with_many_edges_per_destination_still_sums_its_gradient_back_along_them():
    chunk = _shard(num_rows=7, num_dst=2, num_edges=60).chunks(4, 2)[0]   # ~17 per dst
    grad = torch.randn(2, 4)
    back = torch.zeros(chunk.index.num_src, 4).index_add_(
        0, chunk.index.src.long(), grad[chunk.dst_index[chunk.index.dst.long()]])
    torch.testing.assert_close(chunk.copied_back(grad), back)
