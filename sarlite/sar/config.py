"""IntelLabs SAR's ``sar.Config``: engine settings read when each aggregation runs."""
from __future__ import annotations

from ..core.options import EngineOptions


class Config:
    """Settings of every graph built by :mod:`sarlite.sar` (class attributes, as in SAR).

    They are read at every ``update_all``/``apply_edges`` (and, for
    ``max_collective_size``, at every exchange of :mod:`sarlite.sar.comm`), so changing them
    between calls takes effect at the next call, also on graphs built earlier. Every rank
    must hold the same values: they decide which collectives run.

    ``disable_sr`` (default ``False``)
        ``True`` keeps the forward pass's autograd graph (sarlite's mode ``"sa"``) instead
        of rematerializing each shard in the backward pass (``"sar"``).
    ``pipeline_depth`` (default 1)
        Shards fetched ahead of the one being aggregated.
    ``max_collective_size`` (default 0: no bound)
        At most this many **rows** per rank and peer move in one collective call; larger
        exchanges are split into several calls with the same result. SAR counted
        **elements** (rows times row width) over all peers of a call: to keep SAR's byte
        bound, set it to SAR's value divided by the row width.
    """

    disable_sr: bool = False
    max_collective_size: int = 0
    pipeline_depth: int = 1


def engine_options() -> EngineOptions:
    """The :class:`~sarlite.core.options.EngineOptions` that :class:`Config` describes now.

    Raises ``ValueError`` for a negative ``pipeline_depth`` or ``max_collective_size``.
    """
    if Config.max_collective_size < 0:
        raise ValueError(f"Config.max_collective_size must be >= 0 (0: no bound), got "
                         f"{Config.max_collective_size!r}")
    return EngineOptions(mode="sa" if Config.disable_sr else "sar",
                         pipeline_depth=Config.pipeline_depth,
                         max_collective_rows=Config.max_collective_size or None)
