"""examples/dgl: the DGL-shaped training scripts run under torchrun with 2 workers and learn."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sarlite
from sarlite.data import homophilous_graph

ROOT = Path(__file__).resolve().parents[1]
NUM_NODES = 1000


def _graph():
    """Planted classes; DGL's data names; 501 training nodes (251 and 250 per worker, so
    with batches of 125 worker 1 gets an empty third batch); about 10% of the undirected
    pairs held out (both directions) as the edge ``test_mask``."""
    g = homophilous_graph(num_nodes=NUM_NODES, avg_degree=10, feat_dim=16, num_classes=4,
                          feature_signal=0.5, seed=1)
    g.ndata["features"] = g.ndata.pop("feat")
    g.ndata["labels"] = g.ndata.pop("label")
    gen = torch.Generator().manual_seed(0)
    train = torch.zeros(NUM_NODES, dtype=torch.bool)
    train[torch.randperm(NUM_NODES, generator=gen)[:501]] = True
    g.ndata["train_mask"] = train
    g.ndata["val_mask"] &= ~train
    g.ndata["test_mask"] &= ~train
    src, dst = g.edges()
    pair = torch.minimum(src, dst) * NUM_NODES + torch.maximum(src, dst)
    pairs, which = torch.unique(pair, return_inverse=True)
    g.edata["test_mask"] = (torch.rand(pairs.numel(), generator=gen) < 0.1)[which]
    return g


@pytest.fixture(scope="module")
def part_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("dglparts")
    sarlite.partition_graph(_graph(), "g", 2, path)
    return str(path / "g.json")


def _torchrun(script: str, part_config: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DGLBACKEND": "pytorch"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", "2", str(ROOT / "examples" / "dgl" / script),
           "--graph_name", "g", "--part_config", part_config, *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _losses(out: str) -> list[float]:
    return [float(v) for v in re.findall(r"Epoch \d+ \| Loss ([\d.]+)", out)]


def test_node_classification_example_learns(part_config):
    out = _torchrun("node_classification.py", part_config, "--batch_size", "125",
                    "--num_epochs", "8", "--eval_every", "4")
    losses = _losses(out)
    assert len(losses) == 8 and losses[-1] < 0.7 * losses[0]
    accuracy = float(re.search(r"TestAccuracy ([\d.]+)", out).group(1))
    assert accuracy > 0.6, out                            # chance: 0.25


def test_link_prediction_example_learns(part_config):
    out = _torchrun("link_prediction.py", part_config, "--num_epochs", "4")
    losses = _losses(out)
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0]
    auc = float(re.search(r"TestAUC ([\d.]+)", out).group(1))
    assert auc > 0.7, out                                 # chance: 0.5
