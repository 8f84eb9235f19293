"""Files sarlite reads that a hostile user could have crafted: no code runs from any.

(Checkpoints of the training app are covered in tests/test_train_checkpoint_safety.py,
partition files in tests/test_partition_integrity.py.)
"""
from __future__ import annotations

import os
import pickle
import shutil

import pytest
import torch

from sarlite.data.loaders import load_dataset
from sarlite.sar.core.sampling import _cached_order


class _RunsCode:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_planetoid_pickle_that_would_run_code_is_refused(tmp_path, data_dir):
    folder = tmp_path / "planetoid" / "citeseer"
    shutil.copytree(data_dir / "planetoid" / "citeseer", folder)
    marker = tmp_path / "ran"
    (folder / "ind.citeseer.y").write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(ValueError, match=r"ind\.citeseer\.y.*posix\.system|ind\.citeseer\.y.*"
                                         r"refused") as err:
        load_dataset("citeseer", tmp_path)
    assert not marker.exists()
    assert "could run code" in str(err.value)


def test_sars_batch_cache_that_would_run_code_is_refused(tmp_path):
    marker, cache = tmp_path / "ran", tmp_path / "cache_0_4"
    torch.save({"x": _RunsCode(marker)}, cache)
    with pytest.raises(ValueError, match="cache_0_4.*remove it"):
        _cached_order(str(cache), torch.arange(5))
    assert not marker.exists()


def test_sars_batch_cache_of_other_seeds_is_refused(tmp_path):
    cache = tmp_path / "cache_0_4"
    torch.save(torch.tensor([4, 3, 2, 1, 9]), cache)
    with pytest.raises(ValueError, match="does not hold an order of this rank's seeds"):
        _cached_order(str(cache), torch.arange(5))


def test_sars_batch_cache_of_the_same_seeds_is_used(tmp_path):
    cache = tmp_path / "cache_0_4"
    torch.save(torch.tensor([4, 3, 2, 1, 0]), cache)
    assert _cached_order(str(cache), torch.arange(5)).tolist() == [4, 3, 2, 1, 0]
