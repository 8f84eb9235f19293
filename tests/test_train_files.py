"""The training app's files: torn metrics lines, an earlier run's checkpoint, temporary
files of killed runs, and a full disk."""
import errno
import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from harness import WorkerError, spawn
from sarlite.data import homophilous_graph
from sarlite.partition import partition_graph
from sarlite.partition.atomic import remove_stale_temporaries
from sarlite.train import Config, load_config
from sarlite.train import checkpoint
from sarlite.train.config import ConfigError
from sarlite.train.outputs import MetricsLog

SYNTHETIC = {"name": "synthetic", "num_nodes": 300, "avg_degree": 5, "feat_dim": 8}


def _config(root, **train) -> dict:
    return {"dataset": SYNTHETIC, "partition": {"cache_dir": str(root / "parts")},
            "model": {"type": "gcn", "hidden": 8, "dropout": 0.0},
            "train": {"epochs": 1, "out_dir": str(root / "run"), **train}}


def _run(rank, world, cfg_dict):
    from sarlite.train import run
    run(Config.model_validate(cfg_dict))


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _rows(epochs) -> str:
    return "".join(json.dumps({"epoch": e, "loss": 1.0}) + "\n" for e in epochs)


# -- metrics.jsonl on resume ------------------------------------------------------------

def test_torn_last_metrics_line_is_dropped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows(range(3)) + '{"epoch": 3, "lo')
    with caplog.at_level(logging.WARNING, logger="sarlite"):
        log = MetricsLog(tmp_path, 5)
    assert [r["epoch"] for r in log.rows] == [0, 1, 2]
    assert path.read_text() == _rows(range(3))
    assert f"torn last line 4 of {path}" in caplog.text


def test_unparseable_metrics_line_before_the_last_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_rows([0]) + "garbage\n" + _rows([1, 2]))
    with pytest.raises(ValueError, match=f"{path} line 2 is not a metrics row"):
        MetricsLog(tmp_path, 3)
    assert "garbage" in path.read_text()                 # left for the user to repair


# -- an earlier run's checkpoint --------------------------------------------------------

def test_fresh_run_refuses_an_out_dir_holding_a_checkpoint_on_every_rank(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"an earlier run's")
    with pytest.raises(WorkerError) as caught:
        spawn(_run, 2, _config(tmp_path), timeout=120, kill_on_error=False)
    expected = (f"ConfigError: {tmp_path / 'run' / 'checkpoint.pt'} exists (an earlier "
                f"run's checkpoint): set train.resume=true to continue it, or "
                f"train.overwrite=true to start over")
    assert [caught.value.errors[r].splitlines()[0] for r in (0, 1)] == [expected] * 2
    assert not (tmp_path / "parts").exists()              # refused before partitioning


def test_resume_and_overwrite_together_are_refused():
    with pytest.raises(ConfigError, match="set one of them"):
        load_config(None, ["train.resume=true", "train.overwrite=true"])


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """One run with train.overwrite in an out_dir holding an earlier run's checkpoint and
    outputs, and temporary files of a dead process and of a live one (this test process)
    in out_dir and in a part directory of the partition cache."""
    root = tmp_path_factory.mktemp("restart")
    run, part0 = root / "run", root / "parts" / "part0"
    for folder in (run, part0):
        folder.mkdir(parents=True)
    for name in ("checkpoint.pt", "summary.json", "curves.png"):
        (run / name).write_text("old")
    (run / "metrics.jsonl").write_text(_rows(range(7)))
    dead, alive = _dead_pid(), os.getpid()
    temporaries = {"dead": [run / f"checkpoint.pt.tmp-{dead}",
                            part0 / f"graph.dgl.tmp-{dead}"],
                   "alive": [run / f"summary.json.tmp-{alive}"]}
    for path in temporaries["dead"] + temporaries["alive"]:
        path.write_text("partial")
    spawn(_run, 2, _config(root, overwrite=True), timeout=180)
    return run, temporaries


def test_overwrite_replaces_the_earlier_checkpoint_and_outputs(restarted):
    run, _ = restarted
    assert not (run / "checkpoint.pt").exists()           # this run saves none
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0]
    assert json.loads((run / "summary.json").read_text())["world_size"] == 2
    assert (run / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_start_removes_temporary_files_of_dead_processes_only(restarted):
    _, temporaries = restarted
    assert [p.exists() for p in temporaries["dead"]] == [False, False]
    assert [p.exists() for p in temporaries["alive"]] == [True]


def test_only_names_of_temporary_files_count_as_temporaries(tmp_path):
    dead = _dead_pid()
    keep = [tmp_path / "notes.tmp-", tmp_path / f"x.tmp-{dead}.bak",
            tmp_path / "other" / f"x.tmp-{dead}"]
    for path in keep:
        path.parent.mkdir(exist_ok=True)
        path.write_text("mine")
    assert remove_stale_temporaries(tmp_path) == []
    assert remove_stale_temporaries(tmp_path / "absent") == []
    assert all(p.exists() for p in keep)


# -- a full disk ------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs (needs root: skipped otherwise)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_full_disk_while_writing_a_checkpoint_is_one_error_naming_the_path(tiny_disk):
    model = torch.nn.Linear(512, 256)                     # 0.5 MiB of parameters
    optimizer = torch.optim.Adam(model.parameters())
    with pytest.raises(OSError) as caught:
        checkpoint.save(tiny_disk, Config(), 1, model, optimizer, {}, rank=0)
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value) == (f"[Errno 28] no space left on device while writing "
                                 f"{tiny_disk / 'checkpoint.pt'}")
    assert os.listdir(tiny_disk) == []                     # no temporary file left


def test_full_disk_while_partitioning_is_one_error_naming_the_path(tiny_disk):
    g = homophilous_graph(num_nodes=2000, feat_dim=64)     # 0.5 MiB of features
    with pytest.raises(OSError) as caught:
        partition_graph(g, "g", 2, tiny_disk / "parts", part_method="random")
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value).startswith(f"[Errno 28] no space left on device while "
                                        f"writing {tiny_disk / 'parts'}/part")
    left = [f for _, _, files in os.walk(tiny_disk) for f in files]
    assert not [f for f in left if ".tmp-" in f or f == "g.json"]
