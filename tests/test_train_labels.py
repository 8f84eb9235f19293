"""Labels and split masks are checked when a run loads them: a label on a row of a split
mask must be a class (one error, exit status 2, alike on every rank); rows in no mask may
hold anything; train.ignore_label leaves rows out of the loss, its divisor and the
accuracies."""
import json
import logging
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness import WorkerError, spawn, train_errors
from sarlite.partition import load_partition
from sarlite.train import Config
from sarlite.train.config import ConfigError
from sarlite.train.labels import checked_labels
from sarlite.train.models import build_model, graphs_needed
from sarlite.train.partitions import dataset_graph

SYNTHETIC = {"name": "synthetic", "num_nodes": 300, "avg_degree": 5, "feat_dim": 8}


def _config(tmp_path, dataset=None, **train) -> dict:
    return {"dataset": dataset or SYNTHETIC,
            "partition": {"cache_dir": str(tmp_path / "parts")},
            "model": {"type": "gcn", "hidden": 8, "dropout": 0.0},
            "train": {"epochs": 1, "out_dir": str(tmp_path / "run"), **train}}


def _relabelled(cfg: Config, relabel: dict):
    g = dataset_graph(cfg)
    for node, label in relabel.items():
        g.ndata["label"][node] = label
    return g


def _run(rank, world, cfg_dict, relabel):
    """Train on ``cfg_dict`` with the dataset's labels ``{node: label}`` patched in (in
    this worker; rank 0 partitions)."""
    from sarlite.train import partitions, run
    partitions.dataset_graph = lambda cfg: _relabelled(cfg, relabel)
    return run(Config.model_validate(cfg_dict))


def _train_nodes(cfg_dict) -> list[int]:
    return dataset_graph(Config.model_validate(cfg_dict)).ndata["train_mask"] \
        .nonzero().squeeze(1).tolist()


def _heterophilous(root, labels: np.ndarray, train: np.ndarray) -> dict:
    """A heterophilous dataset ('texas') in ``root``: a ring, one split."""
    n = len(labels)
    folder = root / "data" / "heterophilous"
    folder.mkdir(parents=True)
    masks = np.zeros((3, 1, n), bool)
    masks[0, 0, train] = True
    masks[1, 0, (np.arange(n) % 4 == 1) & ~masks[0, 0]] = True
    masks[2, 0, ~masks[0, 0] & ~masks[1, 0]] = True
    np.savez(folder / "texas.npz", node_features=np.eye(n, 8, dtype=np.float32),
             node_labels=labels, edges=np.stack([np.arange(n), (np.arange(n) + 1) % n], 1),
             train_masks=masks[0], val_masks=masks[1], test_masks=masks[2])
    return {"name": "texas", "data_dir": str(root / "data")}


def test_negative_label_on_a_training_row_is_one_error_with_exit_status_2(tmp_path):
    labels = np.arange(40) % 3
    labels[5] = -1                                    # a training row
    cfg = _config(tmp_path, _heterophilous(tmp_path, labels, np.arange(0, 40, 2)))
    (tmp_path / "config.yaml").write_text(json.dumps(cfg))
    code, stderr, errors = train_errors(tmp_path / "config.yaml")
    assert code == 2, stderr
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert re.fullmatch(
        r"sarlite train: error \(rank 0\): rank 0's partition: node field 'label' holds 1 "
        r"label that is no class \(a whole number >= 0; the number of classes is the "
        r"largest label \+ 1\) on rows of a split mask: node \d+ holds -1 \(node ids of "
        r"the partitioned graph; local rows \d+\); fix the dataset, or set "
        r"train.ignore_label to the value that marks unlabelled nodes", errors[0]), errors[0]


def test_label_outside_the_declared_classes_is_the_same_error_on_every_rank(tmp_path):
    cfg = _config(tmp_path)
    bad = _train_nodes(cfg)[7]
    with pytest.raises(WorkerError) as caught:
        spawn(_run, 2, cfg, {bad: 99}, timeout=180, kill_on_error=False)
    errors = caught.value.errors
    assert sorted(errors) == [0, 1]
    first = [errors[r].splitlines()[0] for r in (0, 1)]
    assert first[0] == first[1], first                  # no rank hangs or differs
    found = re.fullmatch(
        r"ConfigError: rank (\d)'s partition: node field 'label' holds 1 label outside the "
        r"classes 0\.\.7 \(dataset\.num_classes=8\) on rows of a split mask: node (\d+) "
        r"holds 99 \(node ids of the partitioned graph; local rows (\d+)\); fix the "
        r"dataset, or set train.ignore_label to the value that marks unlabelled nodes",
        first[0])
    assert found, first[0]
    rank, node, local = map(int, found.groups())
    _, feats, _, book, *_ = load_partition(tmp_path / "parts" / "graph.json", rank)
    assert feats["_N/label"][local] == 99
    assert node == int(book.node_ranges[rank][0]) + local


def test_ignore_label_rows_leave_the_loss_its_divisor_and_the_accuracies(tmp_path):
    cfg_dict = _config(tmp_path, ignore_label=-100)
    ignored = {n: -100 for n in _train_nodes(cfg_dict)[::3]}
    spawn(_run, 1, cfg_dict, ignored, timeout=180)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    cfg = Config.model_validate(cfg_dict)
    g = _relabelled(cfg, ignored)
    x, y = g.ndata["feat"], g.ndata["label"]
    train = g.ndata["train_mask"] & (y != -100)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, x.shape[1], 8)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr,
                                 weight_decay=cfg.optim.weight_decay)
    logits = model([g] * graphs_needed(cfg.model), x)
    loss = F.cross_entropy(logits[train], y[train], reduction="sum") / train.sum()
    assert row["loss"] == pytest.approx(loss.item(), rel=1e-5)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        logits = model([g] * graphs_needed(cfg.model), x)
    hits = (logits[train].argmax(1) == y[train]).sum()
    assert row["train_acc"] == pytest.approx(float(hits / train.sum()), abs=1e-6)
    assert row["train_loss"] == pytest.approx(
        F.cross_entropy(logits[train], y[train]).item(), rel=1e-4)


# -- the check itself, on one process ---------------------------------------------------

def _check(labels, masks, dataset=(), **train):
    cfg = Config.model_validate({"dataset": {"name": "cora", "data_dir": "x", **dict(dataset)},
                                 "train": train})
    return checked_labels(cfg, torch.tensor(labels), masks, rank=0, first_id=100)


def _masks(train, val=(), test=(), n=6) -> dict:
    out = {}
    for split, rows in (("train", train), ("val", val), ("test", test)):
        out[split] = torch.zeros(n, dtype=torch.bool)
        out[split][list(rows)] = True
    return out


def test_rows_in_no_split_mask_may_hold_anything_and_do_not_count_as_classes():
    labels, masks, classes = _check([0, 1, 2, -1, 99, 1], _masks([0, 1], [2], [5]))
    assert classes == 3 and labels.dtype == torch.int64
    assert [m.tolist() for m in masks.values()] == [m.tolist() for m in _masks(
        [0, 1], [2], [5]).values()]


def test_ignore_label_rows_leave_every_split_mask():
    _, masks, classes = _check([0, -1, 2, -1, 1, 1], _masks([0, 1], [2, 3], [4, 5]),
                               ignore_label=-1)
    assert classes == 3
    assert masks["train"].tolist() == [True] + [False] * 5
    assert masks["val"].tolist() == [False, False, True, False, False, False]


def test_fractional_label_on_a_used_row_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"holds 1 label that is no class .* node 102 "
                                          r"holds 1\.5 .*local rows 2\)"):
        _check([0.0, 1.0, 1.5, 2.0, 0.0, 1.0], _masks([0, 1, 2]))


@pytest.mark.parametrize("mask, message", [
    (torch.tensor([1, 0, 2, 0, 0, 0]), r"'train_mask' holds 2 at local row 2; a split "
                                        r"mask must be boolean or 0/1"),
    (torch.ones(5, dtype=torch.bool), r"'train_mask' has shape \(5,\); a split mask "
                                       r"holds one value per owned row \(6,\)"),
])
def test_a_mask_that_is_not_one_boolean_per_row_is_refused(mask, message):
    masks = _masks([0])
    masks["train"] = mask
    with pytest.raises(ConfigError, match=r"^rank 0's partition: node field " + message):
        _check([0, 1, 2, 0, 1, 2], masks)


def test_classes_no_used_row_holds_are_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="sarlite"):
        _, _, classes = _check([0, 1, 99, 0, 1, 0], _masks([0, 1, 2], [3], [4, 5]))
    assert classes == 100
    assert "the largest label is 99, so 100 classes, but 97 of them (2, 3, 4, 5, 6, ...) " \
           "occur on no row of a split mask" in caplog.text


def test_a_real_datasets_declared_classes_refuse_a_label_beyond_them():
    with pytest.raises(ConfigError, match=r"holds 1 label outside the classes 0\.\.7 "
                                          r"\(dataset\.num_classes=8\) .* node 102 holds 99"):
        _check([0, 1, 99, 0, 1, 0], _masks([0, 1, 2], [3], [4, 5]),
               dataset={"num_classes": 8})
