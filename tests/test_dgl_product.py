"""On DGL's kernels, ``u_mul_e`` + ``sum`` (GATConv's aggregation) runs as torch sparse
products over the DGL block's own compressed rows (``BlockCache.update_all``): the same
numbers as DGL's ``update_all`` on the same block, values and both gradients, through
``backward()``, ``torch.autograd.grad`` and ``create_graph``; other calls go to DGL."""
from unittest import mock

import dgl.function as fn
import pytest
import torch

from sarlite.core import local_blocks
from sarlite.core.kernels import EdgeIndex
from sarlite.core.local_blocks import BlockCache

# (source rows, edge values): per edge and head (GATConv), one scalar per edge (weighted
# GraphConv), and an edge vector of length 1 against 2-D rows
PRODUCT_SHAPES = {"per_head": ((4, 5), (4, 1)), "scalar": ((6,), (1,)),
                  "scalar_1d": ((6,), ())}


def _cache(seed: int = 0, num_src: int = 9, num_dst: int = 7, num_edges: int = 40):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = torch.randint(0, num_dst - 1, (num_edges,), generator=gen)   # one without edges
    return BlockCache(EdgeIndex(src.int(), dst.int(), num_src, num_dst))


def _inputs(cache: BlockCache, shapes, dtype=torch.float32, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    x_shape, w_shape = shapes
    x = torch.randn((cache.index.num_src,) + x_shape, generator=gen, dtype=dtype)
    w = torch.rand((cache.index.num_edges,) + w_shape, generator=gen, dtype=dtype)
    return x.requires_grad_(), w.requires_grad_()


def _aggregate(cache: BlockCache, x, w, reducer, through_cache: bool):
    """``u_mul_e`` + ``reducer`` on the cache's DGL block, through ``BlockCache.update_all``
    or straight through DGL's ``update_all``."""
    block = cache.get("dgl")
    message = fn.u_mul_e("x", "w", "m")
    with block.local_scope():
        block.srcdata["x"], block.edata["w"] = x, w
        if through_cache:
            cache.update_all("dgl", message, reducer("m", "out"))
        else:
            block.update_all(message, reducer("m", "out"))
        return block.dstdata["out"]


def _sarlite(cache: BlockCache, x, w, reducer=fn.sum):
    return _aggregate(cache, x, w, reducer, through_cache=True)


def _dgl(cache: BlockCache, x, w, reducer=fn.sum):
    return _aggregate(cache, x, w, reducer, through_cache=False)


@pytest.mark.parametrize("form", sorted(PRODUCT_SHAPES))
def test_product_equals_dgls_update_all_with_both_gradients(form):
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES[form])
    grad = torch.randn_like(_dgl(cache, x, w))
    want = _dgl(cache, x, w)
    want_grads = torch.autograd.grad(want, (x, w), grad)
    got = _sarlite(cache, x, w)
    got_grads = torch.autograd.grad(got, (x, w), grad)
    assert torch.equal(got, want)
    for g, d in zip(got_grads, want_grads):
        torch.testing.assert_close(g, d, rtol=1e-5, atol=1e-6)


def _no_dgl_spmm():
    """DGL's sparse-dense product refused, where DGL's update_all and the engine call it."""
    refuse = AssertionError("DGL's spmm ran")
    return (mock.patch("dgl.ops.spmm.gspmm_internal", side_effect=refuse),
            mock.patch("dgl.backend.gspmm", side_effect=refuse))


def test_dgls_update_all_is_what_the_spmm_guard_catches():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"])
    first, second = _no_dgl_spmm()
    with first, second, pytest.raises(AssertionError, match="spmm ran"):
        _dgl(cache, x, w)


def test_product_and_its_gradients_run_without_dgls_spmm():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"])
    first, second = _no_dgl_spmm()
    with first, second:
        out = _sarlite(cache, x, w)
        out.backward(torch.ones_like(out))
    assert x.grad is not None and w.grad is not None


def test_product_backward_fills_leaf_grads_like_dgl():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"])
    _sarlite(cache, x, w).pow(2).sum().backward()
    xd, wd = (t.detach().clone().requires_grad_() for t in (x, w))
    _dgl(cache, xd, wd).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, xd.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, wd.grad, rtol=1e-5, atol=1e-5)


def test_product_with_one_input_frozen_gives_only_the_other_gradient():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"])
    w = w.detach()
    (gx,) = torch.autograd.grad(_sarlite(cache, x, w).sum(), x)
    (want,) = torch.autograd.grad(_dgl(cache, x, w).sum(), x)
    torch.testing.assert_close(gx, want, rtol=1e-5, atol=1e-6)


def test_product_is_differentiable_twice_as_dgl_is():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"], dtype=torch.float64)

    def penalty(run):
        (gx,) = torch.autograd.grad(run(cache, x, w).pow(2).sum(), x, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), (x, w))

    for got, want in zip(penalty(_sarlite), penalty(_dgl)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("case", ["mean", "half_precision", "broadcast_heads"])
def test_calls_outside_the_product_form_run_on_dgl(case):
    cache = _cache()
    reducer = fn.mean if case == "mean" else fn.sum
    shapes = ((1, 5), (4, 1)) if case == "broadcast_heads" else PRODUCT_SHAPES["per_head"]
    dtype = torch.bfloat16 if case == "half_precision" else torch.float32
    x, w = _inputs(cache, shapes, dtype=dtype)
    with mock.patch.object(local_blocks._DglProduct, "apply",
                           side_effect=AssertionError("the product ran")):
        got = _sarlite(cache, x, w, reducer)
    assert torch.equal(got, _dgl(cache, x, w, reducer))


def test_torch_kernels_keep_their_own_block():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"])
    block = cache.get("torch")
    with block.local_scope():
        block.srcdata["x"], block.edata["w"] = x, w
        cache.update_all("torch", fn.u_mul_e("x", "w", "m"), fn.sum("m", "out"))
        got = block.dstdata["out"]
    torch.testing.assert_close(got, _dgl(cache, x, w), rtol=1e-5, atol=1e-6)


def test_product_without_gradients_equals_dgl():
    cache = _cache()
    x, w = _inputs(cache, PRODUCT_SHAPES["per_head"])
    with torch.no_grad():
        assert torch.equal(_sarlite(cache, x, w), _dgl(cache, x, w))
