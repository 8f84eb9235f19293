"""Batch normalisation over all nodes of all workers."""
from __future__ import annotations

import torch
from torch import nn

from ..comm import all_reduce_autograd


def _global_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks; its gradient is the sum of the gradients over ranks (collective)."""
    return all_reduce_autograd(tensor, "batchnorm")


class DistributedBatchNorm1d(nn.Module):
    r"""``BatchNorm1d`` whose statistics cover the nodes of every worker.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \gamma + \beta

    with mean and (biased) variance over all nodes of all ranks, computed in two passes
    (mean, then squared deviations) through differentiable all-reduces, so outputs and
    gradients equal ``torch.nn.BatchNorm1d`` on the unpartitioned graph. Running statistics
    use the unbiased variance, as PyTorch does; the state dict is interchangeable with
    ``torch.nn.BatchNorm1d``'s.

    With ``ntypes``, it normalises the ``{ntype: tensor}`` outputs of ``HeteroGraphConv``:
    each type with the statistics of that type's nodes on every worker and its own
    :math:`\gamma` and :math:`\beta` (``norm.norms[ntype]``, one such module per type).

    Parameters
    ----------
    num_features : int
        Width ``C`` of the input ``(num_nodes, C)`` (of every type's input).
    eps, momentum, affine, track_running_stats
        As in ``torch.nn.BatchNorm1d``.
    ntypes : list of str, optional
        Keyword-only: the node types to normalise, for inputs
        ``{ntype: (num_nodes of the type, C)}`` (``None``, the default: one tensor).

    Notes
    -----
    **Collective** in training mode (three small all-reduces forward, two backward, all
    named ``"batchnorm"``, per type): every rank calls it, also with zero rows, and blocks
    until all have. Types are normalised in the order of ``ntypes`` (not of the input
    dict), so every rank passes the same types; a type absent from the input is left out,
    and must be absent on every rank. Evaluation with running statistics is local. A
    failed all-reduce (a rank died) raises :class:`~sarlite.comm.CollectiveError`.

    Example
    -------
    >>> bn = sarlite.DistributedBatchNorm1d(64)
    >>> h = bn(conv(g, x))          # (num_owned_nodes, 64)
    >>> norm = sarlite.DistributedBatchNorm1d(64, ntypes=g.ntypes)
    >>> h = norm(hetero_conv(g, x))    # {ntype: (owned nodes of ntype, 64)}
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *, ntypes=None):
        super().__init__()
        if num_features < 1:
            raise ValueError(f"num_features must be positive, got {num_features}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.ntypes = None if ntypes is None else list(ntypes)
        if self.ntypes is not None:
            self.norms = nn.ModuleDict({t: DistributedBatchNorm1d(
                num_features, eps, momentum, affine, track_running_stats)
                for t in self.ntypes})
            return
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x):
        if self.ntypes is not None:
            return self._typed(x)
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.num_features:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"expected input of shape (num_nodes, {self.num_features}), "
                             f"got {shape} (inputs by node type need ntypes=)")
        if self.training or not self.track_running_stats:
            count = _global_sum(torch.tensor([float(x.shape[0])], device=x.device))
            mean = _global_sum(x.sum(0)) / count
            var = _global_sum(((x - mean) ** 2).sum(0)) / count
            if self.training and self.track_running_stats:
                with torch.no_grad():
                    unbiased = var * count / (count - 1).clamp(min=1)
                    self.running_mean.lerp_(mean, self.momentum)
                    self.running_var.lerp_(unbiased, self.momentum)
                    self.num_batches_tracked += 1
        else:
            mean, var = self.running_mean, self.running_var
        out = (x - mean) / torch.sqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out

    def _typed(self, x) -> dict:
        if not isinstance(x, dict):
            raise ValueError(f"DistributedBatchNorm1d(ntypes={self.ntypes}) takes "
                             f"{{ntype: tensor}}, got {type(x).__name__}")
        unknown = sorted(set(x) - set(self.ntypes))
        if unknown:
            raise ValueError(f"DistributedBatchNorm1d: node types {unknown} are not among "
                             f"{self.ntypes}")
        return {t: self.norms[t](x[t]) for t in self.ntypes if t in x}
