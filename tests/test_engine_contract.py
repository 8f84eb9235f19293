"""The engine's contract beyond the layer matrix: what is refused, how, and what is kept.

In-process tests use a one-part partition (no process group: world size 1); multi-rank
properties run on 2 gloo workers, several checks per spawn.
"""
import dgl
import dgl.function as fn
import dgl.nn as dglnn
import weakref

import pytest
import torch
from torch import nn

import sarlite
from conftest import random_graph
from harness import WorkerError, spawn

TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(scope="module")
def one_part(tmp_path_factory):
    """A 60-node graph partitioned into one part, and its PartitionData."""
    g = random_graph(num_nodes=60, num_edges=300)
    out = tmp_path_factory.mktemp("one")
    sarlite.partition_graph(g, "g", 1, out)
    return g, sarlite.load_partition_data(out / "g.json")


@pytest.fixture
def no_dispatch():
    sarlite.uninstall_dgl_dispatch()
    yield
    sarlite.uninstall_dgl_dispatch()


def _penalty(conv, g, x):
    """A gradient penalty: needs the gradient of a gradient (double backward)."""
    out = conv(g, x)
    grad_x, = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
    return grad_x.pow(2).sum()


@pytest.mark.parametrize("mode", ["sar", "sa"])
def test_double_backward_is_refused_in_sequential_modes(one_part, mode):
    _, data = one_part
    g = sarlite.construct_full_graph(data, mode=mode)
    conv = dglnn.GraphConv(4, 3, allow_zero_in_degree=True)
    x = data.node_features["feat"].clone().requires_grad_()
    with pytest.raises(RuntimeError, match="double backward .* one-shot"):
        _penalty(conv, g, x)


def _copy_and_reduce(g, h, reducer: str) -> torch.Tensor:
    with g.local_scope():
        g.srcdata["h"] = h
        g.update_all(fn.copy_u("h", "m"), getattr(fn, reducer)("m", "out"))
        return g.dstdata["out"]


@pytest.mark.parametrize("reducer", ["sum", "mean"])
def test_sar_copy_and_sum_frees_a_temporary_source_before_backward(one_part, reducer):
    # GraphConv aggregates normalized features, a temporary that only the aggregation
    # reads: as in DGL, it must not live on until the backward pass
    _, data = one_part
    x = data.node_features["feat"].clone().requires_grad_()
    temporary = x * 2.0
    alive = weakref.ref(temporary)
    out = _copy_and_reduce(sarlite.construct_full_graph(data, mode="sar"), temporary,
                           reducer)
    del temporary
    assert alive() is None
    out.pow(2).sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    ref = _copy_and_reduce(sarlite.construct_full_graph(data, mode="one-shot"),
                           x_ref * 2.0, reducer)
    ref.pow(2).sum().backward()
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(x.grad, x_ref.grad, **TOL)


def _shards_recomputed_in_backward(out: torch.Tensor, monkeypatch) -> int:
    """Back-propagate ``out.pow(2).sum()``; how many shard computations that ran."""
    calls = []
    real = sarlite.core.sar_op._shard_compute
    monkeypatch.setattr(sarlite.core.sar_op, "_shard_compute",
                        lambda *args: calls.append(1) or real(*args))
    out.pow(2).sum().backward()
    return len(calls)


def _times_edge_and_reduce(g, h, w, reducer: str) -> torch.Tensor:
    with g.local_scope():
        g.srcdata["h"] = h
        g.edata["w"] = w
        g.update_all(fn.u_mul_e("h", "w", "m"), getattr(fn, reducer)("m", "out"))
        return g.dstdata["out"]


@pytest.mark.parametrize("kernels", ["dgl", "torch"])
@pytest.mark.parametrize("reducer", ["sum", "mean"])
@pytest.mark.parametrize("x_shape, w_shape", [((4,), ()), ((2, 2), (2, 1)), ((2, 2), (1,))])
@pytest.mark.parametrize("wanted", ["both", "source", "edge"])
def test_sar_product_and_sum_backward_recomputes_no_aggregate(one_part, monkeypatch, reducer,
                                                               x_shape, w_shape, wanted,
                                                               kernels):
    # GATConv's u_mul_e + sum: its gradients come from the output gradient, the refetched
    # rows and the edge values (the kernels' own backward), not from running it again
    _, data = one_part
    g = sarlite.construct_full_graph(data, mode="sar", kernels=kernels)
    x = data.node_features["feat"].reshape((-1,) + x_shape).clone()
    w = torch.rand((g.num_edges(),) + w_shape, generator=torch.Generator().manual_seed(0))
    x.requires_grad_(wanted != "edge")
    w.requires_grad_(wanted != "source")
    out = _times_edge_and_reduce(g, x, w, reducer)
    assert _shards_recomputed_in_backward(out, monkeypatch) == 0
    ref_g = sarlite.construct_full_graph(data, mode="one-shot")
    x_ref = x.detach().clone().requires_grad_(x.requires_grad)
    w_ref = w.detach().clone().requires_grad_(w.requires_grad)
    ref = _times_edge_and_reduce(ref_g, x_ref, w_ref, reducer)
    ref.pow(2).sum().backward()
    torch.testing.assert_close(out, ref, **TOL)
    for mine, theirs in ((x, x_ref), (w, w_ref)):
        if mine.requires_grad:
            torch.testing.assert_close(mine.grad, theirs.grad, **TOL)


def _src_plus_dst(g, x, y) -> torch.Tensor:
    with g.local_scope():
        g.srcdata["x"] = x
        g.dstdata["y"] = y
        g.apply_edges(fn.u_add_v("x", "y", "e"))
        return g.edata["e"]


@pytest.mark.parametrize("kernels", ["dgl", "torch"])
@pytest.mark.parametrize("x_shape, y_shape", [((2, 1), (2, 1)), ((2, 3), (1,)), ((4,), (4,))])
def test_sar_src_plus_dst_keeps_only_its_inputs_shapes(one_part, monkeypatch, x_shape,
                                                      y_shape, kernels):
    # GATConv's logits el[u] + er[v]: both gradients are sums of the edge gradient, so
    # the inputs (temporaries) are freed after the forward, and nothing is recomputed
    _, data = one_part
    g = sarlite.construct_full_graph(data, mode="sar", kernels=kernels)
    n = data.node_features["feat"].shape[0]
    make = torch.Generator().manual_seed(0)
    x = torch.rand((n,) + x_shape, generator=make, requires_grad=True)
    y = torch.rand((n,) + y_shape, generator=make, requires_grad=True)
    temporary = x * 2.0
    alive = weakref.ref(temporary)
    out = _src_plus_dst(g, temporary, y)
    del temporary
    assert alive() is None
    assert _shards_recomputed_in_backward(out, monkeypatch) == 0
    x_ref = x.detach().clone().requires_grad_()
    y_ref = y.detach().clone().requires_grad_()
    ref = _src_plus_dst(sarlite.construct_full_graph(data, mode="one-shot"), x_ref * 2.0,
                        y_ref)
    ref.pow(2).sum().backward()
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(x.grad, x_ref.grad, **TOL)
    torch.testing.assert_close(y.grad, y_ref.grad, **TOL)


@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
def test_apply_edges_on_an_edge_subset_is_refused(one_part, mode):
    _, data = one_part
    g = sarlite.construct_full_graph(data, mode=mode)
    g.srcdata["h"] = data.node_features["feat"]
    with pytest.raises(NotImplementedError, match="subset of edges.*torch.where"):
        g.apply_edges(fn.copy_u("h", "e"), edges=torch.tensor([0, 1]))


def test_dgl_functions_without_dispatch_name_the_way_out(one_part, no_dispatch):
    _, data = one_part
    g = sarlite.construct_full_graph(data)
    conv = dglnn.GATConv(4, 2, num_heads=1, allow_zero_in_degree=True)
    with pytest.raises(NotImplementedError, match="install_dgl_dispatch"):
        conv(g, data.node_features["feat"])


def test_uninstalling_the_dispatch_restores_dgl_functions(no_dispatch):
    original = dgl.nn.functional.edge_softmax
    names = sarlite.install_dgl_dispatch()
    assert "dgl.nn.pytorch.conv.gatconv.edge_softmax" in names
    assert "dgl.ops.u_mul_e_sum" in names and "dgl.reverse" in names
    assert dgl.nn.functional.edge_softmax is not original
    sarlite.uninstall_dgl_dispatch()
    assert dgl.nn.functional.edge_softmax is original
    import dgl.nn.pytorch.conv.gatconv as gatconv
    assert gatconv.edge_softmax is original


def test_dispatched_functions_give_dgl_results_on_dgl_graphs(no_dispatch):
    g = random_graph(num_nodes=30, num_edges=120)
    x, e = torch.randn(30, 3), torch.randn(120, 3)
    want = (dgl.ops.u_mul_e_sum(g, x, e), dgl.ops.edge_softmax(g, e))
    sarlite.install_dgl_dispatch()
    got = (dgl.ops.u_mul_e_sum(g, x, e), dgl.ops.edge_softmax(g, e))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_graph_transforms_that_change_structure_are_refused(one_part):
    _, data = one_part
    g = sarlite.construct_full_graph(data)
    with pytest.raises(NotImplementedError, match="TWIRLSConv"):
        g.add_self_loop()
    with pytest.raises(AttributeError, match="DGLGraph.edges is not supported"):
        dgl.laplacian_lambda_max(g)


def test_one_shot_message_flow_graphs_keep_their_node_lists(one_part):
    _, data = one_part
    seeds = torch.arange(0, data.num_owned_nodes, 4)
    sar = sarlite.construct_mfgs(data, seeds, 2)
    one_shot = sarlite.construct_mfgs(data, seeds, 2, mode="one-shot")
    assert [type(b).__name__ for b in one_shot] == ["DistributedBlock"] * 2
    for a, b in zip(sar, one_shot):
        assert torch.equal(a.input_nodes, b.input_nodes)
        assert torch.equal(a.output_nodes, b.output_nodes)


class DropoutMessage(nn.Module):
    """A message function with dropout inside: rematerialization must draw the same mask."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, g, x):
        with g.local_scope():
            g.srcdata["h"] = x
            g.update_all(lambda e: {"m": self.drop(self.lin(e.src["h"]))}, fn.sum("m", "o"))
            return g.dstdata["o"]


def _two_rank_checks(rank, world, config, gp_state, total_nodes, total_edges):
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    result = {}
    # global batch counts
    g = sarlite.construct_full_graph(data)
    result["counts"] = (int(g.batch_num_nodes()[0]), int(g.batch_num_edges()[0]),
                        g.batch_size)
    # double backward through one-shot
    block = sarlite.construct_full_graph(data, mode="one-shot")
    conv = dglnn.GraphConv(4, 3, allow_zero_in_degree=True)
    conv.load_state_dict(gp_state)
    x = data.node_features["feat"].clone().requires_grad_()
    _penalty(conv, block, x).backward()
    sarlite.all_reduce_gradients(conv)
    result["penalty"] = (x.grad, conv.weight.grad)
    # dropout in a message function: sar (replayed) equals sa (kept graph)
    grads = {}
    for mode in ("sar", "sa"):
        torch.manual_seed(7 + rank)
        model = DropoutMessage()
        model.load_state_dict({k: torch.ones_like(v) * 0.1 for k, v in
                               model.state_dict().items()})
        xx = data.node_features["feat"].clone().requires_grad_()
        out = model(sarlite.construct_full_graph(data, mode=mode), xx)
        (out * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
        grads[mode] = (out.detach(), xx.grad, model.lin.weight.grad)
    result["dropout"] = grads
    return result


def test_multi_rank_contract(tmp_path):
    """Global batch counts, double backward in one-shot, dropout replayed in sar."""
    g = random_graph(num_nodes=50, num_edges=240)
    orig, _ = sarlite.partition_graph(g, "g", 2, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    conv = dglnn.GraphConv(4, 3, allow_zero_in_degree=True)
    x = g.ndata["feat"].clone().requires_grad_()
    _penalty(conv, g, x).backward()
    results = spawn(_two_rank_checks, 2, str(tmp_path / "g.json"), conv.state_dict(),
                    50, 240, timeout=180)
    for r in results:
        assert r["counts"] == (50, 240, 1)
    torch.testing.assert_close(torch.cat([r["penalty"][0] for r in results]), x.grad[orig],
                               **TOL)
    torch.testing.assert_close(results[0]["penalty"][1], conv.weight.grad, **TOL)
    for r in results:
        for a, b in zip(r["dropout"]["sar"], r["dropout"]["sa"]):
            torch.testing.assert_close(a, b, **TOL)


def _mismatched_width(rank, world, config, mode="sar"):
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data, mode=mode)
    conv = dglnn.GraphConv(3 + rank, 8, allow_zero_in_degree=True)   # aggregates first
    return conv(g, torch.randn(data.num_owned_nodes, 3 + rank))


def _errors_of_both_ranks(fn, tmp_path, *args) -> list[str]:
    """Run ``fn`` on 2 workers that must both fail; their error texts."""
    g = random_graph(num_nodes=40, num_edges=160)
    sarlite.partition_graph(g, "g", 2, tmp_path)
    with pytest.raises(WorkerError) as caught:
        spawn(fn, 2, str(tmp_path / "g.json"), *args, timeout=120, kill_on_error=False)
    assert set(caught.value.errors) == {0, 1}
    return list(caught.value.errors.values())


@pytest.mark.parametrize("mode", ["sar", "one-shot"])
def test_ranks_passing_different_widths_fail_with_the_field_named(tmp_path, mode):
    for text in _errors_of_both_ranks(_mismatched_width, tmp_path, mode):
        assert "update_all" in text and "(3,)" in text and "(4,)" in text


def _labels_missing_on_one_rank(rank, world, config):
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data)
    labels = torch.arange(data.num_owned_nodes) % (4 if rank == 0 else 3)  # class 3: rank 0
    return dglnn.LabelPropagation(2, 0.5)(g, labels)


def test_label_propagation_with_classes_missing_on_a_rank_names_both_widths(tmp_path):
    for text in _errors_of_both_ranks(_labels_missing_on_one_rank, tmp_path):
        assert "(4,)" in text and "(3,)" in text and "same feature width" in text


def _egat(rank, world, config, state):
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    results = {}
    for mode in ("sar", "sa", "one-shot"):
        g = sarlite.construct_full_graph(data, mode=mode)
        conv = dglnn.EGATConv(4, 2, 3, 2, num_heads=2)
        conv.load_state_dict(state)
        x = data.node_features["feat"].clone().requires_grad_()
        e = data.edge_features["w"].clone().requires_grad_()
        h, _ = conv(g, x, e)
        (h * data.node_features["probe"]).sum().backward()
        sarlite.all_reduce_gradients(conv)
        results[mode] = (h.detach(), x.grad, e.grad,
                         {n: p.grad for n, p in conv.named_parameters()})
    results["eids"] = torch.cat([s.eids for s in data.shards])
    return results


def test_egat_conv_on_a_graph_without_zero_in_degree_nodes_matches_dgl(tmp_path):
    """EGATConv refuses zero-in-degree nodes (so it is not in the matrix graph)."""
    g = dgl.add_self_loop(random_graph(num_nodes=40, num_edges=160, isolated=0))
    g.edata["w"] = torch.randn(g.num_edges(), 2)
    g.ndata["probe"] = torch.randn(40, 2, 3)
    orig, orig_e = sarlite.partition_graph(g, "g", 2, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    conv = dglnn.EGATConv(4, 2, 3, 2, num_heads=2)
    x = g.ndata["feat"].clone().requires_grad_()
    e = g.edata["w"].clone().requires_grad_()
    h, _ = conv(g, x, e)
    (h * g.ndata["probe"]).sum().backward()
    results = spawn(_egat, 2, str(tmp_path / "g.json"), conv.state_dict(), timeout=180)
    edge_order = orig_e[torch.cat([r["eids"] for r in results])]
    for mode in ("sar", "sa", "one-shot"):
        got = [r[mode] for r in results]
        torch.testing.assert_close(torch.cat([r[0] for r in got]), h.detach()[orig], **TOL)
        torch.testing.assert_close(torch.cat([r[1] for r in got]), x.grad[orig], **TOL)
        torch.testing.assert_close(torch.cat([r[2] for r in got]), e.grad[edge_order], **TOL)
        for name, param in conv.named_parameters():
            torch.testing.assert_close(got[0][3][name], param.grad, **TOL)
