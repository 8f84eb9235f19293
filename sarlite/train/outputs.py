"""What a run leaves in its output directory (written by rank 0 only)."""
from __future__ import annotations

import json
import platform
from pathlib import Path


class MetricsLog:
    """``metrics.jsonl``: one JSON object per epoch, flushed as it is written.

    On resume, lines for epochs at or after ``start_epoch`` are dropped first, so the file
    reads as one uninterrupted run.
    """

    def __init__(self, out_dir: Path, start_epoch: int):
        self.path = out_dir / "metrics.jsonl"
        self.rows = []
        if start_epoch > 0 and self.path.is_file():
            self.rows = [row for row in map(json.loads, self.path.read_text().splitlines())
                         if row["epoch"] < start_epoch]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))

    def append(self, row: dict) -> None:
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def versions() -> dict:
    import dgl
    import torch

    from .. import __version__
    return {"sarlite": __version__, "torch": torch.__version__, "dgl": dgl.__version__,
            "python": platform.python_version()}


def write_summary(out_dir: Path, summary: dict) -> Path:
    path = out_dir / "summary.json"
    path.write_text(json.dumps({**summary, "versions": versions()}, indent=2))
    return path


def plot_curves(out_dir: Path, rows: list[dict]) -> Path:
    """``curves.png``: loss and accuracy per epoch (headless matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [r for r in rows if "val_acc" in r]
    colors = {"train": "C0", "val": "C1", "test": "C2"}
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot([r["epoch"] for r in rows], [r["loss"] for r in rows], color="k",
                 linestyle=":", label="training pass")
    for split, color in colors.items():
        epochs = [r["epoch"] for r in evaluated]
        ax_loss.plot(epochs, [r[f"{split}_loss"] for r in evaluated], color=color,
                     label=split)
        ax_acc.plot(epochs, [r[f"{split}_acc"] for r in evaluated], color=color, label=split)
    for ax, title in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    path = out_dir / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
