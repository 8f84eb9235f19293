"""The one error every failed collective becomes, and the guard that raises it."""
from __future__ import annotations

from typing import Callable, TypeVar

from ..runtime import health
from .group import rank, world_size

T = TypeVar("T")


class CollectiveError(RuntimeError):
    """A collective failed: usually another worker died, raised, or never called it."""


def _failed(kind: str, err: Exception) -> CollectiveError:
    return CollectiveError(
        f"sarlite: collective {kind!r} failed on rank {rank()} of "
        f"{world_size()}: {err}. "
        f"Another worker probably died or did not make the same call (every rank must run "
        f"the same collectives in the same order); see the other workers' output.")


def guarded(kind: str, call: Callable[[], T]) -> T:
    """Return ``call()``; turn the ``RuntimeError`` a failed collective raises (a dead or
    absent peer, the process group's timeout) into one :class:`CollectiveError` naming
    ``kind``, this rank and the cause.

    Every ``torch.distributed`` call of :mod:`sarlite.comm` runs through it; while it
    blocks, the heartbeat monitor (:mod:`sarlite.runtime.health`) may end the process if a
    peer stops sending heartbeats.
    """
    try:
        with health.waiting(kind):
            return call()
    except CollectiveError:
        raise
    except RuntimeError as err:
        raise _failed(kind, err) from err


def ranks_text(ranks: list[int]) -> str:
    """``"rank 1"`` or ``"ranks 0, 2"``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def disagreement(values: list, show: Callable[[object], str] = str) -> str | None:
    """How per-rank ``values`` (index = rank) differ, e.g. ``"(3,) on ranks 0, 2 but (4,) on
    rank 1"``; ``None`` when they are all equal. Deterministic: every rank that holds the
    same list words it the same way."""
    groups: dict = {}
    for peer, value in enumerate(values):
        groups.setdefault(value, []).append(peer)
    if len(groups) < 2:
        return None
    first, *rest = (f"{show(value)} on {ranks_text(peers)}" for value, peers in groups.items())
    return f"{first} but {' and '.join(rest)}"
