"""Which kernels a shard's message passing runs on, and the local blocks that run it.

A *block* is DGL's: a bipartite graph of source and destination nodes. A *local block*
is one rank's block of its own rows, run by one set of kernels; a
:class:`~sarlite.core.distributed_block.DistributedBlock` is a block whose sources
include other ranks' rows, which it fetches.

The engine holds every shard, chunk and one-shot block as an
:class:`~sarlite.core.kernels.EdgeIndex` (torch index tensors) and builds the object that
``dgl.nn``'s calls run on from it, once per kind:

* ``"dgl"``: a ``dgl.create_block`` block, DGL's own kernels (PyPI's DGL runs them on CPU
  only);
* ``"torch"``: a :class:`~sarlite.core.torch_block.TorchBlock`, the kernels of
  :mod:`sarlite.core.kernels`, on any device torch runs on.

``None`` (``"auto"``) picks ``"dgl"`` for a graph on the CPU and ``"torch"`` elsewhere.
"""
from __future__ import annotations

import torch

from .kernels import EdgeIndex, copy_sum_back
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
        if self._reversed is None:      # once: the rows by source, kept with the forward
            block._graph.create_formats_()          # graph, and its reversed view
            self._reversed = block._graph.reverse()
        return gspmm(self._reversed, "copy_lhs", "sum", grad, None)
