"""Bytes sent to and received from other ranks, per kind of operation.

Only traffic between different ranks is counted (a rank's rows to itself are free).
The benchmark suite and the training application read these counters.
"""
from __future__ import annotations

from collections import defaultdict

_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])


def record(kind: str, sent: int, received: int) -> None:
    """Add ``sent`` and ``received`` bytes to the counter of ``kind``."""
    entry = _counts[kind]
    entry[0] += int(sent)
    entry[1] += int(received)


def snapshot() -> dict[str, dict[str, int]]:
    """``{kind: {"sent": bytes, "received": bytes}}`` since the last reset."""
    return {kind: {"sent": s, "received": r} for kind, (s, r) in _counts.items()}


def total() -> dict[str, int]:
    """Bytes sent and received over all kinds."""
    return {"sent": sum(s for s, _ in _counts.values()),
            "received": sum(r for _, r in _counts.values())}


def reset() -> None:
    _counts.clear()
