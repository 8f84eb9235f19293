"""What a run leaves in its output directory (written by rank 0 only)."""
from __future__ import annotations

import json
import logging
import math
import platform
from pathlib import Path
from typing import Callable

from .. import comm
from ..partition.atomic import atomic_write, naming_full_disk

log = logging.getLogger("sarlite.train")

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CURVES = "curves.png"


def finite_or_null(value):
    """``value`` with every non-finite float (inf, nan), also inside lists and dicts,
    replaced by ``None``: strict JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def _dumps(obj, **kwargs) -> str:
    return json.dumps(finite_or_null(obj), allow_nan=False, **kwargs)


def _read_rows(path: Path) -> list[dict]:
    """The rows of ``path``; a torn last line (a run killed while writing it) is dropped
    with a warning.

    Raises
    ------
    ValueError
        A line before the last is not a JSON object.
    """
    lines = path.read_text(errors="replace").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "epoch" not in row:
                raise ValueError("not an object with an 'epoch'")
        except ValueError as err:
            if number < len(lines):
                raise ValueError(f"{path} line {number} is not a metrics row ({err}); "
                                 f"repair or remove the file to resume") from None
            log.warning("dropped the torn last line %d of %s (a run stopped while writing "
                        "it)", number, path)
            break
        rows.append(row)
    return rows


class MetricsLog:
    """``metrics.jsonl``: one JSON object per epoch, flushed as it is written.

    The file is strict JSON: non-finite floats (a nan or inf loss, allowed by
    ``train.allow_nonfinite``) are written as ``null``, also in :attr:`rows`.
    On resume, lines for epochs at or after ``start_epoch`` are dropped first, so the file
    reads as one uninterrupted run; a torn last line (from a killed run) is dropped with a
    warning.

    Raises
    ------
    ValueError
        On resume, a line before the last cannot be parsed (the message names the file and
        the line number).
    OSError
        The disk is full (errno ``ENOSPC``, naming the file), or the file cannot be written.
    """

    def __init__(self, out_dir: Path, start_epoch: int):
        self.path = out_dir / METRICS
        self.rows = []
        if start_epoch > 0 and self.path.is_file():
            self.rows = [row for row in _read_rows(self.path) if row["epoch"] < start_epoch]
        with naming_full_disk(self.path):
            self.path.write_text("".join(_dumps(r) + "\n" for r in self.rows))

    def append(self, row: dict) -> None:
        row = finite_or_null(row)
        self.rows.append(row)
        with naming_full_disk(self.path), self.path.open("a") as f:
            f.write(_dumps(row) + "\n")


def _for_peers(failure: Exception | None, kind: str) -> Exception | None:
    """What the other ranks raise for rank 0's ``failure``: a copy of what a user can fix,
    else a ``RuntimeError`` naming it (rank 0 shows the traceback)."""
    if failure is None or isinstance(failure, (ValueError, OSError)):
        return failure
    return RuntimeError(f"rank 0 failed ({kind}): {type(failure).__name__}: {failure}")


def on_rank0(fn: Callable[[], object], rank: int, kind: str):
    """``fn()`` run by rank 0 alone; its result there (``None`` elsewhere).

    Collective (one object broadcast): every rank calls it, and if ``fn`` fails every rank
    raises, so no rank runs on alone. Rank 0 raises ``fn``'s own error; the others raise a
    copy of it when it is a ``ValueError`` or ``OSError`` (what a user can fix), else a
    ``RuntimeError`` naming it.
    """
    result, failure = None, None
    if rank == 0:
        try:
            result = fn()
        except Exception as err:  # every rank must hear of it, whatever it is
            failure = err
    shared = comm.broadcast_object(_for_peers(failure, kind), src=0, kind=kind)
    if failure is not None:
        raise failure
    if shared is not None:
        raise shared
    return result


def versions() -> dict:
    import dgl
    import torch

    from .. import __version__
    return {"sarlite": __version__, "torch": torch.__version__, "dgl": dgl.__version__,
            "python": platform.python_version()}


def write_summary(out_dir: Path, summary: dict) -> Path:
    """``summary.json`` (strict JSON, non-finite floats as ``null``), written atomically."""
    path = out_dir / SUMMARY
    text = _dumps({**summary, "versions": versions()}, indent=2)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))
    return path


def plot_curves(out_dir: Path, rows: list[dict]) -> Path:
    """``curves.png``: loss and accuracy per epoch (headless matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [r for r in rows if "val_acc" in r]
    colors = {"train": "C0", "val": "C1", "test": "C2"}
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    try:
        ax_loss.plot([r["epoch"] for r in rows], _series(rows, "loss"), color="k",
                     linestyle=":", label="training pass")
        for split, color in colors.items():
            epochs = [r["epoch"] for r in evaluated]
            ax_loss.plot(epochs, _series(evaluated, f"{split}_loss"), color=color,
                         label=split)
            ax_acc.plot(epochs, _series(evaluated, f"{split}_acc"), color=color,
                        label=split)
        for ax, title in ((ax_loss, "loss"), (ax_acc, "accuracy")):
            ax.set_xlabel("epoch")
            ax.set_title(title)
            ax.legend()
        fig.tight_layout()
        path = out_dir / CURVES
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    finally:
        plt.close(fig)
    return path


def _series(rows: list[dict], key: str) -> list[float]:
    """``row[key]`` of each row, ``null`` (a non-finite value) as nan: a gap in the plot."""
    return [math.nan if r[key] is None else r[key] for r in rows]
