"""examples/sar: SAR-style scripts (``import sarlite.sar as sar``) learn on 2 workers.

Each script runs as two plain processes started by hand, as SAR's users start them
(``--rank``, ``--world-size``, ``--ip-file``), on a small synthetic graph with 4 classes
(chance: 25%), and must print a final accuracy well above chance.
"""
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from harness import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "sar"
TIMEOUT = 240


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """The graph partitioned into 2 parts by examples/sar/partition_graph.py."""
    out = tmp_path_factory.mktemp("sarparts")
    argv = sys.argv
    sys.argv = ["partition_graph.py", "--num-nodes", "1500", "--num-classes", "4",
                "--feature-signal", "0.15", "--partition-out-path", str(out)]
    try:
        runpy.run_path(str(EXAMPLES / "partition_graph.py"), run_name="__main__")
    finally:
        sys.argv = argv
    return out / "synthetic.json"


def _run(script: str, config: Path, tmp_path: Path, *args: str,
         master_addr: str | None = "127.0.0.1") -> dict[str, float]:
    """Run ``script`` on ranks 0 and 1; the ``final:`` values rank 0 prints."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    if master_addr is not None:
        env["MASTER_ADDR"] = master_addr
    common = ["--partitioning-json-file", str(config), "--world-size", "2",
              "--ip-file", str(tmp_path / "ip_file"), "--master-port", str(free_port()),
              *args]
    procs = [subprocess.Popen([sys.executable, str(EXAMPLES / script), "--rank", str(r),
                               *common], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    try:
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text[-3000:]
    final = re.search(r"^final: (.*)$", outputs[0], re.M)
    assert final, outputs[0][-3000:]
    return {k: float(v.rstrip("s")) for k, v in
            (item.split("=") for item in final.group(1).split())}


def test_full_graph_sage_learns_with_rank_0_address_passed_through_the_ip_file(parts,
                                                                            tmp_path):
    final = _run("train_full_graph.py", parts, tmp_path, "--train-iters", "30",
                 master_addr=None)
    assert final["test"] > 0.6
    assert (tmp_path / "ip_file").exists()


def test_mfg_training_learns_and_gives_the_same_numbers_in_all_three_modes(parts,
                                                                          tmp_path):
    finals = [_run("train_mfgs.py", parts, tmp_path, "--train-iters", "15",
                   "--train-mode", mode)
              for mode in ("SAR", "SA", "one_shot_aggregation")]
    assert finals[0]["test"] > 0.6
    for final in finals[1:]:
        assert abs(final["test"] - finals[0]["test"]) < 1e-3
        assert abs(final["valid"] - finals[0]["valid"]) < 1e-3


def test_correct_and_smooth_beats_its_mlp_and_chance(parts, tmp_path):
    final = _run("correct_and_smooth.py", parts, tmp_path, "--epochs", "40")
    assert final["cs_test"] > max(0.6, final["mlp_test"] + 0.05)
