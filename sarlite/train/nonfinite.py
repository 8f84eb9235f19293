"""Stopping at the first inf or nan: in the input features, the training loss or a gradient.

``train.allow_nonfinite`` turns these checks off.
"""
from __future__ import annotations

import math

import torch

ALLOW = "set train.allow_nonfinite=true to train anyway"
CHUNK_ROWS = 1 << 16          # rows checked at once: bounds the temporary masks


class NonFiniteError(ValueError):
    """Input features, the loss or a gradient hold inf or nan; the message says where."""


def _count(values: torch.Tensor) -> tuple[int, int, int, int | None]:
    """``(non-finite values, of which nan, rows holding one, first such row)``."""
    bad = nan = rows = 0
    first = None
    for start in range(0, len(values), CHUNK_ROWS):
        chunk = values[start:start + CHUNK_ROWS]
        chunk = chunk.flatten(1) if chunk.dim() > 1 else chunk[:, None]
        mask = ~torch.isfinite(chunk)
        if not mask.any():
            continue
        in_rows = mask.any(1)
        bad += int(mask.sum())
        nan += int(torch.isnan(chunk).sum())
        rows += int(in_rows.sum())
        if first is None:
            first = start + int(in_rows.nonzero()[0, 0])
    return bad, nan, rows, first


def check_features(values: torch.Tensor, field: str, rank: int, first_id: int) -> None:
    """Refuse a node field of owned rows that holds inf or nan.

    Parameters
    ----------
    values:
        ``(num_owned, ...)`` rows of this rank's owned nodes.
    field:
        The field's name, for the message.
    rank:
        This rank, for the message.
    first_id:
        Global node id (in the partitioned graph's numbering) of the first owned row.

    Raises
    ------
    NonFiniteError
        E.g. "rank 1: node field 'feat' holds 3 non-finite values (1 nan, 2 inf) in 1 of
        5000 owned rows (the first at node 1234 of the partitioned graph, local row 34);
        clean the dataset, or set train.allow_nonfinite=true to train anyway".
    """
    if not values.is_floating_point():
        return
    bad, nan, rows, first = _count(values)
    if bad:
        raise NonFiniteError(
            f"rank {rank}: node field {field!r} holds {bad} non-finite values ({nan} nan, "
            f"{bad - nan} inf) in {rows} of {len(values)} owned rows (the first at node "
            f"{first_id + first} of the partitioned graph, local row {first}); clean the "
            f"dataset, or {ALLOW}")


def _where(epoch: int, step: int | None) -> str:
    return f"epoch {epoch}" if step is None else f"epoch {epoch}, step {step}"


def check_step(loss: float, model: torch.nn.Module, epoch: int,
               step: int | None = None) -> None:
    """Refuse a training step whose loss or a gradient is inf or nan, before the optimizer
    applies it. Call it with the loss summed over ranks and the gradients after
    ``comm.all_reduce_gradients``: every rank then raises the same error.

    Raises
    ------
    NonFiniteError
        The loss first, else the first parameter (in ``named_parameters`` order) whose
        gradient holds inf or nan; the message names the epoch (and the step of a sampled
        epoch).
    """
    advice = f"stopped before the optimizer step; lower optim.lr, check the data, or {ALLOW}"
    if not math.isfinite(loss):
        raise NonFiniteError(f"{_where(epoch, step)}: the training loss is {loss}; {advice}")
    named = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    if not named or bool(torch.stack([torch.isfinite(g).all() for _, g in named]).all()):
        return                                       # one host sync in the usual case
    name = next(name for name, g in named if not bool(torch.isfinite(g).all()))
    raise NonFiniteError(f"{_where(epoch, step)}: the gradient of parameter {name!r} holds "
                         f"inf or nan (summed over ranks); {advice}")
