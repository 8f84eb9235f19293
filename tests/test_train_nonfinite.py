"""Non-finite values: inf/nan input features, losses and gradients stop the training app
with one error (unless train.allow_nonfinite); metrics.jsonl stays strict JSON."""
import json
import math
import re

import pytest
import torch

from harness import WorkerError, spawn
from sarlite.partition import load_partition
from sarlite.train import Config
from sarlite.train.nonfinite import NonFiniteError, check_step
from sarlite.train.outputs import MetricsLog

SYNTHETIC = {"name": "synthetic", "num_nodes": 300, "avg_degree": 5, "feat_dim": 8}
BAD_NODE = 7              # dataset node whose features get 2 infs and a nan


def _config(tmp_path, epochs=2, optim=None, **train) -> dict:
    return {"dataset": SYNTHETIC, "partition": {"cache_dir": str(tmp_path / "parts")},
            "model": {"type": "gcn", "hidden": 8, "dropout": 0.0},
            "optim": optim or {},
            "train": {"epochs": epochs, "out_dir": str(tmp_path / "run"), **train}}


def _run(rank, world, cfg_dict, bad_features=False):
    """Train on ``cfg_dict``; with ``bad_features`` the dataset's node ``BAD_NODE`` holds
    non-finite features (patched in this worker; rank 0 partitions)."""
    from sarlite.train import partitions, run
    if bad_features:
        clean = partitions.dataset_graph

        def dataset_graph(cfg):
            g = clean(cfg)
            g.ndata["feat"][BAD_NODE, :3] = torch.tensor([math.inf, -math.inf, math.nan])
            return g
        partitions.dataset_graph = dataset_graph
    return run(Config.model_validate(cfg_dict))


def _strict_json(text: str):
    """``json.loads`` that refuses NaN and Infinity, as strict JSON parsers do."""
    def refuse(token):
        raise ValueError(f"invalid JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_nonfinite_input_features_are_one_error_naming_field_rank_and_rows(tmp_path):
    with pytest.raises(WorkerError) as caught:
        spawn(_run, 2, _config(tmp_path), True, timeout=120)
    (rank, text), = caught.value.errors.items()           # the rank that holds the node
    found = re.match(
        rf"NonFiniteError: rank {rank}: node field 'feat' holds 3 non-finite values \(1 nan, "
        r"2 inf\) in 1 of (\d+) owned rows \(the first at node (\d+) of the partitioned "
        r"graph, local row (\d+)\); clean the dataset, or set train.allow_nonfinite=true "
        r"to train anyway$", text.splitlines()[0])
    assert found, text
    _, feats, _, book, *_ = load_partition(tmp_path / "parts" / "graph.json", rank)
    rows = (~torch.isfinite(feats["_N/feat"])).any(1).nonzero().squeeze(1).tolist()
    owned, node, row = map(int, found.groups())
    start, end = book.node_ranges[rank].tolist()
    assert (owned, rows, node) == (end - start, [row], start + row)


def test_nonfinite_loss_stops_every_rank_with_the_same_error(tmp_path):
    exploding = {"name": "adam", "lr": 1e30}              # epoch 1's logits overflow
    with pytest.raises(WorkerError) as caught:
        spawn(_run, 2, _config(tmp_path, epochs=3, optim=exploding), timeout=120,
              kill_on_error=False)
    expected = ("NonFiniteError: epoch 1: the training loss is nan; stopped before the "
                "optimizer step; lower optim.lr, check the data, or set "
                "train.allow_nonfinite=true to train anyway")
    assert [caught.value.errors[r].splitlines()[0] for r in (0, 1)] == [expected] * 2
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [_strict_json(line)["epoch"] for line in rows] == [0]


def test_nonfinite_gradient_error_names_the_parameter():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    model[1].weight.grad[0, 1] = math.inf
    check_step(0.5, torch.nn.Linear(2, 2), 4)             # no gradients: nothing to check
    with pytest.raises(NonFiniteError, match=r"^epoch 4, step 2: the gradient of parameter "
                                             r"'1\.weight' holds inf or nan"):
        check_step(0.5, model, 4, step=2)


def test_allow_nonfinite_trains_through_nonfinite_features_and_losses(tmp_path):
    cfg = _config(tmp_path, allow_nonfinite=True)
    summaries = spawn(_run, 2, cfg, True, timeout=120)
    assert [s["world_size"] for s in summaries] == [2, 2]
    rows = [_strict_json(line)
            for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["loss"], r["val_loss"]) for r in rows] == [(0, None, None),
                                                                      (1, None, None)]
    _strict_json((tmp_path / "run" / "summary.json").read_text())


def test_metrics_log_writes_nonfinite_floats_as_null(tmp_path):
    log = MetricsLog(tmp_path, 0)
    log.append({"epoch": 0, "loss": math.nan, "val_loss": -math.inf,
                "peak_rss_mib": [1.5, math.inf]})
    line, = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert _strict_json(line) == {"epoch": 0, "loss": None, "val_loss": None,
                                  "peak_rss_mib": [1.5, None]}
    assert log.rows == [_strict_json(line)]
