"""Message passing written with torch operations only: DGL's builtin kernels without DGL.

DGL's PyPI wheel is a CPU-only build, so a graph on CUDA cannot run its kernels. These
functions compute what DGL's ``gsddmm`` (per-edge values), ``gspmm`` (messages reduced at
the destinations) and degree queries compute, from a graph held as torch index tensors
(:class:`EdgeIndex`), on any device, with torch's autograd. They import nothing from DGL.

Semantics, as DGL 2.1 defines them (and as ``tests/test_kernels.py`` checks against it):

* **Binary operators** ``add``, ``sub``, ``mul``, ``div`` and ``dot`` combine a left and a
  right operand, each read on the edge's source (``"u"``), destination (``"v"``) or the
  edge itself (``"e"``); ``copy_lhs`` / ``copy_rhs`` take one of them. Feature shapes
  broadcast as in NumPy over the dimensions after the first (the shorter shape is padded
  with ones in front); ``dot`` sums over the last feature dimension and keeps it as size 1.
* **Reducers** ``sum``, ``mean``, ``max`` and ``min``. A destination without in-edges gets
  0 with every reducer (``update_all``'s rule; ``dgl.ops.gspmm`` leaves -inf/inf there).
  ``mean`` divides the sum by the in-degree. ``max`` and ``min`` choose, per destination
  and per feature element, the **first** edge in edge-id order among the edges that reach
  the extreme value, and the gradient goes to that edge only. That is the rule of DGL's
  own CPU kernel. DGL on x86 hands float32 calls without broadcasting to libxsmm by
  default, which keeps the *last* such edge instead (measured with DGL 2.1: the rule
  follows ``dgl.use_libxsmm``), so DGL itself breaks ties two ways; the tests compare
  with libxsmm turned off.

Example
-------
>>> index = EdgeIndex(torch.tensor([0, 1, 1]), torch.tensor([1, 0, 1]), 2, 2)
>>> h = torch.tensor([[1.0], [2.0]])
>>> spmm(index, "copy_lhs", "sum", h, None)          # copy_u("h", "m"), sum("m", "h")
tensor([[2.],
        [3.]])
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

BINARY_OPS = ("add", "sub", "mul", "div", "dot")
COPY_OPS = ("copy_lhs", "copy_rhs")
REDUCERS = ("sum", "mean", "max", "min")
TARGETS = ("u", "v", "e")
_EDGE_CHUNK = 1 << 24          # elements of one chunk of edges (max/min winners, weight
                               # gradients of the sparse products)


def index_dtype(*bounds: int) -> torch.dtype:
    """The narrowest id type that holds ids below every one of ``bounds`` (node and edge
    counts): ``int32`` below 2**31, else ``int64``. Shards and blocks keep their edges in
    it, and DGL builds its sparse formats in the graph's id type, so a shard of fewer
    than 2**31 nodes and edges costs half the bytes per edge."""
    return torch.int32 if max(bounds, default=0) < 2 ** 31 else torch.int64


def narrow(ids: torch.Tensor, *bounds: int) -> torch.Tensor:
    """``ids`` in :func:`index_dtype` of ``bounds`` (no copy when it already is)."""
    return ids.to(index_dtype(*bounds))


@dataclass(frozen=True)
class EdgeIndex:
    """A graph's edges as index tensors: edge ``i`` runs from source ``src[i]`` to
    destination ``dst[i]``; ids are edge ids (positions). Source and destination node
    sets may differ (a block): ``num_src`` and ``num_dst`` nodes.

    Raises
    ------
    ValueError
        ``src`` and ``dst`` are not 1-D integer tensors of one length on one device.
    """

    src: torch.Tensor
    dst: torch.Tensor
    num_src: int
    num_dst: int

    def __post_init__(self):
        for name, ids in (("src", self.src), ("dst", self.dst)):
            if ids.dim() != 1 or ids.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"EdgeIndex.{name} must be a 1-D integer tensor, got "
                                 f"shape {tuple(ids.shape)} and {ids.dtype}")
        if self.src.shape != self.dst.shape or self.src.device != self.dst.device:
            raise ValueError(f"EdgeIndex: src and dst must have one length on one device, "
                             f"got {self.src.shape[0]} on {self.src.device} and "
                             f"{self.dst.shape[0]} on {self.dst.device}")

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    def in_degrees(self) -> torch.Tensor:
        """``(num_dst,)`` int64: the in-edges of each destination."""
        return torch.bincount(self.dst.long(), minlength=self.num_dst)

    def out_degrees(self) -> torch.Tensor:
        """``(num_src,)`` int64: the out-edges of each source."""
        return torch.bincount(self.src.long(), minlength=self.num_src)

    def to(self, device) -> "EdgeIndex":
        """The same edges with their ids on ``device``."""
        return EdgeIndex(self.src.to(device), self.dst.to(device), self.num_src,
                         self.num_dst)

    def reversed(self) -> "EdgeIndex":
        """Every edge turned around (destinations as sources); edge ids are kept."""
        return EdgeIndex(self.dst, self.src, self.num_dst, self.num_src)

    def select(self, edge_ids: torch.Tensor) -> "EdgeIndex":
        """The edges ``edge_ids``, in that order, over the same nodes."""
        return EdgeIndex(self.src[edge_ids], self.dst[edge_ids], self.num_src, self.num_dst)


def _on_edges(index: EdgeIndex, value: torch.Tensor, target: str) -> torch.Tensor:
    """``value``'s row for every edge: of its source, destination or the edge itself."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    if target == "e":
        return value
    ids = index.src if target == "u" else index.dst
    return value.index_select(0, ids.long())


def padded_shapes(*shapes) -> list[tuple]:
    """Feature shapes (each without its first dimension), the shorter ones padded with
    ones in front to as many dimensions: DGL's broadcasting rule for two operands."""
    dims = max(len(s) for s in shapes)
    return [(1,) * (dims - len(s)) + tuple(s) for s in shapes]


def _aligned(lhs: torch.Tensor, rhs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``lhs`` and ``rhs`` viewed with their feature shapes padded (:func:`padded_shapes`)."""
    lhs_shape, rhs_shape = padded_shapes(lhs.shape[1:], rhs.shape[1:])
    return (lhs.reshape(lhs.shape[:1] + lhs_shape), rhs.reshape(rhs.shape[:1] + rhs_shape))


def sddmm(index: EdgeIndex, op: str, lhs: torch.Tensor | None, rhs: torch.Tensor | None,
          lhs_target: str = "u", rhs_target: str = "v") -> torch.Tensor:
    """Per-edge values ``op(lhs on lhs_target, rhs on rhs_target)``, ``(E, *F)``: DGL's
    ``gsddmm`` (``apply_edges`` with a builtin, ``fn.u_add_v`` and the like).

    ``lhs`` / ``rhs``: ``(num rows of its target, *F)``; the one a copy operator does not
    read may be ``None``.

    Raises
    ------
    ValueError
        An unknown operator or target, or a missing operand.
    """
    if op not in BINARY_OPS + COPY_OPS:
        raise ValueError(f"op must be one of {BINARY_OPS + COPY_OPS}, got {op!r}")
    if op == "copy_lhs" or op == "copy_rhs":
        value, target = (lhs, lhs_target) if op == "copy_lhs" else (rhs, rhs_target)
        if value is None:
            raise ValueError(f"{op} needs its operand, got None")
        return _on_edges(index, value, target)
    if lhs is None or rhs is None:
        raise ValueError(f"{op} needs both operands")
    a, b = _aligned(_on_edges(index, lhs, lhs_target), _on_edges(index, rhs, rhs_target))
    if op == "dot":
        return (a * b).sum(-1, keepdim=True)
    return {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[op](a, b)


def reduce_edges(index: EdgeIndex, messages: torch.Tensor, reducer: str) -> torch.Tensor:
    """Per-edge ``messages`` ``(E, *F)`` reduced at the destinations, ``(num_dst, *F)``,
    with DGL's rules (module text): 0 where no edge arrives, ``mean`` over the in-degree,
    ``max``/``min`` from the first extreme edge, which alone gets the gradient.

    Raises
    ------
    ValueError
        An unknown reducer, or messages whose first dimension is not the edge count.
    """
    if reducer not in REDUCERS:
        raise ValueError(f"reducer must be one of {REDUCERS}, got {reducer!r}")
    if messages.shape[0] != index.num_edges:
        raise ValueError(f"messages need one row per edge ({index.num_edges}), got "
                         f"{messages.shape[0]}")
    dst = index.dst.long()
    shape = (index.num_dst,) + tuple(messages.shape[1:])
    if reducer in ("sum", "mean"):
        total = messages.new_zeros(shape).index_add(0, dst, messages)
        if reducer == "sum":
            return total
        degrees = index.in_degrees().clamp(min=1).to(messages.dtype)
        return total / degrees.reshape((-1,) + (1,) * (messages.dim() - 1))
    return _extreme(dst, messages, shape, reducer)


def _extreme(dst: torch.Tensor, messages: torch.Tensor, shape: tuple, reducer: str
             ) -> torch.Tensor:
    """``max``/``min`` as a gather of each element's winning edge (differentiable). The
    winners are found a chunk of edges at a time, so that besides the messages only
    ``(num_dst, F)`` tensors and one chunk's candidates are held."""
    flat = messages.reshape(messages.shape[0], math.prod(messages.shape[1:]))
    num_edges = flat.shape[0]
    if num_edges == 0:                  # keeps the (empty) graph to the messages
        return messages.new_zeros(shape) + flat.sum() * 0
    with torch.no_grad():
        rows = dst.unsqueeze(1).expand_as(flat)
        best = flat.new_zeros((shape[0], flat.shape[1])).scatter_reduce(
            0, rows, flat, "amax" if reducer == "max" else "amin", include_self=False)
        winner = torch.full(best.shape, num_edges, dtype=torch.int64, device=flat.device)
        step = max(1, _EDGE_CHUNK // max(1, flat.shape[1]))
        for start in range(0, num_edges, step):
            chunk, chunk_rows = flat[start:start + step], rows[start:start + step]
            ids = torch.arange(start, start + chunk.shape[0], device=flat.device)
            candidates = torch.where(chunk == best.gather(0, chunk_rows),
                                     ids.unsqueeze(1).expand_as(chunk), num_edges)
            winner.scatter_reduce_(0, chunk_rows, candidates, "amin")
        found = winner < num_edges
    picked = flat.gather(0, winner.clamp(max=num_edges - 1))
    return torch.where(found, picked, torch.zeros_like(picked)).reshape(shape)


def spmm(index: EdgeIndex, op: str, reducer: str, lhs: torch.Tensor | None,
         rhs: torch.Tensor | None, adjacency: "Adjacency | None" = None) -> torch.Tensor:
    """Messages ``op(lhs on the source, rhs on the edge)`` reduced at the destinations:
    DGL's ``gspmm`` (``update_all`` with builtins: ``copy_u`` is ``copy_lhs``, ``copy_e``
    is ``copy_rhs``, ``u_mul_e`` is ``mul``). Returns ``(num_dst, *F)``.

    With ``adjacency`` (``index``'s :class:`Adjacency`), ``copy_lhs`` and ``mul`` by a
    per-edge scalar (one per edge, or per edge and head: ``(E, H, 1)`` against ``(N, H,
    F)``) with ``sum``/``mean`` run as sparse matrix products, without a message per edge
    (:func:`fused_sum`); everything else materializes the messages."""
    if adjacency is not None and reducer in ("sum", "mean"):
        out = fused_sum(adjacency, op, lhs, rhs)
        if out is not None:
            if reducer == "mean":          # in-degrees: the row lengths of the CSR
                degrees = adjacency.crow.diff().clamp(min=1).to(out.dtype)
                out = out / degrees.reshape((-1,) + (1,) * (out.dim() - 1))
            return out
    return reduce_edges(index, sddmm(index, op, lhs, rhs, "u", "e"), reducer)


# -- sums as sparse matrix products ----------------------------------------------------
FUSED_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class Adjacency:
    """An :class:`EdgeIndex` as compressed sparse rows, both ways, built once per graph.

    ``crow``/``col``: by destination (row ``d`` holds the sources of ``d``'s in-edges);
    ``order``: the edge id in each slot (edges of one destination in edge-id order).
    ``crow_t``/``col_t``/``order_t``: the same by source.
    """

    num_src: int
    num_dst: int
    crow: torch.Tensor
    col: torch.Tensor
    order: torch.Tensor
    crow_t: torch.Tensor
    col_t: torch.Tensor
    order_t: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor

    @classmethod
    def of(cls, index: EdgeIndex) -> "Adjacency":
        src, dst = index.src.long(), index.dst.long()
        crow, col, order = _csr(dst, src, index.num_dst)
        crow_t, col_t, order_t = _csr(src, dst, index.num_src)
        return cls(index.num_src, index.num_dst, crow, col, order, crow_t, col_t, order_t,
                   src, dst)

    def matrix(self, values: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """The ``(num_dst, num_src)`` sparse matrix whose entry per edge is ``values[e]``
        (summed over repeated edges); transposed: ``(num_src, num_dst)``."""
        crow, col, order = (self.crow_t, self.col_t, self.order_t) if transposed else \
            (self.crow, self.col, self.order)
        size = (self.num_src, self.num_dst) if transposed else (self.num_dst, self.num_src)
        return csr_matrix(crow, col, order, size, values)


def csr_matrix(crow: torch.Tensor, col: torch.Tensor, order: torch.Tensor, size: tuple,
               values: torch.Tensor) -> torch.Tensor:
    """The sparse CSR matrix of ``size`` whose slot ``i`` (row-pointer ``crow``, column
    ``col``) holds ``values[order[i]]``: ``values`` ``(E,)`` per edge in edge-id order,
    ``order`` the edge in each slot. The index tensors are used as they are (int32 or
    int64, one type), so a graph's own compressed rows (DGL's included) serve without a
    copy."""
    with warnings.catch_warnings():          # torch calls sparse CSR "beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values.index_select(0, order),
                                       size=size)


def _csr(rows: torch.Tensor, cols: torch.Tensor, num_rows: int):
    order = torch.sort(rows, stable=True).indices
    crow = torch.zeros(num_rows + 1, dtype=torch.int64, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)
    return crow, cols.index_select(0, order), order


def fused_sum(adjacency: Adjacency, op: str, lhs: torch.Tensor | None,
              rhs: torch.Tensor | None) -> torch.Tensor | None:
    """``spmm(..., "sum")`` for ``copy_lhs`` and for ``mul`` of source rows by per-edge
    scalars as sparse matrix products; ``None`` when the call has another form (the
    caller then materializes the messages). Float32/float64 only."""
    if lhs is None or lhs.dtype not in FUSED_DTYPES or lhs.dim() < 2:
        return None
    if op == "copy_lhs":
        ones = lhs.new_ones(adjacency.col.shape[0])
        return _SumProduct.apply(lhs, ones, adjacency, False)
    form = product_form(lhs, rhs) if op == "mul" else None
    if form is None:
        return None
    per_head, weights = form
    return _SumProduct.apply(lhs, weights, adjacency, per_head)


def product_form(lhs: torch.Tensor, rhs: torch.Tensor | None):
    """``(per_head, weights)`` for ``mul`` of source rows ``lhs`` by per-edge ``rhs`` as
    :class:`_SumProduct` takes them (one scalar per edge, ``(E,)``, or per edge and head,
    ``(E, *H, 1)``), or ``None`` when the product has another form."""
    if lhs is None or lhs.dtype not in FUSED_DTYPES or lhs.dim() < 2 or rhs is None \
            or rhs.dtype != lhs.dtype:
        return None
    rhs = _aligned(lhs, rhs)[1]
    heads = lhs.shape[1:-1]
    if rhs.dim() != lhs.dim() or rhs.shape[-1] != 1 or any(
            w not in (1, x) for w, x in zip(rhs.shape[1:-1], heads)):
        return None
    if all(w == 1 for w in rhs.shape[1:]):                 # one scalar per edge
        return False, rhs.reshape(-1)
    return True, rhs.expand((rhs.shape[0],) + tuple(heads) + (1,))


def product_grads(adjacency: Adjacency, grad: torch.Tensor, x: torch.Tensor,
                  w: torch.Tensor, need_x: bool, need_w: bool):
    """The gradients ``(dx, dw)`` of ``spmm(..., "mul", "sum", x, w)`` run as a sparse
    product (:func:`fused_sum`; :func:`product_form` must not be ``None``), against the
    output gradient ``grad``, as its backward computes them (the transposed product;
    per-edge dot products, summed back to ``w``'s shape), without the forward; ``None``
    where not ``need_*``. Not differentiable."""
    per_head, weights = product_form(x, w)
    grad = grad.contiguous()
    dx = _product(adjacency, grad, weights, per_head, transposed=True) if need_x else None
    dw = None
    if need_w:
        dots = _edge_dots(adjacency, grad, x, per_head).reshape(weights.shape)
        if per_head:                  # the weights were expanded over some heads
            dots = dots.sum_to_size(_aligned(x, w)[1].shape)
        dw = dots.reshape(w.shape)
    return dx, dw


def copy_sum_back(adjacency: Adjacency, grad: torch.Tensor) -> torch.Tensor:
    """``(num_src, *F)``: each source's sum of ``grad`` ``(num_dst, *F)`` over its
    out-edges, the gradient of ``copy_u`` + ``sum`` (the transposed product; not
    differentiable)."""
    if grad.dtype not in FUSED_DTYPES:
        back = EdgeIndex(adjacency.dst, adjacency.src, adjacency.num_dst, adjacency.num_src)
        return reduce_edges(back, sddmm(back, "copy_lhs", grad, None), "sum")
    ones = grad.new_ones(adjacency.col.shape[0])
    return _product(adjacency, grad.contiguous(), ones, False, transposed=True)


def edge_matrix(dst: torch.Tensor, src: torch.Tensor, num_dst: int, num_src: int,
                dtype: torch.dtype) -> torch.Tensor:
    """The ``(num_dst, num_src)`` sparse (COO) matrix of ``dtype`` with a one at
    ``(dst[e], src[e])`` for every edge ``e``, in edge order (a repeated edge is a
    repeated entry): :func:`add_product` multiplies it, and its transpose (``.t()``)
    sums back along the edges. 20 bytes per edge (int64 indices, one value).

    ``dst``/``src``: ``(E,)`` integer ids.
    """
    with warnings.catch_warnings():          # torch calls sparse tensors "beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_coo_tensor(
            torch.stack([dst.long(), src.long()]),
            torch.ones(dst.shape[0], dtype=dtype, device=dst.device),
            (num_dst, num_src), check_invariants=False)


def add_product(out: torch.Tensor, matrix: torch.Tensor, rows: torch.Tensor) -> bool:
    """``out += matrix @ rows``, in place, for a sparse ``matrix`` from
    :func:`edge_matrix` (or its transpose): ``out[d] += rows[s]`` for every edge
    ``s -> d``. ``False`` (and nothing done) when the dtypes are not float32/float64 or
    differ, or ``out`` is not contiguous.

    No message per edge and no aggregate per destination is made, so the cost follows
    the edges, not the destinations. On the CPU the sums run in edge order per
    destination, as DGL's ``copy_u`` + ``sum`` kernel adds them; on CUDA torch may add them
    in another order (float rounding). Not differentiable (the engine's sequential
    passes call it without autograd).

    ``out`` ``(D, *F)``, ``matrix`` ``(D, S)``, ``rows`` ``(S, *F)``.

    Example
    -------
    >>> out = torch.zeros(2, 1)
    >>> m = edge_matrix(torch.tensor([1, 1]), torch.tensor([0, 1]), 2, 2, torch.float32)
    >>> add_product(out, m, torch.tensor([[1.], [2.]]))
    True
    >>> out
    tensor([[0.],
            [3.]])
    """
    if (rows.dtype not in FUSED_DTYPES or out.dtype != rows.dtype
            or matrix.dtype != rows.dtype or not out.is_contiguous() or out.dim() == 0):
        return False
    if matrix._nnz() == 0:
        return True
    flat_out = out.view(out.shape[0], math.prod(out.shape[1:]))
    flat_rows = rows.reshape(rows.shape[0], math.prod(rows.shape[1:]))
    with warnings.catch_warnings():          # torch calls sparse tensors "beta"
        warnings.simplefilter("ignore", UserWarning)
        flat_out.addmm_(matrix, flat_rows)
    return True


class _SumProduct(torch.autograd.Function):
    """``out[d] = sum over edges e into d of w[e] * x[src[e]]``, as sparse products.

    ``weights``: ``(E,)`` one scalar per edge, or with ``per_head`` ``(E, *H, 1)`` against
    ``x`` ``(N, *H, F)``: one sparse product per head. The gradient of ``x`` is the
    transposed product; that of the weights a per-edge dot product, taken in chunks of
    edges (never a message per edge at once).
    """

    @staticmethod
    def forward(ctx, x, weights, adjacency: Adjacency, per_head: bool):
        ctx.adjacency, ctx.per_head = adjacency, per_head
        ctx.save_for_backward(x, weights)
        return _product(adjacency, x, weights, per_head, transposed=False)

    @staticmethod
    def backward(ctx, grad):
        x, weights = ctx.saved_tensors
        adjacency, per_head = ctx.adjacency, ctx.per_head
        if torch.is_grad_enabled():     # create_graph: differentiate a recorded form
            return _recorded_grads(ctx, adjacency, x, weights, per_head, grad)
        grad = grad.contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = _product(adjacency, grad, weights, per_head, transposed=True)
        if ctx.needs_input_grad[1]:
            grad_w = _edge_dots(adjacency, grad, x, per_head).reshape(weights.shape)
        return grad_x, grad_w, None, None


def _recorded_grads(ctx, adjacency: Adjacency, x, weights, per_head: bool, grad):
    """The gradients of :class:`_SumProduct` as a differentiable graph (for double
    backward): the same sum with a message per edge, differentiated with
    ``create_graph=True``."""
    scale = weights if per_head else weights.reshape((-1,) + (1,) * (x.dim() - 1))
    messages = x.index_select(0, adjacency.src) * scale
    out = messages.new_zeros((adjacency.num_dst,) + tuple(x.shape[1:])).index_add(
        0, adjacency.dst, messages)
    wanted = [t for t, need in zip((x, weights), ctx.needs_input_grad[:2]) if need]
    found = iter(torch.autograd.grad(out, wanted, grad, create_graph=True))
    return (*(next(found) if need else None for need in ctx.needs_input_grad[:2]),
            None, None)


def _product(adjacency: Adjacency, x: torch.Tensor, weights: torch.Tensor, per_head: bool,
             transposed: bool) -> torch.Tensor:
    rows = adjacency.num_src if transposed else adjacency.num_dst
    return weighted_sum(lambda values: adjacency.matrix(values, transposed), rows, x,
                        weights, per_head)


def weighted_sum(matrix_of, rows: int, x: torch.Tensor, weights: torch.Tensor,
                 per_head: bool) -> torch.Tensor:
    r"""``(rows, *F)``: :math:`out_d = \sum_{e: s \to d} w_e \, x_s` as sparse matrix
    products, where ``matrix_of(values)`` is the ``(rows, len(x))`` sparse matrix with
    ``values`` ``(E,)`` (per edge, in edge-id order) on the edges (:func:`csr_matrix`).

    ``weights``: ``(E,)``, one scalar per edge, against ``x`` ``(N, *F)``: one product;
    or, with ``per_head``, ``(E, *H, 1)`` against ``x`` ``(N, *H, D)``: one product per
    head. On the CPU each destination adds its edges in slot order, as DGL's own kernel
    does on the same compressed rows. Not differentiable (callers wrap it).
    """
    if not per_head:
        flat = x.reshape(x.shape[0], math.prod(x.shape[1:]))
        return (matrix_of(weights) @ flat).reshape((rows,) + tuple(x.shape[1:]))
    num_heads = math.prod(x.shape[1:-1])
    heads = x.reshape(x.shape[0], num_heads, x.shape[-1])
    per_edge = weights.reshape(weights.shape[0], num_heads)
    # Each head's product is added straight into its slice of one zeroed output, from one
    # reused copy of that head's rows: no fresh temporary per head, whose page faults cost
    # as much as the product on small steps (adding to 0.0 changes no bit).
    out = x.new_zeros((rows, num_heads, x.shape[-1]))
    head = x.new_empty((x.shape[0], x.shape[-1]))
    for h in range(num_heads):
        head.copy_(heads[:, h])
        out[:, h].addmm_(matrix_of(per_edge[:, h]), head)
    return out.reshape((rows,) + tuple(x.shape[1:]))


def _edge_dots(adjacency: Adjacency, grad: torch.Tensor, x: torch.Tensor, per_head: bool
               ) -> torch.Tensor:
    """Per edge, ``grad[dst[e]] . x[src[e]]``: over every feature (``(E,)``), or per head
    (``(E, H)``), a chunk of edges at a time."""
    step = max(1, _EDGE_CHUNK // max(1, math.prod(x.shape[1:])))
    parts = []
    for start in range(0, adjacency.src.shape[0], step):
        src = adjacency.src[start:start + step]
        dst = adjacency.dst[start:start + step]
        prod = grad.index_select(0, dst) * x.index_select(0, src)
        if per_head:                  # (chunk, *H, F) -> (chunk, H)
            parts.append(prod.sum(-1).reshape(prod.shape[0], math.prod(prod.shape[1:-1])))
        else:
            parts.append(prod.reshape(prod.shape[0], math.prod(prod.shape[1:])).sum(1))
    if not parts:
        return x.new_zeros((0,))
    return torch.cat(parts)


def edge_softmax(index: EdgeIndex, logits: torch.Tensor) -> torch.Tensor:
    """Softmax of per-edge ``logits`` ``(E, *F)`` over the in-edges of each destination:
    DGL's ``edge_softmax`` with its defaults (all edges, ``norm_by="dst"``). The maximum
    per destination is subtracted first (no gradient flows through it, and the result
    does not depend on it), as in DGL.

    Raises
    ------
    ValueError
        Logits whose first dimension is not the edge count.
    """
    if logits.shape[0] != index.num_edges:
        raise ValueError(f"logits need one row per edge ({index.num_edges}), got "
                         f"{logits.shape[0]}")
    dst = index.dst.long()
    shape = (index.num_dst,) + tuple(logits.shape[1:])
    rows = dst.reshape((-1,) + (1,) * (logits.dim() - 1)).expand_as(logits)
    with torch.no_grad():
        top = logits.new_zeros(shape).scatter_reduce(0, rows, logits, "amax",
                                                     include_self=False)
    scores = torch.exp(logits - top.index_select(0, dst))
    totals = scores.new_zeros(shape).index_add(0, dst, scores)
    return scores / totals.index_select(0, dst)
