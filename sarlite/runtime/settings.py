"""The settings a sarlite process takes from its environment, read in one place.

:func:`sarlite.init` reads them once (:func:`read_settings`), applies its own arguments
over them and records the result, which :func:`sarlite.comm.settings` returns; the code
below it gets the values as arguments. No module reads the environment when it is
imported.

======================================  ===================================================
``SARLITE_TIMEOUT``                     seconds every collective, the rendezvous and each
                                        wait of a one-sided read may take (600)
``SARLITE_HEARTBEAT_TIMEOUT``           seconds without a peer's heartbeat, while this rank
                                        waits in a collective, before the run is stopped
                                        (60; 0 turns the check off)
``SARLITE_MMAP_THRESHOLD``              glibc's mmap threshold in bytes, ``retain`` or
                                        ``off`` (:mod:`sarlite.runtime.allocator`)
======================================  ===================================================
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping

from . import allocator

TIMEOUT_ENV = "SARLITE_TIMEOUT"
HEARTBEAT_ENV = "SARLITE_HEARTBEAT_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_HEARTBEAT_S = 60.0


@dataclass(frozen=True)
class RuntimeSettings:
    """What the environment (or :func:`sarlite.init`'s arguments) set for this process.

    timeout:
        Bounds the rendezvous, every collective and each wait of a one-sided read.
    heartbeat_timeout:
        Seconds; 0: no heartbeat check.
    mmap_threshold:
        The allocator setting: bytes, :data:`~sarlite.runtime.allocator.RETAIN`, or
        ``None`` (glibc left alone).
    """

    timeout: timedelta = timedelta(seconds=DEFAULT_TIMEOUT_S)
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_S
    mmap_threshold: int | str | None = allocator.DEFAULT_THRESHOLD

    def describe(self) -> str:
        """One line, e.g. ``"timeout 600 s, heartbeat timeout 60 s, mmap threshold
        131072 bytes"``."""
        heartbeat = (f"heartbeat timeout {self.heartbeat_timeout:g} s"
                     if self.heartbeat_timeout > 0 else "heartbeat check off")
        if self.mmap_threshold is None:
            mmap = "mmap threshold as glibc sets it"
        elif self.mmap_threshold == allocator.RETAIN:
            mmap = "mmap threshold: retain freed memory"
        else:
            mmap = f"mmap threshold {self.mmap_threshold} bytes"
        return f"timeout {self.timeout.total_seconds():g} s, {heartbeat}, {mmap}"


def _seconds(environ: Mapping[str, str], name: str, default: float, zero_ok: bool) -> float:
    """``environ[name]`` as a number of seconds (``default`` when unset).

    Raises
    ------
    ValueError
        The value is not a finite number, is negative, or is 0 where 0 is not allowed.
    """
    text = environ.get(name)
    if text is None:
        return default
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        kind = "a non-negative" if zero_ok else "a positive"
        raise ValueError(f"{name} must be {kind} number of seconds, got {text!r}")
    return value


def read_settings(environ: Mapping[str, str], *,
                  mmap_default: int | str = allocator.DEFAULT_THRESHOLD) -> RuntimeSettings:
    """The settings ``environ`` holds (``SARLITE_TIMEOUT``, ``SARLITE_HEARTBEAT_TIMEOUT``,
    ``SARLITE_MMAP_THRESHOLD``; see the module docstring), each variable's default where
    it is unset; ``mmap_default`` is the allocator setting when neither
    ``SARLITE_MMAP_THRESHOLD`` nor glibc's ``MALLOC_MMAP_THRESHOLD_`` is set
    (:data:`~sarlite.runtime.allocator.RETAIN` for mini-batch training). A pure function
    of ``environ``; local.

    Raises
    ------
    ValueError
        A variable is malformed (the message names it and its value).
    """
    return RuntimeSettings(
        timeout=timedelta(seconds=_seconds(environ, TIMEOUT_ENV, DEFAULT_TIMEOUT_S, False)),
        heartbeat_timeout=_seconds(environ, HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S, True),
        mmap_threshold=allocator.threshold_from_env(environ, mmap_default))
