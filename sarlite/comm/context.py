"""Process-group set-up from the launcher's environment (torchrun, mpirun, srun).

Every sarlite process is a worker that owns one partition. ``init`` is the only set-up
call; everything else reads the default process group. ``init`` is also where the
environment's settings (``SARLITE_TIMEOUT``, ``SARLITE_HEARTBEAT_TIMEOUT``,
``SARLITE_MMAP_THRESHOLD``; :mod:`sarlite.runtime.settings`) are read, once; what it chose
is :func:`settings`.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import time
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist

from ..runtime import allocator, health, runkey
from ..runtime.launchenv import LaunchEnv, read_launch_env, route_interface
from ..runtime.settings import RuntimeSettings, read_settings
from .errors import CollectiveError, guarded
from .group import comm_device, rank, world_size

__all__ = ["comm_device", "init", "rank", "run_key", "settings", "settle", "world_size"]

GLOO_SETTLE = 0.1          # seconds; see settle

# What the last init chose (settings()): recorded once per init, like the group itself.
_settings: RuntimeSettings | None = None


def init(backend: str | None = None, timeout: timedelta | float | None = None,
         device: str | torch.device | None = None,
         heartbeat_timeout: float | None = None, *,
         mmap_threshold: int | None | str = "auto") -> tuple[int, int]:
    """Join the default process group described by the launcher's environment.

    Reads torchrun's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (and
    ``LOCAL_RANK`` to pick the CUDA device); without them, the variables ``mpirun`` (Open
    MPI's ``OMPI_COMM_WORLD_*``, PMI's ``PMI_*``) or Slurm's ``srun`` (``SLURM_PROCID``,
    ``SLURM_NTASKS``) set, with rank 0's host in ``MASTER_ADDR`` (``MASTER_PORT`` defaults
    to 29500); see :func:`sarlite.runtime.launchenv.read_launch_env`. The backend defaults to
    ``nccl`` when ``device`` is CUDA and to ``gloo`` otherwise. When ``MASTER_ADDR`` is not
    this host and ``GLOO_SOCKET_IFNAME`` is not set, gloo is told the interface that routes
    to it (and the choice is logged). If a process group already exists (the script made
    it) it is reused, and only the exit hook below is added for it.

    Every rank must call it. It blocks until all ranks have joined or ``timeout`` (default
    ``SARLITE_TIMEOUT`` seconds, 600) passes; the same timeout then bounds every collective,
    so a dead peer ends the others with an error instead of a hang.

    It also starts this rank's heartbeat monitor (:mod:`sarlite.runtime.health`): when this
    rank has waited in a collective for ``heartbeat_timeout`` seconds (default
    ``SARLITE_HEARTBEAT_TIMEOUT``, 60; 0 turns it off) while a peer sent no heartbeat for
    as long, the monitor names the frozen peer and ends this process, well before
    ``timeout``. When another rank reports the run's failure through the monitor, this
    rank leaves quietly.

    It agrees on the run's secret key (:func:`run_key`, :mod:`sarlite.runtime.runkey`: the one
    ``sarlite train`` hands its workers in ``SARLITE_RUN_KEY``, which it then removes
    from the environment, or one rank 0 makes and broadcasts), which authenticates the
    health records and the one-sided request service.

    A script may end without :func:`sarlite.finalize` (SAR's and DGL's scripts do): an
    exit hook then runs :func:`settle`, so that the process ends cleanly.

    It fixes glibc's mmap threshold (keyword-only ``mmap_threshold``, in bytes), so that
    freed shard buffers leave the process instead of staying in its heap (see
    :mod:`sarlite.runtime.allocator`): ``"auto"`` (default) takes ``SARLITE_MMAP_THRESHOLD``
    (bytes, ``retain`` or ``off``; default 128 KiB) unless glibc's
    ``MALLOC_MMAP_THRESHOLD_`` is set. ``"retain"`` is the choice for sampled mini-batch
    training: freed memory stays in the process, so that every step reuses the last
    step's pages instead of page-faulting fresh ones. ``None`` leaves the allocator alone.

    The environment's settings are read here once; with the arguments applied over them
    they are recorded for :func:`settings` (and the code that needs them after ``init``).

    Returns
    -------
    (int, int)
        ``(rank, world_size)``.

    Raises
    ------
    RuntimeError
        No launcher's variables are set, or ``MASTER_ADDR`` is missing.
    ValueError
        A launcher variable or a ``SARLITE_*`` setting is malformed (not an integer, rank
        out of range, not a number of seconds), or ``mmap_threshold`` is not one of the
        values above.
    CollectiveError
        The ranks did not all join within ``timeout``.
    """
    if dist.is_initialized():
        _settle_at_exit()
        return dist.get_rank(), dist.get_world_size()
    env = read_launch_env(os.environ)
    chosen = _chosen(read_settings(os.environ), timeout, heartbeat_timeout, mmap_threshold)
    allocator.configure(chosen.mmap_threshold)
    device = torch.device(device) if device is not None else None
    if backend is None:
        backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(env.local_rank)
    elif env.world_size > 1 and "GLOO_SOCKET_IFNAME" not in os.environ:
        _use_route_to(env.master_addr)
    _join(backend, env, chosen.timeout)
    _settle_at_exit()
    global _settings
    _settings = chosen
    key = _establish_key()             # each init agrees anew, as its group is new
    health.start(env.master_addr, env.master_port, env.rank, env.world_size, key,
                 chosen.heartbeat_timeout, os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return env.rank, env.world_size


def _chosen(from_env: RuntimeSettings, timeout: timedelta | float | None,
            heartbeat_timeout: float | None, mmap_threshold: int | None | str
            ) -> RuntimeSettings:
    """``init``'s arguments applied over the environment's settings (``None`` and
    ``"auto"`` keep the environment's value)."""
    if timeout is not None and not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return replace(from_env,
                   timeout=from_env.timeout if timeout is None else timeout,
                   heartbeat_timeout=from_env.heartbeat_timeout if heartbeat_timeout is None
                   else float(heartbeat_timeout),
                   mmap_threshold=from_env.mmap_threshold if mmap_threshold == "auto"
                   else mmap_threshold)


def settings() -> RuntimeSettings:
    """The settings :func:`init` read from the environment and applied (with its
    arguments over them): the timeout of the process group and of one-sided reads, the
    heartbeat timeout, the allocator setting. Before ``init`` has run (or where a script
    made the process group itself), the environment's settings, read now. Local.

    Raises
    ------
    ValueError
        Before ``init``: a ``SARLITE_*`` variable is malformed.
    """
    return _settings if _settings is not None else read_settings(os.environ)


def run_key() -> bytes:
    """The run's secret key (:mod:`sarlite.runtime.runkey`): the one this process has,
    else agreed on now, from ``SARLITE_RUN_KEY`` (removed from ``os.environ``) or made by
    rank 0. **Collective** when this process has no key yet and the default process group
    has several ranks (one gather, and one broadcast when rank 0 makes the key).

    Raises
    ------
    ValueError
        ``SARLITE_RUN_KEY`` is malformed.
    CollectiveError
        The ranks were given different keys, or only some of them one.
    """
    return runkey.current() or _establish_key()


def _establish_key() -> bytes:
    """:func:`sarlite.runtime.runkey.establish` over the default process group."""
    return runkey.establish(os.environ, _agree_on_key if world_size() > 1 else None)


def _agree_on_key(key: bytes | None) -> bytes:
    """The key every rank uses: the one they were all given, or rank 0's new one.
    Collective."""
    proofs = [None] * dist.get_world_size()
    mine = runkey.tag(key, "same run key") if key is not None else None
    guarded("agree on the run key", lambda: dist.all_gather_object(proofs, mine))
    if all(p is None for p in proofs):
        box = [runkey.new_key() if dist.get_rank() == 0 else None]
        guarded("share the run key", lambda: dist.broadcast_object_list(box, src=0))
        return box[0]
    if len(set(proofs)) != 1:
        given = [r for r, p in enumerate(proofs) if p is not None]
        raise CollectiveError(
            f"sarlite: the ranks were not given the same {runkey.KEY_ENV} (ranks with "
            f"one: {given}; of {len(proofs)}): set the same value on every host, or set it "
            f"on none and rank 0 makes one")
    return key


def _settle_at_exit() -> None:
    """Run :func:`settle` when the process exits (once, however many inits)."""
    atexit.unregister(settle)
    atexit.register(settle)


def settle() -> None:
    """Make this process safe to end while the default process group still exists.
    Local; not a collective; it blocks for ``GLOO_SETTLE`` seconds with a gloo group.

    It stops the heartbeat monitor. With gloo, it also keeps the group's C++ object alive
    until the process ends, and sleeps briefly without holding Python's lock. Both work
    around torch 2.2's gloo:

    * A gloo worker thread drops its reference to the last collective's work object
      after the caller has already returned. Freeing that work frees the collective's
      tensors, which takes Python's lock. If Python is finalizing by then, the thread is
      killed inside C++ code and the process aborts ("terminate called without an active
      exception"). This happened in about 1 in 20 two-rank runs of a script that ended
      right after a collective. The sleep lets the thread finish first.
    * ``~ProcessGroupGloo`` joins its worker threads while holding Python's lock. It
      deadlocks when one of them still waits for that lock (about 1 in 30 runs hung at
      exit). The group is therefore never destroyed; its threads end with the process.
    """
    health.stop()
    if dist.is_initialized() and dist.get_backend() == "gloo":
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(dist.group.WORLD))
        time.sleep(GLOO_SETTLE)


def _join(backend: str, env: LaunchEnv, timeout: timedelta) -> None:
    """``init_process_group`` for ``env``: torchrun's own ``env://`` rendezvous (which
    knows about its agent's store), a TCP one for the other launchers."""
    if env.source == "torchrun":
        kwargs = {"init_method": "env://"}
    else:
        kwargs = {"init_method": f"tcp://{env.master_addr}:{env.master_port}",
                  "rank": env.rank, "world_size": env.world_size}
    try:
        dist.init_process_group(backend, timeout=timeout, **kwargs)
    except RuntimeError as err:
        raise CollectiveError(
            f"sarlite.init: rank {env.rank} of {env.world_size} ({env.source}) could not "
            f"join the process group at {env.master_addr}:{env.master_port} within "
            f"{timeout}: {err}") from None


def _use_route_to(master_addr: str) -> None:
    """Tell gloo (through the one setting it reads, ``GLOO_SOCKET_IFNAME``, in this
    process only) to use the interface that routes to ``master_addr``."""
    interface = route_interface(master_addr)
    if interface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
        logging.getLogger("sarlite").info("gloo uses interface %s (it routes to %s)",
                                          interface, master_addr)
