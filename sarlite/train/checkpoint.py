"""Checkpoints: model, optimizer, epoch, every rank's RNG state and the config hash.

Rank 0 writes ``checkpoint.pt``. A model with parameters of its own on each rank (the
learned rows of a heterogeneous graph's featureless types, held by their owners) is
saved by every rank too: ``checkpoint.e<epoch>.rank<r>.pt`` holds rank ``r``'s model and
optimizer state, written before ``checkpoint.pt`` names that epoch, and the files of
older epochs are removed after it. So a run killed while saving resumes from the last
complete checkpoint. Learned rows kept in the KV store (sampled training's
:class:`~sarlite.train.models.SampledEmbeddings`) are saved the same way, by all ranks
together, under ``embeddings.e<epoch>/``.

Loading reads tensors and plain data only (``weights_only``): a file holding anything else
(a pickled object, which could run code) is refused with one error, never executed.

``train.overwrite`` deletes nothing before the new run has shown that its input works:
:func:`start_fresh` moves the earlier run's files into ``out_dir/.previous-<time>-<pid>/``
and :func:`settle_previous` later removes that folder (once this run has a
``checkpoint.pt``, or has ended) or moves its files back (the run stopped before).
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import torch

from .. import comm
from ..partition.atomic import atomic_write
from .config import Config, ConfigError
from .models import replicated
from .outputs import CURVES, METRICS, SUMMARY, on_rank0

FILE = "checkpoint.pt"
PREVIOUS = ".previous-"             # prefix of the folders train.overwrite moves files into


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
    sampling, ignore = cfg.train.sampling, cfg.train.ignore_label
    return (cfg.digest("dataset", "partition", "model", "optim") + str(cfg.train.seed) +
            (sampling.model_dump_json() if sampling is not None else "") +
            (f"ignore{ignore}" if ignore is not None else ""))


def save(out_dir: Path, cfg: Config, epoch: int, model, optimizer, best: dict,
         rank: int, sparse=None) -> None:
    """Write ``out_dir/checkpoint.pt`` atomically. Rank 0 writes; collective: every rank
    calls it, sends rank 0 its RNG state, and raises if the writing failed. ``sparse``:
    learned rows outside the model (:class:`~sarlite.train.models.SampledEmbeddings`),
    saved first. Rank 0 then removes the files train.overwrite moved aside.

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
        settle_previous(out_dir)            # this run has a checkpoint: the old files go
    on_rank0(write, rank, "checkpoint_written")
    for old in _rank_files(out_dir, rank):
        if old != _rank_file(out_dir, epoch, rank):
            old.unlink(missing_ok=True)
    if rank == 0:
        for old in _sparse_dirs(out_dir):
            if old != _sparse_dir(out_dir, epoch):
                shutil.rmtree(old, ignore_errors=True)


def _outputs(out_dir: Path) -> list[Path]:
    """A run's files in ``out_dir``, ``checkpoint.pt`` first."""
    return ([out_dir / name for name in (FILE, METRICS, SUMMARY, CURVES)
             if (out_dir / name).exists()] + _rank_files(out_dir) + _sparse_dirs(out_dir))


def start_fresh(out_dir: Path, overwrite: bool) -> Path | None:
    """Rank 0, before a run that does not resume: refuse an ``out_dir`` holding another
    run's checkpoint, or (``overwrite``) move it and that run's outputs aside, into a new
    ``out_dir/.previous-<time>-<pid>/`` (``checkpoint.pt`` first: see
    :func:`settle_previous`), with ``os.replace`` on the same filesystem.

    Returns
    -------
    Path | None
        The folder the files were moved into; ``None`` when nothing was moved.

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
        return None
    old = _outputs(out_dir)
    if not old:
        return None
    aside = out_dir / f"{PREVIOUS}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    aside.mkdir()
    for item in old:
        os.replace(item, aside / item.name)
    return aside


def settle_previous(out_dir: Path) -> tuple[str, list[Path]]:
    """Rank 0: end what :func:`start_fresh` began. When ``out_dir/checkpoint.pt`` exists
    (the new run has written its first checkpoint) the folders ``.previous-*`` are
    removed; when it does not (the run stopped before) their files are moved back over the
    stopped run's, ``checkpoint.pt`` last. Called after each checkpoint, when a run fails,
    and at each start: a process killed in between (the launcher stops every worker on the
    first failure) leaves a state the next start settles the same way.

    Returns
    -------
    tuple[str, list[Path]]
        ``("removed", folders)`` or ``("restored", files moved back)``; no paths when there
        was nothing to settle.
    """
    if (out_dir / FILE).exists():
        return "removed", discard_previous(out_dir)
    restored = []
    for folder in _previous(out_dir):
        items = sorted(folder.iterdir(), key=lambda p: p.name == FILE)   # checkpoint last
        for item in items:
            target = out_dir / item.name
            if item.is_dir() and target.is_dir():
                shutil.rmtree(target)       # the stopped run's learned rows of that epoch
            os.replace(item, target)
            restored.append(target)
        folder.rmdir()
    return "restored", restored


def discard_previous(out_dir: Path) -> list[Path]:
    """Rank 0, after a run ended cleanly: remove the folders ``.previous-*`` (the files
    train.overwrite moved aside). Returns them."""
    folders = _previous(out_dir)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return folders


def _previous(out_dir: Path) -> list[Path]:
    """The folders train.overwrite moved earlier runs' files into."""
    return sorted(p for p in out_dir.glob(f"{PREVIOUS}*") if p.is_dir())


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
        except Exception as err:  # torch refused or could not parse a file of the rows
            raise ConfigError(f"checkpoint {path}: its learned rows in "
                              f"{_sparse_dir(out_dir, payload['epoch'])} cannot be loaded: "
                              f"a file there {_refusal(err)}") from None
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
    payload = _load_file(path, ("epoch", "rng", "best", "config_hash", "world_size"))
    if payload.get("per_rank"):
        own = _rank_file(out_dir, payload["epoch"], rank)
        if not own.is_file():
            raise ConfigError(f"checkpoint {path} names epoch {payload['epoch']}, but this "
                              f"rank's state {own.name} does not exist")
        payload.update(_load_file(own, ()))
    missing = [k for k in ("model", "optimizer") if k not in payload]
    if missing:
        raise ConfigError(f"checkpoint {path} is corrupt or unreadable, not a checkpoint "
                          f"sarlite wrote: it lacks {missing}")
    return payload


def _load_file(path: Path, keys: tuple) -> dict:
    """``path`` read as tensors and plain data only, a dict holding ``keys``. Local.

    Raises
    ------
    ConfigError
        The file cannot be read, is damaged, holds anything else (e.g. a pickled
        object: refused, never run), or lacks a key.
    """
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:
        raise ConfigError(f"checkpoint {path} cannot be read: {err.strerror or err}") from None
    except Exception as err:  # torch raises many kinds for a damaged or foreign file
        raise ConfigError(f"checkpoint {path} {_refusal(err)}") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"checkpoint {path} is corrupt or unreadable, not a checkpoint "
                          f"sarlite wrote: it holds a {type(payload).__name__}, not a dict")
    missing = [k for k in keys if k not in payload]
    if missing:
        raise ConfigError(f"checkpoint {path} is corrupt or unreadable, not a checkpoint "
                          f"sarlite wrote: it lacks {missing}")
    return payload


_OBJECT = re.compile(r"GLOBAL ([\w.]+)|Unsupported class ([\w.]+)")


def _refusal(err: Exception) -> str:
    """What to say of a file ``torch.load(weights_only=True)`` refused with ``err``: the
    Python object it holds when torch names one, else that it is damaged (torch's advice
    to load it with ``weights_only=False`` is left out: that would run the file's code)."""
    text = str(err)
    found = _OBJECT.search(text)
    if found:
        return (f"is not a checkpoint sarlite wrote: it holds the Python object "
                f"{found.group(1) or found.group(2)}, and sarlite never loads code or objects "
                f"from a checkpoint, only tensors and plain data (nothing in the file was "
                f"run); remove or replace it")
    if "weights_only" in text or "Weights only" in text:
        reason = "not in the format torch.save writes, or cut short"
    else:
        reason = (text.strip().splitlines() or [type(err).__name__])[0].split(". ")[0]
    return (f"is corrupt or unreadable, not a checkpoint sarlite wrote ({reason}); remove "
            f"or replace it")
