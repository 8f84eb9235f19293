"""DistributedBlock: all owned in-edges in one block (one-shot mode).

The block's source nodes are the owned nodes followed by every remote (halo) row, grouped
by owner; its destination nodes are the owned nodes. Before message passing each source
field is completed with its halo rows in one collective exchange, whose backward sends the
halo gradients back in one exchange (and is itself differentiable, so double backward
works). Any DGL reducer works, at the cost of holding every halo row of the layer (and its
autograd graph). Python (UDF) reducers see each node's messages in global edge-id order,
as DGL's mailbox on the unpartitioned graph does, so order-dependent reducers (SAGEConv
``lstm``) are exact too.
"""
from __future__ import annotations

import torch

from ..comm import agree_row_shapes, comm_device, rank, start_known_rows
from .local_blocks import BlockCache, resolve
from .graph_view import ShardedGraphBase
from .kernels import EdgeIndex, narrow
from .message import check_all_edges, check_layer, is_udf, message_inputs
from .options import EngineOptions, OptionsSource, current


class HaloExchange(torch.autograd.Function):
    """``apply(x, block)``: ``(num_owned, ...)`` -> ``(num_owned + num_halo, ...)``.

    Collective in forward and backward: every rank must call it for the same field.
    """

    @staticmethod
    def forward(ctx, owned: torch.Tensor, block: "DistributedBlock"):
        ctx.block = block
        return block._fetch_halo(owned)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return HaloReturn.apply(grad, ctx.block), None


class HaloReturn(torch.autograd.Function):
    """The adjoint of :class:`HaloExchange`: halo-row gradients summed into their owners."""

    @staticmethod
    def forward(ctx, grad: torch.Tensor, block: "DistributedBlock"):
        ctx.block = block
        return block._sum_halo(grad)

    @staticmethod
    def backward(ctx, grad_owned: torch.Tensor):
        return HaloExchange.apply(grad_owned, ctx.block), None


def _written(before: dict, after) -> list[str]:
    """Fields of ``after`` that are new or replaced relative to ``before``."""
    return [k for k in after.keys() if k not in before or after[k] is not before[k]]


def _halo_counts(plan) -> tuple[int, ...]:
    """The halo rows a one-shot block receives from each rank: the plan's receive counts,
    with none from this rank (its rows are the block's first sources)."""
    return tuple(0 if k == plan.me else rows for k, rows in enumerate(plan.num_recv))


class DistributedBlock(ShardedGraphBase):
    """All owned in-edges as one block, with one-shot halo exchange.

    Looks like :class:`GraphShardManager` to ``dgl.nn`` layers (nodes = owned nodes,
    edges = owned edges in shard order) but accepts any reducer. Get it from
    :meth:`GraphShardManager.get_full_partition_graph` or
    ``construct_full_graph(data, mode="one-shot")``.

    **Collectives.** ``update_all``/``apply_edges`` exchange halo rows when the function
    reads source fields; every rank must call them in the same order.

    Of its :class:`~sarlite.core.options.EngineOptions` ``max_collective_rows`` (each halo
    exchange then moves in calls of at most that many rows per pair), ``halo_dtype`` and
    ``kernels`` apply. ``index`` holds the block's edges
    (:class:`~sarlite.core.kernels.EdgeIndex`): sources are the owned nodes, then the halo
    rows.
    """

    mode = "one-shot"

    def __init__(self, index: EdgeIndex, plan, num_src: int,
                 in_degrees, out_degrees, edata, is_block: bool = False,
                 global_counts=None, edge_ids: torch.Tensor | None = None,
                 input_nodes=None, output_nodes=None, *,
                 options: OptionsSource | None = None,
                 relation: tuple[str, str, str] | None = None):
        super().__init__(num_src, index.num_dst, in_degrees, out_degrees,
                         index.dst, edata, is_block, global_counts, relation)
        self.index = index
        self._blocks = BlockCache(index)
        self.plan = plan
        self._edge_ids = edge_ids
        self._sends = None
        self._ordered = None
        self._reversed = None
        self.input_nodes, self.output_nodes = input_nodes, output_nodes
        self._options = options if options is not None else EngineOptions("one-shot")
        self.engine_options()                   # check now, not at the first layer

    def engine_options(self) -> EngineOptions:
        """The options the next exchange runs with (asked of the options callable, when
        the graph was built with one, at every call)."""
        return current(self._options)

    @classmethod
    def from_shards(cls, shards, plan, num_src: int, num_dst: int, in_degrees,
                    out_degrees, edata, is_block: bool = False, global_counts=None,
                    edge_ids=None, input_nodes=None, output_nodes=None, *,
                    options: OptionsSource | None = None,
                    relation: tuple[str, str, str] | None = None) -> "DistributedBlock":
        """Merge graph shards (see :mod:`sarlite.core.shards`) into one block."""
        me = rank()
        halo = _halo_counts(plan)
        offsets = torch.tensor([0, *halo[:-1]]).cumsum(0).tolist()
        bounds = (num_src + sum(halo), num_dst, sum(s.num_edges for s in shards))
        src, dst = [], []
        for shard, offset in zip(shards, offsets):
            compact = narrow(shard.index.src, *bounds)
            # the local shard already indexes this rank's source tensor
            src.append(compact if shard.src_part == me else compact + (num_src + offset))
            dst.append(narrow(shard.index.dst, *bounds))
        index = EdgeIndex(torch.cat(src).to(in_degrees.device),
                          torch.cat(dst).to(in_degrees.device), bounds[0], num_dst)
        return cls(index, plan, num_src, in_degrees, out_degrees, edata, is_block,
                   global_counts, edge_ids, input_nodes, output_nodes, options=options,
                   relation=relation)

    @classmethod
    def from_manager(cls, manager) -> "DistributedBlock":
        """A :class:`GraphShardManager`'s shards as one block, sharing its data."""
        merged = cls.from_shards(
            manager.shards, manager.plan, manager.num_src_nodes(), manager.num_dst_nodes(),
            manager.in_degrees(), manager.out_degrees(), manager.edata, manager.is_block,
            manager._global_counts, manager._edge_ids, manager.input_nodes,
            manager.output_nodes, options=manager._options, relation=manager.relation)
        merged.srcdata.update(manager.srcdata)
        merged.dstdata.update(manager.dstdata)
        return merged

    # -- the halo exchange -------------------------------------------------------------
    @property
    def halo(self) -> tuple[int, ...]:
        """Rows received from each rank, in rank order (0 for this rank)."""
        return _halo_counts(self.plan)

    def _send_index(self) -> torch.Tensor:
        """The owned rows other ranks read, grouped by reader in rank order (as many per
        reader as ``plan.counts[me]`` says); made once."""
        if self._sends is None:
            rows = [idx for idx in self.plan.send_idx if idx is not None]
            self._sends = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64,
                                                                   device=self.device)
        return self._sends

    def _fetch_halo(self, owned: torch.Tensor) -> torch.Tensor:
        """Owned rows followed by every halo row (collective, not differentiable).

        The rows other ranks read are gathered once, in the order they are sent, and the
        halo rows are received straight into the result; this rank's own rows are copied
        in while they travel."""
        num_owned = owned.shape[0]
        wire = self._wire(owned)
        sending = owned[self._send_index()].to(wire)
        out = owned.new_empty((num_owned + sum(self.halo),) + tuple(owned.shape[1:]))
        direct = wire == owned.dtype and out.device == comm_device()
        pending = start_known_rows(
            list(sending.split(self.plan.counts[self.plan.me])), self.halo,
            kind="oneshot_fetch",
            max_rows=self.engine_options().max_collective_rows,
            out=out[num_owned:] if direct else None)
        out[:num_owned] = owned
        received = pending.wait()
        if not direct:
            out[num_owned:] = received
        return out

    def _wire(self, rows: torch.Tensor) -> torch.dtype:
        """The dtype ``rows`` travel in: the options' ``halo_dtype`` for a wider floating
        type, else their own."""
        wire = self.engine_options().halo_dtype
        return rows.dtype if wire is None or not rows.is_floating_point() else wire

    def _sum_halo(self, grad: torch.Tensor) -> torch.Tensor:
        """Owned-row gradients plus the halo-row gradients other ranks send back.

        The halo rows go back as they lie in ``grad`` (grouped by owner), and the owned
        rows are copied while they travel."""
        me, num_owned = self.plan.me, self.num_src_nodes()
        counts = self.plan.counts[me]
        halo = grad[num_owned:].to(self._wire(grad))
        pending = start_known_rows(list(halo.split(self.halo)), counts, kind="oneshot_grad",
                                   max_rows=self.engine_options().max_collective_rows)
        grad_owned = grad[:num_owned].clone()
        received = pending.wait()
        for k, rows in enumerate(received.split(counts)):
            if k != me and rows.shape[0]:
                grad_owned.index_add_(0, self.plan.send_idx[k], rows.to(grad.dtype))
        return grad_owned

    def sum_into_owners(self, rows: torch.Tensor) -> torch.Tensor:
        """``(num_owned + num_halo, ...)`` per-source rows -> ``(num_owned, ...)``: each halo
        row is added into its owner's row, differentiably. Collective."""
        return HaloReturn.apply(rows, self)

    def kernels(self) -> str:
        """The kernels the next call runs on (``"dgl"`` or ``"torch"``)."""
        return resolve(self.engine_options().kernels, self.device)

    def block(self):
        """The block that runs the next call (see :meth:`kernels`), built once per kind."""
        return self._blocks.get(self.kernels())

    def reversed_block(self):
        """The block with every edge reversed (owned nodes to owned-then-halo rows), on
        the kernels of :meth:`kernels`, built once."""
        if self._reversed is None:
            self._reversed = BlockCache(self.index.reversed())
        return self._reversed.get(self.kernels())

    def reverse(self):
        """The reversed graph (see :mod:`sarlite.core.reverse`), as ``dgl.reverse`` gives."""
        from .reverse import ReversedGraph
        if self.is_block:
            raise NotImplementedError("reversing a message-flow graph (block) is not "
                                      "supported, as in DGL")
        return ReversedGraph(self)

    def _to(self, device) -> None:
        self.index = self.index.to(device)
        self._blocks = BlockCache(self.index)
        self.plan = self.plan.to(device)
        self._ordered = self._reversed = self._sends = None
        if self.input_nodes is not None:
            self.input_nodes = self.input_nodes.to(device)
            self.output_nodes = self.output_nodes.to(device)

    # -- message passing ---------------------------------------------------------------
    def _edge_order(self) -> tuple[BlockCache, torch.Tensor]:
        """The blocks with the edges in global edge-id order, and that permutation."""
        if self._ordered is None:
            if self._edge_ids is None:
                raise NotImplementedError("a Python reducer needs the global edge ids: "
                                          "build the graph with sarlite.construct_full_graph "
                                          "or sarlite.construct_mfgs")
            perm = torch.argsort(self._edge_ids.to(self.device))
            self._ordered = (BlockCache(self.index.select(perm)), perm)
        return self._ordered

    def _prepare(self, func, scope, kind: str, perm=None):
        src, dst, edge = message_inputs(func, self.srcdata.keys(), self.dstdata.keys(),
                                        self.edata.keys())
        # the exchanges below carry no header: agree on the rows' width first (one small
        # collective), so that a rank passing another width gets an error, not a gloo abort
        agree_row_shapes(kind, {n: self.srcdata[n] for n in src})
        scope.srcdata.update({n: HaloExchange.apply(self.srcdata[n], self) for n in src})
        scope.dstdata.update({n: self.dstdata[n] for n in dst})
        scope.edata.update({n: self.edata[n] if perm is None else self.edata[n][perm]
                            for n in edge})

    def update_all(self, message_func, reduce_func, apply_node_func=None, etype=None):
        """Message passing over all owned edges in one step; any DGL reducer. Collective.

        A Python reducer receives each node's messages in global edge-id order, as on the
        unpartitioned graph.
        """
        for func in (message_func, reduce_func):
            check_layer(func, len(self.halo))
        blocks, perm = self._edge_order() if is_udf(reduce_func) else (self._blocks, None)
        kernels = self.kernels()
        block = blocks.get(kernels)
        with block.local_scope():
            self._prepare(message_func, block, "update_all", perm)
            before = dict(block.dstdata)
            blocks.update_all(kernels, message_func, reduce_func, apply_node_func)
            for name in _written(before, block.dstdata):
                self.dstdata[name] = block.dstdata[name]

    def apply_edges(self, func, edges="__ALL__", etype=None):
        """Per-edge values on all owned edges in one step; results land in ``edata``."""
        check_all_edges(edges)
        check_layer(func, len(self.halo))
        block = self.block()
        with block.local_scope():
            self._prepare(func, block, "apply_edges")
            before = dict(block.edata)
            block.apply_edges(func)
            for name in _written(before, block.edata):
                self.edata[name] = block.edata[name]
