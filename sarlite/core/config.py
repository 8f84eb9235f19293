"""Global defaults of the SAR engine, overridable per graph."""
from __future__ import annotations

MODES = ("sar", "sa", "one-shot")


class Config:
    """Process-wide defaults read when a graph is constructed.

    ``mode``
        ``"sar"`` (sequential aggregation with rematerialization, the default), ``"sa"``
        (sequential, autograd graph kept, no refetch in backward) or ``"one-shot"``
        (``construct_full_graph`` returns a :class:`DistributedBlock`).
    ``pipeline_depth``
        How many shards' remote rows are fetched ahead of the one being aggregated
        (default 1). Memory holds about ``1 + pipeline_depth`` shards of remote rows.

    Example
    -------
    >>> sarlite.Config.mode = "sa"          # every graph built after this line
    >>> g = sarlite.construct_full_graph(data, mode="sar")   # or per graph
    """

    mode: str = "sar"
    pipeline_depth: int = 1


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    return mode


def check_depth(depth: int) -> int:
    if not isinstance(depth, int) or depth < 0:
        raise ValueError(f"pipeline_depth must be a non-negative integer, got {depth!r}")
    return depth
