"""``dgl.reverse`` of a sarlite graph, for aggregating along edges backwards.

``EdgeWeightNorm('both')`` (and through it ``edge_weight`` on SGConv, TAGConv, APPNPConv and
GCN2Conv) reverses the graph and sums each edge's weight at its *source* node. A source's
out-edges live on every worker, so each worker sums what its own edges give to each source
row it holds (owned or halo), and the halo sums go back to their owners in one exchange
(the adjoint of the one-shot halo fetch, differentiable both ways).

:class:`ReversedGraph` supports what that needs: ``edata``/``srcdata``/``dstdata``,
``local_scope`` and ``update_all`` with ``copy_e``/``copy_u`` and ``sum``/``mean``.
"""
from __future__ import annotations

import dgl.function as fn
import torch
from dgl.function.message import CopyMessageFunction

from .graph_view import restoring
from .message import SRC, reducer_name


class ReversedGraph:
    """The reverse of a :class:`DistributedBlock`'s edges: from its destination (owned)
    nodes to its source nodes (owned, then halo), with results summed at the owners.

    Its source nodes are the original's destination nodes; its destination nodes are the
    original's source (owned) nodes. Edge ``i`` is the original's edge ``i``.
    """

    def __init__(self, block):
        self._block = block
        self._reversed = block.reversed_block()
        self.srcdata: dict[str, torch.Tensor] = {}
        self.dstdata: dict[str, torch.Tensor] = {}
        self.edata: dict[str, torch.Tensor] = {}

    @property
    def is_block(self) -> bool:
        return False

    @property
    def device(self) -> torch.device:
        return self._block.device

    def num_edges(self, etype=None) -> int:
        return self._reversed.num_edges()

    def in_degrees(self, v=None, etype=None) -> torch.Tensor:
        """Global in-degree of the reversed graph: the original's out-degree."""
        return self._block.out_degrees(v)

    def out_degrees(self, u=None, etype=None) -> torch.Tensor:
        return self._block.in_degrees(u)

    def local_scope(self):
        return restoring([self.srcdata, self.dstdata, self.edata])

    def update_all(self, message_func, reduce_func, apply_node_func=None, etype=None):
        """``copy_e``/``copy_u`` messages, ``sum``/``mean`` at the sources. Collective.

        Raises
        ------
        NotImplementedError
            Any other message or reducer, or an ``apply_node_func``.
        """
        name = reducer_name(reduce_func)
        if (not isinstance(message_func, CopyMessageFunction) or name not in ("sum", "mean")
                or apply_node_func is not None):
            raise NotImplementedError(
                "a reversed sarlite graph supports update_all(copy_e or copy_u, sum or "
                "mean) only (what EdgeWeightNorm needs)")
        field = message_func.in_field
        with self._reversed.local_scope():
            if message_func.target == SRC:
                self._reversed.srcdata[field] = self.srcdata[field]
            else:
                self._reversed.edata[field] = self.edata[field]
            self._reversed.update_all(message_func, fn.sum(message_func.out_field, "_sum"))
            partial = self._reversed.dstdata["_sum"]          # owned rows, then halo rows
        total = self._block.sum_into_owners(partial)
        if name == "mean":
            deg = self.in_degrees().to(total.dtype).clamp(min=1)
            total = total / deg.reshape((-1,) + (1,) * (total.dim() - 1))
        self.dstdata[reduce_func.out_field] = total
