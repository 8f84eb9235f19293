"""Process-group set-up from the torchrun environment.

Every sarlite process is a torchrun worker that owns one partition. ``init`` is the only
set-up call; everything else reads the default process group.
"""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT = timedelta(seconds=int(os.environ.get("SARLITE_TIMEOUT", "600")))
_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init(backend: str | None = None, timeout: timedelta | float | None = None,
         device: str | torch.device | None = None) -> tuple[int, int]:
    """Join the default process group described by torchrun's environment.

    Reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (and ``LOCAL_RANK``
    to pick the CUDA device). The backend defaults to ``nccl`` when ``device`` is CUDA and
    to ``gloo`` otherwise. No files or interface names are needed (gloo picks the interface
    itself unless ``GLOO_SOCKET_IFNAME`` is set). If a process group already exists it is
    reused unchanged.

    Every rank must call it. It blocks until all ``WORLD_SIZE`` ranks have joined or
    ``timeout`` (default ``SARLITE_TIMEOUT`` seconds, 600) passes; the same timeout then
    bounds every collective, so a dead peer ends the others with an error instead of a hang.

    Returns
    -------
    (int, int)
        ``(rank, world_size)``.

    Raises
    ------
    RuntimeError
        A torchrun variable is missing.
    """
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    missing = [name for name in _ENV if name not in os.environ]
    if missing:
        raise RuntimeError(f"sarlite.init: environment variable(s) {missing} are not set; "
                           f"launch with torchrun (or set them yourself)")
    device = torch.device(device) if device is not None else None
    if backend is None:
        backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    elif not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    dist.init_process_group(backend, init_method="env://", timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def rank() -> int:
    """Rank of this process (0 when no process group exists)."""
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    """Number of processes (1 when no process group exists)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def comm_device() -> torch.device:
    """Device that collective buffers must live on: CUDA for nccl, CPU otherwise."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")

