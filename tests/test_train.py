"""The training application: parity with single-process DGL, exact resume, bad input."""
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from harness import spawn
from sarlite import cli
from sarlite.train import Config, load_config
from sarlite.train.checkpoint import trajectory_hash
from sarlite.train.models import build_model, graphs_needed
from sarlite.train.partitions import dataset_graph

SYNTHETIC = {"name": "synthetic", "num_nodes": 2000, "avg_degree": 8, "feat_dim": 16}


def _config(tmp_path, **sections) -> dict:
    base = {"dataset": SYNTHETIC,
            "partition": {"cache_dir": str(tmp_path / "parts")},
            "model": {"type": "gcn", "hidden": 16, "dropout": 0.0},
            "train": {"epochs": 5, "out_dir": str(tmp_path / "run")}}
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return base


def _run(rank, world, cfg_dict):
    from sarlite.train import run
    run(Config.model_validate(cfg_dict))


def _metrics(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def _dgl_losses(cfg: Config) -> list[float]:
    """The same model, seed and optimizer on the unpartitioned graph, one process."""
    g = dataset_graph(cfg)
    x, y, train = g.ndata["feat"], g.ndata["label"], g.ndata["train_mask"]
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, x.shape[1], int(y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr,
                                 weight_decay=cfg.optim.weight_decay)
    losses = []
    for _ in range(cfg.train.epochs):
        logits = model([g] * graphs_needed(cfg.model), x)
        loss = F.cross_entropy(logits[train], y[train], reduction="sum") / train.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _assert_loss_parity(cfg_dict, out_dir):
    spawn(_run, 2, cfg_dict, timeout=300)
    got = [row["loss"] for row in _metrics(out_dir)]
    expected = _dgl_losses(Config.model_validate(cfg_dict))
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_synthetic_losses_match_single_process_dgl_per_epoch(tmp_path, model):
    _assert_loss_parity(_config(tmp_path, model={"type": model}), tmp_path / "run")


def test_torch_kernels_from_yaml_keep_dgls_losses(tmp_path):
    cfg = _config(tmp_path, model={"type": "gat"}, engine={"kernels": "torch"},
                  train={"epochs": 3})
    _assert_loss_parity(cfg, tmp_path / "run")


def test_a_memory_budget_run_keeps_dgls_losses_stays_under_it_and_records_its_plan(tmp_path):
    cfg = _config(tmp_path, engine={"memory_budget": "4GiB"}, train={"epochs": 3})
    _assert_loss_parity(cfg, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["memory_plan"]["layers"] == ["one-shot", "one-shot"]
    assert max(max(r["training_peak_rss_mib"]) for r in _metrics(tmp_path / "run")) < 4096


def test_cora_losses_match_single_process_dgl_per_epoch(tmp_path, data_dir):
    cfg = _config(tmp_path)
    cfg["dataset"] = {"name": "cora", "data_dir": str(data_dir)}
    _assert_loss_parity(cfg, tmp_path / "run")


def test_run_writes_metrics_summary_and_curves(tmp_path):
    spawn(_run, 2, _config(tmp_path, train={"epochs": 3}), timeout=300)
    rows = _metrics(tmp_path / "run")
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    assert {"loss", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss",
            "test_acc", "epoch_time", "peak_rss_mib", "training_peak_rss_mib",
            "bytes_sent"} <= rows[0].keys()
    assert len(rows[0]["peak_rss_mib"]) == 2 and rows[0]["bytes_sent"] > 0
    assert all(t <= p for t, p in zip(rows[0]["training_peak_rss_mib"], rows[0]["peak_rss_mib"]))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and "versions" in summary
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0


def test_resume_reproduces_an_uninterrupted_run_bit_for_bit(tmp_path):
    dropout = {"model": {"type": "gcn", "hidden": 16, "dropout": 0.5}}
    straight = _config(tmp_path / "a", train={"epochs": 6, "checkpoint_every": 3},
                       **dropout)
    first_half = _config(tmp_path / "b", train={"epochs": 3, "checkpoint_every": 3},
                         **dropout)
    resumed = _config(tmp_path / "b", train={"epochs": 6, "checkpoint_every": 3,
                                             "resume": True}, **dropout)
    for cfg in (straight, first_half, resumed):
        spawn(_run, 2, cfg, timeout=300)
    exact = ("loss", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss",
             "test_acc")
    a, b = _metrics(tmp_path / "a" / "run"), _metrics(tmp_path / "b" / "run")
    assert [r["epoch"] for r in b] == list(range(6))
    assert [[r[k] for k in exact] for r in a] == [[r[k] for k in exact] for r in b]


# -- bad input: one clear error, exit status 2 ------------------------------------------

@pytest.mark.parametrize("sets,message", [
    (["model.hiden=3"], "unknown key 'model.hiden'"),
    (["model.hidden=wide"], "model.hidden"),
    (["model.type=transformer"], "model.type"),
    (["dataset.name=imagenet"], "unknown dataset 'imagenet'"),
    (["dataset.name=cora"], "set dataset.data_dir"),
])
def test_bad_config_values_are_one_clear_error(tmp_path, capsys, sets, message):
    assert cli.main(["train", "--set", *sets]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_config_file_is_named(tmp_path, capsys):
    assert cli.main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml does not exist" in capsys.readouterr().err


def test_nproc_different_from_existing_partitions_is_refused(tmp_path, capsys):
    cfg = _config(tmp_path, train={"epochs": 1})
    spawn(_run, 2, cfg, timeout=300)
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(cfg))             # JSON is YAML
    assert cli.main(["train", "--config", str(path), "--nproc", "3"]) == 2
    assert "holds 2 partitions" in capsys.readouterr().err


def _launch(cfg: dict, tmp_path) -> subprocess.CompletedProcess:
    """``sarlite train --nproc 2`` on ``cfg`` written to a file, as a user runs it."""
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(cfg))                 # JSON is YAML
    return subprocess.run([sys.executable, "-m", "sarlite.cli", "train", "--nproc", "2",
                           "--config", str(path)], capture_output=True, text=True,
                          timeout=300)


def _one_error_line(result) -> str:
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "sarlite train: error" in line]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_corrupt_checkpoint_is_reported_once_and_every_worker_fails(tmp_path):
    cfg = _config(tmp_path, train={"epochs": 2, "resume": True})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    assert "corrupt or unreadable" in _one_error_line(_launch(cfg, tmp_path))


def test_data_dir_without_the_dataset_is_one_clear_error(tmp_path):
    cfg = _config(tmp_path)
    cfg["dataset"] = {"name": "cora", "data_dir": str(tmp_path / "empty")}
    (tmp_path / "empty").mkdir()
    assert "ind.cora" in _one_error_line(_launch(cfg, tmp_path))


def test_help_lists_every_config_field():
    result = subprocess.run([sys.executable, "-m", "sarlite.cli", "train", "--help"],
                            capture_output=True, text=True, timeout=120)
    for section, fields in load_config(None).model_dump().items():
        for name in fields:
            assert name in result.stdout, f"{section}.{name} missing from --help"


def test_resume_with_a_different_config_is_refused(tmp_path):
    cfg = _config(tmp_path, train={"epochs": 2, "checkpoint_every": 2})
    spawn(_run, 2, cfg, timeout=300)
    cfg["model"]["hidden"] = 32
    cfg["train"]["resume"] = True
    message = _one_error_line(_launch(cfg, tmp_path))
    assert "different dataset, partition, model, optimizer, seed or sampling" in message


def test_checkpoints_of_different_sampling_settings_do_not_match():
    full = load_config(None, ["model.layers=2"])
    sampled = load_config(None, ["model.layers=2", "train.sampling={fanouts: [5, 5], "
                                 "batch_size: 64}"])
    wider = load_config(None, ["model.layers=2", "train.sampling={fanouts: [9, 9], "
                               "batch_size: 64}"])
    hashes = {trajectory_hash(cfg) for cfg in (full, sampled, wider)}
    assert len(hashes) == 3


def test_label_only_layers_train_exactly_like_the_full_graph(tmp_path):
    full = _config(tmp_path / "full", model={"type": "sage", "layers": 2})
    label_only = _config(tmp_path / "mfg", model={"type": "sage", "layers": 2,
                                                   "label_only": True})
    for cfg in (full, label_only):
        spawn(_run, 2, cfg, timeout=300)
    a, b = _metrics(tmp_path / "full" / "run"), _metrics(tmp_path / "mfg" / "run")
    torch.testing.assert_close(torch.tensor([r["loss"] for r in b]),
                               torch.tensor([r["loss"] for r in a]), rtol=1e-5, atol=1e-6)
    assert [r["val_acc"] for r in b] == [r["val_acc"] for r in a]
