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


def test_a_memory_budget_on_a_heterogeneous_dataset_plans_and_gives_sar_s_losses(tmp_path):
    runs = {}
    for name, engine in (("sar", {}), ("budget", {"memory_budget": "64GiB"})):
        cfg = _config(tmp_path, name, batch_norm=True)
        cfg["engine"], cfg["train"]["epochs"] = engine, 5
        runs[name] = spawn(_run, 2, cfg, timeout=300)[0]
    assert runs["budget"]["memory_plan"]["layers"] == ["one-shot", "one-shot"]
    assert _losses(tmp_path / "budget") == pytest.approx(_losses(tmp_path / "sar"), abs=1e-5)


def test_rgcn_with_batch_norm_learns(tmp_path):
    summary = spawn(_run, 2, _config(tmp_path, "bn", batch_norm=True), timeout=300)[0]
    assert summary["test_acc_at_best_val"] > 0.6


def _metrics(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_sampled_rgcn_learns_the_featureless_types_rows_far_above_an_mlp(tmp_path):
    sampling = {"fanouts": [8, 8], "batch_size": 64}
    cfg = _config(tmp_path, "sampled")
    cfg["train"].update(epochs=12, sampling=sampling)
    summary = spawn(_run, 2, cfg, timeout=300)[0]
    assert summary["test_acc_at_best_val"] > 0.6, summary["test_acc_at_best_val"]


def test_label_only_rgcn_gives_the_full_graphs_losses(tmp_path):
    runs = {}
    for name, label_only in (("full", False), ("label_only", True)):
        cfg = _config(tmp_path, name, dropout=0.0, label_only=label_only)
        cfg["train"]["epochs"] = 5
        spawn(_run, 2, cfg, timeout=300)
        runs[name] = _metrics(tmp_path / name)
    for key in ("loss", "train_loss", "val_acc", "test_loss"):
        assert [r[key] for r in runs["label_only"]] == \
            pytest.approx([r[key] for r in runs["full"]], abs=1e-5), key


def test_resuming_an_rgcn_reproduces_the_uninterrupted_run_bit_for_bit(tmp_path):
    def config(name, epochs, resume=False):
        cfg = _config(tmp_path, name)
        cfg["train"].update(epochs=epochs, checkpoint_every=2, resume=resume)
        return cfg
    for cfg in (config("a", 4), config("b", 2), config("b", 4, resume=True)):
        spawn(_run, 2, cfg, timeout=300)
    exact = ("loss", "train_loss", "val_acc", "test_loss", "test_acc")
    a, b = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert [r["epoch"] for r in b] == list(range(4))
    assert [[r[k] for k in exact] for r in a] == [[r[k] for k in exact] for r in b]
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint*")) == [
        "checkpoint.e4.rank0.pt", "checkpoint.e4.rank1.pt", "checkpoint.pt"]


def test_a_sampled_rgcn_resumes_with_its_learned_rows(tmp_path):
    def config(epochs, resume=False):
        cfg = _config(tmp_path, "run")
        cfg["train"].update(epochs=epochs, checkpoint_every=2, resume=resume,
                            sampling={"fanouts": [8, 8], "batch_size": 64})
        return cfg
    first = spawn(_run, 2, config(2), timeout=300)[0]
    assert sorted(p.name for p in (tmp_path / "run").glob("embeddings.e*")) == ["embeddings.e2"]
    resumed = spawn(_run, 2, config(8, resume=True), timeout=300)[0]
    assert [r["epoch"] for r in _metrics(tmp_path / "run")] == list(range(8))
    assert sorted(p.name for p in (tmp_path / "run").glob("embeddings.e*")) == ["embeddings.e8"]
    assert resumed["test_acc_at_best_val"] > max(first["test_acc_at_best_val"], 0.6)


@pytest.mark.parametrize("change, message", [
    ({"model": {"type": "gcn"}}, "model.type=gcn"),
    ({"model": {"type": "mlp", "label_only": True}}, "model.label_only with model.type=mlp"),
])
def test_what_heterogeneous_datasets_do_not_support_is_one_clear_error(tmp_path, change,
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
