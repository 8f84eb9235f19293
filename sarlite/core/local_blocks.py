"""Which kernels a shard's message passing runs on, and the local blocks that run it.

A *block* is DGL's: a bipartite graph of source and destination nodes. A *local block*
is one rank's block of its own rows, run by one set of kernels; a
:class:`~sarlite.core.distributed_block.DistributedBlock` is a block whose sources
include other ranks' rows, which it fetches.

The engine holds every shard, chunk and one-shot block as an
:class:`~sarlite.core.kernels.EdgeIndex` (torch index tensors) and builds the object that
``dgl.nn``'s calls run on from it, once per kind:

* ``"dgl"``: a ``dgl.create_block`` block, DGL's own kernels (PyPI's DGL runs them on CPU
  only), except for ``u_mul_e`` + ``sum`` (GATConv's aggregation, weighted GraphConv's):
  :meth:`BlockCache.update_all` runs it, and its source gradient, as torch sparse
  products over the block's own compressed rows, which add each destination's edges in
  the order DGL's kernel adds them, at about half its time on one thread (DGL 2.1's CPU
  kernel for a product with per-edge weights does not take its vectorized path);
* ``"torch"``: a :class:`~sarlite.core.torch_block.TorchBlock`, the kernels of
  :mod:`sarlite.core.kernels`, on any device torch runs on.

``None`` (``"auto"``) picks ``"dgl"`` for a graph on the CPU and ``"torch"`` elsewhere.
"""
from __future__ import annotations

import torch

from .kernels import (EdgeIndex, copy_sum_back, csr_matrix, padded_shapes, product_form,
                      product_grads, weighted_sum)
from .message import src_times_edge_sum
from .torch_block import TorchBlock


def resolve(kernels: str | None, device) -> str:
    """The kernels a graph on ``device`` runs: ``kernels`` itself, or for ``None`` DGL's
    on the CPU and torch's elsewhere."""
    if kernels is not None:
        return kernels
    return "dgl" if torch.device(device).type == "cpu" else "torch"


def make_block(index: EdgeIndex, kernels: str):
    """The block over ``index`` that runs ``kernels`` (``"dgl"`` or ``"torch"``).

    Raises
    ------
    RuntimeError
        ``"dgl"`` for a graph whose device DGL's build cannot hold (PyPI's DGL is a CPU
        build); the message names ``kernels="torch"``.
    """
    if kernels == "torch":
        return TorchBlock(index)
    import dgl
    try:
        return dgl.create_block((index.src, index.dst), num_src_nodes=index.num_src,
                                num_dst_nodes=index.num_dst, device=index.src.device)
    except dgl.DGLError as err:
        raise RuntimeError(
            f"DGL cannot hold a graph on {index.src.device} ({err}); the DGL that pip "
            f"installs is a CPU-only build. Use the torch kernels: "
            f"construct_full_graph(..., kernels='torch') or engine.kernels: torch "
            f"(the default, 'auto', picks them off the CPU)") from None


class BlockCache:
    """The blocks built over one :class:`EdgeIndex`, at most one per kind of kernels."""

    def __init__(self, index: EdgeIndex):
        self.index = index
        self._blocks: dict[str, object] = {}
        self._reversed = None           # DGL's graph index of the "dgl" block, reversed

    def get(self, kernels: str):
        if kernels not in self._blocks:
            self._blocks[kernels] = make_block(self.index, kernels)
        return self._blocks[kernels]

    def update_all(self, kernels: str, message_func, reduce_func, apply_node_func=None):
        """``update_all`` on the block for ``kernels`` (whose fields the caller has set,
        in its local scope); the result lands in its ``dstdata``, as DGL's does.

        On DGL's kernels, ``u_mul_e`` + ``sum`` in the form of a sparse product
        (:func:`~sarlite.core.kernels.product_form`: a float32/float64 scalar per edge, or
        per edge and head) runs as :func:`~sarlite.core.kernels.weighted_sum` over the
        block's compressed rows by destination, differentiably (:class:`_DglProduct`);
        every other call runs on DGL's ``update_all``.
        """
        block = self.get(kernels)
        fields = src_times_edge_sum(message_func, reduce_func) \
            if kernels == "dgl" and apply_node_func is None else None
        if fields is not None:
            x, w = block.srcdata[fields[0]], block.edata[fields[1]]
            if product_form(x, w) is not None:
                block.dstdata[reduce_func.out_field] = _DglProduct.apply(x, w, self)
                return
        block.update_all(message_func, reduce_func, apply_node_func)

    def product(self, x: torch.Tensor, w: torch.Tensor, transposed: bool = False
                ) -> torch.Tensor:
        """``u_mul_e`` + ``sum`` of ``x`` by edge values ``w`` on the ``"dgl"`` block's
        compressed rows (DGL's own, no copy): by destination, or, ``transposed``, by
        source (``x`` then holds per-destination rows, as an output gradient does).
        :func:`~sarlite.core.kernels.product_form` must not be ``None``. Not
        differentiable."""
        block = self.get("dgl")
        indptr, indices, eids = block.adj_tensors("csr" if transposed else "csc")
        rows, cols = (self.index.num_src, self.index.num_dst) if transposed else \
            (self.index.num_dst, self.index.num_src)
        per_head, weights = product_form(x, w)
        return weighted_sum(lambda values: csr_matrix(indptr, indices, eids, (rows, cols),
                                                      values),
                            rows, x.contiguous(), weights, per_head)

    def sum_back(self, kernels: str, grad: torch.Tensor) -> torch.Tensor:
        """``(num_src, ...)``: ``grad`` ``(num_dst, ...)`` summed back along every edge to
        its source, on ``kernels``, with the structure the forward block already holds.

        The torch kernels read the block's sparse rows transposed. DGL's run on the
        forward block's graph reversed, as DGL's own ``copy_u_sum`` backward does: the
        reversed graph shares the forward graph's sparse formats, so the rows by source
        (CSR) are built once, on the forward graph, and no second graph is held.
        """
        block = self.get(kernels)
        if kernels == "torch":
            return copy_sum_back(block.adjacency, grad)
        from dgl.backend import gspmm
        return gspmm(self._reversed_graph(), "copy_lhs", "sum", grad, None)

    def product_back(self, kernels: str, grad: torch.Tensor, x: torch.Tensor,
                     w: torch.Tensor, need_x: bool, need_w: bool):
        r"""The gradients of ``u_mul_e`` + ``sum`` from the output gradient alone: no
        aggregate is recomputed. For :math:`out_d = \sum_{e: s \to d} x_s \odot w_e`
        (broadcast as DGL's ``gspmm`` broadcasts, after padding both to as many
        dimensions), :math:`\partial x_s = \sum_{e: s \to d} grad_d \odot w_e` and
        :math:`\partial w_e = grad_d \odot x_s` (a dot product over the last dimension when
        ``w`` has one value there), each summed over the dimensions its input was
        broadcast along.

        On ``kernels`` ``"dgl"`` these are the kernels DGL's own backward of the call runs
        (the product on the reversed graph, which shares the forward graph's formats; a
        per-edge product or dot), the product as :meth:`product` transposed where it
        takes the call. On ``"torch"`` the sparse product's own backward
        (:func:`~sarlite.core.kernels.product_grads`), for a call that
        :func:`takes_product_back` says the torch kernels ran as one.

        ``grad`` ``(num_dst, *out)``, ``x`` ``(num_src, *X)``, ``w`` ``(num_edges, *W)``;
        returns ``(dx, dw)`` shaped like ``x`` and ``w``, ``None`` where not ``need_*``.
        """
        if kernels == "torch":
            return product_grads(self.get("torch").adjacency, grad, x, w, need_x, need_w)
        from dgl.backend import gsddmm, gspmm
        xs, ws = padded_shapes(x.shape[1:], w.shape[1:])
        x2 = x.reshape(x.shape[:1] + xs)
        dx = dw = None
        if need_x and product_form(x, w) is not None:
            dx = self.product(grad, w, transposed=True)
        elif need_x:
            dx = gspmm(self._reversed_graph(), "mul", "sum", grad, w.reshape(w.shape[:1] + ws))
            dx = dx.sum_to_size(x2.shape).reshape(x.shape)
        if need_w:
            dot = bool(xs) and xs[:-1] == ws[:-1] and ws[-1] == 1 and xs[-1] > 1
            dw = gsddmm(self.get("dgl")._graph, "dot" if dot else "mul", x2, grad)
            dw = dw.sum_to_size(w.shape[:1] + ws).reshape(w.shape)
        return dx, dw

    def add_back(self, kernels: str, grad: torch.Tensor, x_shape: tuple, y_shape: tuple,
                 need_x: bool, need_y: bool):
        r"""The gradients of ``u_add_v`` from the edge gradient alone: for
        :math:`e_{s \to d} = x_s + y_d` (broadcast as DGL's ``gsddmm`` broadcasts),
        :math:`\partial x_s = \sum_{e: s \to d} grad_e` and
        :math:`\partial y_d = \sum_{e: s \to d} grad_e`, each summed over the dimensions
        its input was broadcast along. Neither reads ``x`` or ``y``.

        On ``kernels`` ``"dgl"`` these are the kernels DGL's own backward of the call
        runs (the source sums on the reversed graph, which shares the forward graph's
        formats); on ``"torch"`` what autograd does for the torch kernels' gather and
        add (the per-edge gradient unbroadcast, then added up at each edge's ends).

        ``grad`` ``(num_edges, *out)``; ``x_shape``/``y_shape``: the inputs' shapes
        after their first dimension. Returns ``(dx, dy)``, ``(num_src, *x_shape)`` and
        ``(num_dst, *y_shape)``, ``None`` where not ``need_*``.
        """
        index = self.index

        def summed(at_src: bool, shape: tuple, padded: tuple) -> torch.Tensor:
            rows = index.num_src if at_src else index.num_dst
            if kernels == "torch":          # autograd's: unbroadcast, then add at the ends
                ends = (index.src if at_src else index.dst).long()
                out = grad.new_zeros((rows,) + padded).index_add_(
                    0, ends, grad.sum_to_size(grad.shape[:1] + padded))
            else:                           # DGL's: sum at the ends, then unbroadcast
                from dgl.backend import gspmm
                graph = self._reversed_graph() if at_src else self.get("dgl")._graph
                out = gspmm(graph, "copy_rhs", "sum", None, grad).sum_to_size(
                    (rows,) + padded)
            return out.reshape((rows,) + tuple(shape))

        xs, ys = padded_shapes(x_shape, y_shape)
        return (summed(True, x_shape, xs) if need_x else None,
                summed(False, y_shape, ys) if need_y else None)

    def _reversed_graph(self):
        """DGL's graph index of the ``"dgl"`` block, reversed; built once, after the rows by
        source (CSR) are built on the forward graph, so that both share them."""
        if self._reversed is None:
            block = self.get("dgl")
            block._graph.create_formats_()
            self._reversed = block._graph.reverse()
        return self._reversed


def takes_product_back(kernels: str, x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether :meth:`BlockCache.product_back` can differentiate ``u_mul_e`` + ``sum`` of
    source rows like ``x`` by edge values like ``w`` on ``kernels``: always on DGL's; on
    the torch kernels where they run the call as a sparse product
    (:func:`~sarlite.core.kernels.product_form`), not where they materialize messages."""
    return kernels != "torch" or product_form(x, w) is not None


class _DglProduct(torch.autograd.Function):
    """``u_mul_e`` + ``sum`` on a ``"dgl"`` block as :meth:`BlockCache.product`; its
    backward is :meth:`BlockCache.product_back`'s (the transposed product, DGL's per-edge
    dot). Under ``create_graph`` the gradients are those of DGL's own ``gspmm``,
    differentiated again by autograd, as they were before this function."""

    @staticmethod
    def forward(ctx, x, w, cache: BlockCache):
        ctx.cache = cache
        ctx.save_for_backward(x, w)
        return cache.product(x, w)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        if torch.is_grad_enabled():
            import dgl
            wanted = [t for t, need in ((x, need_x), (w, need_w)) if need]
            out = dgl.ops.gspmm(ctx.cache.get("dgl"), "mul", "sum", x, w)
            found = iter(torch.autograd.grad(out, wanted, grad, create_graph=True))
            return next(found) if need_x else None, next(found) if need_w else None, None
        dx, dw = ctx.cache.product_back("dgl", grad.contiguous(), x, w, need_x, need_w)
        return dx, dw, None
