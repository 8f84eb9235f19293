"""Checkpoints: model, optimizer, epoch, every rank's RNG state and the config hash.

Rank 0 writes ``checkpoint.pt``. A model with parameters of its own on each rank (the
learned rows of a heterogeneous graph's featureless types, held by their owners) is
saved by every rank too: ``checkpoint.e<epoch>.rank<r>.pt`` holds rank ``r``'s model and
optimizer state, written before ``checkpoint.pt`` names that epoch, and the files of
older epochs are removed after it. So a run killed while saving resumes from the last
complete checkpoint. Learned rows kept in the KV store (sampled training's
:class:`~sarlite.train.models.SampledEmbeddings`) are saved the same way, by all ranks
together, under ``embeddings.e<epoch>/``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from .. import comm
from ..partition.files import atomic_write
from .config import Config, ConfigError
from .models import replicated
from .outputs import CURVES, METRICS, SUMMARY, on_rank0

FILE = "checkpoint.pt"


def _rank_file(out_dir: Path, epoch: int, rank: int) -> Path:
    return out_dir / f"checkpoint.e{epoch}.rank{rank}.pt"


def _rank_files(out_dir: Path, rank: int | None = None) -> list[Path]:
    return sorted(out_dir.glob(f"checkpoint.e*.rank{'*' if rank is None else rank}.pt"))


def _sparse_dir(out_dir: Path, epoch: int) -> Path:
    return out_dir / f"embeddings.e{epoch}"


def _sparse_dirs(out_dir: Path) -> list[Path]:
    return sorted(out_dir.glob("embeddings.e*"))


def has_rank_state(model) -> bool:
    """Whether ``model`` has parameters outside its replicated part (each rank's own)."""
    shared = {id(p) for p in replicated(model).parameters()}
    return any(id(p) not in shared for p in model.parameters())


def _save_rank_state(out_dir: Path, epoch: int, model, optimizer, rank: int) -> None:
    """Every rank writes its own model and optimizer state; every rank raises when one
    failed. Collective."""
    error = None
    try:
        state = {"epoch": epoch, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict()}
        atomic_write(_rank_file(out_dir, epoch, rank), lambda tmp: torch.save(state, tmp))
    except OSError as err:
        error = err
    _raise_on_every_rank(error, OSError, "could not write its checkpoint")


def _raise_on_every_rank(error: Exception | None, kind: type, what: str) -> None:
    """Raise this rank's ``error``, or a ``kind`` naming the first rank that had one
    (``"rank r <what>: <its error>"``). Collective (one object gather)."""
    failed = [(r, e) for r, e in enumerate(comm.all_gather_object(
        None if error is None else str(error), "checkpoint")) if e is not None]
    if error is not None:
        raise error
    if failed:
        raise kind(f"rank {failed[0][0]} {what}: {failed[0][1]}")


def trajectory_hash(cfg: Config) -> str:
    """Hash of everything that shapes the training trajectory (not epochs or output)."""
    sampling = cfg.train.sampling
    return (cfg.digest("dataset", "partition", "model", "optim") + str(cfg.train.seed) +
            (sampling.model_dump_json() if sampling is not None else ""))


def save(out_dir: Path, cfg: Config, epoch: int, model, optimizer, best: dict,
         rank: int, sparse=None) -> None:
    """Write ``out_dir/checkpoint.pt`` atomically. Rank 0 writes; collective: every rank
    calls it, sends rank 0 its RNG state, and raises if the writing failed. ``sparse``:
    learned rows outside the model (:class:`~sarlite.train.models.SampledEmbeddings`),
    saved first.

    Raises
    ------
    OSError
        The checkpoint cannot be written; for a full disk errno ``ENOSPC`` and the message
        "no space left on device while writing <out_dir>/checkpoint.pt".
    """
    rng = comm.all_gather_object(torch.get_rng_state(), "checkpoint")
    per_rank = has_rank_state(model)
    if per_rank:
        _save_rank_state(out_dir, epoch, model, optimizer, rank)
    if sparse is not None:
        sparse.save(_sparse_dir(out_dir, epoch))

    def write() -> None:
        payload = {"epoch": epoch, "rng": rng, "best": best, "per_rank": per_rank,
                   "sparse": sparse is not None,
                   "config_hash": trajectory_hash(cfg), "world_size": len(rng)}
        if not per_rank:
            payload.update(model=model.state_dict(), optimizer=optimizer.state_dict())
        atomic_write(out_dir / FILE, lambda tmp: torch.save(payload, tmp))
    on_rank0(write, rank, "checkpoint_written")
    for old in _rank_files(out_dir, rank):
        if old != _rank_file(out_dir, epoch, rank):
            old.unlink(missing_ok=True)
    if rank == 0:
        for old in _sparse_dirs(out_dir):
            if old != _sparse_dir(out_dir, epoch):
                shutil.rmtree(old, ignore_errors=True)


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
               if (out_dir / name).exists()] + _rank_files(out_dir)
    for old in removed:
        old.unlink()
    for old in _sparse_dirs(out_dir):
        shutil.rmtree(old)
        removed.append(old)
    return removed


def load(out_dir: Path, cfg: Config, model, optimizer, rank: int, world_size: int,
         sparse=None) -> tuple:
    """Restore a checkpoint (and ``sparse``'s rows, see :func:`save`); returns
    ``(next_epoch, best)``. Collective: every rank calls it, and when one rank cannot load
    its part, every rank raises.

    Raises
    ------
    ConfigError
        No checkpoint, a corrupt one (or a rank's missing or corrupt state file), or one
        made with another config or world size.
    """
    payload, error = None, None
    try:
        payload = _read(out_dir, rank)
    except ConfigError as err:
        error = err
    _raise_on_every_rank(error, ConfigError, "cannot resume")
    path = out_dir / FILE
    if payload["world_size"] != world_size:
        raise ConfigError(f"checkpoint {path} was written by {payload['world_size']} "
                          f"workers; resume with the same number (got {world_size})")
    if payload["config_hash"] != trajectory_hash(cfg):
        raise ConfigError(f"checkpoint {path} was written with a different dataset, "
                          f"partition, model, optimizer, seed or sampling settings; resume with "
                          f"that config")
    if sparse is not None:
        try:
            sparse.load(_sparse_dir(out_dir, payload["epoch"]))
        except (OSError, ValueError) as err:
            raise ConfigError(f"checkpoint {path}: its learned rows cannot be loaded: "
                              f"{err}") from None
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["rng"][rank])
    return payload["epoch"], payload["best"]


def _read(out_dir: Path, rank: int) -> dict:
    """The checkpoint as this rank needs it (with its own state file when there are
    per-rank files). Local; ``ConfigError`` when missing or unreadable."""
    path = out_dir / FILE
    if not path.is_file():
        raise ConfigError(f"train.resume is set but {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        missing = [k for k in ("epoch", "rng", "best", "config_hash", "world_size")
                   if k not in payload]
        if missing:
            raise KeyError(f"missing {missing}")
        if payload.get("per_rank"):
            path = _rank_file(out_dir, payload["epoch"], rank)
            if not path.is_file():
                raise FileNotFoundError(f"{out_dir / FILE} names epoch {payload['epoch']}, "
                                        f"but this rank's state {path.name} does not exist")
            payload.update(torch.load(path, map_location="cpu", weights_only=True))
        missing = [k for k in ("model", "optimizer") if k not in payload]
        if missing:
            raise KeyError(f"missing {missing}")
    except Exception as err:  # torch raises many kinds for a damaged file
        raise ConfigError(f"checkpoint {path} is corrupt or unreadable: {err}") from None
    return payload
