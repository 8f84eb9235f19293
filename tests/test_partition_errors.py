"""Bad input to partitioning and loading gets one clear error naming the problem."""
import json

import pytest

import sarlite
from conftest import random_graph


@pytest.fixture
def partitioned(tmp_path):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    return tmp_path / "g.json"


@pytest.mark.parametrize("num_parts", [0, -1, 61])
def test_num_parts_outside_one_to_num_nodes_is_rejected(tmp_path, num_parts):
    with pytest.raises(ValueError, match="num_parts"):
        sarlite.partition_graph(random_graph(num_nodes=60), "g", num_parts, tmp_path)


def test_output_path_that_is_a_file_is_rejected(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        sarlite.partition_graph(random_graph(), "g", 2, target)


def test_unknown_method_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown part_method 'kway'"):
        sarlite.partition_graph(random_graph(), "g", 2, tmp_path, part_method="kway")


def test_unknown_objtype_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown objtype 'edges'"):
        sarlite.partition_graph(random_graph(), "g", 2, tmp_path, objtype="edges")


@pytest.mark.parametrize("value", [0, 2.5])
def test_metis_max_edges_that_is_not_a_positive_integer_is_rejected(tmp_path, value):
    with pytest.raises(ValueError, match="metis_max_edges must be a positive integer"):
        sarlite.partition_graph(random_graph(), "g", 2, tmp_path, metis_max_edges=value)


def test_missing_config_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.json"):
        sarlite.load_partition(tmp_path / "nothing.json", 0)


def test_corrupt_config_is_named(partitioned):
    partitioned.write_text("{ not json")
    with pytest.raises(ValueError, match="g.json is not valid JSON"):
        sarlite.load_partition(partitioned, 0)


def test_config_without_required_key_is_named(partitioned):
    meta = json.loads(partitioned.read_text())
    del meta["node_map"]
    partitioned.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="node_map"):
        sarlite.load_partition_book(partitioned, 0)


def test_missing_part_file_is_named(partitioned):
    (partitioned.parent / "part1" / "graph.dgl").unlink()
    with pytest.raises(FileNotFoundError, match="part1/graph.dgl"):
        sarlite.load_partition(partitioned, 1)


def test_corrupt_part_file_is_named(partitioned):
    (partitioned.parent / "part0" / "node_feat.dgl").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="part0/node_feat.dgl"):
        sarlite.load_partition(partitioned, 0)


@pytest.mark.parametrize("part_id", [-1, 2])
def test_part_id_out_of_range_is_rejected(partitioned, part_id):
    with pytest.raises(ValueError, match="out of range"):
        sarlite.load_partition(partitioned, part_id)


def test_rerun_removes_the_old_config_before_writing(tmp_path, monkeypatch):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")
    monkeypatch.setattr("sarlite.partition.writer.write_graph", crash)
    with pytest.raises(RuntimeError):
        sarlite.partition_graph(random_graph(seed=1), "g", 2, tmp_path)
    assert not (tmp_path / "g.json").exists()
