"""Checkpoints: model, optimizer, epoch, every rank's RNG state and the config hash."""
from __future__ import annotations

from pathlib import Path

import torch

from .. import comm
from ..partition.files import atomic_write
from .config import Config, ConfigError
from .outputs import CURVES, METRICS, SUMMARY, on_rank0

FILE = "checkpoint.pt"


def trajectory_hash(cfg: Config) -> str:
    """Hash of everything that shapes the training trajectory (not epochs or output)."""
    sampling = cfg.train.sampling
    return (cfg.digest("dataset", "partition", "model", "optim") + str(cfg.train.seed) +
            (sampling.model_dump_json() if sampling is not None else ""))


def save(out_dir: Path, cfg: Config, epoch: int, model, optimizer, best: dict,
         rank: int) -> None:
    """Write ``out_dir/checkpoint.pt`` atomically. Rank 0 writes; collective: every rank
    calls it, sends rank 0 its RNG state, and raises if the writing failed.

    Raises
    ------
    OSError
        The checkpoint cannot be written; for a full disk errno ``ENOSPC`` and the message
        "no space left on device while writing <out_dir>/checkpoint.pt".
    """
    rng = comm.all_gather_object(torch.get_rng_state(), "checkpoint")

    def write() -> None:
        payload = {"epoch": epoch, "model": model.state_dict(),
                   "optimizer": optimizer.state_dict(), "rng": rng, "best": best,
                   "config_hash": trajectory_hash(cfg), "world_size": len(rng)}
        atomic_write(out_dir / FILE, lambda tmp: torch.save(payload, tmp))
    on_rank0(write, rank, "checkpoint_written")


def start_fresh(out_dir: Path, overwrite: bool) -> list[Path]:
    """Rank 0, before a run that does not resume: refuse an ``out_dir`` holding another
    run's checkpoint, or (``overwrite``) remove it and that run's outputs.

    Returns
    -------
    list[Path]
        The files removed.

    Raises
    ------
    ConfigError
        ``out_dir`` holds a checkpoint and ``overwrite`` is not set.
    """
    path = out_dir / FILE
    if not overwrite:
        if path.exists():
            raise ConfigError(f"{path} exists (an earlier run's checkpoint): set "
                              f"train.resume=true to continue it, or train.overwrite=true "
                              f"to start over")
        return []
    removed = [out_dir / name for name in (FILE, METRICS, SUMMARY, CURVES)
               if (out_dir / name).exists()]
    for old in removed:
        old.unlink()
    return removed


def load(out_dir: Path, cfg: Config, model, optimizer, rank: int, world_size: int) -> tuple:
    """Restore a checkpoint; returns ``(next_epoch, best)``. Every rank calls it.

    Raises
    ------
    ConfigError
        No checkpoint, a corrupt one, or one made with another config or world size.
    """
    path = out_dir / FILE
    if not path.is_file():
        raise ConfigError(f"train.resume is set but {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu")
        keys = ("epoch", "model", "optimizer", "rng", "best", "config_hash", "world_size")
        missing = [k for k in keys if k not in payload]
        if missing:
            raise KeyError(f"missing {missing}")
    except Exception as err:  # torch raises many kinds for a damaged file
        raise ConfigError(f"checkpoint {path} is corrupt or unreadable: {err}") from None
    if payload["world_size"] != world_size:
        raise ConfigError(f"checkpoint {path} was written by {payload['world_size']} "
                          f"workers; resume with the same number (got {world_size})")
    if payload["config_hash"] != trajectory_hash(cfg):
        raise ConfigError(f"checkpoint {path} was written with a different dataset, "
                          f"partition, model, optimizer, seed or sampling settings; resume with "
                          f"that config")
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["rng"][rank])
    return payload["epoch"], payload["best"]
