"""Sampled training in the training application: full-batch accuracy, exact inference."""
import json

import pytest
import torch
import torch.nn.functional as F

from harness import spawn
from sarlite.train import Config, load_config
from sarlite.train.config import ConfigError
from sarlite.train.models import build_model
from sarlite.train.partitions import dataset_graph

SAMPLED_EPOCHS = 20


def _configs(tmp_path) -> tuple[dict, dict]:
    """GraphSAGE on the default synthetic graph, full-batch and sampled."""
    base = {"dataset": {"name": "synthetic"},
            "partition": {"cache_dir": str(tmp_path / "parts")},
            "model": {"type": "sage", "layers": 2, "hidden": 32, "dropout": 0.5}}
    full = {**base, "train": {"epochs": 100, "eval_every": 10,
                              "out_dir": str(tmp_path / "full")}}
    sampled = {**base, "train": {"epochs": SAMPLED_EPOCHS, "eval_every": 5,
                                 "checkpoint_every": SAMPLED_EPOCHS,
                                 "out_dir": str(tmp_path / "sampled"),
                                 "sampling": {"fanouts": [10, 10], "batch_size": 64}}}
    return full, sampled


def _run_both(rank, world, configs):
    from sarlite.train import run
    return [run(Config.model_validate(cfg)) for cfg in configs]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("train")
    full, sampled = _configs(tmp_path)
    summaries = spawn(_run_both, 2, [full, sampled], timeout=240)[0]
    return tmp_path, sampled, summaries


def test_sampled_training_reaches_full_batch_accuracy_within_two_points(runs):
    _, _, (full, sampled) = runs
    assert full["test_acc_at_best_val"] > 0.9                     # chance is 0.125
    assert abs(sampled["test_acc_at_best_val"] - full["test_acc_at_best_val"]) < 0.02


def test_full_graph_evaluation_after_sampled_training_equals_a_dgl_forward(runs):
    tmp_path, sampled_dict, _ = runs
    cfg = Config.model_validate(sampled_dict)
    out_dir = tmp_path / "sampled"
    last = json.loads((out_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["epoch"] == SAMPLED_EPOCHS - 1
    g = dataset_graph(cfg)
    model = build_model(cfg.model, g.ndata["feat"].shape[1], int(g.ndata["label"].max()) + 1)
    model.load_state_dict(torch.load(out_dir / "checkpoint.pt")["model"])
    model.eval()
    with torch.no_grad():
        logits = model([g, g], g.ndata["feat"])
    labels = g.ndata["label"]
    for split in ("train", "val", "test"):
        mask = g.ndata[f"{split}_mask"]
        loss = F.cross_entropy(logits[mask], labels[mask]).item()
        correct = (logits[mask].argmax(1) == labels[mask]).float().mean().item()
        assert last[f"{split}_loss"] == pytest.approx(loss, rel=1e-4, abs=1e-5)
        assert last[f"{split}_acc"] == pytest.approx(correct, abs=1.5 / int(mask.sum()))


@pytest.mark.parametrize("overrides, message", [
    (["train.sampling={fanouts: [10], batch_size: 8}"], "fanouts has 1 entries but the "
     "model has 2 layers"),
    (["train.sampling={fanouts: [10, 10], batch_size: 8}", "model.type=sgc"],
     "needs a layer-per-block model"),
    (["train.sampling={fanouts: [10, 0], batch_size: 8}"], "fanouts must be"),
    (["train.sampling={fanouts: [10, 10], batch_size: 0}"], "batch_size"),
])
def test_bad_sampling_settings_are_config_errors_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
