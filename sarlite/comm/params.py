"""Keep model replicas identical: broadcast parameters, sum gradients.

Both functions are collectives over the default group: every rank calls them with a
module of the same structure. Tensors are packed into one flat buffer per dtype, so each
is a single collective per dtype.
"""
from __future__ import annotations

from collections import defaultdict

import torch

from .collectives import all_reduce, broadcast
from .group import world_size


def _by_dtype(tensors):
    groups = defaultdict(list)
    for tensor in tensors:
        groups[tensor.dtype].append(tensor)
    return [groups[dtype] for dtype in sorted(groups, key=str)]


def sync_params(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers into ``module`` on every rank (in place).

    Collective, blocking: every rank calls it with a module of the same structure.

    Raises
    ------
    CollectiveError
        The broadcast failed (a rank died, or did not call it within the timeout).
    """
    if world_size() == 1:
        return
    for group in _by_dtype(list(module.parameters()) + list(module.buffers())):
        flat = broadcast(torch.cat([t.detach().reshape(-1) for t in group]), src=0,
                         kind="sync_params")
        offset = 0
        with torch.no_grad():
            for t in group:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()


def all_reduce_gradients(module: torch.nn.Module) -> None:
    """Replace every parameter's gradient by its sum over ranks.

    A parameter with no gradient on some rank counts as zero there; it keeps ``grad=None``
    only if no rank has a gradient for it. Collective, blocking: every rank calls it with a
    module of the same structure.

    Raises
    ------
    CollectiveError
        The all-reduce failed (a rank died, or did not call it within the timeout).
    """
    if world_size() == 1:
        return
    params = [p for p in module.parameters() if p.requires_grad]
    for group in _by_dtype(params):
        has_grad = torch.tensor([p.grad is not None for p in group], dtype=group[0].dtype)
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in group] + [has_grad.to(group[0].device)])
        flat = all_reduce(flat, "sum", kind="all_reduce_gradients")
        flags = flat[-len(group):]
        offset = 0
        for p, flag in zip(group, flags.tolist()):
            if flag > 0:
                p.grad = flat[offset:offset + p.numel()].view_as(p).to(p.device).clone()
            offset += p.numel()
