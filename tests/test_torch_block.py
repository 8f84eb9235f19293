"""TorchBlock: DGL's block calls (update_all, apply_edges, data scopes) on torch kernels
give what a DGL block gives, values and gradients."""
from unittest import mock

import dgl
import dgl.function as fn
import pytest
import torch

from sarlite.core.kernels import EdgeIndex
from sarlite.core.torch_block import TorchBlock

TARGET_OPS = ["add", "sub", "mul", "div", "dot"]


@pytest.fixture(autouse=True)
def dgl_reference_kernel():
    """DGL's own CPU kernel for max/min ties (see sarlite.core.kernels)."""
    before = dgl.is_libxsmm_enabled()
    dgl.use_libxsmm(False)
    yield
    dgl.use_libxsmm(before)


def _pair(seed: int = 0, num_src: int = 8, num_dst: int = 6, num_edges: int = 30):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = torch.randint(0, num_dst - 1, (num_edges,), generator=gen)   # one empty
    block = dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=num_dst)
    return block, TorchBlock(EdgeIndex(src, dst, num_src, num_dst))


def _data(seed: int, rows: tuple[int, int, int], width: int = 3):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 4, (n, width), generator=gen).float().requires_grad_()
            for n in rows]


def _run(graph, call, src, dst, edge, out: str, where: str):
    with graph.local_scope():
        graph.srcdata["a"], graph.dstdata["b"], graph.edata["w"] = src, dst, edge
        call(graph)
        return getattr(graph, where)[out]


def _check(dgl_block, torch_block, call, out, where, seed=1):
    src, dst, edge = _data(seed, (dgl_block.num_src_nodes(), dgl_block.num_dst_nodes(),
                                  dgl_block.num_edges()))
    theirs = _run(dgl_block, call, src, dst, edge, out, where)
    ours = _run(torch_block, call, src, dst, edge, out, where)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    grad = torch.randn_like(theirs)
    inputs = [src, dst, edge]
    expected = torch.autograd.grad(theirs, inputs, grad, allow_unused=True)
    got = torch.autograd.grad(ours, inputs, grad, allow_unused=True)
    for g, e, t in zip(got, expected, inputs):
        torch.testing.assert_close(torch.zeros_like(t) if g is None else g,
                                   torch.zeros_like(t) if e is None else e,
                                   rtol=0, atol=1e-5)


def _messages():
    """Every builtin message function over the fields a (u), b (v) and w (e)."""
    out = {"copy_u": fn.copy_u("a", "m"), "copy_e": fn.copy_e("w", "m")}
    fields = {"u": "a", "v": "b", "e": "w"}
    for op in TARGET_OPS:
        for lhs in "uve":
            for rhs in "uve":
                if lhs != rhs:
                    name = f"{lhs}_{op}_{rhs}"
                    out[name] = getattr(fn, name)(fields[lhs], fields[rhs], "m")
    return out


MESSAGES = _messages()


@pytest.mark.parametrize("reducer", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("message", sorted(MESSAGES))
def test_update_all_with_builtins_equals_a_dgl_block(message, reducer):
    dgl_block, torch_block = _pair()
    _check(dgl_block, torch_block,
           lambda g: g.update_all(MESSAGES[message], getattr(fn, reducer)("m", "out")),
           "out", "dstdata")


@pytest.mark.parametrize("message", sorted(MESSAGES))
def test_apply_edges_with_builtins_equals_a_dgl_block(message):
    dgl_block, torch_block = _pair(seed=2)
    _check(dgl_block, torch_block, lambda g: g.apply_edges(MESSAGES[message]), "m", "edata")


FUSED_SHAPES = {                          # (source feature shape, edge weight shape)
    "per-edge": ((3,), ()), "per-edge-column": ((3,), (1,)),
    "per-head": ((2, 3), (2, 1)), "one-for-all-heads": ((2, 3), (1, 1))}


@pytest.mark.parametrize("reducer", ["sum", "mean"])
@pytest.mark.parametrize("message", ["copy_u", "u_mul_e", "e_mul_u"])
@pytest.mark.parametrize("shapes", sorted(FUSED_SHAPES))
def test_sums_of_copied_and_weighted_rows_hold_no_message_per_edge(shapes, message, reducer):
    feature, weight = FUSED_SHAPES[shapes]
    dgl_block, torch_block = _pair(seed=7)
    gen = torch.Generator().manual_seed(8)
    src = torch.randn((dgl_block.num_src_nodes(),) + feature, generator=gen,
                      dtype=torch.float64).requires_grad_()
    edge = torch.randn((dgl_block.num_edges(),) + weight, generator=gen,
                       dtype=torch.float64).requires_grad_()
    func = fn.copy_u("a", "m") if message == "copy_u" else \
        getattr(fn, message)(*(("a", "w") if message == "u_mul_e" else ("w", "a")), "m")

    def run(block):
        with block.local_scope():
            block.srcdata["a"], block.edata["w"] = src, edge
            block.update_all(func, getattr(fn, reducer)("m", "out"))
            return block.dstdata["out"]
    theirs = run(dgl_block)
    with mock.patch("sarlite.core.torch_block.sddmm", side_effect=AssertionError("messages")):
        ours = run(torch_block)
        grad = torch.randn_like(theirs)
        inputs = [src] if message == "copy_u" else [src, edge]
        got = torch.autograd.grad(ours, inputs, grad)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    for g, e in zip(got, torch.autograd.grad(theirs, inputs, grad)):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_python_message_and_edge_functions_read_an_edge_batch():
    def gate(edges):
        src, dst, eid = edges.edges()
        assert edges.batch_size() == len(edges) == eid.numel() == src.numel() == dst.numel()
        return {"m": edges.src["a"] * torch.sigmoid(edges.dst["b"]) + edges.data["w"]}
    dgl_block, torch_block = _pair(seed=3)
    _check(dgl_block, torch_block, lambda g: g.update_all(gate, fn.max("m", "out")),
           "out", "dstdata")
    _check(dgl_block, torch_block, lambda g: g.apply_edges(gate), "m", "edata")


def test_local_scope_drops_what_was_written_inside():
    _, block = _pair()
    block.srcdata["kept"] = torch.ones(block.num_src_nodes(), 1)
    with block.local_scope():
        block.srcdata["h"] = torch.ones(block.num_src_nodes(), 1)
        block.update_all(fn.copy_u("h", "m"), fn.sum("m", "h"))
        assert "h" in block.dstdata
    assert list(block.srcdata) == ["kept"] and not block.dstdata


def test_degrees_and_counts_equal_a_dgl_block():
    dgl_block, torch_block = _pair(seed=4)
    assert torch.equal(torch_block.in_degrees(), dgl_block.in_degrees())
    assert torch.equal(torch_block.out_degrees(), dgl_block.out_degrees())
    assert (torch_block.num_src_nodes(), torch_block.num_dst_nodes(),
            torch_block.num_edges()) == (dgl_block.num_src_nodes(),
                                         dgl_block.num_dst_nodes(), dgl_block.num_edges())


def test_python_reducers_see_each_nodes_messages_in_edge_id_order():
    def first_minus_last(nodes):          # order-dependent, as SAGEConv's lstm is
        box = nodes.mailbox["m"]
        return {"out": box[:, 0] * 2 - box[:, -1] + nodes.data["b"]}
    dgl_block, torch_block = _pair(seed=5)
    _check(dgl_block, torch_block,
           lambda g: g.update_all(fn.u_mul_e("a", "w", "m"), first_minus_last),
           "out", "dstdata")


def test_apply_node_func_runs_on_every_destination_after_the_reduce():
    dgl_block, torch_block = _pair(seed=6)
    _check(dgl_block, torch_block,
           lambda g: g.update_all(fn.copy_u("a", "m"), fn.sum("m", "s"),
                                  lambda nodes: {"out": nodes.data["s"] * nodes.data["b"]}),
           "out", "dstdata")


def test_missing_fields_are_refused_with_their_names():
    _, block = _pair()
    block.srcdata["h"] = torch.ones(block.num_src_nodes(), 1)
    with pytest.raises(KeyError, match="no source field 'x'"):
        block.update_all(fn.copy_u("x", "m"), fn.sum("m", "h"))
    with pytest.raises(KeyError, match="reads message 'q'"):
        block.update_all(fn.copy_u("h", "m"), fn.sum("q", "h"))
