"""Send ids to the ranks that own them and bring each owner's answer back.

Every distributed graph query (sampling, subgraphs) has the same shape: a rank holds ids
of nodes other ranks own, each owner answers from its local partition, and the answers
travel back. :func:`ask_owners` is that round trip: the KV layer's checked id exchange
(:func:`sarlite.kv.protocol.exchange_ids`, whose header makes a rank with bad input or a
different call fail every rank at once), then one ``all_to_all_rows`` of the answers.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..comm import all_to_all_rows, world_size
from ..kv.protocol import KVCall, exchange_ids


def ask_owners(ids: torch.Tensor, owners: torch.Tensor,
               serve: Callable[[list[torch.Tensor]], list[torch.Tensor]],
               call: KVCall) -> list[torch.Tensor]:
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
    call:
        Names the operation in errors (its tag must match on every rank) and the
        traffic counter.

    Returns
    -------
    list[torch.Tensor]
        ``result[j]`` is rank ``j``'s answer to this rank.

    Collective and blocking: every rank must call it, also with no ids (two row
    exchanges: the requests, then the answers). Start it with
    :func:`sarlite.kv.protocol.validated` so that a rank whose input is bad still takes
    part in the request exchange.

    Raises
    ------
    CollectiveError
        Another rank's input was bad, it ran a different operation, or a rank died.
    """
    order = torch.sort(owners, stable=True).indices
    counts = torch.bincount(owners, minlength=world_size()).tolist()
    requests = exchange_ids(list(ids[order].split(counts)), call)
    return all_to_all_rows(serve(requests), kind=call.kind)
