"""The engine's per-call options (mode, pipeline depth, rows per collective, halo dtype,
rows per step, kernels) and their checks.

A graph holds its options as an immutable :class:`EngineOptions`, or as a zero-argument
callable returning one: the graph then asks for its options at every ``update_all`` /
``apply_edges``, so a facade whose settings are read when a call runs (``sarlite.sar``'s
``Config``) can hand them over explicitly instead of patching the engine.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Union

import torch

MODES = ("sar", "sa", "one-shot")
KERNELS = ("auto", "dgl", "torch")
HALO_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
               "float16": torch.float16}


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    return mode


def check_depth(depth: int) -> int:
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"pipeline_depth must be a non-negative integer, got {depth!r}")
    return depth


def check_max_rows(rows: int | None) -> int | None:
    if rows is not None and (not isinstance(rows, int) or isinstance(rows, bool) or rows < 1):
        raise ValueError(f"max_collective_rows must be a positive integer or None (no "
                         f"bound), got {rows!r}")
    return rows


#: ``max_rows_per_step="auto"`` (the default): a step fetches at most the fewest
#: destination rows any rank holds divided by this, in a call whose steps add their rows
#: along the edges straight into the output (``copy_u`` + ``sum``/``mean`` in ``sar``
#: mode: GraphConv, SAGEConv). At the peak of such a pass a step holds about three
#: step-sized row buffers (the rows or their gradients being used, sent and received); at
#: a third of a layer's rows these stay within what the layer's own dense backward holds
#: anyway, so the pass's peak stays the layer's on any cut, with as few steps (each costs
#: a message and a pass over the destinations it reaches) as that allows ...
AUTO_STEP_DIVISOR = 3
#: ... and by this in any other call, whose steps also hold an aggregate or a gathered
#: gradient for every destination they reach (up to one row per edge: GATConv's) ...
AUTO_STEP_DIVISOR_PER_DESTINATION = 12
#: ... and never fewer than this many rows (small graphs keep whole shards).
AUTO_STEP_FLOOR = 1024


def check_step_rows(rows: int | str | None) -> int | str:
    """``rows`` as :class:`EngineOptions` holds it: a positive int, ``"auto"``, or
    ``"whole"`` (``None`` is taken as ``"whole"``)."""
    if rows is None:
        return "whole"
    if rows in ("auto", "whole"):
        return rows
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        raise ValueError(f"max_rows_per_step must be a positive integer, 'auto' (the "
                         f"default: a size from the halo and the rows each rank holds) or "
                         f"'whole' / None (a whole shard per ring round), got {rows!r}")
    return rows


def step_rows(setting: int | str, dst_counts, along_edges: bool = False) -> int | None:
    """The rows per step that ``setting`` (see :func:`check_step_rows`) gives on a graph
    whose ranks hold ``dst_counts`` destination rows each; ``None``: whole shards.

    ``"auto"`` is ``max(AUTO_STEP_FLOOR, ceil(min(dst_counts) / divisor))``, the divisor
    :data:`AUTO_STEP_DIVISOR` for a call whose steps add along the edges (``along_edges``)
    and :data:`AUTO_STEP_DIVISOR_PER_DESTINATION` for any other: a shard whose rows fit in
    one such step still runs whole (a good cut costs nothing), a larger one (a bad cut) in
    steps of that size. Every rank computes the same value.
    """
    if setting == "whole":
        return None
    if setting == "auto":
        fewest = min(dst_counts, default=0)
        divisor = AUTO_STEP_DIVISOR if along_edges else AUTO_STEP_DIVISOR_PER_DESTINATION
        return max(AUTO_STEP_FLOOR, -(-fewest // divisor))
    return setting


def check_halo_dtype(dtype) -> torch.dtype | None:
    """``dtype`` (a torch dtype or its name among :data:`HALO_DTYPES`) as the dtype halo
    rows travel in; ``None`` for float32 or ``None`` (exact: rows travel as they are)."""
    if isinstance(dtype, str) and dtype in HALO_DTYPES:
        dtype = HALO_DTYPES[dtype]
    if dtype is None or dtype == torch.float32:
        return None
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"halo_dtype must be one of {sorted(HALO_DTYPES)} (or the torch "
                         f"dtypes), got {dtype!r}")
    return dtype


def check_kernels(kernels: str | None) -> str | None:
    """``kernels`` among :data:`KERNELS`; ``None`` for ``"auto"`` or ``None``."""
    if kernels is None or kernels == "auto":
        return None
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    return kernels


@dataclass(frozen=True)
class EngineOptions:
    """How a sharded graph runs its message passing.

    ``mode``: ``"sar"`` (sequential aggregation, rematerialized backward), ``"sa"``
    (sequential, autograd graph kept) or ``"one-shot"`` (the graph is a
    :class:`~sarlite.DistributedBlock`; a :class:`~sarlite.GraphShardManager` cannot switch
    to it per call). ``pipeline_depth``: shards fetched ahead of the one being aggregated.
    ``max_collective_rows``: at most this many rows per rank and peer move in one collective
    call; a larger exchange is split into several calls, in order, with the same result
    (``None``: no bound). It bounds the size of each message on the wire, not the rows a
    shard holds once fetched. ``halo_dtype``: ``torch.bfloat16`` or ``torch.float16``
    makes floating-point halo rows and their gradients travel in that type (half the
    bytes); they are cast back on arrival and everything is computed and accumulated in
    the tensors' own dtype. ``None`` (or float32, the default): rows travel as they are,
    and results are exact. A name (``"bfloat16"``) is accepted too.
    ``max_rows_per_step``: a remote shard's rows are fetched, used and freed in chunks of
    at most this many rows (forward, rematerialized backward and the gradients sent
    back), so the transient memory of a step follows the chunk, not the cut; results stay
    exact. ``"auto"`` (the default) picks the size from the graph (:func:`step_rows`):
    shards of a good cut run whole, those of a bad cut in steps of a third of the
    fewest rows a rank holds (a twelfth in calls other than ``copy_u`` + ``sum``/``mean``,
    whose steps also hold a row per destination they reach); ``"whole"`` (or ``None``):
    a whole shard per ring round.
    ``kernels``: ``"dgl"`` runs each shard's message passing on DGL's kernels (but
    ``u_mul_e`` + ``sum``, GATConv's aggregation, as torch sparse products over DGL's own
    compressed rows: :mod:`sarlite.core.local_blocks`), ``"torch"`` on sarlite's own
    (:mod:`sarlite.core.kernels`: torch operations, on any device; the DGL that pip
    installs has no CUDA kernels); ``None`` or ``"auto"``: DGL's on the CPU,
    torch's on any other device. Both give the same results as DGL on one graph.
    """

    mode: str = "sar"
    pipeline_depth: int = 1
    max_collective_rows: int | None = None
    halo_dtype: torch.dtype | None = None
    max_rows_per_step: int | str = "auto"
    kernels: str | None = None

    def __post_init__(self):
        check_mode(self.mode)
        check_depth(self.pipeline_depth)
        check_max_rows(self.max_collective_rows)
        object.__setattr__(self, "max_rows_per_step", check_step_rows(self.max_rows_per_step))
        object.__setattr__(self, "halo_dtype", check_halo_dtype(self.halo_dtype))
        object.__setattr__(self, "kernels", check_kernels(self.kernels))


OptionsSource = Union[EngineOptions, Callable[[], EngineOptions]]
ENGINE_FIELDS = tuple(f.name for f in fields(EngineOptions))


def current(source: OptionsSource) -> EngineOptions:
    """The options in force now: ``source`` itself, or what the callable returns.

    Raises ``TypeError`` when the callable returns anything but :class:`EngineOptions`.
    """
    options = source() if callable(source) else source
    if not isinstance(options, EngineOptions):
        raise TypeError(f"the graph's options callable must return EngineOptions, got "
                        f"{type(options).__name__}")
    return options


def resolve_options(options: OptionsSource | None = None, **settings) -> OptionsSource:
    """The options source of a call that takes ``options=`` or the loose keywords of the
    same names (:class:`EngineOptions`' fields; ``None`` leaves the default).

    Raises
    ------
    ValueError
        ``options`` and a keyword setting are both given (which one would win is not
        for sarlite to guess), or a setting is invalid.
    TypeError
        A keyword that is not one of :class:`EngineOptions`' fields.
    """
    given = {name: value for name, value in settings.items() if value is not None}
    if options is not None:
        if given:
            raise ValueError(f"the engine settings {sorted(given)} were passed together "
                             f"with options=: pass them in the EngineOptions instead "
                             f"(dataclasses.replace(options, ...))")
        return options
    return EngineOptions(**given)
