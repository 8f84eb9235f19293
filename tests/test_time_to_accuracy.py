"""benchmarks.time_to_accuracy: the target and the clock on given curves, and one tiny
run of the harness (DGL full-graph and sampled, sarlite full-graph at N=2).

Timings are never asserted (they are the benchmark's report).
"""
import json

import pytest

from benchmarks import time_to_accuracy as tta

SYSTEMS = ["dgl-full", "sar-full-N2", "dgl-sampled"]
TINY = ["dataset.num_nodes=600", "dataset.avg_degree=4", "dataset.feat_dim=8",
        "model.hidden=8", "model.dropout=0"]


def _rows(val_accs, seconds=1.0):
    return [{"epoch": e, "train_time": seconds, "val_acc": v, "val_loss": 1 - v,
             "test_acc": v / 2} for e, v in enumerate(val_accs)]


def test_time_to_target_sums_training_time_up_to_the_first_epoch_that_reaches_it():
    to = tta.time_to(_rows([0.2, 0.5, 0.4, 0.9], seconds=0.5), 0.45)
    assert to == {"epochs": 2, "train_time_s": 1.0, "test_acc": 0.25}
    assert tta.time_to(_rows([0.2, 0.3]), 0.45) is None


def test_a_loss_target_is_reached_from_above():
    to = tta.time_to(_rows([0.2, 0.5, 0.9]), 0.5, key="val_loss")
    assert to["epochs"] == 2


def test_the_target_lies_between_the_majority_class_and_the_lowest_best_accuracy():
    result = tta.dataset_result({"a": _rows([0.5, 0.8, 0.7]), "b": _rows([0.6, 0.7])},
                                majority=0.5)
    assert result["targets"]["gain"] == ("val_acc", pytest.approx(0.5 + tta.GAIN_FRACTION * 0.2))
    assert result["targets"]["best"] == ("val_acc", pytest.approx(tta.BEST_FRACTION * 0.7))
    assert all(to is not None for run in result["runs"].values() for to in run["to"].values())
    assert result["runs"]["a"]["test_acc_at_best_val"] == 0.4
    assert result["runs"]["a"]["final_test_acc"] == 0.35


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The harness on a 600-node synthetic graph, three epochs (one sampled)."""
    out = tmp_path_factory.mktemp("tta")
    status = tta.main(["--datasets", "synthetic", "--systems", *SYSTEMS,
                       "--epochs-scale", "0.12", "--set", *TINY, "--timeout", "120",
                       "--out", str(out), "--cache", str(out / "cache")])
    assert status == 0
    return out


def test_the_report_has_a_row_per_system_a_record_and_a_plot(tiny_run):
    summary = json.loads((tiny_run / "time_to_accuracy.json").read_text())
    runs = summary["datasets"]["synthetic"]["runs"]
    assert list(runs) == SYSTEMS
    for name, run in runs.items():
        facts = run["facts"]
        assert facts["commit"]["sha"] and facts["date"] and facts["machine"]["cpu_model"]
        assert facts["threads"]["torch_per_process"] == (
            1 if name.startswith("sar") else summary["meta"]["dgl_torch_threads"])
        assert "malloc_env" in facts["allocator"] and run["launch"]
        # sarlite's workers as its launcher starts them, DGL as installed
        assert facts["allocator"]["huge_pages"].startswith(
            "on" if name.startswith("sar") else "off")
    table = (tiny_run / "time_to_accuracy.md").read_text()
    assert sum(line.startswith("| synthetic") for line in table.splitlines()) == len(SYSTEMS)
    assert (tiny_run / "time_to_accuracy.png").stat().st_size > 0


def test_dgl_and_sarlite_full_graph_runs_train_the_same_model_the_same_way(tiny_run):
    # dropout 0: the same parameters, optimizer and loss give the same curve
    dgl, sar = (tta.read_metrics(tiny_run / "cache" / "synthetic" / name)
                for name in ("dgl-full", "sar-full-N2"))
    assert len(dgl) == len(sar) == 3
    for a, b in zip(dgl, sar):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["val_acc"] == pytest.approx(b["val_acc"], abs=1e-6)
