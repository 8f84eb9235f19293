"""Send ids to the ranks that own them and bring each owner's answer back.

Every distributed graph query (sampling, subgraphs) has the same shape: a rank holds ids
of nodes other ranks own, each owner answers from its local partition, and the answers
travel back. :func:`ask_owners` is that round trip, built on two ``all_to_all_rows``.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..comm import all_to_all_rows, world_size


def ask_owners(ids: torch.Tensor, owners: torch.Tensor,
               serve: Callable[[list[torch.Tensor]], list[torch.Tensor]],
               kind: str) -> list[torch.Tensor]:
    """Send ``ids[i]`` to rank ``owners[i]``, let every rank answer, return the answers.

    Parameters
    ----------
    ids:
        ``(n,)`` int64 ids; may be empty.
    owners:
        ``(n,)`` rank that owns each id, in ``[0, world_size)``.
    serve:
        Called once on every rank with ``requests``: ``requests[k]`` holds the ids rank
        ``k`` sent here (``(n_k,)`` int64, in the order ``k`` listed them). It returns one
        answer per rank: ``answers[k]`` is a tensor of rows for rank ``k`` (any number of
        rows; the trailing shape and dtype must be the same on every rank). ``serve`` may
        itself run collectives, since every rank calls it at the same point.
    kind:
        Name under which the traffic is counted.

    Returns
    -------
    list[torch.Tensor]
        ``result[j]`` is rank ``j``'s answer to this rank.

    Collective and blocking: every rank must call it, also with no ids (two row
    exchanges: the requests, then the answers).
    """
    order = torch.sort(owners, stable=True).indices
    counts = torch.bincount(owners, minlength=world_size()).tolist()
    requests = all_to_all_rows(list(ids[order].unsqueeze(1).split(counts)), kind=kind)
    answers = serve([r.squeeze(1) for r in requests])
    return all_to_all_rows(answers, kind=kind)
