"""DistributedBlock: all owned in-edges in one DGL block (one-shot mode).

The block's source nodes are the owned nodes followed by every remote (halo) row, grouped
by owner; its destination nodes are the owned nodes. Before message passing each source
field is completed with its halo rows in one collective exchange, whose backward sends the
halo gradients back in one exchange. Any DGL reducer works, at the cost of holding every
halo row of the layer (and its autograd graph).
"""
from __future__ import annotations

import dgl
import torch

from ..comm import all_to_all_rows, rank
from .graph_view import DistributedGraph
from .message import message_inputs


class HaloExchange(torch.autograd.Function):
    """``apply(x, block)``: ``(num_owned, ...)`` -> ``(num_owned + num_halo, ...)``.

    Collective in forward and backward: every rank must call it for the same field.
    """

    @staticmethod
    def forward(ctx, owned: torch.Tensor, block: "DistributedBlock"):
        ctx.block = block
        me = rank()
        chunks = [owned[idx] if k != me else owned[:0]
                  for k, idx in enumerate(block.plan.send_idx)]
        received = all_to_all_rows(chunks, kind="oneshot_fetch")
        return torch.cat([owned] + [r for k, r in enumerate(received) if k != me])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        block = ctx.block
        me = rank()
        num_owned = block.num_src_nodes()
        pieces = iter(grad[num_owned:].split(block.halo_sizes()))
        chunks = [next(pieces) if k != me else grad[:0] for k in range(len(block.halo))]
        received = all_to_all_rows(chunks, kind="oneshot_grad")
        grad_owned = grad[:num_owned].clone()
        for k, rows in enumerate(received):
            if k != me:
                grad_owned.index_add_(0, block.plan.send_idx[k], rows)
        return grad_owned, None


def _written(before: dict, after) -> list[str]:
    """Fields of ``after`` that are new or replaced relative to ``before``."""
    return [k for k in after.keys() if k not in before or after[k] is not before[k]]


class DistributedBlock(DistributedGraph):
    """All owned in-edges as one DGL block, with one-shot halo exchange.

    Looks like :class:`GraphShardManager` to ``dgl.nn`` layers (nodes = owned nodes,
    edges = owned edges in shard order) but accepts any reducer. Get it from
    :meth:`GraphShardManager.get_full_partition_graph` or
    ``construct_full_graph(data, mode="one-shot")``.

    **Collectives.** ``update_all``/``apply_edges`` exchange halo rows when the function
    reads source fields; every rank must call them in the same order.
    """

    mode = "one-shot"

    def __init__(self, block: dgl.DGLGraph, plan, halo: list[int], num_src: int,
                 in_degrees, out_degrees, edata, is_block: bool = False):
        super().__init__(num_src, block.num_dst_nodes(), in_degrees, out_degrees,
                         block.edges()[1], edata, is_block)
        self.block = block
        self.plan = plan
        self.halo = halo

    @classmethod
    def from_shards(cls, manager) -> "DistributedBlock":
        """Merge a :class:`GraphShardManager`'s shards into one block."""
        me, num_src = rank(), manager.num_src_nodes()
        halo = [0 if s.src_part == me else s.rows.numel() for s in manager.shards]
        offsets = torch.tensor([0] + halo[:-1]).cumsum(0).tolist()
        src, dst = [], []
        for shard, offset in zip(manager.shards, offsets):
            compact, local_dst = shard.block.edges()
            # the local shard already indexes this rank's source tensor
            src.append(compact if shard.src_part == me else num_src + offset + compact)
            dst.append(local_dst)
        block = dgl.create_block((torch.cat(src), torch.cat(dst)),
                                 num_src_nodes=num_src + sum(halo),
                                 num_dst_nodes=manager.num_dst_nodes(), device=manager.device)
        merged = cls(block, manager.plan, halo, num_src, manager.in_degrees(),
                     manager.out_degrees(), manager.edata, manager.is_block)
        merged.srcdata.update(manager.srcdata)
        merged.dstdata.update(manager.dstdata)
        return merged

    def halo_sizes(self) -> list[int]:
        """Halo rows received from each other rank, in rank order (self excluded)."""
        return [n for k, n in enumerate(self.halo) if k != rank()]

    def _to(self, device) -> None:
        self.block = self.block.to(device)
        self.plan = self.plan.to(device)

    def _prepare(self, func, scope):
        src, dst, edge = message_inputs(func, self.srcdata.keys(), self.dstdata.keys(),
                                        self.edata.keys())
        scope.srcdata.update({n: HaloExchange.apply(self.srcdata[n], self) for n in src})
        scope.dstdata.update({n: self.dstdata[n] for n in dst})
        scope.edata.update({n: self.edata[n] for n in edge})

    def update_all(self, message_func, reduce_func, apply_node_func=None, etype=None):
        """Message passing over all owned edges in one step; any DGL reducer. Collective."""
        with self.block.local_scope():
            self._prepare(message_func, self.block)
            before = dict(self.block.dstdata)
            self.block.update_all(message_func, reduce_func, apply_node_func)
            for name in _written(before, self.block.dstdata):
                self.dstdata[name] = self.block.dstdata[name]

    def apply_edges(self, func, edges="__ALL__", etype=None):
        """Per-edge values on all owned edges in one step; results land in ``edata``."""
        if not isinstance(edges, str) or edges != "__ALL__":
            raise NotImplementedError("apply_edges on a subset of edges is not supported")
        with self.block.local_scope():
            self._prepare(func, self.block)
            before = dict(self.block.edata)
            self.block.apply_edges(func)
            for name in _written(before, self.block.edata):
                self.edata[name] = self.block.edata[name]
