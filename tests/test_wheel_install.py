"""sarlite as a library: its wheel, built with the standard front-end (``python -m build``),
installs into a new environment that already holds the user's torch and numpy without
replacing either, and there ``import dgl, sarlite`` and the packaged demo work from a folder
that is not the checkout.

Slow (a new environment, with every dependency from pip's cache or PyPI) and needs PyPI;
it is part of the whole suite, not of the oldest stack's subset.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch

from test_demo import run_demo

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=None, timeout=900) -> str:
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


def _versions(python: Path) -> str:
    return _run(python, "-c", "import torch, numpy; print(torch.__version__, "
                "numpy.__version__)").strip()


@pytest.mark.timeout(1500)
def test_built_wheel_keeps_the_users_torch_and_numpy_and_runs_the_demo(tmp_path):
    _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
         tmp_path / "dist", ROOT, cwd=tmp_path)
    wheel, = (tmp_path / "dist").glob("sarlite-*.whl")

    env = tmp_path / "env"
    _run(sys.executable, "-m", "venv", env)
    python, pip = env / "bin" / "python", [env / "bin" / "python", "-m", "pip", "install", "-q"]
    _run(*pip, f"torch=={torch.__version__}", f"numpy=={numpy.__version__}")
    before = _versions(python)
    assert before == f"{torch.__version__} {numpy.__version__}"

    _run(*pip, wheel)
    assert _versions(python) == before            # the user's torch and numpy stay

    work = tmp_path / "work"
    work.mkdir()
    _run(python, "-c", "import dgl, sarlite; print(dgl.__version__)", cwd=work)
    listed = _run(env / "bin" / "sarlite", "train", "--list-configs", cwd=work)
    assert "demo" in listed.split() and str(env) in listed    # read from the installed copy

    result = run_demo(env / "bin" / "sarlite", work)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((work / "out" / "demo" / "gcn" / "summary.json").read_text())
    assert summary["best_val_acc"] >= 0.9, summary
