"""load_partition_data: the one loader of a worker's partition, for training and sampling."""
import json

import dgl
import pytest
import torch

import sarlite
import sarlite.core
import sarlite.partition
from conftest import random_graph


def _dgl_writer(g, name, parts, out):
    dgl.distributed.partition_graph(g, name, parts, str(out), part_method="random")


WRITERS = {"sarlite": sarlite.partition_graph, "dgl": _dgl_writer}


@pytest.fixture(scope="module", params=sorted(WRITERS))
def config(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    WRITERS[request.param](random_graph(), "g", 2, out)
    return out / "g.json"


def test_core_and_sarlite_export_the_partition_layers_loader():
    for name in ("PartitionData", "ShardEdges", "load_partition_data"):
        assert getattr(sarlite.core, name) is getattr(sarlite.partition, name)
    assert sarlite.load_partition_data is sarlite.partition.load_partition_data
    assert sarlite.PartitionData is sarlite.partition.PartitionData


def test_masks_are_bool_whichever_writer_made_the_partitions(config):
    for part in (0, 1):
        data = sarlite.load_partition_data(config, part)
        assert data.node_features["train_mask"].dtype == torch.bool


def test_partition_data_holds_the_graph_name_and_the_loaded_partition_graph(config):
    for part in (0, 1):
        data = sarlite.load_partition_data(config, part)
        loaded = sarlite.load_partition(config, part)[0]
        assert data.graph_name == "g"
        for key in (dgl.NID, "inner_node"):
            assert torch.equal(data.partition_graph.ndata[key], loaded.ndata[key])
        for key in (dgl.EID, "inner_edge"):
            assert torch.equal(data.partition_graph.edata[key], loaded.edata[key])


def test_shards_hold_each_owned_edge_id_once(config):
    for part in (0, 1):
        data = sarlite.load_partition_data(config, part)
        lo, hi = data.owned_edge_range
        assert (lo, hi) == tuple(data.partition_book.edge_ranges[part].tolist())
        eids = torch.cat([shard.eids for shard in data.shards])
        assert torch.equal(eids.sort().values, torch.arange(lo, hi))


def test_edge_features_follow_the_shard_order_of_the_edge_ids(config):
    for part in (0, 1):
        data = sarlite.load_partition_data(config, part)
        stored = sarlite.load_partition(config, part)[2]["_N:_E:_N/w"]     # by edge id
        eids = torch.cat([shard.eids for shard in data.shards])
        assert torch.equal(data.edge_features["w"], stored[eids - data.owned_edge_range[0]])


def test_an_edge_map_that_disagrees_with_the_inner_edges_is_an_error(tmp_path):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    path = tmp_path / "g.json"
    meta = json.loads(path.read_text())
    ranges = meta["edge_map"]["_N:_E:_N"]
    ranges[0][1] -= 1
    ranges[1][0] -= 1
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"inner edges of part 0 are not exactly the edge "
                                         r"ids \[0, \d+\) it owns"):
        sarlite.load_partition_data(path, 0)


def test_more_partitions_than_processes_is_an_error_before_reading_partition_files(config):
    with pytest.raises(ValueError, match="world size 1 does not match the 2 partitions"):
        sarlite.load_partition_data(config)
