"""The training application on a heterogeneous dataset: R-GCN on the synthetic graph with
ogbn-mag's schema learns far above an MLP on the paper features, alike in every mode."""
import json

import pytest

from harness import spawn
from sarlite.train import Config
from sarlite.train.config import ConfigError
from sarlite.train.loop import _check_hetero

MAG_LIKE = {"name": "mag_like", "num_nodes": 1500, "avg_degree": 6, "num_classes": 6,
            "feat_dim": 16}


def _config(tmp_path, name: str, **model) -> dict:
    return {"dataset": MAG_LIKE, "partition": {"cache_dir": str(tmp_path / "parts")},
            "model": {"type": "rgcn", "layers": 2, "hidden": 32, "dropout": 0.2, **model},
            "train": {"epochs": 30, "eval_every": 1, "out_dir": str(tmp_path / name)}}


def _run(rank, world, cfg_dict):
    from sarlite.train import run
    return run(Config.model_validate(cfg_dict))


def _losses(out_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in (out_dir / "metrics.jsonl").read_text()
            .splitlines()]


def test_rgcn_learns_far_above_an_mlp_and_alike_in_every_mode(tmp_path):
    runs = {}
    for name, engine, model in (("sar", "sar", {}), ("sa", "sa", {}),
                                ("one-shot", "one-shot", {}), ("mlp", "sar", {"type": "mlp"})):
        cfg = _config(tmp_path, name, **model)
        cfg["engine"] = {"mode": engine}
        runs[name] = spawn(_run, 2, cfg, timeout=300)[0]
    rgcn, mlp = runs["sar"]["test_acc_at_best_val"], runs["mlp"]["test_acc_at_best_val"]
    assert rgcn > 0.6 and rgcn > mlp + 0.25, (rgcn, mlp)
    for mode in ("sa", "one-shot"):
        assert _losses(tmp_path / mode) == pytest.approx(_losses(tmp_path / "sar"), abs=1e-5)


def test_rgcn_with_batch_norm_learns(tmp_path):
    summary = spawn(_run, 2, _config(tmp_path, "bn", batch_norm=True), timeout=300)[0]
    assert summary["test_acc_at_best_val"] > 0.6


@pytest.mark.parametrize("change, message", [
    ({"model": {"type": "gcn"}}, "model.type=gcn"),
    ({"model": {"type": "rgcn", "label_only": True}}, "model.label_only"),
    ({"train": {"checkpoint_every": 5}}, "train.checkpoint_every"),
    ({"train": {"sampling": {"fanouts": [5, 5], "batch_size": 8}}}, "train.sampling"),
])
def test_what_heterogeneous_datasets_do_not_support_yet_is_one_clear_error(tmp_path, change,
                                                                          message):
    cfg = _config(tmp_path, "x")
    for section, values in change.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    with pytest.raises(ConfigError, match=f"heterogeneous: {message}"):
        _check_hetero(Config.model_validate(cfg), hetero=True)


def test_rgcn_on_a_homogeneous_dataset_is_refused(tmp_path):
    cfg = _config(tmp_path, "x")
    cfg["dataset"] = {"name": "synthetic"}
    with pytest.raises(ConfigError, match="rgcn needs a heterogeneous dataset"):
        _check_hetero(Config.model_validate(cfg), hetero=False)
