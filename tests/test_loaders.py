"""Tests of sarlite.data.loaders: real datasets from ../shared/data, errors on tmp dirs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sarlite.data.loaders import REAL_DATASETS, load_dataset

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MASKS = ("train_mask", "val_mask", "test_mask")


@pytest.fixture(scope="module")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"../shared/data not found: {DATA_DIR} (real-dataset tests need it)")
    return DATA_DIR


_cache: dict[tuple, object] = {}


def _load(data_dir: Path, name: str, split: int = 0):
    key = (name, split)
    if key not in _cache:
        _cache[key] = load_dataset(name, data_dir, split=split)
    return _cache[key]


def _check_consistent(g) -> None:
    n = g.num_nodes()
    assert g.idtype == torch.int64
    assert g.ndata["feat"].dtype == torch.float32 and g.ndata["feat"].shape[0] == n
    assert g.ndata["label"].dtype == torch.int64 and g.ndata["label"].shape == (n,)
    masks = [g.ndata[k] for k in MASKS]
    assert all(m.dtype == torch.bool and m.shape == (n,) for m in masks)
    assert all(m.any() for m in masks)
    assert not (masks[0] & masks[1]).any()
    assert not (masks[0] & masks[2]).any()
    assert not (masks[1] & masks[2]).any()
    src, dst = g.edges()
    assert not (src == dst).any()
    key = src * n + dst
    assert torch.equal(key, torch.unique(key))  # sorted by (src, dst), no duplicates


def _is_symmetric(g) -> bool:
    src, dst = g.edges()
    return bool(g.has_edges_between(dst, src).all())


def _num_classes(g) -> int:
    return int(g.ndata["label"].max()) + 1


# ------------------------------------------------------------------ real data

def test_cora_has_standard_sizes_and_split(data_dir):
    g = _load(data_dir, "cora")
    assert (g.num_nodes(), g.num_edges(), g.ndata["feat"].shape[1]) == (2708, 10556, 1433)
    assert _num_classes(g) == 7
    assert [int(g.ndata[k].sum()) for k in MASKS] == [140, 500, 1000]


def test_cora_masks_disjoint_no_self_loops_and_symmetric(data_dir):
    g = _load(data_dir, "cora")
    _check_consistent(g)
    assert _is_symmetric(g)


def test_cora_train_and_val_are_the_leading_nodes(data_dir):
    g = _load(data_dir, "cora")
    assert g.ndata["train_mask"][:140].all() and g.ndata["val_mask"][140:640].all()


def test_citeseer_has_standard_sizes_and_split(data_dir):
    g = _load(data_dir, "citeseer")
    assert (g.num_nodes(), g.num_edges(), g.ndata["feat"].shape[1]) == (3327, 9104, 3703)
    assert _num_classes(g) == 6
    assert [int(g.ndata[k].sum()) for k in MASKS] == [120, 500, 1000]
    _check_consistent(g)


def test_citeseer_padded_test_nodes_have_zero_features_and_no_mask(data_dir):
    g = _load(data_dir, "citeseer")
    in_mask = g.ndata["train_mask"] | g.ndata["val_mask"] | g.ndata["test_mask"]
    padded = torch.arange(g.num_nodes()) >= 2312  # after the allx rows ...
    padded &= ~in_mask                            # ... and not a listed test id
    assert int(padded.sum()) == 15
    assert not g.ndata["feat"][padded].any()
    assert not g.ndata["label"][padded].any()


def test_cora_ml_loads_with_seeded_random_split(data_dir):
    g = _load(data_dir, "cora_ml")
    _check_consistent(g)
    assert _is_symmetric(g)
    assert g.num_nodes() == 2995 and g.ndata["feat"].shape[1] == 2879
    train = g.ndata["train_mask"]
    assert torch.equal(torch.bincount(g.ndata["label"][train]), torch.full((7,), 20))
    assert int(g.ndata["val_mask"].sum()) == 500
    assert int(g.ndata["test_mask"].sum()) == 2995 - 140 - 500


def test_random_split_depends_on_seed(data_dir):
    a = load_dataset("cora_ml", data_dir, seed=0).ndata["train_mask"]
    b = load_dataset("cora_ml", data_dir, seed=0).ndata["train_mask"]
    c = load_dataset("cora_ml", data_dir, seed=1).ndata["train_mask"]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_tolokers_loads_with_both_directions(data_dir):
    g = _load(data_dir, "tolokers")
    _check_consistent(g)
    assert g.num_nodes() == 11758
    assert g.num_edges() == 2 * 519000
    assert _is_symmetric(g)


def test_heterophilous_split_index_changes_masks(data_dir):
    a, b = _load(data_dir, "tolokers", 0), _load(data_dir, "tolokers", 1)
    assert torch.equal(a.ndata["feat"], b.ndata["feat"])
    assert not torch.equal(a.ndata["train_mask"], b.ndata["train_mask"])


def test_directed_variant_is_not_symmetrised(data_dir):
    directed = load_dataset("chameleon_directed", data_dir)
    _check_consistent(directed)
    assert not _is_symmetric(directed)
    stored = np.load(data_dir / "heterophilous" / "chameleon_directed.npz")["edges"]
    self_loops = int((stored[:, 0] == stored[:, 1]).sum())
    assert directed.num_edges() == len(stored) - self_loops


def test_facebook_loads_with_four_classes(data_dir):
    g = _load(data_dir, "facebook")
    _check_consistent(g)
    assert _is_symmetric(g)
    assert g.num_nodes() == 22470 and _num_classes(g) == 4
    assert g.ndata["feat"].shape[1] == 4714
    feat = g.ndata["feat"]
    assert ((feat == 0) | (feat == 1)).all() and feat.any()


def test_twitch_de_loads_with_two_classes(data_dir):
    g = _load(data_dir, "twitch_de")
    _check_consistent(g)
    assert _is_symmetric(g)
    assert g.num_nodes() == 9498 and _num_classes(g) == 2
    assert g.ndata["feat"].shape[1] == 3170


def test_names_are_case_insensitive(data_dir):
    assert load_dataset("CoRa", data_dir).num_nodes() == 2708


# ------------------------------------------------------------------ errors (no real data)

def _tiny_heterophilous(path: Path, num_splits: int = 10, **drop) -> None:
    n = 6
    arrays = dict(node_features=np.eye(n, dtype=np.float32),
                  node_labels=np.arange(n) % 2,
                  edges=np.array([[0, 1], [1, 2], [2, 2], [3, 4]]),
                  train_masks=np.zeros((num_splits, n), bool),
                  val_masks=np.zeros((num_splits, n), bool),
                  test_masks=np.ones((num_splits, n), bool))
    for key in drop:
        del arrays[key]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)


def test_real_datasets_is_sorted_and_complete():
    assert list(REAL_DATASETS) == sorted(REAL_DATASETS)
    for name in ("cora", "citeseer", "cora_ml", "tolokers", "chameleon_directed",
                 "texas_4_classes", "facebook", "twitch_de"):
        assert name in REAL_DATASETS


def test_unknown_name_raises_value_error_listing_names(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'nope'.*cora_ml"):
        load_dataset("nope", tmp_path)


def test_missing_data_dir_raises_file_not_found(tmp_path):
    missing = tmp_path / "absent"
    with pytest.raises(FileNotFoundError, match="absent"):
        load_dataset("cora", missing)


def test_missing_file_error_names_its_path(tmp_path):
    (tmp_path / "planetoid" / "cora").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("cora", tmp_path)
    assert str(tmp_path / "planetoid" / "cora" / "ind.cora.") in str(info.value)


def test_npz_missing_edges_raises_value_error_naming_file(tmp_path):
    path = tmp_path / "heterophilous" / "tolokers.npz"
    _tiny_heterophilous(path, edges=None)
    with pytest.raises(ValueError, match="tolokers.npz.*edges"):
        load_dataset("tolokers", tmp_path)


def test_unreadable_pickle_raises_value_error_naming_file(tmp_path):
    folder = tmp_path / "planetoid" / "cora"
    folder.mkdir(parents=True)
    (folder / "ind.cora.y").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="ind.cora.y"):
        load_dataset("cora", tmp_path)


def test_csv_with_wrong_columns_raises_value_error_naming_file(tmp_path):
    folder = tmp_path / "musae" / "facebook"
    folder.mkdir(parents=True)
    (folder / "facebook_target.csv").write_text("id,kind\n0,a\n1,b\n")
    with pytest.raises(ValueError, match="facebook_target.csv.*page_type"):
        load_dataset("facebook", tmp_path)


def test_heterophilous_split_out_of_range_raises_value_error(tmp_path):
    _tiny_heterophilous(tmp_path / "heterophilous" / "tolokers.npz")
    assert load_dataset("tolokers", tmp_path, split=9).num_nodes() == 6
    for split in (10, -1):
        with pytest.raises(ValueError, match=r"0\.\.9"):
            load_dataset("tolokers", tmp_path, split=split)


def test_tiny_heterophilous_file_symmetrised_without_self_loops(tmp_path):
    _tiny_heterophilous(tmp_path / "heterophilous" / "tolokers.npz")
    src, dst = load_dataset("tolokers", tmp_path).edges()
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1),
                                                     (3, 4), (4, 3)]
