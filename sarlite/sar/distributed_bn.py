"""IntelLabs SAR's ``DistributedBN1D`` and its ``MeanOp``/``VarOp``, on sarlite's
:class:`~sarlite.DistributedBatchNorm1d` and differentiable all-reduce."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn import init

from ..comm import all_reduce_autograd
from ..core import DistributedBatchNorm1d


class DistributedBN1D(DistributedBatchNorm1d):
    """Batch normalisation of a ``(num_nodes, n_feats)`` tensor (SAR's signature).

    With ``distributed=True`` the mean and (biased) variance cover the rows of every
    worker, so outputs and gradients equal ``torch.nn.BatchNorm1d`` (training mode) on the
    concatenated rows; it is then a collective. With ``distributed=False`` they cover this
    worker's rows only, again with BatchNorm1d's formula (SAR used the unbiased standard
    deviation without ``eps`` there). ``distributed=None`` means "a process group exists".
    As in SAR there are no running statistics: evaluation also normalises with the
    statistics of the rows it is given.

    Raises ``ValueError`` for input that is not ``(num_nodes, n_feats)``.
    """

    def __init__(self, n_feats: int, eps: float = 1.0e-5, affine: bool = True,
                 distributed: bool | None = None):
        super().__init__(n_feats, eps=eps, affine=affine, track_running_stats=False)
        self.n_feats = n_feats
        if not affine:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.distributed = dist.is_initialized() if distributed is None else distributed

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            return super().forward(inp)
        if inp.dim() != 2 or inp.shape[1] != self.n_feats:
            raise ValueError(f"expected input of shape (num_nodes, {self.n_feats}), got "
                             f"{tuple(inp.shape)}")
        return F.batch_norm(inp, None, None, self.weight, self.bias, True, 0.0, self.eps)

    def reset_parameters(self) -> None:
        """Weight to ones, bias to zeros (when ``affine``)."""
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)


def _global_count(x: torch.Tensor) -> torch.Tensor:
    return all_reduce_autograd(torch.tensor([float(x.shape[0])], device=x.device),
                               "sar.batchnorm").to(x.dtype)


class MeanOp:
    """``MeanOp.apply(x)``: the ``(C,)`` mean of ``x`` ``(N, C)`` over the rows of all
    workers; differentiable. Collective (forward and backward)."""

    @staticmethod
    def apply(x: torch.Tensor) -> torch.Tensor:
        return all_reduce_autograd(x.sum(0), "sar.batchnorm") / _global_count(x)


class VarOp:
    """``VarOp.apply(x)``: the ``(C,)`` mean of ``x ** 2`` over the rows of all workers
    (SAR's name: the variance is ``VarOp.apply(x) - MeanOp.apply(x) ** 2``);
    differentiable. Collective (forward and backward)."""

    @staticmethod
    def apply(x: torch.Tensor) -> torch.Tensor:
        return all_reduce_autograd((x ** 2).sum(0), "sar.batchnorm") / _global_count(x)


mean_op = MeanOp.apply
var_op = VarOp.apply
