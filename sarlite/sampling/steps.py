"""Training steps on the distributed loaders' batches, empty ones included.

Every rank gets the same number of batches from sarlite's loaders; a rank that ran out of
seeds gets empty ones and must still run the step, because its feature pulls and the
gradient all-reduce are collectives. On an empty batch the usual mean loss is ``nan`` (the
mean of nothing) and a DDP model may see parameters without gradients. :func:`mean_loss`
is the loss to use instead; :func:`is_empty_batch` tells a rank that its batch is empty.
"""
from __future__ import annotations

import dgl
import torch

from ..comm import all_reduce, world_size

GRAD_REDUCTIONS = ("mean", "sum")


def is_empty_batch(batch) -> bool:
    """Whether a loader's batch has nothing to train on. Local, no communication.

    ``batch`` is what :class:`~sarlite.sampling.DistNodeDataLoader` yields
    (``(input_nodes, output_nodes, blocks)``: empty when there are no output nodes),
    what :class:`~sarlite.sampling.DistEdgeDataLoader` yields (``(input_nodes,
    pair_graph, [neg_pair_graph,] blocks)``: empty when the pair graph has no edges), a
    list of blocks (no destination nodes in the last), a block (no destination nodes), a
    graph (no edges), a tensor (no elements) or a :class:`DistDataLoader` batch list (no
    items).

    An empty batch still needs its training step on this rank (see :func:`mean_loss`);
    use this to leave the rank out of logged metrics, e.g. a printed accuracy.

    Raises ``TypeError`` for anything else.
    """
    if isinstance(batch, torch.Tensor):
        return batch.numel() == 0
    if isinstance(batch, dgl.DGLGraph):
        return (batch.num_dst_nodes() if batch.is_block else batch.num_edges()) == 0
    if isinstance(batch, tuple) and len(batch) in (3, 4) and isinstance(batch[-1], list):
        return is_empty_batch(batch[1])
    if isinstance(batch, (list, tuple)):
        if batch and all(isinstance(item, dgl.DGLGraph) for item in batch):
            return is_empty_batch(batch[-1])
        return len(batch) == 0
    raise TypeError(f"is_empty_batch takes a loader's batch, blocks, a graph or a tensor, "
                    f"got {type(batch).__name__}")


def mean_loss(losses: torch.Tensor, model: torch.nn.Module | None = None, *,
              grad_reduction: str = "mean") -> torch.Tensor:
    """The mean of per-element losses over **every rank's batch**, ready for
    ``backward()`` on every rank, empty batches included.

    With ``N`` the number of elements of ``losses`` summed over ranks and ``W`` the world
    size, it returns ``losses.sum() * W / N`` (``grad_reduction="mean"``, for gradients
    averaged over ranks: ``DistributedDataParallel``) or ``losses.sum() / N``
    (``grad_reduction="sum"``, for gradients summed over ranks:
    :func:`sarlite.all_reduce_gradients`). Either way the reduced gradient is exactly the
    gradient of the mean loss over all ranks' elements, whatever the batch sizes (the
    usual per-rank mean under DDP weighs a half-full batch like a full one). The value
    is this rank's local mean when every rank has the same number of elements, 0 on a
    rank with none (never ``nan``), and 0 everywhere when no rank has any.

    Parameters
    ----------
    losses:
        Per-element losses of this rank's batch, any shape (e.g.
        ``F.cross_entropy(pred, labels, reduction="none")``); every element counts once.
        May be empty.
    model:
        The model being trained (a ``DistributedDataParallel`` wrapper too). When given,
        the result is also connected to every parameter that requires a gradient (with a
        zero contribution), so each parameter gets a gradient on every rank and DDP's
        all-reduce runs even when an empty batch skipped a layer's computation.
    grad_reduction:
        ``"mean"`` (default) or ``"sum"``, as above.

    Collective and blocking (one all-reduce of the element count): every rank calls it
    once per step, in the same order.

    Raises
    ------
    ValueError
        An unknown ``grad_reduction``.
    CollectiveError
        A rank failed or did not call it in time.
    """
    if grad_reduction not in GRAD_REDUCTIONS:
        raise ValueError(f"grad_reduction must be one of {GRAD_REDUCTIONS}, got "
                         f"{grad_reduction!r}")
    count = all_reduce(torch.tensor([float(losses.numel())], dtype=torch.float64), "sum",
                       kind="mean_loss")
    scale = (world_size() if grad_reduction == "mean" else 1) / max(float(count[0]), 1.0)
    loss = losses.sum() * scale
    if model is not None:
        for param in model.parameters():
            if param.requires_grad:
                loss = loss + param.reshape(-1)[:0].sum().to(loss.dtype)
    return loss
