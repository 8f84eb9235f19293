"""Which process group this process is in: its rank, the world size, the device of
collective buffers. Local queries of the default process group (no collective); without
one, a world of one rank on the CPU."""
from __future__ import annotations

import torch
import torch.distributed as dist


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
