"""The demo as a user runs it: ``sarlite train --config demo --nproc 2`` from a folder that
is not the checkout, with the packaged config, learns (GCN on the embedded synthetic graph:
about 0.97 validation accuracy; chance is 1/8)."""
import json
import os
import subprocess
from pathlib import Path

from harness import SARLITE


def run_demo(command: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    """``command train --config demo --nproc 2 [extra]`` in ``cwd``, without PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(command), "train", "--config", "demo", "--nproc", "2", *extra],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=480)


def test_packaged_demo_learns_when_run_outside_the_checkout(tmp_path):
    result = run_demo(SARLITE, tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "demo" / "gcn" / "summary.json").read_text())
    assert summary["best_val_acc"] >= 0.9, summary
    assert summary["config"]["train"]["epochs"] == 100
