"""Sequential aggregation and rematerialization as one autograd function.

Forward, for each shard in ring order: fetch the remote source rows the message function
reads, compute that shard's messages and aggregate them into an accumulator, drop the
rows. ``update_all`` folds shards with the reducer; ``apply_edges`` concatenates per-edge
results in shard order. The forward runs before the autograd function is applied, so that
the tensors a Python message function captures (parameters, closures; see
:mod:`sarlite.core.capture`) are known and become inputs of the function: their gradients
are returned through autograd like any other input's.

Backward, mode ``sar``: for each shard, fetch the rows again, rebuild the shard's
computation under autograd, back-propagate the slice of the output gradient, and send the
source-row gradients back to their owners, who add them up. ``copy_u`` with ``sum``/``mean``
needs no refetch: the source gradient is the transposed aggregation of the output gradient,
and the sources' values are not kept for it (only their shapes), so a temporary input such
as GraphConv's normalized features is freed after the forward, as in DGL.
``apply_edges(u_add_v)`` (GATConv's logits) likewise needs only shapes: both its
gradients are sums of the edge gradient (:meth:`GraphShard.add_back
<sarlite.core.shards.GraphShard.add_back>`), so nothing is refetched; and ``u_mul_e`` with
``sum``/``mean`` (GATConv's aggregation) refetches the rows but recomputes no aggregate
(on the torch kernels, where it runs as a sparse product): its two gradients are read
off the output gradient
(:meth:`GraphShard.product_back <sarlite.core.shards.GraphShard.product_back>`).
Mode ``sa`` keeps the forward's autograd graph instead and only sends gradients back.
The backward is not itself differentiable: double backward is refused.

In mode ``sar`` a ``mean`` is the function's ``sum`` divided by the in-degrees outside it,
in place and under autograd, as DGL's own ``mean`` is a ``sum`` divided by the in-degrees:
the same numbers both ways, and the backward's divided output gradient is the one autograd
makes, so the undivided one is freed before the function's backward runs (one gradient of
the destinations' size at the peak of a ``mean``'s backward, not two).

With ``max_rows_per_step`` a remote shard is split by source row into chunks
(:meth:`GraphShard.chunks <sarlite.core.shards.GraphShard.chunks>`), and every pass above
runs step by step instead of round by round: a chunk's rows are fetched, used and freed,
its aggregate added into the output at the destinations it reaches, its gradients sent
back, before the next chunk's. For ``copy_u`` with ``sum``/``mean`` (GraphConv, SAGE) a
chunk's rows are added along its edges straight into the accumulator, and its source
gradient summed straight from the output gradient (:meth:`GraphShard.add_copied
<sarlite.core.shards.GraphShard.add_copied>`): a step costs in proportion to its edges,
with no aggregate or gathered gradient per destination it reaches.

Every rank runs the same steps in the same order (the plan's collectives), also for empty
shards, so the function is a collective in both passes.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import dgl.function as fn
import torch

from .capture import Captures
from .local_blocks import takes_product_back
from .message import is_copy_src, is_src_plus_dst, is_src_times_edge
from .options import EngineOptions, step_rows
from .shards import GraphShard, RingPlan, Step
from .step_buffers import Rotation

FETCH_KIND, GRAD_KIND = "sar_fetch", "sar_grad"


@dataclass(frozen=True)
class ShardSet:
    """The immutable structure a sequential call runs over.

    ``shards[j]`` holds the edges from partition ``j``; ``plan`` says who serves which rows;
    ``in_degrees`` ``(num_dst,)`` divide ``mean``; ``options``: the call's
    :class:`~sarlite.core.options.EngineOptions` (``pipeline_depth``,
    ``max_collective_rows``, ``halo_dtype``, ``max_rows_per_step`` as documented there);
    ``kernels``: ``"dgl"`` or ``"torch"``, the options' kernels resolved for the graph's
    device, the blocks each step runs on (see :mod:`sarlite.core.local_blocks`);
    ``along_edges``: whether the call's steps add their rows along the edges into the
    output (the size ``"auto"`` steps take, see :func:`~sarlite.core.options.step_rows`).
    """

    shards: tuple[GraphShard, ...]
    plan: RingPlan
    in_degrees: torch.Tensor
    options: EngineOptions = EngineOptions()
    kernels: str = "dgl"
    along_edges: bool = False

    @property
    def step_rows(self) -> int | None:
        """The rows per step the options give on this graph (``None``: whole shards)."""
        return step_rows(self.options.max_rows_per_step, self.plan.dst_counts,
                         self.along_edges)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.plan.steps(self.step_rows)

    def piece(self, step: Step) -> GraphShard:
        """The shard, or the chunk of it, that ``step`` aggregates."""
        return self.shards[step.shard].chunks(self.step_rows, step.chunks)[step.chunk]

    def fetched(self, tensors, kind: str, reuse: bool = False):
        """``(step, piece, fetched rows)`` for every step; see :meth:`RingPlan.fetched`
        (with ``reuse``, a step's rows are overwritten once the next step is asked for)."""
        for step, rows in self.plan.fetched(tensors, self.steps, self.options.pipeline_depth,
                                            kind, self.options.max_collective_rows,
                                            self.options.halo_dtype, reuse):
            yield step, self.piece(step), rows


@dataclass(frozen=True)
class Message:
    """What one ``update_all`` (``reducer`` set) or ``apply_edges`` call computes.

    ``src``/``dst``/``edge`` name the fields the function reads; ``udf`` is True for a
    Python function (which may capture tensors), False for a DGL builtin.
    """

    func: object
    src: tuple[str, ...]
    dst: tuple[str, ...]
    edge: tuple[str, ...]
    udf: bool
    reducer: str | None = None
    msg_field: str | None = None
    out_field: str | None = None

    def split(self, values):
        a, b = len(self.src), len(self.src) + len(self.dst)
        return list(values[:a]), list(values[a:b]), list(values[b:b + len(self.edge)])


@dataclass(frozen=True)
class OpContext:
    """Everything the backward pass needs besides saved tensors; never mutated."""

    graph: ShardSet
    message: Message
    keep_graph: bool
    captured: tuple[torch.Tensor, ...]
    out_names: tuple[str, ...]
    rng_states: tuple = ()      # per shard, for Python functions: replayed in backward

    @property
    def transposes(self) -> bool:
        """Whether the backward is the output gradient summed back along the edges
        (``sar`` mode, ``copy_u`` with ``sum``/``mean``, no destination or edge data, no
        captured tensors): it reads the sources' shapes, not their values."""
        return (not self.keep_graph and _copies_and_sums(self.message)
                and not self.message.dst and not self.message.edge and not self.captured)

    @property
    def adds(self) -> bool:
        """Whether the backward is ``apply_edges(u_add_v)``'s (``sar`` mode): the edge
        gradient summed at the sources and at the destinations (:meth:`GraphShard.add_back
        <sarlite.core.shards.GraphShard.add_back>`). It reads the inputs' shapes, not
        their values, so nothing is refetched."""
        return (not self.keep_graph and not self.captured
                and self.message.reducer is None and not self.message.edge
                and is_src_plus_dst(self.message.func))

    @property
    def shapes_only(self) -> bool:
        """Whether the backward reads the inputs' shapes only (:attr:`transposes`,
        :attr:`adds`): their values are not kept, and no rows are refetched."""
        return self.transposes or self.adds

    @property
    def multiplies(self) -> bool:
        """Whether the backward takes ``u_mul_e`` + ``sum``/``mean``'s gradients straight
        from the output gradient (``sar`` mode, no destination data): it refetches the
        source rows and reads the edge values, but recomputes no aggregate
        (:meth:`GraphShard.product_back <sarlite.core.shards.GraphShard.product_back>`),
        where the kernels take it (:func:`~sarlite.core.local_blocks.takes_product_back`:
        the torch kernels only where they ran the call as a sparse product)."""
        return (not self.keep_graph and not self.captured
                and self.message.reducer in ("sum", "mean") and not self.message.dst
                and is_src_times_edge(self.message.func))


@dataclass
class _Forward:
    """The forward pass's tensors, handed to the autograd function."""

    outputs: tuple[torch.Tensor, ...]
    winner: torch.Tensor | None = None     # max/min: the shard each element came from
    kept: tuple | None = None              # sa mode: graph-carrying outputs and their leaves


def run_sequential(graph: ShardSet, message: Message, values: list[torch.Tensor],
                   declared: list[torch.Tensor], keep_graph: bool) -> dict:
    """Run one sequential call; returns ``{name: tensor}`` (aggregate or edge values).

    ``values`` are the fields named by ``message`` (src, dst, edge); ``declared`` the
    parameters of :func:`message_has_parameters`. Collective.
    """
    keep_graph = keep_graph and torch.is_grad_enabled()
    graph = replace(graph, along_edges=not keep_graph and _copies_and_sums(message))
    divides = message.reducer == "mean" and not keep_graph
    if divides:                         # the sum, divided below (see the module's note)
        message = replace(message, reducer="sum")
    op, forward = _forward(graph, message, values, declared, keep_graph)
    inputs = list(values) + list(op.captured)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        outputs = SequentialAggregation.apply(op, forward, *inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    else:
        outputs = tuple(o.detach() for o in forward.outputs)
    if divides:
        outputs = (outputs[0].div_(_degree_view(graph, outputs[0])),)
    return dict(zip(op.out_names, outputs))


# -- per-shard computation --------------------------------------------------------------
def _shard_compute(message: Message, shard: GraphShard, kernels: str, fetched, dst_vals,
                   edge_vals):
    """Run the function on one shard's block for ``kernels``; returns the aggregate or
    ``{name: edge values}``."""
    def run(block):
        with block.local_scope():
            block.srcdata.update(dict(zip(message.src, fetched)))
            block.dstdata.update(dict(zip(message.dst, dst_vals)))
            block.edata.update(dict(zip(message.edge, edge_vals)))
            if message.reducer is None:
                before = dict(block.edata)
                block.apply_edges(message.func)
                return {k: v for k, v in block.edata.items()
                        if k not in before or v is not before[k]}
            reduce = getattr(fn, "sum" if message.reducer == "mean" else message.reducer)
            shard.update_all(kernels, message.func,
                             reduce(message.msg_field, message.out_field))
            return block.dstdata[message.out_field]
    return shard.run(run, kernels)


def _edge_slices(edge_vals, piece: GraphShard):
    """The rows of per-edge tensors that belong to ``piece`` (a shard or a chunk of one),
    in its block's edge order."""
    start, end = piece.edge_slice
    if piece.edge_index is None:
        return [v[start:end] for v in edge_vals]
    return [v[start:end][piece.edge_index] for v in edge_vals]


def _dst_slices(dst_vals, piece: GraphShard):
    """The destination values ``piece`` reads: all of them for a shard, the rows of the
    destinations a chunk reaches (gathered copies) for a chunk."""
    if piece.dst_index is None:
        return list(dst_vals)
    return [v.index_select(0, piece.dst_index) for v in dst_vals]


def _add_dst_grads(totals, piece: GraphShard, grads) -> None:
    """Add the gradients of ``piece``'s destination values into the totals."""
    for total, grad in zip(totals, grads):
        if total is None or grad is None:
            continue
        if piece.dst_index is None:
            total.add_(grad)
        else:
            total.index_add_(0, piece.dst_index, grad)


def _add_edge_grads(totals, piece: GraphShard, grads) -> None:
    """Add the gradients of ``piece``'s edge values into the per-edge totals."""
    start, end = piece.edge_slice
    for total, grad in zip(totals, grads):
        if total is None or grad is None:
            continue
        if piece.edge_index is None:
            total[start:end].add_(grad)
        else:
            total[start:end].index_add_(0, piece.edge_index, grad)


def _idle(step: Step, piece: GraphShard) -> bool:
    """True for a chunk past the end of its shard's rows (other ranks needed more chunks
    in this round): nothing is computed, and no message is posted to receive it (none come)."""
    return step.chunk > 0 and piece.num_edges == 0


def _leaf(tensor: torch.Tensor, requires_grad: bool | None = None) -> torch.Tensor:
    """A detached copy-free leaf; ``requires_grad`` defaults to the tensor's own flag."""
    flag = tensor.requires_grad if requires_grad is None else requires_grad
    return tensor.detach().requires_grad_(flag)


def _leaves_like(copies, sources):
    """Leaves for copies (fetched rows, a chunk's gathered destination or edge values),
    needing a gradient when the tensor they were copied from does."""
    return [_leaf(t, s.requires_grad) for t, s in zip(copies, sources)]


def _rng_state(shard: GraphShard):
    """The random state a Python function sees on ``shard`` (CPU, and the shard's GPU)."""
    device = shard.device
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextmanager
def _replayed_rng(states: tuple, j: int, shard: GraphShard):
    """Run with the random state the forward pass had at step ``j`` (so dropout inside a
    message function draws the same mask when rematerialized); restore it afterwards."""
    if not states:
        yield
        return
    device = shard.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        cpu, cuda = states[j]
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)
        yield


def _capture_scope(capture: "Captures | None", own):
    return capture.active(own) if capture is not None else nullcontext()


# -- folding ------------------------------------------------------------------------------
def _degree_view(graph: ShardSet, value: torch.Tensor) -> torch.Tensor:
    """In-degrees (clamped at 1) shaped to broadcast against ``value``."""
    deg = graph.in_degrees.to(value.dtype).clamp(min=1)
    return deg.reshape((-1,) + (1,) * (value.dim() - 1))


def _fold(reducer: str, state, shard: GraphShard, value, shard_index: int,
          num_steps: int, num_dst: int):
    """Fold one step's aggregate into ``state = (acc, winner)``.

    ``sum``/``mean`` add up; ``max``/``min`` keep the first strictly better step for
    each element (``winner``, the step index), ignoring destinations the step's shard or
    chunk has no edges into: ties go to the earliest step, as within one block DGL's
    reference kernel keeps the first edge. (DGL on x86 hands unbroadcast float32 calls to
    libxsmm by default, which keeps the last; so the gradient of a tie may reach another
    of the tied edges than on one DGL graph, and the exactness tests compare the tied
    cases' gradient mass.)
    """
    acc, winner = state
    rows = shard.dst_index
    if reducer in ("sum", "mean"):
        if acc is None and rows is None:
            return value, None
        if acc is None:
            acc = value.new_zeros((num_dst,) + value.shape[1:])
        # in place when no graph is recorded: one accumulator, no per-shard copy
        if rows is None:
            return (acc + value if torch.is_grad_enabled() else acc.add_(value)), None
        return (acc.index_add(0, rows, value) if torch.is_grad_enabled()
                else acc.index_add_(0, rows, value)), None
    if acc is None:
        acc = value.new_full((num_dst,) + value.shape[1:],
                             float("-inf") if reducer == "max" else float("inf"))
        dtype = torch.int16 if num_steps < 2 ** 15 else torch.int32
        winner = torch.full(acc.shape, -1, dtype=dtype, device=value.device)
    if rows is None:            # a whole shard: only destinations it has edges into
        has = shard.has_in_edges().reshape((-1,) + (1,) * (value.dim() - 1))
        take = has & (value > acc if reducer == "max" else value < acc)
        return torch.where(take, value, acc), torch.where(
            take, torch.full_like(winner, shard_index), winner)
    old, old_winner = acc[rows], winner[rows]          # a chunk reaches every row it has
    take = value > old if reducer == "max" else value < old
    return (acc.index_copy(0, rows, torch.where(take, value, old)),
            winner.index_copy(0, rows, torch.where(
                take, torch.full_like(old_winner, shard_index), old_winner)))


def _copies_and_sums(message: Message) -> bool:
    """True for ``copy_u`` + ``sum``/``mean``: a chunk's aggregate can be added straight
    into the accumulator (:meth:`GraphShard.add_copied`)."""
    return message.reducer in ("sum", "mean") and is_copy_src(message.func)


def _finish(graph: ShardSet, reducer: str, state):
    acc, winner = state
    if reducer == "mean":
        deg = _degree_view(graph, acc)
        return acc / deg if torch.is_grad_enabled() else acc.div_(deg)
    if reducer in ("max", "min"):
        return torch.where(winner >= 0, acc, torch.zeros_like(acc))
    return acc


def _shard_grad(reducer: str, grad_agg, winner, shard_index: int, piece: GraphShard):
    """The gradient of one step's aggregate, given the folded result's gradient."""
    if piece.dst_index is not None:
        grad_agg = grad_agg.index_select(0, piece.dst_index)
        winner = winner.index_select(0, piece.dst_index) if winner is not None else None
    if reducer in ("sum", "mean"):
        return grad_agg
    return grad_agg * (winner == shard_index).to(grad_agg.dtype)


# -- forward --------------------------------------------------------------------------------
def _tensors(value) -> list[torch.Tensor]:
    return list(value.values()) if isinstance(value, dict) else [value]


def _detached(value):
    if isinstance(value, dict):
        return {k: v.detach() for k, v in value.items()}
    return value.detach()


def _forward(graph: ShardSet, message: Message, values, declared, keep_graph: bool
             ) -> tuple[OpContext, _Forward]:
    """Aggregate shard by shard. A Python function runs each shard with gradients on, so
    that the tensors it captures are found; the shard's graph is then dropped unless kept
    (``sa``), and its random state is kept for the rematerialization (``sar``)."""
    src_vals, dst_vals, edge_vals = message.split(values)
    if keep_graph:
        dst_vals = [_leaf(t) for t in dst_vals]
        edge_vals = [_leaf(t) for t in edge_vals]
    else:
        src_vals = [t.detach() for t in src_vals]
        dst_vals = [t.detach() for t in dst_vals]
        edge_vals = [t.detach() for t in edge_vals]
    capture = Captures(declared) if message.udf and torch.is_grad_enabled() else None
    copies = graph.along_edges            # set by run_sequential for this call
    state, per_step, fetched_leaves, rng_states = (None, None), {}, {}, {}
    # the copy_u + sum path uses a step's rows up within the step: its buffers are reused
    for step, piece, fetched in graph.fetched(src_vals, FETCH_KIND, reuse=copies):
        if keep_graph:
            fetched = _leaves_like(fetched, values[:len(message.src)])
            fetched_leaves[step.index] = fetched
        if _idle(step, piece):
            continue
        if copies and piece.dst_index is not None and state[0] is not None and \
                piece.add_copied(state[0], fetched[0]):
            continue                      # a chunk's copy_u + sum, added in place
        piece_edges = _edge_slices(edge_vals, piece)
        piece_dst = _dst_slices(dst_vals, piece)
        if capture is not None and not keep_graph:
            rng_states[step.index] = _rng_state(piece)
        with torch.set_grad_enabled(keep_graph or capture is not None):
            with _capture_scope(capture, fetched + piece_dst + piece_edges):
                value = _shard_compute(message, piece, graph.kernels, fetched, piece_dst,
                                       piece_edges)
            if capture is not None:
                capture.add_reached(_tensors(value))
        with torch.set_grad_enabled(keep_graph):
            value = value if keep_graph else _detached(value)
            if message.reducer is None:
                per_step[step.index] = value
            else:
                state = _fold(message.reducer, state, piece, value, step.index,
                              len(graph.steps), graph.in_degrees.shape[0])
        del fetched
    with torch.set_grad_enabled(keep_graph):
        if message.reducer is None:
            names = tuple(sorted({name for value in per_step.values() for name in value}))
            outputs = _edge_outputs(graph, per_step, names)
        else:
            names, outputs = (message.out_field,), (_finish(graph, message.reducer, state),)
    captured = tuple(capture.found) if capture is not None else ()
    kept = (outputs, dst_vals, edge_vals, fetched_leaves) if keep_graph else None
    rng = tuple(rng_states.get(s.index) for s in graph.steps) if rng_states else ()
    op = OpContext(graph, message, keep_graph, captured, names, rng)
    return op, _Forward(outputs, state[1], kept)


def _edge_outputs(graph: ShardSet, per_step: dict, names) -> tuple[torch.Tensor, ...]:
    """Per-edge values of each of ``names`` over all shards, in the shards' edge order,
    from the steps' pieces (a chunk's ``edge_index`` says where in the shard each of its
    edges goes back to)."""
    by_shard: dict[int, list] = {j: [] for j in range(len(graph.shards))}
    for step in graph.steps:
        if step.index in per_step:
            by_shard[step.shard].append((graph.piece(step), per_step[step.index]))
    order = {j: None if len(parts) == 1 and parts[0][0].edge_index is None else
             torch.argsort(torch.cat([piece.edge_index for piece, _ in parts]))
             for j, parts in by_shard.items()}

    def shard_values(j: int, name: str) -> torch.Tensor:
        values = torch.cat([value[name] for _, value in by_shard[j]])
        return values if order[j] is None else values[order[j]]

    return tuple(torch.cat([shard_values(j, name) for j in by_shard]) for name in names)


class SequentialAggregation(torch.autograd.Function):
    """``apply(ctx, forward, *src, *dst, *edge, *captured)`` -> outputs of ``forward``."""

    @staticmethod
    def forward(ctx, op: OpContext, result: _Forward, *inputs):
        ctx.op = op
        ctx.winner = result.winner
        ctx.kept = result.kept
        saved = inputs[:len(inputs) - len(op.captured)]
        # a backward that reads only the inputs' shapes: keeping their values would hold
        # a temporary input (GraphConv's normalized features, GATConv's logits) until it
        ctx.stand_ins = tuple(_StandIn.of(t) for t in saved) if op.shapes_only else None
        ctx.save_for_backward(*(() if op.shapes_only else saved))
        outputs = tuple(o.detach() for o in result.outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "sarlite: double backward (create_graph=True) through a sequential "
                "update_all/apply_edges (modes 'sar' and 'sa') is not supported; use "
                "one-shot mode (g.get_full_partition_graph() or mode='one-shot').")
        op: OpContext = ctx.op
        saved = ctx.stand_ins if ctx.stand_ins is not None else ctx.saved_tensors
        src_vals, dst_vals, edge_vals = op.message.split(saved)
        sender = _GradReturn(op.graph, src_vals)
        if op.keep_graph:
            dst_grads, edge_grads, captured_grads = _backward_kept(op, ctx.kept,
                                                                   grad_outputs, sender)
        else:
            dst_grads, edge_grads, captured_grads = _backward_rematerialized(
                op, ctx.winner, grad_outputs, src_vals, dst_vals, edge_vals, sender)
        ctx.kept = ctx.winner = ctx.stand_ins = None
        return (None, None, *sender.totals(), *dst_grads, *edge_grads, *captured_grads)


@dataclass(frozen=True)
class _StandIn:
    """What a backward that reads shapes only (:attr:`OpContext.shapes_only`) needs of an
    input tensor: its shape, dtype, device and whether it wants a gradient."""

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "_StandIn":
        return cls(tensor.shape, tensor.dtype, tensor.device, tensor.requires_grad)


class _GradReturn:
    """Sends fetched-row gradients back step by step and sums what comes back into the
    gradients of the source fields (created on first use). With ``depth`` 0 each exchange
    completes before the next step is computed; otherwise one stays in flight.

    What comes back is added up before the next step is posted, so it arrives in one
    reused buffer per field (``received``). The gradients a chunk sums along its edges
    are written into ``depth + 1`` reused buffers per field (:meth:`outgoing`): a step's
    exchange is complete (flushed) before its buffer comes round again."""

    def __init__(self, graph: ShardSet, src_vals):
        # src_vals: the source tensors, or their stand-ins (shapes only, see _StandIn)
        self.plan, self.options = graph.plan, graph.options
        self.src_vals = src_vals
        self.wanted = [t.requires_grad for t in src_vals]
        self.grads = [None] * len(src_vals)
        self.pending = []
        capacity = self.plan.largest_step(graph.steps)
        self.received = [Rotation(1, capacity) for _ in src_vals]
        self.sent = [Rotation(self.options.pipeline_depth + 1, capacity) for _ in src_vals]

    def outgoing(self, field: int, rows: int, like) -> torch.Tensor:
        """An uninitialised ``(rows, *like.shape[1:])`` buffer, in ``like``'s dtype and
        on its device, for the gradients of field ``field`` that the next step sends."""
        return self.sent[field].take(rows, like.shape[1:], like.dtype, like.device)

    def post(self, step: Step, fetched_grads):
        """Send the gradients of the rows fetched in ``step``; apply the previous step's."""
        self.flush()
        self.pending = [(step, f, self.plan.return_grad(
            grad, step, GRAD_KIND, self.options.max_collective_rows, self.options.halo_dtype,
            self.received[f])) for f, grad in enumerate(fetched_grads) if self.wanted[f]]
        if self.options.pipeline_depth == 0:
            self.flush()

    def flush(self):
        for step, f, handle in self.pending:
            rows = handle.wait()
            if self.grads[f] is None and step.round_ == 0:
                self.grads[f] = rows          # the local shard's gradient, full size already
            else:
                if self.grads[f] is None:
                    self.grads[f] = _zeros(self.src_vals[f])
                self.plan.add_returned(self.grads[f], rows, step)
        self.pending = []

    def totals(self) -> list:
        """Final gradients of the source fields (``None`` where none is needed)."""
        self.flush()
        return [(g if g is not None else _zeros(t)) if want else None
                for g, t, want in zip(self.grads, self.src_vals, self.wanted)]


def _zeros(like) -> torch.Tensor:
    """Zeros of the shape, dtype and device of ``like`` (a tensor or a :class:`_StandIn`)."""
    return torch.zeros(like.shape, dtype=like.dtype, device=like.device)


def _backward_kept(op: OpContext, kept, grad_outputs, sender):
    """``sa`` mode: differentiate the kept graph once, then return row gradients."""
    outputs, dst_leaves, edge_leaves, fetched_leaves = kept
    steps = op.graph.steps
    fetched = [leaf for step in steps for leaf in fetched_leaves[step.index]]
    grads = _grads(outputs, grad_outputs, fetched + dst_leaves + edge_leaves +
                   list(op.captured))
    per_step = len(fetched_leaves[0]) if fetched_leaves else 0
    for step in steps:
        k = step.index
        sender.post(step, [_or_zeros(g, leaf) for g, leaf in zip(
            grads[k * per_step:(k + 1) * per_step], fetched_leaves[k])])
    rest = grads[len(fetched):]
    n_dst, n_edge = len(dst_leaves), len(edge_leaves)
    return rest[:n_dst], rest[n_dst:n_dst + n_edge], rest[n_dst + n_edge:]


def _backward_rematerialized(op: OpContext, winner, grad_outputs, src_vals, dst_vals,
                             edge_vals, sender):
    """``sar`` mode: refetch and recompute step by step."""
    graph, message = op.graph, op.message
    dst_grads = [_zeros(t) if t.requires_grad else None for t in dst_vals]
    edge_grads = [_zeros(t) if t.requires_grad else None for t in edge_vals]
    captured_grads = [None] * len(op.captured)
    reducer = message.reducer             # never "mean" here: run_sequential divides
    grad_agg = grad_outputs[0] if reducer is not None else None
    multiplies = op.multiplies and takes_product_back(graph.kernels, src_vals[0],
                                                      edge_vals[0])
    steps = ((step, graph.piece(step), None) for step in graph.steps) if op.shapes_only \
        else graph.fetched(src_vals, FETCH_KIND)
    for step, piece, fetched in steps:
        if op.transposes:
            fetched_grads = [_transposed_sum(piece, graph.kernels, grad_agg, lambda rows:
                                             sender.outgoing(0, rows, grad_agg))]
        elif op.adds:
            (grad_e,) = _edge_slices(grad_outputs[:1], piece)
            (src,), (dst,) = src_vals, dst_vals
            grad_src, grad_dst = piece.add_back(graph.kernels, grad_e, tuple(src.shape[1:]),
                                                tuple(dst.shape[1:]), src.requires_grad,
                                                dst.requires_grad)
            _add_dst_grads(dst_grads, piece, [grad_dst])
            fetched_grads = [grad_src]
            del grad_e, grad_dst
        elif _idle(step, piece):
            fetched_grads = [torch.zeros_like(t) for t in fetched]
        elif multiplies:
            fetched_grads = _multiplied_back(
                graph, piece, fetched, src_vals, edge_vals,
                _shard_grad(reducer, grad_agg, winner, step.index, piece), edge_grads)
        else:
            fetched = _leaves_like(fetched, src_vals)
            dst_leaves = _leaves_like(_dst_slices(dst_vals, piece), dst_vals)
            edge_leaves = _leaves_like(_edge_slices(edge_vals, piece), edge_vals)
            with torch.enable_grad(), _replayed_rng(op.rng_states, step.index, piece):
                value = _shard_compute(message, piece, graph.kernels, fetched, dst_leaves,
                                       edge_leaves)
            if reducer is None:
                outs = [value[name] for name in op.out_names]
                grads_out = [_edge_slices([g], piece)[0] if g is not None else None
                             for g in grad_outputs]
            else:
                outs, grads_out = [value], [_shard_grad(reducer, grad_agg, winner,
                                                        step.index, piece)]
            grads = _grads(outs, grads_out, fetched + dst_leaves + edge_leaves +
                           list(op.captured))
            n_f, n_d, n_e = len(fetched), len(dst_leaves), len(edge_leaves)
            _add_dst_grads(dst_grads, piece, grads[n_f:n_f + n_d])
            _add_edge_grads(edge_grads, piece, grads[n_f + n_d:n_f + n_d + n_e])
            captured_grads = [_sum(a, b) for a, b in zip(captured_grads,
                                                         grads[n_f + n_d + n_e:])]
            fetched_grads = [_or_zeros(g, leaf) for g, leaf in zip(grads[:n_f], fetched)]
            del dst_leaves, edge_leaves, value, grads
        del fetched
        sender.post(step, fetched_grads)
        del fetched_grads                  # the exchange holds the buffer until it is sent
    return dst_grads, edge_grads, captured_grads


def _multiplied_back(graph: ShardSet, piece: GraphShard, fetched, src_vals, edge_vals,
                     grad: torch.Tensor, edge_grads) -> list:
    """``u_mul_e`` + ``sum``'s gradients on ``piece`` from its slice of the output gradient
    ``grad``: the edge values' added into ``edge_grads``, the fetched rows' returned."""
    (weights,) = _edge_slices(edge_vals, piece)
    grad_x, grad_w = piece.product_back(graph.kernels, grad, fetched[0], weights,
                                        src_vals[0].requires_grad, edge_vals[0].requires_grad)
    _add_edge_grads(edge_grads, piece, [grad_w])
    return [_or_zeros(grad_x, fetched[0])]


def _transposed_sum(piece: GraphShard, kernels: str, grad_agg: torch.Tensor,
                    buffer) -> torch.Tensor:
    """``copy_u`` + ``sum``'s source gradient: the output gradient summed back along the
    piece's edges, at its source rows (for a chunk, into the reused ``buffer(rows)``; a
    whole shard's, the local one's included, is a new tensor)."""
    if piece.dst_index is None:
        return piece.sum_back(kernels, grad_agg)
    grad = piece.copied_back(grad_agg, buffer)   # a chunk: along its edges, no gathered rows
    return grad if grad is not None else piece.sum_back(
        kernels, grad_agg.index_select(0, piece.dst_index))


def _grads(outputs, grad_outputs, inputs) -> list:
    """``d(outputs)/d(inputs)`` against ``grad_outputs`` (``None`` where unused); nothing
    is accumulated into any ``.grad``."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
             if g is not None and o.requires_grad]
    wanted = [i for i, t in enumerate(inputs) if t.requires_grad]
    result = [None] * len(inputs)
    if pairs and wanted:
        found = torch.autograd.grad([o for o, _ in pairs], [inputs[i] for i in wanted],
                                    [g for _, g in pairs], allow_unused=True)
        for i, grad in zip(wanted, found):
            result[i] = grad
    return result


def _sum(total, grad):
    """``total + grad`` where either may be ``None`` (no gradient yet / none here)."""
    return grad if total is None else (total if grad is None else total + grad)


def _or_zeros(grad, like: torch.Tensor) -> torch.Tensor:
    return grad if grad is not None else torch.zeros_like(like)
