"""Sequential aggregation and rematerialization as one autograd function.

Forward, for each shard in ring order: fetch the remote source rows the message function
reads, compute that shard's messages and aggregate them into an accumulator, drop the
rows. ``update_all`` folds shards with the reducer; ``apply_edges`` concatenates per-edge
results in shard order.

Backward, mode ``sar``: for each shard, fetch the rows again, rebuild the shard's
computation under autograd, back-propagate the slice of the output gradient, and send the
source-row gradients back to their owners, who add them up. ``copy_u`` with ``sum``/``mean``
needs no refetch: the source gradient is the transposed aggregation of the output gradient.
Mode ``sa`` keeps the forward's autograd graph instead and only sends gradients back.

Every rank runs the same rounds in the same order (the plan's collectives), also for empty
shards, so the function is a collective in both passes.
"""
from __future__ import annotations

import dgl.function as fn
import torch
from dgl.ops import copy_u_sum

from .message import is_copy_src

_FETCH, _GRAD = "sar_fetch", "sar_grad"


def _leaf(tensor: torch.Tensor, requires_grad: bool | None = None) -> torch.Tensor:
    """A detached copy-free leaf; ``requires_grad`` defaults to the tensor's own flag."""
    flag = tensor.requires_grad if requires_grad is None else requires_grad
    return tensor.detach().requires_grad_(flag)


def _fetched_leaves(fetched, src_vals):
    """Leaves for fetched rows, needing a gradient when their source field does."""
    return [_leaf(t, s.requires_grad) for t, s in zip(fetched, src_vals)]


class ShardOp:
    """One ``update_all`` or ``apply_edges`` call on a :class:`GraphShardManager`.

    Holds what the autograd function needs besides tensors: the shards and plan, the
    message (or edge) function, the reducer and the names of the fields it reads.
    """

    def __init__(self, graph, func, src_names, dst_names, edge_names, num_params: int,
                 reducer: str | None = None, msg_field: str | None = None,
                 out_field: str | None = None):
        self.graph = graph
        self.func = func
        self.src_names, self.dst_names, self.edge_names = src_names, dst_names, edge_names
        self.num_params = num_params
        self.reducer = reducer          # None for apply_edges
        self.msg_field, self.out_field = msg_field, out_field
        self.out_names: list[str] = []  # apply_edges outputs, known after forward

    # -- per-shard computation ---------------------------------------------------------
    def split(self, inputs):
        a = len(self.src_names)
        b = a + len(self.dst_names)
        c = b + len(self.edge_names)
        return list(inputs[:a]), list(inputs[a:b]), list(inputs[b:c])

    def shard_compute(self, shard, fetched, dst_vals, shard_edge_vals):
        """Run the function on one shard; returns the aggregate or ``{name: edge values}``.

        ``shard_edge_vals`` are the edge fields already cut to this shard's edges.
        """
        def run(block):
            with block.local_scope():
                block.srcdata.update(dict(zip(self.src_names, fetched)))
                block.dstdata.update(dict(zip(self.dst_names, dst_vals)))
                block.edata.update(dict(zip(self.edge_names, shard_edge_vals)))
                if self.reducer is None:
                    written = self.apply_edge_func(block)
                    return {name: block.edata[name] for name in written}
                shard_reduce = getattr(fn, "sum" if self.reducer == "mean" else self.reducer)
                block.update_all(self.func, shard_reduce(self.msg_field, self.out_field))
                return block.dstdata[self.out_field]
        return shard.run(run)

    def apply_edge_func(self, block) -> list[str]:
        """``block.apply_edges(func)``; returns the names of the edge fields it wrote."""
        out_field = getattr(self.func, "out_field", None)
        if out_field is not None:                      # a DGL builtin
            block.apply_edges(self.func)
            return [out_field]
        written: list[str] = []

        def recording(edges):
            result = self.func(edges)
            written.extend(result)
            return result
        block.apply_edges(recording)
        return written

    def degree_view(self, value: torch.Tensor) -> torch.Tensor:
        """In-degrees (clamped at 1) shaped to broadcast against ``value``."""
        deg = self.graph.in_degrees().to(value.dtype).clamp(min=1)
        return deg.reshape((-1,) + (1,) * (value.dim() - 1))

    # -- folding --------------------------------------------------------------------
    def fold(self, state, shard, value, shard_index: int):
        """Fold one shard's aggregate into ``state = (acc, winner)``.

        ``sum``/``mean`` add up; ``max``/``min`` keep the first strictly better shard for
        each element (``winner``), ignoring destinations the shard has no edges into.
        """
        acc, winner = state
        if self.reducer in ("sum", "mean"):
            if acc is None:
                return value, None
            # in place when no graph is recorded: one accumulator, no per-shard copy
            return (acc + value if torch.is_grad_enabled() else acc.add_(value)), None
        if acc is None:
            fill = float("-inf") if self.reducer == "max" else float("inf")
            acc = torch.full_like(value, fill)
            winner = torch.full(value.shape, -1, dtype=torch.int16, device=value.device)
        has = shard.has_in_edges().reshape((-1,) + (1,) * (value.dim() - 1))
        better = value > acc if self.reducer == "max" else value < acc
        take = has & better
        return torch.where(take, value, acc), torch.where(
            take, torch.full_like(winner, shard_index), winner)

    def finish(self, state):
        acc, winner = state
        if self.reducer == "mean":
            deg = self.degree_view(acc)
            return acc / deg if torch.is_grad_enabled() else acc.div_(deg)
        if self.reducer in ("max", "min"):
            return torch.where(winner >= 0, acc, torch.zeros_like(acc))
        return acc

    def aggregate_grad(self, grad_out):
        """Gradient of the folded sum before ``finish``: divided by degree for ``mean``."""
        return grad_out / self.degree_view(grad_out) if self.reducer == "mean" else grad_out

    def shard_grad(self, grad_agg, winner, shard_index: int):
        """The gradient of one shard's aggregate, given :meth:`aggregate_grad`'s result."""
        if self.reducer in ("sum", "mean"):
            return grad_agg
        return grad_agg * (winner == shard_index).to(grad_agg.dtype)


class SequentialAggregation(torch.autograd.Function):
    """``apply(op, *src, *dst, *edge, *params)`` -> aggregate, or tuple of edge outputs."""

    @staticmethod
    def forward(ctx, op: ShardOp, *inputs):
        graph = op.graph
        src_vals, dst_vals, edge_vals = op.split(inputs)
        keep_graph = graph.mode == "sa"
        ctx.op = op
        ctx.keep_graph = keep_graph
        with torch.set_grad_enabled(keep_graph):
            if keep_graph:
                dst_vals = [_leaf(t) for t in dst_vals]
                edge_vals = [_leaf(t) for t in edge_vals]
            state, per_shard, fetched_leaves = (None, None), {}, {}
            for round_, j, fetched in graph.plan.rounds(src_vals, graph.pipeline_depth,
                                                        _FETCH):
                if keep_graph:
                    fetched = _fetched_leaves(fetched, src_vals)
                    fetched_leaves[round_] = fetched
                value = op.shard_compute(graph.shards[j], fetched, dst_vals,
                                         _edge_slices(edge_vals, graph.shards[j]))
                if op.reducer is None:
                    per_shard[j] = value
                else:
                    state = op.fold(state, graph.shards[j], value, j)
                del fetched
            if op.reducer is None:
                outputs = _concat_edge_outputs(op, per_shard, len(graph.shards))
            else:
                outputs = (op.finish(state),)
        if keep_graph:
            ctx.kept = (outputs, dst_vals, edge_vals, fetched_leaves)
        ctx.winner = state[1]
        ctx.save_for_backward(*inputs)
        detached = tuple(o.detach() for o in outputs)
        return detached[0] if op.reducer is not None else detached

    @staticmethod
    def backward(ctx, *grad_outputs):
        op = ctx.op
        graph = op.graph
        inputs = ctx.saved_tensors
        src_vals, dst_vals, edge_vals = op.split(inputs)
        sender = _GradReturn(graph.plan, src_vals, graph.pipeline_depth)
        if ctx.keep_graph:
            dst_grads, edge_grads = _backward_kept(ctx, grad_outputs, sender)
        else:
            dst_grads, edge_grads = _backward_rematerialized(
                ctx, grad_outputs, src_vals, dst_vals, edge_vals, sender)
        grads = sender.totals() + dst_grads + edge_grads + [None] * op.num_params
        ctx.kept = ctx.winner = None
        return (None, *grads)


def _concat_edge_outputs(op: ShardOp, per_shard: dict, num_shards: int):
    names = sorted({name for value in per_shard.values() for name in value})
    op.out_names = names
    return tuple(torch.cat([per_shard[j][name] for j in range(num_shards)])
                 for name in names)


class _GradReturn:
    """Sends fetched-row gradients back round by round and sums what comes back into the
    gradients of the source fields (created on first use). With ``depth`` 0 each exchange
    completes before the next shard is computed; otherwise one stays in flight."""

    def __init__(self, plan, src_vals, depth: int):
        self.plan = plan
        self.depth = depth
        self.src_vals = src_vals
        self.wanted = [t.requires_grad for t in src_vals]
        self.grads = [None] * len(src_vals)
        self.pending = []

    def post(self, round_: int, fetched_grads):
        """Send the gradients of the rows fetched in ``round_``; apply the previous round."""
        self.flush()
        self.pending = [(round_, f, self.plan.return_grad(grad, round_, _GRAD))
                        for f, grad in enumerate(fetched_grads) if self.wanted[f]]
        if self.depth == 0:
            self.flush()

    def flush(self):
        for round_, f, handle in self.pending:
            rows = handle.wait()
            if self.grads[f] is None and self.plan.send_idx[self.plan.peers(round_)[0]] is None:
                self.grads[f] = rows          # the local shard's gradient, full size already
            else:
                if self.grads[f] is None:
                    self.grads[f] = torch.zeros_like(self.src_vals[f])
                self.plan.add_returned(self.grads[f], rows, round_)
        self.pending = []

    def totals(self) -> list:
        """Final gradients of the source fields (``None`` where none is needed)."""
        self.flush()
        return [(g if g is not None else torch.zeros_like(t)) if want else None
                for g, t, want in zip(self.grads, self.src_vals, self.wanted)]


def _edge_slices(edge_vals, shard):
    start, end = shard.edge_slice
    return [v[start:end] for v in edge_vals]


def _backward_kept(ctx, grad_outputs, sender):
    """``sa`` mode: back-propagate through the kept graph, then return row gradients."""
    outputs, dst_leaves, edge_leaves, fetched_leaves = ctx.kept
    _backward_pairs(outputs, grad_outputs)
    for round_ in range(sender.plan.size):
        sender.post(round_, [_grad_or_zeros(leaf) for leaf in fetched_leaves[round_]])
    return [t.grad for t in dst_leaves], [t.grad for t in edge_leaves]


def _backward_rematerialized(ctx, grad_outputs, src_vals, dst_vals, edge_vals, sender):
    """``sar`` mode: refetch and recompute shard by shard."""
    op = ctx.op
    graph = op.graph
    plan = graph.plan
    dst_grads = [torch.zeros_like(t) if t.requires_grad else None for t in dst_vals]
    edge_grads = [torch.zeros_like(t) if t.requires_grad else None for t in edge_vals]
    grad_agg = op.aggregate_grad(grad_outputs[0]) if op.reducer is not None else None
    shortcut = (op.reducer in ("sum", "mean") and is_copy_src(op.func)
                and not dst_vals and not edge_vals)
    rounds = ((r, plan.peers(r)[1], None) for r in range(plan.size)) if shortcut else \
        plan.rounds(src_vals, graph.pipeline_depth, _FETCH)
    for round_, j, fetched in rounds:
        shard = graph.shards[j]
        if shortcut:
            fetched_grads = [copy_u_sum(shard.reverse_block(), grad_agg)]
        else:
            fetched = _fetched_leaves(fetched, src_vals)
            dst_leaves = [_leaf(t) for t in dst_vals]
            edge_leaves = [_leaf(t) for t in _edge_slices(edge_vals, shard)]
            with torch.enable_grad():
                value = op.shard_compute(shard, fetched, dst_leaves, edge_leaves)
                if op.reducer is None:
                    start, end = shard.edge_slice
                    _backward_pairs([value[name] for name in op.out_names],
                                    [g[start:end] if g is not None else None
                                     for g in grad_outputs])
                else:
                    _backward_pairs([value], [op.shard_grad(grad_agg, ctx.winner, j)])
            _accumulate(dst_grads, dst_leaves)
            _accumulate([g[slice(*shard.edge_slice)] if g is not None else None
                         for g in edge_grads], edge_leaves)
            fetched_grads = [_grad_or_zeros(leaf) for leaf in fetched]
            del fetched, dst_leaves, edge_leaves, value
        sender.post(round_, fetched_grads)
        del fetched_grads                  # the exchange holds the buffer until it is sent
    return dst_grads, edge_grads


def _backward_pairs(outputs, grads) -> None:
    """Back-propagate ``grads`` into ``outputs`` that need it (accumulating in leaves)."""
    pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def _accumulate(totals, leaves) -> None:
    """Add each leaf's gradient into the matching total (views of the totals allowed)."""
    for total, leaf in zip(totals, leaves):
        if total is not None and leaf.grad is not None:
            total.add_(leaf.grad)


def _grad_or_zeros(leaf: torch.Tensor) -> torch.Tensor:
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
