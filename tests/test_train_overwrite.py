"""train.overwrite deletes nothing before the new run has shown that its input works: the
earlier run's files wait in out_dir/.previous-*/ until the first new checkpoint (or the
end of the run), and come back when the run stops before."""
import numpy as np
import pytest
import torch

from harness import WorkerError, spawn
from sarlite.train import Config, checkpoint

OLD = {"checkpoint.pt": "old checkpoint", "metrics.jsonl": '{"epoch": 0}\n',
       "summary.json": "{}", "curves.png": "old png", "checkpoint.e3.rank0.pt": "old rank"}


def _earlier_run(out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in OLD.items():
        (out_dir / name).write_text(text)
    (out_dir / "embeddings.e3").mkdir()
    (out_dir / "embeddings.e3" / "rows.pt").write_text("old rows")


def _assert_earlier_run_in_place(out_dir):
    assert {n: (out_dir / n).read_text() for n in OLD} == OLD
    assert (out_dir / "embeddings.e3" / "rows.pt").read_text() == "old rows"
    assert not list(out_dir.glob(".previous-*"))


def _run(rank, world, cfg_dict):
    from sarlite.train import run
    run(Config.model_validate(cfg_dict))


def test_overwrite_run_that_fails_on_its_input_leaves_the_earlier_run_in_place(tmp_path):
    out_dir = tmp_path / "run"
    _earlier_run(out_dir)
    data = tmp_path / "data" / "heterophilous"
    data.mkdir(parents=True)
    masks = np.ones((1, 12), bool)
    np.savez(data / "texas.npz", node_features=np.eye(12, 4, dtype=np.float32),
             node_labels=np.full(12, -1), edges=np.array([[0, 1], [1, 2]]),
             train_masks=masks, val_masks=masks, test_masks=masks)   # no usable label
    cfg = {"dataset": {"name": "texas", "data_dir": str(tmp_path / "data")},
           "partition": {"cache_dir": str(tmp_path / "parts")},
           "model": {"type": "gcn", "hidden": 4},
           "train": {"epochs": 1, "out_dir": str(out_dir), "overwrite": True}}
    with pytest.raises(WorkerError, match="node field 'label' holds 12 labels"):
        spawn(_run, 1, cfg, timeout=180)
    _assert_earlier_run_in_place(out_dir)


def test_overwrite_moves_the_earlier_run_aside_until_the_first_new_checkpoint(tmp_path):
    _earlier_run(tmp_path)
    aside = checkpoint.start_fresh(tmp_path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [aside.name]
    assert (aside / "checkpoint.pt").read_text() == "old checkpoint"
    model = torch.nn.Linear(2, 2)
    checkpoint.save(tmp_path, Config(), 1, model, torch.optim.SGD(model.parameters(), 0.1),
                    {}, rank=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"] == 1


def test_a_run_killed_before_its_first_checkpoint_is_moved_back_at_the_next_start(tmp_path):
    _earlier_run(tmp_path)
    checkpoint.start_fresh(tmp_path, overwrite=True)
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 0, "new": 1}\n')   # the killed run's
    (tmp_path / "embeddings.e3").mkdir()
    assert checkpoint.settle_previous(tmp_path)[0] == "restored"
    _assert_earlier_run_in_place(tmp_path)


def test_a_run_killed_after_its_first_checkpoint_keeps_it_and_drops_the_earlier_run(
        tmp_path):
    _earlier_run(tmp_path)
    aside = checkpoint.start_fresh(tmp_path, overwrite=True)
    (tmp_path / "checkpoint.pt").write_text("new checkpoint")
    assert checkpoint.settle_previous(tmp_path) == ("removed", [aside])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    assert (tmp_path / "checkpoint.pt").read_text() == "new checkpoint"


def test_overwrite_of_an_empty_out_dir_moves_nothing(tmp_path):
    assert checkpoint.start_fresh(tmp_path, overwrite=True) is None
    assert list(tmp_path.iterdir()) == []
