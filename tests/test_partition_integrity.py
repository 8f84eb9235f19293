"""A partition's files are checked before anything trains on them: sizes and checksums
sarlite records, the sizes DGL's tensor files declare, and row counts against the book."""
import json
import os
import shutil

import dgl
import pytest
import torch

import sarlite
from conftest import random_graph
from harness import WorkerError, outcome, spawn
from sarlite.partition import integrity
from sarlite.partition.integrity import PartitionFileError
from sarlite.train import Config

CUTS = {"8 bytes": lambda size: 8, "1000 bytes": lambda size: 1000,
        "half": lambda size: size // 2}


def _graph() -> dgl.DGLGraph:
    """About 1000 owned rows of 100 features per part: a truncated file loses whole rows."""
    return random_graph(num_nodes=2000, num_edges=8000, feat_dim=100)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A sarlite-written and a DGL-written partitioning of the same graph, in 2 parts."""
    root = tmp_path_factory.mktemp("written")
    sarlite.partition_graph(_graph(), "g", 2, root / "sarlite", part_method="random")
    dgl.distributed.partition_graph(_graph(), "g", 2, str(root / "dgl"),
                                    part_method="random")
    return root


def _copy(written, tmp_path, writer: str):
    """A fresh copy of a partitioning (its path), and part 0's node features as written."""
    shutil.copytree(written / writer, tmp_path / writer)
    config = tmp_path / writer / "g.json"
    return config, sarlite.load_partition(config, 0)[1]


def _truncate(path, cut) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - cut(len(data))])


def _flip_bit(path) -> None:
    """Flip one bit in the middle of ``path`` and move its mtime on by a second (a file
    rewritten within the same clock tick as its last check keeps its times)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    times = os.stat(path)
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns + 10**9))


def test_sarlite_partition_records_size_and_crc32_of_every_part_file(written):
    meta = json.loads((written / "sarlite" / "g.json").read_text())
    for part in (0, 1):
        records = meta[f"part-{part}"]["sarlite_files"]
        assert sorted(records) == ["edge_feats", "node_feats", "part_graph"]
        for key, record in records.items():
            path = written / "sarlite" / meta[f"part-{part}"][key]
            assert record == {"size": path.stat().st_size,
                              "crc32": integrity.crc32_of(path)}


def test_valid_partitions_load_with_the_default_check(written):
    for writer in ("sarlite", "dgl"):
        for part in (0, 1):
            graph, nfeat, _, *_ = sarlite.load_partition(written / writer / "g.json", part)
            assert nfeat["_N/feat"].shape[1] == 100 and graph.num_nodes() > 0


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_node_feats_of_a_sarlite_partition_are_refused_by_size(written, tmp_path,
                                                                       cut):
    config, _ = _copy(written, tmp_path, "sarlite")
    path = config.parent / "part0" / "node_feat.dgl"
    size = path.stat().st_size
    _truncate(path, CUTS[cut])
    with pytest.raises(PartitionFileError,
                       match=rf"has {path.stat().st_size} bytes but the partition config "
                             rf"records {size}: it is truncated"):
        sarlite.load_partition(config, 0, verify="size")


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_node_feats_of_a_dgl_partition_are_refused_by_their_header(written,
                                                                           tmp_path, cut):
    config, _ = _copy(written, tmp_path, "dgl")
    path = config.parent / "part0" / "node_feat.dgl"
    _truncate(path, CUTS[cut])
    with pytest.raises(PartitionFileError, match="but its header declares|ends inside"):
        sarlite.load_partition(config, 0)


def test_dgl_reads_a_truncated_tensor_file_silently_with_the_same_shapes(written, tmp_path):
    """Why the header check exists: DGL's own reader keeps the shapes of a cut tensor."""
    config, expected = _copy(written, tmp_path, "dgl")
    path = config.parent / "part0" / "node_feat.dgl"
    _truncate(path, CUTS["1000 bytes"])
    got = dgl.data.utils.load_tensors(str(path))
    assert got["_N/feat"].shape == expected["_N/feat"].shape


def test_error_names_the_file_the_part_and_the_config(written, tmp_path):
    config, _ = _copy(written, tmp_path, "sarlite")
    path = config.parent / "part1" / "edge_feat.dgl"
    _truncate(path, CUTS["8 bytes"])
    with pytest.raises(ValueError) as caught:
        sarlite.load_partition_feats(config, 1)
    assert str(caught.value).startswith(f"partition file {path} (part 1 of {config}) has ")
    assert "re-copy the partition" in str(caught.value)


def test_bit_flip_is_missed_by_the_size_check_and_caught_by_the_full_check(written,
                                                                          tmp_path):
    config, expected = _copy(written, tmp_path, "sarlite")
    _flip_bit(config.parent / "part0" / "node_feat.dgl")
    damaged = sarlite.load_partition(config, 0, verify="size")[1]
    assert not torch.equal(damaged["_N/feat"], expected["_N/feat"])   # sizes cannot tell
    with pytest.raises(PartitionFileError, match="has CRC-32 [0-9a-f]{8} but the "
                                                 "partition config records [0-9a-f]{8}"):
        sarlite.load_partition(config, 0, verify="full")


def test_default_check_catches_a_bit_flip_in_a_file_changed_since_its_last_check(
        written, tmp_path):
    config, _ = _copy(written, tmp_path, "sarlite")
    sarlite.load_partition(config, 0)
    _flip_bit(config.parent / "part0" / "node_feat.dgl")
    with pytest.raises(PartitionFileError, match="part0/node_feat.dgl .* has CRC-32"):
        sarlite.load_partition(config, 0)


def test_default_check_reads_each_unchanged_file_once(written, tmp_path, monkeypatch):
    shutil.copytree(written / "sarlite", tmp_path / "sarlite")  # new files: never checked
    config = tmp_path / "sarlite" / "g.json"
    read = []
    inner = integrity.crc32_of
    monkeypatch.setattr(integrity, "crc32_of", lambda p: read.append(p) or inner(p))
    sarlite.load_partition(config, 0)
    assert len(read) == 3
    sarlite.load_partition(config, 0)
    monkeypatch.setattr(integrity, "_checked", {})             # a new process: the sidecar
    sarlite.load_partition(config, 0)
    assert len(read) == 3 and integrity.sidecar_path(config, 0).is_file()


def test_partition_graph_counts_its_own_files_as_checked(tmp_path, monkeypatch):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    monkeypatch.setattr(integrity, "_checked", {})             # only the sidecars remain
    monkeypatch.setattr(integrity, "crc32_of", lambda path: pytest.fail(f"read {path}"))
    sarlite.load_partition(tmp_path / "g.json", 1)


def test_a_sidecar_that_cannot_be_written_does_not_fail_the_load(written, tmp_path):
    config, _ = _copy(written, tmp_path, "sarlite")
    integrity.sidecar_path(config, 0).unlink()
    integrity.sidecar_path(config, 0).mkdir()          # neither readable nor writable
    sarlite.load_partition(config, 0)
    assert not [p for p in config.parent.iterdir() if ".tmp-" in p.name]


def test_a_feature_file_of_another_part_is_refused_by_its_row_count(written, tmp_path):
    config, _ = _copy(written, tmp_path, "dgl")
    book = sarlite.load_partition_book(config, 0)[0]
    owned = int(book.node_ranges[0, 1] - book.node_ranges[0, 0])
    other = int(book.node_ranges[1, 1] - book.node_ranges[1, 0])
    assert owned != other
    shutil.copy(config.parent / "part1" / "node_feat.dgl", config.parent / "part0")
    with pytest.raises(PartitionFileError,
                       match=f"node feature '_N/feat' has {other} rows but the partition "
                             f"book gives the part {owned} nodes of type '_N'"):
        sarlite.load_partition_feats(config, 0)


def test_unknown_verify_mode_is_rejected(written):
    with pytest.raises(ValueError, match="verify must be one of"):
        sarlite.load_partition(written / "sarlite" / "g.json", 0, verify="crc")


# -- the training app: a cached partition JSON that disagrees with the run -------------

def _cached_json_mismatch(rank, world, cfg_dict) -> tuple[str, str]:
    """Prepare the partition cache, shrink its JSON's num_parts to 1, then run the app."""
    from sarlite import comm
    from sarlite.train import run
    from sarlite.train.partitions import prepare_partitions
    cfg = Config.model_validate(cfg_dict)
    config = prepare_partitions(cfg, rank, world)
    comm.barrier(kind="test")
    if rank == 0:
        meta = json.loads(config.read_text())
        meta["num_parts"] = 1
        config.write_text(json.dumps(meta))
    comm.barrier(kind="test")
    return outcome(lambda: run(cfg))


def test_cached_json_with_another_num_parts_is_one_clear_error_on_every_rank(tmp_path):
    cfg = {"dataset": {"name": "synthetic", "num_nodes": 300, "avg_degree": 5,
                       "feat_dim": 8},
           "partition": {"cache_dir": str(tmp_path / "parts"), "method": "random"},
           "model": {"type": "gcn", "hidden": 8},
           "train": {"epochs": 1, "out_dir": str(tmp_path / "run")}}
    try:
        results = spawn(_cached_json_mismatch, 2, cfg, timeout=120)
    except WorkerError as err:                 # e.g. a raw IndexError before the fix
        pytest.fail(str(err))
    config = tmp_path / "parts" / "graph.json"
    expected = ("ConfigError", f"preparing partitions failed: ConfigError: world size 2 "
                f"does not match the 1 partitions of {config}, whose sarlite-stamp.json "
                f"records 2: the JSON was changed after partitioning; remove "
                f"{tmp_path / 'parts'} or use another partition.cache_dir to repartition")
    assert results == [expected, expected]
