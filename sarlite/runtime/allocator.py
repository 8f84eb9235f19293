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
which has always run with the threshold fixed. The engine's passes in steps, which would
pay it at every step, reuse their step buffers instead (:mod:`sarlite.core.step_buffers`).

That cost is worth paying where buffers scale with the graph (full-graph training), not
in **sampled mini-batch training**, whose buffers are bounded by the batch and are made
afresh every step: there a fixed threshold page-faults every batch's features and
activations again (``benchmarks.sampled``: 1.15 s against 0.73 s per epoch at N=2).
glibc's default does better but still gives pages back when the top of the heap is
free, and mmaps every buffer larger than the biggest one freed so far. For such scripts
``sarlite.init(mmap_threshold="retain")`` (:func:`retain_freed_memory`) does the
opposite of the fixed threshold: buffers up to 1 GiB come from the heap, and the heap
keeps what is freed, so that the next batch reuses pages that are already mapped. The
resident set then stays at the largest batch's peak; ``sarlite train`` does this when
``train.sampling`` is set, unless ``SARLITE_MMAP_THRESHOLD`` says otherwise. ``None``
leaves the allocator alone.

**Huge pages.** Each fresh buffer's pages fault in one by one: 4 KiB at a time, which
is most of what a freed-and-remade buffer costs. torch's CPU allocator asks Linux for
transparent huge pages (2 MiB) for buffers of 2 MiB and more when its variable
``THP_MEM_ALLOC_ENABLE=1`` is set when the process starts (torch reads it once, at its
first allocation, so :func:`sarlite.init` is too late to set it). ``sarlite train`` and
``sarlite run`` start their workers with it (:func:`launch_environ`), unless the user set
the variable (``THP_MEM_ALLOC_ENABLE=0`` turns it off). A script started with
``torchrun`` gets it by exporting the variable first. On a Linux whose huge pages are
``never`` (``/sys/kernel/mm/transparent_hugepage/enabled``) it changes nothing.
Measured in ``benchmarks/results/full``: see its allocator lines.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from typing import Mapping

log = logging.getLogger("sarlite.runtime")

M_TRIM_THRESHOLD = -1            # glibc's mallopt parameter numbers
M_MMAP_THRESHOLD = -3
DEFAULT_THRESHOLD = 128 * 1024   # glibc's initial value, kept fixed
RETAIN = "retain"
RETAIN_MMAP_THRESHOLDS = (2**30, 32 * 2**20)   # 1 GiB; else glibc's own ceiling, 32 MiB
RETAIN_TRIM_THRESHOLD = 2**31 - 1              # the largest value mallopt takes
ENV = "SARLITE_MMAP_THRESHOLD"
HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"        # torch's own switch (c10's CPU allocator)

# What configure applied in this process: a record of glibc's own setting, which is
# process-wide by nature (read by applied()).
_applied: int | str | None = None


def threshold_from_env(environ: Mapping[str, str],
                       default: int | str = DEFAULT_THRESHOLD) -> int | str | None:
    """The setting for :func:`configure` from ``environ``: ``SARLITE_MMAP_THRESHOLD``
    (bytes to fix the threshold at; ``retain``; ``0`` or ``off``: none), else ``default``
    (:data:`DEFAULT_THRESHOLD`; :data:`RETAIN` in :func:`mini_batch_setting`); ``None``
    when glibc's own ``MALLOC_MMAP_THRESHOLD_`` is set (the user's choice stands).

    Raises
    ------
    ValueError
        ``SARLITE_MMAP_THRESHOLD`` is neither a non-negative integer, ``retain`` nor
        ``off``.
    """
    if "MALLOC_MMAP_THRESHOLD_" in environ:
        return None
    value = environ.get(ENV, str(default)).strip().lower()
    if value in ("off", "0"):
        return None
    if value == RETAIN:
        return RETAIN
    if not value.isdigit():
        raise ValueError(f"{ENV} must be a number of bytes, 'retain' or 'off', got "
                         f"{value!r}")
    return int(value)


def mini_batch_setting(environ: Mapping[str, str] | None = None) -> int | str | None:
    """The setting for a process that trains on mini-batches: :data:`RETAIN`, unless
    ``SARLITE_MMAP_THRESHOLD`` (or glibc's own variable) in ``environ`` (``os.environ``,
    read when called, if ``None``) says otherwise. What ``sarlite train`` with sampling
    and the DGL facade pass to :func:`sarlite.init`. Local.

    Raises
    ------
    ValueError
        As :func:`threshold_from_env`.
    """
    return threshold_from_env(os.environ if environ is None else environ, default=RETAIN)


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt(param, value)``; ``False`` when it refuses or is missing."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(param, int(value)))


def fix_mmap_threshold(threshold: int) -> bool:
    """Set glibc's mmap threshold to ``threshold`` bytes (and stop it from moving).
    Local; returns whether the allocator took it (``False`` off glibc)."""
    return _mallopt(M_MMAP_THRESHOLD, threshold)


def retain_freed_memory() -> bool:
    """Serve buffers up to 1 GiB (32 MiB where glibc takes no more) from the heap, and
    never give freed heap memory back to the system, so that a process that makes
    buffers of the same sizes again and again (mini-batch training) reuses mapped pages
    instead of page-faulting fresh ones. Local; returns whether the allocator took both
    settings (``False`` off glibc)."""
    return any(_mallopt(M_MMAP_THRESHOLD, t) for t in RETAIN_MMAP_THRESHOLDS) and \
        _mallopt(M_TRIM_THRESHOLD, RETAIN_TRIM_THRESHOLD)


def configure(setting: int | str | None) -> None:
    """What :func:`sarlite.init` calls: fix the threshold at ``setting`` bytes,
    :func:`retain_freed_memory` for ``"retain"``, or leave the allocator alone for
    ``None``; log the outcome. Local.

    Raises
    ------
    ValueError
        ``setting`` is none of these.
    """
    if setting is None:
        return
    if setting == RETAIN:
        took = retain_freed_memory()
        what = "freed memory kept in the process for reuse (mini-batch training)"
    elif isinstance(setting, int) and not isinstance(setting, bool) and setting > 0:
        took = fix_mmap_threshold(setting)
        what = (f"mmap threshold fixed at {setting} bytes (freed buffers leave the "
                f"process; {ENV}=off keeps glibc's default)")
    else:
        raise ValueError(f"mmap_threshold must be a positive number of bytes, 'retain', "
                         f"'auto' or None, got {setting!r}")
    if took:
        global _applied
        _applied = setting
        if log.isEnabledFor(logging.DEBUG):       # huge_pages() reads /sys
            log.debug("malloc: %s; torch huge pages %s", what, huge_pages())
    else:
        log.debug("malloc: this C library did not take mallopt; left alone")


def applied() -> int | str | None:
    """What :func:`configure` set in this process: the fixed threshold in bytes,
    :data:`RETAIN`, or ``None`` (the allocator as glibc left it). Local."""
    return _applied


def mini_batch_advice() -> str | None:
    """Advice for a mini-batch loader when this process fixed the threshold (the
    full-graph setting, :func:`sarlite.init`'s default), else ``None``. Local."""
    if not isinstance(applied(), int):
        return None
    return (f"sarlite.init fixed glibc's mmap threshold at {applied()} bytes, the setting "
            f"for full-graph training: in mini-batch training it page-faults every batch's "
            f"buffers anew (epochs about 2x as long). Sampling scripts should call "
            f"sarlite.init(mmap_threshold=\"retain\") (or set {ENV}=retain)")


def launch_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as sarlite's launcher hands it to its workers, allocator-wise: with
    torch's huge pages for large buffers (``THP_MEM_ALLOC_ENABLE=1``) unless
    ``environ`` sets the variable already (the user's choice stands). Local."""
    env = dict(environ)
    env.setdefault(HUGE_PAGES_ENV, "1")
    return env


def huge_pages(environ: Mapping[str, str] | None = None) -> str:
    """``"on"`` when torch in a process started with ``environ`` (``os.environ`` if
    ``None``) asks for huge pages, else ``"off"``; with the system's setting in
    parentheses where Linux reports it (``[madvise]``: granted when asked). Local."""
    environ = os.environ if environ is None else environ
    state = "on" if environ.get(HUGE_PAGES_ENV, "0").strip() == "1" else "off"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            system = f.read().strip()
    except OSError:
        return state
    return f"{state} (system: {system})"
