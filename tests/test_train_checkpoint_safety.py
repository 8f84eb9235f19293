"""A checkpoint is read as tensors and plain data only: a crafted pickle is refused with one
error naming the file, and its code never runs; a damaged file is one error too."""
import json
import os

import pytest
import torch

from harness import train_errors
from sarlite.train import Config, checkpoint
from sarlite.train.config import ConfigError


class _Command:
    """Unpickled, runs ``command`` (what a crafted checkpoint does to ``torch.load``
    without ``weights_only``)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _malicious(out_dir, marker):
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 1, "rng": [], "best": {}, "config_hash": "x", "world_size": 1,
                "model": _Command(f"touch {marker}"), "optimizer": {}},
               out_dir / "checkpoint.pt")


def _garbage(out_dir, _):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "checkpoint.pt").write_bytes(b"\x80\x02garbage, not a checkpoint")


def _truncated(out_dir, _):
    out_dir.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Linear(8, 8)
    checkpoint.save(out_dir, Config(), 1, model, torch.optim.SGD(model.parameters(), 0.1),
                    {}, rank=0)
    whole = (out_dir / "checkpoint.pt").read_bytes()
    (out_dir / "checkpoint.pt").write_bytes(whole[:len(whole) // 2])


@pytest.mark.parametrize("make, message", [
    (_malicious, "is not a checkpoint sarlite wrote: it holds the Python object "
                 "posix.system, and sarlite never loads code or objects from a checkpoint, "
                 "only tensors and plain data (nothing in the file was run); remove or "
                 "replace it"),
    (_garbage, "is corrupt or unreadable, not a checkpoint sarlite wrote (not in the "
               "format torch.save writes, or cut short); remove or replace it"),
    (_truncated, "is corrupt or unreadable, not a checkpoint sarlite wrote "
                 "(PytorchStreamReader failed reading zip archive: failed finding central "
                 "directory); remove or replace it"),
], ids=["malicious", "garbage", "truncated"])
def test_a_checkpoint_sarlite_did_not_write_is_one_error_naming_it(tmp_path, make, message):
    marker = tmp_path / "MARKER"
    make(tmp_path / "run", marker)
    model = torch.nn.Linear(8, 8)
    with pytest.raises(ConfigError) as caught:
        checkpoint.load(tmp_path / "run", Config(), model,
                        torch.optim.SGD(model.parameters(), 0.1), rank=0, world_size=1)
    assert str(caught.value) == f"checkpoint {tmp_path / 'run' / 'checkpoint.pt'} {message}"
    assert not marker.exists()


def test_resuming_from_a_crafted_pickle_runs_no_code_and_exits_with_status_2(tmp_path):
    marker = tmp_path / "MARKER"
    _malicious(tmp_path / "run", marker)
    cfg = {"dataset": {"name": "synthetic", "num_nodes": 200, "feat_dim": 4},
           "partition": {"cache_dir": str(tmp_path / "parts")},
           "model": {"hidden": 4},
           "train": {"epochs": 2, "out_dir": str(tmp_path / "run"), "resume": True}}
    (tmp_path / "config.yaml").write_text(json.dumps(cfg))
    code, stderr, errors = train_errors(tmp_path / "config.yaml")
    assert code == 2, stderr
    assert errors == [f"sarlite train: error (rank 0): checkpoint "
                      f"{tmp_path / 'run' / 'checkpoint.pt'} is not a checkpoint sarlite "
                      f"wrote: it holds the Python object posix.system, and sarlite never "
                      f"loads code or objects from a checkpoint, only tensors and plain data "
                      f"(nothing in the file was run); remove or replace it"], stderr
    assert "Traceback" not in stderr
    assert not marker.exists()
