"""Labels and split masks, checked when a partition is loaded, on every rank together.

A row is *used* when a split mask holds it and its label is not ``train.ignore_label``; a
used row must hold a class, a whole number in ``[0, classes)``. The classes are
``dataset.num_classes`` for a synthetic dataset or when the config sets it for a real one,
else the largest label of a used row on any rank + 1 (rank 0 then warns about classes no
used row holds). Rows in no split mask may hold anything (OGB's -1 for an unlabelled node).
Rows holding ``train.ignore_label`` leave the split masks here, and so the loss, its
divisor, the accuracies and the sampled loader's seeds.
"""
from __future__ import annotations

import itertools
import logging

import torch

from .. import comm
from ..comm.errors import ranks_text
from ..data import SYNTHETIC_DATASETS
from .config import Config, ConfigError

SHOWN = 5                       # offending rows a label error lists

log = logging.getLogger("sarlite.train")


def _declared_classes(cfg: Config) -> int | None:
    """The number of classes the config declares: ``dataset.num_classes`` of a synthetic
    dataset, or of a real one when the config sets it; ``None`` when a real dataset's
    config does not (its classes are then inferred from its labels)."""
    data = cfg.dataset
    if data.name.lower() in SYNTHETIC_DATASETS or "num_classes" in data.model_fields_set:
        return data.num_classes
    return None


def _shape_problem(labels: torch.Tensor, masks: dict, where: str) -> str | None:
    """What is wrong with the shapes and values of the split masks (one value per owned row,
    boolean or 0/1; DGL stores bool as uint8, which the partition loader makes bool again)
    or of the labels (one per owned row); ``None`` when nothing is."""
    rows = labels.shape[0]
    if labels.dim() != 1:
        return (f"node field '{where}label' has shape {tuple(labels.shape)}; it must hold "
                f"one class per owned row ({rows},)")
    for split, mask in masks.items():
        name = f"{where}{split}_mask"
        if mask.dim() != 1 or len(mask) != rows:
            return (f"node field {name!r} has shape {tuple(mask.shape)}; a split mask holds "
                    f"one value per owned row ({rows},)")
        other = ((mask != 0) & (mask != 1)).nonzero() if mask.dtype != torch.bool else []
        if len(other):
            row = int(other[0, 0])
            return (f"node field {name!r} holds {mask[row].item()} at local row {row}; a "
                    f"split mask must be boolean or 0/1")
    return None


def _no_class(labels: torch.Tensor, declared: int | None) -> torch.Tensor:
    """Which rows hold no class: a negative, fractional or non-finite label, or (classes
    ``declared``) one of ``declared`` or more."""
    bad = labels < 0
    if labels.is_floating_point():
        bad |= ~torch.isfinite(labels) | (labels != labels.floor())
    if declared is not None:
        bad |= labels >= declared
    return bad


def _label_problem(labels: torch.Tensor, bad: torch.Tensor, declared: int | None,
                   where: str, first_id: int) -> str:
    """The error for the ``bad`` rows (bool per owned row), naming the first few."""
    rows = bad.nonzero().squeeze(1)
    shown = rows[:SHOWN].tolist()
    values = ", ".join(f"node {first_id + r} holds {labels[r].item()}" for r in shown)
    what = (f"outside the classes 0..{declared - 1} (dataset.num_classes={declared})"
            if declared is not None else f"that {'is' if len(rows) == 1 else 'are'} no "
            f"class (a whole number >= 0; the number of classes is the largest label + 1)")
    ids = f"type-wise '{where[:-1]}' ids" if where else "node ids"
    count = f"{len(rows)} label{'s' if len(rows) != 1 else ''}"
    return (f"node field '{where}label' holds {count} {what} on rows of a split "
            f"mask: {values}{', ...' if len(rows) > SHOWN else ''} ({ids} of the "
            f"partitioned graph; local rows {', '.join(map(str, shown))}); fix the dataset, "
            f"or set train.ignore_label to the value that marks unlabelled nodes")


def checked_labels(cfg: Config, labels: torch.Tensor, masks: dict, rank: int,
                    first_id: int, ntype: str | None = None) -> tuple:
    """This partition's labels (int64), its split masks (bool, without the rows that hold
    train.ignore_label) and the number of classes, checked on every rank together.

    A row is *used* when a split mask holds it and its label is not train.ignore_label; a
    used row must hold a class, a whole number in ``[0, classes)``. The classes are
    :func:`_declared_classes`, else the largest label of a used row on any rank + 1 (rank
    0 warns when some of them occur on no used row). Rows in no split mask are not
    checked: they may hold anything (OGB's -1 for an unlabelled node).
    ``first_id``: the global (type-wise for ``ntype``) id of the first owned row.
    Collective (one object gather).

    Raises
    ------
    ConfigError
        On every rank (a rank with the problem names its own partition, the others the
        first such rank's): a split mask that is not one boolean (or 0/1) value per owned
        row, labels that are not one per row, or used rows that hold no class (their
        count, and the first ones with their ids and labels).
    """
    where, declared = (f"{ntype}/" if ntype else ""), _declared_classes(cfg)
    problem, present = _shape_problem(labels, masks, where), []
    if problem is None:
        masks = {s: m.bool() for s, m in masks.items()}
        if cfg.train.ignore_label is not None:
            keep = labels != cfg.train.ignore_label
            masks = {s: m & keep for s, m in masks.items()}
        used = masks["train"] | masks["val"] | masks["test"]
        bad = used & _no_class(labels, declared)
        if bad.any():
            problem = _label_problem(labels, bad, declared, where, first_id)
        present = torch.unique(labels[used & ~bad]).long().tolist()
    classes = _agree_on_classes(problem, present, declared, rank)
    return labels.long(), masks, classes


def _agree_on_classes(problem: str | None, present: list[int], declared: int | None,
                      rank: int) -> int:
    """Every rank's label ``problem`` and ``present`` classes, gathered: a problem raised
    on every rank (this rank's own, else the first rank's), else the number of classes.
    Collective."""
    gathered = comm.all_gather_object((problem, present), "labels")
    failed = [r for r, (p, _) in enumerate(gathered) if p is not None]
    if failed:
        own = rank if rank in failed else failed[0]
        others = [r for r in failed if r != own]
        also = f" (and that of {ranks_text(others)})" if others else ""
        raise ConfigError(f"rank {own}'s partition{also}: {gathered[own][0]}")
    found = set().union(*(set(c) for _, c in gathered))
    if declared is not None:
        return declared
    classes = max(found, default=-1) + 1
    if rank == 0 and len(found) < classes:
        absent = list(itertools.islice((c for c in range(classes) if c not in found),
                                       SHOWN))
        log.warning("the largest label is %d, so %d classes, but %d of them (%s%s) occur on "
                    "no row of a split mask: if the dataset has fewer classes, a label is "
                    "wrong", classes - 1, classes, classes - len(found),
                    ", ".join(map(str, absent)),
                    ", ..." if classes - len(found) > SHOWN else "")
    return classes
