"""sarlite.core.kernels: torch-only message passing equals DGL's ``update_all`` and
``gsddmm``, values and gradients, ties and destinations without in-edges included."""
from unittest import mock

import dgl
import dgl.function as fn
import dgl.ops
import pytest
import torch

from sarlite.core.kernels import (Adjacency, EdgeIndex, copy_sum_back, edge_softmax,
                                  reduce_edges, sddmm, spmm)

SPMM_OPS = ["add", "sub", "mul", "div", "copy_lhs", "copy_rhs"]
SDDMM_OPS = ["add", "sub", "mul", "div", "dot", "copy_lhs", "copy_rhs"]
TARGETS = ["u", "v", "e"]


def _block(seed: int = 0, num_src: int = 9, num_dst: int = 7, num_edges: int = 40):
    """A block with repeated edges and two destinations no edge reaches."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = torch.randint(0, num_dst - 2, (num_edges,), generator=gen)
    graph = dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=num_dst)
    return graph, EdgeIndex(src, dst, num_src, num_dst)


def _features(rows: int, shape, seed: int) -> torch.Tensor:
    """Small integers (many ties for max/min), never 0 (so div is defined)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, 4, (rows, *shape), generator=gen).float().requires_grad_()


def _rows(graph, target: str) -> int:
    return {"u": graph.num_src_nodes(), "v": graph.num_dst_nodes(),
            "e": graph.num_edges()}[target]


def _same_values_and_gradients(ours, theirs, inputs):
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    grad = torch.randn_like(theirs)
    expected = torch.autograd.grad(theirs, inputs, grad, allow_unused=True)
    got = torch.autograd.grad(ours, inputs, grad, allow_unused=True)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, e, rtol=0, atol=1e-5)


@pytest.fixture(autouse=True)
def dgl_reference_kernel():
    """DGL's own CPU kernel: libxsmm, which DGL uses by default on x86 for float32
    without broadcasting, breaks max/min ties the other way (see the module text)."""
    before = dgl.is_libxsmm_enabled()
    dgl.use_libxsmm(False)
    yield
    dgl.use_libxsmm(before)


def _dgl_update_all(graph, op: str, reducer: str, u, e) -> torch.Tensor:
    """DGL's ``update_all`` with the builtin message function of ``op``."""
    message = {"copy_lhs": fn.copy_u("u", "m"), "copy_rhs": fn.copy_e("e", "m")}.get(
        op) or getattr(fn, f"u_{op}_e")("u", "e", "m")
    with graph.local_scope():
        graph.srcdata["u"] = u
        graph.edata["e"] = e
        graph.update_all(message, getattr(fn, reducer)("m", "out"))
        return graph.dstdata["out"]


@pytest.mark.parametrize("reducer", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("op", SPMM_OPS)
def test_spmm_equals_dgl_update_all_with_ties_and_empty_destinations(op, reducer):
    graph, index = _block()
    u = _features(graph.num_src_nodes(), (3,), 1)
    e = _features(graph.num_edges(), (3,), 2)
    theirs = _dgl_update_all(graph, op, reducer, u, e)
    ours = spmm(index, op, reducer, None if op == "copy_rhs" else u,
                None if op == "copy_lhs" else e)
    _same_values_and_gradients(ours, theirs, [u, e])


@pytest.mark.parametrize("reducer", ["max", "min"])
def test_max_min_winners_found_a_few_edges_at_a_time_are_the_same(reducer):
    graph, index = _block(seed=3)
    u = _features(graph.num_src_nodes(), (3,), 4)
    e = _features(graph.num_edges(), (3,), 5)
    theirs = _dgl_update_all(graph, "mul", reducer, u, e)
    with mock.patch("sarlite.core.kernels._EDGE_CHUNK", 7):        # chunks of 2 edges
        ours = spmm(index, "mul", reducer, u, e)
    _same_values_and_gradients(ours, theirs, [u, e])


def test_edge_weight_gradients_taken_a_few_edges_at_a_time_are_the_same():
    graph, index = _block(seed=6)
    u = _features(graph.num_src_nodes(), (2, 3), 7).double()
    e = _features(graph.num_edges(), (2, 1), 8).double()
    theirs = _dgl_update_all(graph, "mul", "sum", u, e)
    with mock.patch("sarlite.core.kernels._EDGE_CHUNK", 13):       # chunks of 2 edges
        ours = spmm(index, "mul", "sum", u, e, Adjacency.of(index))
        _same_values_and_gradients(ours, theirs, [u, e])


@pytest.mark.parametrize("call", ["edge_softmax", "weighted_sum", "copy_mean", "max"])
def test_kernels_are_twice_differentiable(call):
    """gradgradcheck: second derivatives are the true ones. (DGL's own edge_softmax is
    not twice differentiable: its backward enters a double backward as a constant.)"""
    _, index = _block(seed=12, num_src=6, num_dst=6, num_edges=20)
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(6, 2, 3, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(20, 2, 1, generator=gen, dtype=torch.float64).requires_grad_()
    adjacency = Adjacency.of(index)
    calls = {"edge_softmax": (lambda t: edge_softmax(index, t), (w,)),
             "weighted_sum": (lambda a, b: spmm(index, "mul", "sum", a, b, adjacency), (x, w)),
             "copy_mean": (lambda a: spmm(index, "copy_lhs", "mean", a, None, adjacency), (x,)),
             "max": (lambda a: spmm(index, "copy_lhs", "max", a, None), (x,))}
    func, inputs = calls[call]
    assert torch.autograd.gradgradcheck(func, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_copy_sum_back_is_copy_u_sums_source_gradient(dtype):
    graph, index = _block(seed=9)
    u = _features(graph.num_src_nodes(), (2, 3), 10).to(dtype)
    out = spmm(index, "copy_lhs", "sum", u, None)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(11)).to(dtype)
    expected = torch.autograd.grad(out, u, grad)[0]
    torch.testing.assert_close(copy_sum_back(Adjacency.of(index), grad), expected)


@pytest.mark.parametrize("rhs_target", TARGETS)
@pytest.mark.parametrize("lhs_target", TARGETS)
@pytest.mark.parametrize("op", SDDMM_OPS)
def test_sddmm_equals_dgl_gsddmm_for_every_pair_of_targets(op, lhs_target, rhs_target):
    graph, index = _block(seed=3)
    lhs = _features(_rows(graph, lhs_target), (2, 4), 4)
    rhs = _features(_rows(graph, rhs_target), (2, 4), 5)
    theirs = dgl.ops.gsddmm(graph, op, lhs, rhs, lhs_target, rhs_target)
    ours = sddmm(index, op, lhs, rhs, lhs_target, rhs_target)
    _same_values_and_gradients(ours, theirs, [lhs, rhs])


def test_features_broadcast_as_in_dgl():
    graph, index = _block(seed=6)
    u = _features(graph.num_src_nodes(), (4, 5), 7)      # heads x width
    e = _features(graph.num_edges(), (4, 1), 8)          # one weight per head
    theirs = _dgl_update_all(graph, "mul", "sum", u, e)
    _same_values_and_gradients(spmm(index, "mul", "sum", u, e), theirs, [u, e])
    w = _features(graph.num_edges(), (5,), 9)             # shorter: padded in front
    theirs = _dgl_update_all(graph, "mul", "max", u, w)
    _same_values_and_gradients(spmm(index, "mul", "max", u, w), theirs, [u, w])


def test_degrees_count_in_and_out_edges():
    graph, index = _block(seed=10)
    assert torch.equal(index.in_degrees(), graph.in_degrees())
    assert torch.equal(index.out_degrees(), graph.out_degrees())


def test_bad_operators_reducers_and_shapes_are_refused():
    _, index = _block()
    x = torch.ones(index.num_src, 2)
    with pytest.raises(ValueError, match="op must be one of"):
        sddmm(index, "pow", x, x)
    with pytest.raises(ValueError, match="reducer must be one of"):
        reduce_edges(index, torch.ones(index.num_edges, 2), "prod")
    with pytest.raises(ValueError, match="one row per edge"):
        reduce_edges(index, torch.ones(3, 2), "sum")
    with pytest.raises(ValueError, match="target must be one of"):
        sddmm(index, "copy_lhs", x, None, lhs_target="w")
    with pytest.raises(ValueError, match="1-D integer tensor"):
        EdgeIndex(torch.zeros(3), torch.zeros(3, dtype=torch.int64), 1, 1)


def test_edge_softmax_equals_dgl_edge_softmax_values_and_gradients():
    from sarlite.core.kernels import edge_softmax
    graph, index = _block(seed=11)
    logits = torch.randn(graph.num_edges(), 4, 1).mul(5).requires_grad_()
    theirs = dgl.ops.edge_softmax(graph, logits)
    _same_values_and_gradients(edge_softmax(index, logits), theirs, [logits])
