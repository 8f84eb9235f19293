"""Partitions without a shared file system: rank 0 sends a rank the part its own
``partition.cache_dir`` lacks, byte for byte, and later runs reuse the copy."""
import pytest
import torch

from harness import outcome, spawn
from sarlite.partition import load_partition_data
from sarlite.train import Config
from sarlite.train.partitions import partition_key

SYNTHETIC = {"name": "synthetic", "num_nodes": 400, "avg_degree": 6, "feat_dim": 8}
SEND = "prepare_partitions/send"
PART_FILES = ("graph.dgl", "node_feat.dgl", "edge_feat.dgl")


def _config(cache_dir) -> dict:
    return {"dataset": SYNTHETIC, "partition": {"cache_dir": str(cache_dir)}}


def _summary(data) -> dict:
    """What a worker needs of its partition, as plain tensors."""
    return {"rank": data.rank, "node_ranges": data.node_ranges,
            "node_features": data.node_features, "edge_features": data.edge_features,
            "shards": [(s.src, s.dst, s.eids) for s in data.shards]}


def _prepare(cfg_dict, rank, world) -> tuple[str, dict]:
    """The JSON path and this rank's traffic of the scatter, for one call."""
    from sarlite import comm
    from sarlite.train.partitions import prepare_partitions
    comm.traffic.reset()
    path = prepare_partitions(Config.model_validate(cfg_dict), rank, world)
    return str(path), comm.traffic.snapshot().get(SEND)


def _worker(rank, world, per_rank: list, broken: list) -> dict:
    from pathlib import Path
    result = {}
    result["first"] = _prepare(per_rank[rank], rank, world)
    result["second"] = _prepare(per_rank[rank], rank, world)
    result["data"] = _summary(load_partition_data(result["second"][0]))
    if rank == 1:                                   # a damaged copy is sent again
        feat = Path(per_rank[1]["partition"]["cache_dir"]) / "part1" / "node_feat.dgl"
        feat.write_bytes(feat.read_bytes()[:-1])
    result["damaged"] = _prepare(per_rank[rank], rank, world)
    result["broken"] = outcome(lambda: _prepare(broken[rank], rank, world))
    return result


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transfer")
    dirs = [tmp / "rank0", tmp / "rank1"]
    (tmp / "a-file").write_text("not a directory")
    per_rank = [_config(d) for d in dirs]
    broken = [per_rank[0], _config(tmp / "a-file" / "parts")]
    results = spawn(_worker, 2, per_rank, broken, timeout=300)
    return dirs, results


def test_partition_key_ignores_cache_dir(tmp_path):
    keys = {partition_key(Config.model_validate(_config(tmp_path / d))) for d in "ab"}
    assert len(keys) == 1


def test_rank_without_its_partition_receives_identical_files(run):
    dirs, results = run
    assert not (dirs[1] / "part0").exists()                      # only its own part
    for name in PART_FILES + ("sarlite-stamp.json",):
        sub = "" if name.startswith("sarlite") else "part1"
        assert (dirs[1] / sub / name).read_bytes() == (dirs[0] / sub / name).read_bytes()
    assert (dirs[1] / "graph.json").read_bytes() == (dirs[0] / "graph.json").read_bytes()
    path, traffic = results[1]["first"]
    assert path == str(dirs[1] / "graph.json")
    assert traffic["received"] > sum((dirs[0] / "part1" / n).stat().st_size
                                     for n in PART_FILES)
    assert results[0]["first"][1]["sent"] == traffic["received"]


def test_second_call_reuses_the_copy_without_sending(run):
    _, results = run
    assert results[0]["second"][1] is None and results[1]["second"][1] is None


def test_received_partition_loads_as_rank_0s_part_1(run):
    dirs, results = run
    got = results[1]["data"]
    expected = _summary(load_partition_data(dirs[0] / "graph.json", rank=1))
    assert got["rank"] == 1
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_damaged_copy_is_sent_again(run):
    dirs, results = run
    assert results[1]["damaged"][1]["received"] > 0
    name = "part1/node_feat.dgl"
    assert (dirs[1] / name).read_bytes() == (dirs[0] / name).read_bytes()


def test_unwritable_cache_dir_fails_every_rank_naming_it(run):
    dirs, results = run
    kind, message = results[1]["broken"]
    assert kind == "OSError" and "a-file/parts" in message and "partition 1" in message
    kind, message = results[0]["broken"]
    assert kind == "ConfigError" and "rank 1" in message and "a-file/parts" in message
