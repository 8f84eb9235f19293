"""Giving freed tensor memory back to the system at once (glibc's malloc).

A SAR pass allocates and frees shard-sized row buffers again and again. glibc serves a
large request with its own ``mmap`` (returned to the system when freed) only while the
request is at least its *mmap threshold*, and by default it raises that threshold to the
size of every mmapped chunk freed, up to 32 MiB. After the first shard buffer is freed,
the next ones come from the heap, and freed heap memory mostly stays in the process: the
resident set keeps the largest transient it ever held, and the per-worker memory that SAR
saves is not seen by the machine. Fixing the threshold (``mallopt(M_MMAP_THRESHOLD)``,
the same as the environment variable ``MALLOC_MMAP_THRESHOLD_``) turns that adjustment
off, so every buffer of at least the threshold goes back when it is freed.

:func:`sarlite.init` does this (see :func:`configure`); it changes one setting of this
process's allocator, once, and says so in the log. The cost is a page fault per page of
each large buffer (the kernel hands out zeroed pages), measured in the benchmark suite,
which has always run with the threshold fixed.

That cost is worth paying where buffers scale with the graph (full-graph training), not
in **sampled mini-batch training**, whose buffers are bounded by the batch and are made
afresh every step: there a fixed threshold page-faults every batch's features and
activations again (``benchmarks.sampled``: 1.15 s against 0.73 s per epoch at N=2). Pass
``sarlite.init(mmap_threshold=None)`` for such a script; ``sarlite train`` does so when
``train.sampling`` is set.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("sarlite.comm")

M_MMAP_THRESHOLD = -3            # glibc's mallopt parameter number
DEFAULT_THRESHOLD = 128 * 1024   # glibc's initial value, kept fixed
ENV = "SARLITE_MMAP_THRESHOLD"


def threshold_from_env(environ=os.environ) -> int | None:
    """The threshold to fix, in bytes: ``SARLITE_MMAP_THRESHOLD`` (``0`` or ``off``: none)
    or :data:`DEFAULT_THRESHOLD`; ``None`` when glibc's own ``MALLOC_MMAP_THRESHOLD_`` is
    set (the user's choice stands).

    Raises
    ------
    ValueError
        ``SARLITE_MMAP_THRESHOLD`` is neither a non-negative integer nor ``off``.
    """
    if "MALLOC_MMAP_THRESHOLD_" in environ:
        return None
    value = environ.get(ENV, str(DEFAULT_THRESHOLD)).strip().lower()
    if value in ("off", "0"):
        return None
    if not value.isdigit():
        raise ValueError(f"{ENV} must be a number of bytes or 'off', got {value!r}")
    return int(value)


def fix_mmap_threshold(threshold: int) -> bool:
    """Set glibc's mmap threshold to ``threshold`` bytes (and stop it from moving).
    Local; returns whether the allocator took it (``False`` off glibc)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, int(threshold)))


def configure(threshold: int | None) -> None:
    """What :func:`sarlite.init` calls: fix the threshold (``None``: leave the allocator
    alone) and log the outcome. Local."""
    if threshold is None:
        return
    if fix_mmap_threshold(threshold):
        log.debug("malloc: mmap threshold fixed at %d bytes (freed buffers leave the "
                  "process; %s=off keeps glibc's default)", threshold, ENV)
    else:
        log.debug("malloc: this C library has no mallopt(M_MMAP_THRESHOLD); left alone")
