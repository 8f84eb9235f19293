"""The shipped configs: each one validates, and the real-dataset ones train from a folder
in their dataset's own layout with one command, as a user runs it."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ogb_layout as layout
from sarlite.train import load_config
from sarlite.train.config import PACKAGED

CONFIGS = sorted(PACKAGED.glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_validates(path):
    load_config(str(path), [])


def _write(kind: str, root: Path) -> None:
    feat, label, splits = layout.random_node_data(80, 8, 4, seed=0)
    edges = np.random.default_rng(1).integers(0, 80, (400, 2))
    if kind == "ogbn-arxiv":
        layout.write_ogbn_csv(root / "ogbn_arxiv", edges, feat, label, splits, "time")
    elif kind == "ogbn-mag":
        sizes = {"author": 40, "field_of_study": 10, "institution": 6, "paper": 80}
        rng = np.random.default_rng(2)
        triplets = (("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
                    ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study"))
        relations = {(s, r, d): np.stack([rng.integers(0, sizes[s], 120),
                                          rng.integers(0, sizes[d], 120)], 1)
                     for s, r, d in triplets}
        layout.write_ogbn_mag(root / "ogbn_mag", sizes, relations, feat,
                              np.arange(80) % 10 + 2010, label, splits)
    else:
        types = np.random.default_rng(2).integers(1, 4, 80)
        layout.write_reddit(root / "reddit_0a1b2c3d", feat, label, types, edges[:, 0],
                            edges[:, 1])


@pytest.mark.parametrize("config,kind", [("ogbn_arxiv_gcn", "ogbn-arxiv"),
                                         ("reddit_sage", "reddit"),
                                         ("ogbn_mag_rgcn", "ogbn-mag")])
def test_real_dataset_config_trains_with_one_command(tmp_path, config, kind):
    _write(kind, tmp_path / "data")
    result = subprocess.run(
        [sys.executable, "-m", "sarlite.cli", "train", "--config", config,
         "--nproc", "2", "--set", f"dataset.data_dir={tmp_path / 'data'}", "train.epochs=2",
         f"partition.cache_dir={tmp_path / 'parts'}", f"train.out_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=300,
        cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["config"]["dataset"]["name"] == kind
    assert 0.0 <= summary["test_acc_at_best_val"] <= 1.0
    if kind == "ogbn-mag":        # heterogeneous: R-GCN over the 4 relations and reverses
        assert summary["config"]["model"]["type"] == "rgcn"
        parts = json.loads((tmp_path / "parts" / "graph.json").read_text())
        assert len(parts["etypes"]) == 8 and "paper:cited_by:paper" in parts["etypes"]
        epochs = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        assert len(epochs) == 2 and all(np.isfinite(json.loads(e)["loss"]) for e in epochs)
