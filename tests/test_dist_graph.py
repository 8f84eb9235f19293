"""DistGraph: counts, degrees, find_edges and data equal the unpartitioned DGL graph's."""
import gc

import dgl
import pytest
import torch

import sarlite
import sarlite.kv
from conftest import random_graph
from harness import spawn
from sarlite.kv import DistTensor


def _queries(rank, world, config):
    # DGL's spelling of init; it reuses the group the harness made (none in one process)
    initialized = sarlite.distributed.initialize("ip_config.txt") if world > 1 else None
    g = sarlite.distributed.DistGraph("g", part_config=config)
    gen = torch.Generator().manual_seed(rank)
    asked = torch.randint(0, g.num_edges(), (40,), generator=gen)
    asked = asked if rank < world - 1 or world == 1 else asked[:0]   # last rank: no ids
    src, dst = g.find_edges(asked)
    everything = torch.arange(g.num_nodes())
    part = g.local_partition
    return {"initialize": initialized, "counts": (g.num_nodes(), g.num_edges()),
            "asked": asked, "ends": (src, dst),
            "in": g.in_degrees(), "out": g.out_degrees(everything),
            "in_one": g.in_degrees(3), "out_one": g.out_degrees(3),
            "ndata": {k: v[everything] for k, v in g.ndata.items()},
            "edata": {k: v[torch.arange(g.num_edges())] for k, v in g.edata.items()},
            "schemes": (g.node_attr_schemes(), g.edge_attr_schemes()),
            "local": (part.ndata[dgl.NID], part.edata[dgl.EID], part.edges(),
                      part.ndata["inner_node"], part.edata["inner_edge"]),
            "policies": (g.get_node_partition_policy().policy_str,
                         g.get_edge_partition_policy().policy_str,
                         g.get_partition_book().partid),
            "inferred": (DistTensor((g.num_nodes(), 2), torch.float32).part_policy.policy_str,
                         DistTensor((g.num_edges(),), torch.int64).part_policy.policy_str)}


def _partitioned(tmp_path, world, writer):
    g = random_graph(num_nodes=60, num_edges=300)
    g.ndata["label"] = g.ndata["label"].to(torch.int64)
    g.ndata.pop("train_mask")           # DGL's writer keeps it as uint8, ours as bool
    orig_nids, orig_eids = writer(g, "g", world, str(tmp_path), return_mapping=True)
    return g, orig_nids, orig_eids, str(tmp_path / "g.json")


def _dgl_writer(g, name, world, out, return_mapping):
    return dgl.distributed.partition_graph(g, name, world, out, part_method="random",
                                           return_mapping=return_mapping)


CASES = {1: sarlite.partition_graph, 3: sarlite.partition_graph, 2: _dgl_writer}


@pytest.fixture(scope="module", params=sorted(CASES), ids=lambda w: f"world{w}")
def run(request, tmp_path_factory):
    world = request.param
    g, orig_nids, orig_eids, config = _partitioned(tmp_path_factory.mktemp("p"), world,
                                                   CASES[world])
    results = [_queries(0, 1, config)] if world == 1 else \
        spawn(_queries, world, config, timeout=180)
    new_id = torch.empty_like(orig_nids)
    new_id[orig_nids] = torch.arange(orig_nids.numel())
    return g, orig_nids, orig_eids, new_id, config, results


def test_initialize_is_init_under_dgls_name(run):
    results = run[-1]
    if len(results) == 1:
        pytest.skip("no process group in one process")
    assert [r["initialize"] for r in results] == [(r, len(results)) for r in range(len(results))]


def test_counts_are_the_whole_graphs(run):
    g, *_, results = run
    assert all(r["counts"] == (g.num_nodes(), g.num_edges()) for r in results)


def test_find_edges_gives_the_endpoints_of_each_asked_edge(run):
    g, _, orig_eids, new_id, _, results = run
    src, dst = g.edges()
    for r in results:
        original = orig_eids[r["asked"]]
        assert torch.equal(r["ends"][0], new_id[src[original]])
        assert torch.equal(r["ends"][1], new_id[dst[original]])


def test_in_and_out_degrees_match_dgl(run):
    g, orig_nids, *_, results = run
    for r in results:
        assert torch.equal(r["in"], g.in_degrees()[orig_nids])
        assert torch.equal(r["out"], g.out_degrees()[orig_nids])
        assert r["in_one"] == int(g.in_degrees(orig_nids[3]))
        assert r["out_one"] == int(g.out_degrees(orig_nids[3]))


def test_ndata_and_edata_hold_the_original_features(run):
    g, orig_nids, orig_eids, _, _, results = run
    for r in results:
        assert sorted(r["ndata"]) == ["feat", "label"] and sorted(r["edata"]) == ["w"]
        for name, rows in r["ndata"].items():
            assert torch.equal(rows, g.ndata[name][orig_nids])
        assert torch.equal(r["edata"]["w"], g.edata["w"][orig_eids])


def test_attr_schemes_give_row_shape_and_dtype(run):
    for r in run[-1]:
        nodes, edges = r["schemes"]
        assert nodes == {"feat": ((4,), torch.float32), "label": ((), torch.int64)}
        assert edges == {"w": ((2,), torch.float32)}


def test_local_partition_is_the_loaded_partition_graph(run):
    config, results = run[-2:]
    for rank, r in enumerate(results):
        loaded = sarlite.load_partition(config, rank)[0]
        expected = (loaded.ndata[dgl.NID], loaded.edata[dgl.EID], loaded.edges(),
                    loaded.ndata["inner_node"], loaded.edata["inner_edge"])
        for got, want in zip(r["local"][:2] + r["local"][2] + r["local"][3:],
                             expected[:2] + expected[2] + expected[3:]):
            assert torch.equal(got, want)


def test_partition_book_and_policies_are_this_ranks(run):
    for rank, r in enumerate(run[-1]):
        assert r["policies"] == ("node~_N", "edge~_N:_E:_N", rank)


def test_dist_tensor_infers_node_or_edge_policy_from_the_graph(run):
    for r in run[-1]:
        assert r["inferred"] == ("node~_N", "edge~_N:_E:_N")


# -- bad input (single process) ------------------------------------------------------
@pytest.fixture(scope="module")
def config(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    sarlite.partition_graph(random_graph(), "g", 1, out)
    return out / "g.json"


def test_more_partitions_than_ranks_is_an_error(tmp_path):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    with pytest.raises(ValueError, match="world size 1 does not match the 2 partitions"):
        sarlite.distributed.DistGraph("g", part_config=tmp_path / "g.json")


def test_a_different_graph_name_is_an_error(config):
    with pytest.raises(ValueError, match="hold graph 'g', not 'other'"):
        sarlite.distributed.DistGraph("other", part_config=config)


def test_the_partition_config_alone_is_sarlites_shorthand(config):
    g = sarlite.distributed.DistGraph(config)
    assert (g.graph_name, g.num_nodes()) == ("g", 60)


def test_a_graph_name_without_part_config_is_an_error_naming_it(config):
    with pytest.raises(ValueError, match=r"needs part_config.*part_config='out/g.json'"):
        sarlite.distributed.DistGraph("g")


def test_a_gpb_of_another_partitioning_is_an_error(config):
    other = sarlite.RangePartitionBook(0, 1, [[0, 60]], [[0, 299]])
    with pytest.raises(ValueError, match="gpb .* differs from the partition book"):
        sarlite.distributed.DistGraph("g", other, config)
    assert sarlite.distributed.DistGraph("g", sarlite.load_partition_book(config, 0)[0],
                             config).num_edges() == 300


def test_edge_ids_out_of_range_are_an_index_error(config):
    g = sarlite.distributed.DistGraph(config)
    with pytest.raises(IndexError, match=r"ids must be in \[0, 300\)"):
        g.find_edges(torch.tensor([0, 300]))


def test_ndata_accepts_only_node_dist_tensors(config):
    g = sarlite.distributed.DistGraph(config)
    g.ndata["h"] = DistTensor((g.num_nodes(), 3), torch.float32, "h")
    assert g.ndata["h"][torch.tensor([0])].shape == (1, 3)
    with pytest.raises(ValueError, match="node partition policy"):
        g.ndata["w2"] = DistTensor((g.num_edges(), 3), torch.float32, "w2")
    with pytest.raises(TypeError, match="must be a DistTensor"):
        g.ndata["t"] = torch.zeros(g.num_nodes())


# -- from_partition_data and the default KV store ------------------------------------
def _facts(g) -> dict:
    """Everything a DistGraph answers, over all node and edge ids (collective)."""
    nodes, edges = torch.arange(g.num_nodes()), torch.arange(g.num_edges())
    return {"ndata": {k: v[nodes] for k, v in g.ndata.items()},
            "edata": {k: v[edges] for k, v in g.edata.items()},
            "degrees": (g.in_degrees(), g.out_degrees(nodes)), "ends": g.find_edges(edges),
            "local": g.local_partition.edata[dgl.EID]}


def _both_ways(rank, world, config, other_config):
    data = sarlite.load_partition_data(config)
    from_data = sarlite.distributed.DistGraph.from_partition_data(data)
    store = sarlite.kv.get_kvstore()
    out = {"from_data": _facts(from_data),
           "shares": [from_data.ndata[k].local_partition.data_ptr() ==
                      data.node_features[k].data_ptr() for k in sorted(data.node_features)]}
    from_config = sarlite.distributed.DistGraph("g", part_config=config)
    out["from_config"] = _facts(from_config)
    out["reused"] = sarlite.kv.get_kvstore() is store and \
        from_config.ndata["feat"].kvstore is store
    try:
        sarlite.distributed.DistGraph("h", part_config=other_config)
        out["conflict"] = "no error"
    except ValueError as err:
        out["conflict"] = str(err)
    return out


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory):
    g = random_graph(num_nodes=60, num_edges=300)
    path = tmp_path_factory.mktemp("dgl2")
    orig_nids, _ = _dgl_writer(g, "g", 2, str(path), return_mapping=True)   # uint8 masks
    other = tmp_path_factory.mktemp("other")
    sarlite.partition_graph(random_graph(num_nodes=40, num_edges=200), "h", 2, other)
    results = spawn(_both_ways, 2, str(path / "g.json"), str(other / "h.json"), timeout=180)
    return g, orig_nids, results


def test_from_partition_data_answers_as_the_graph_from_the_config(both_ways):
    *_, results = both_ways
    for r in results:
        a, b = r["from_data"], r["from_config"]
        assert sorted(a["ndata"]) == sorted(b["ndata"]) == ["feat", "label", "train_mask"]
        for name in a["ndata"]:
            assert torch.equal(a["ndata"][name], b["ndata"][name])
        assert sorted(a["edata"]) == ["w"] and torch.equal(a["edata"]["w"], b["edata"]["w"])
        for key in ("degrees", "ends"):
            assert all(torch.equal(x, y) for x, y in zip(a[key], b[key]))
        assert torch.equal(a["local"], b["local"])


def test_masks_are_bool_from_partition_data_and_from_the_config(both_ways):
    g, orig_nids, results = both_ways
    for r in results:
        for way in ("from_data", "from_config"):
            mask = r[way]["ndata"]["train_mask"]
            assert mask.dtype == torch.bool
            assert torch.equal(mask, g.ndata["train_mask"][orig_nids])


def test_the_store_holds_the_partition_datas_node_feature_tensors(both_ways):
    assert all(r["shares"] and all(r["shares"]) for r in both_ways[-1])


def test_a_second_dist_graph_over_the_same_partitioning_reuses_the_store(both_ways):
    assert all(r["reused"] for r in both_ways[-1])


def test_a_dist_graph_over_another_partitioning_raises_on_every_rank(both_ways):
    for r in both_ways[-1]:
        assert "default KVStore is over another partitioning" in r["conflict"]
        assert "replace_kvstore=True" in r["conflict"] and "init_kvstore" in r["conflict"]


def test_a_dist_graph_creates_and_registers_a_default_store_when_there_is_none(config):
    assert sarlite.kv.current_kvstore() is None
    g = sarlite.distributed.DistGraph("g", part_config=config)
    store = sarlite.kv.get_kvstore()
    assert g.ndata["feat"].kvstore is store
    assert sarlite.kv.same_partitioning(store.partition_book, g.get_partition_book())


def test_a_dist_graph_keeps_an_equal_default_store_and_its_tensors(config):
    store = sarlite.kv.init_kvstore(sarlite.load_partition_book(config, 0)[0])
    h = DistTensor((60, 2), torch.float32, "h", persistent=True)
    h[torch.arange(60)] = torch.ones(60, 2)
    g = sarlite.distributed.DistGraph("g", part_config=config)
    assert sarlite.kv.get_kvstore() is store and g.edata["w"].kvstore is store
    assert torch.equal(DistTensor((60, 2), torch.float32, "h")[[0, 59]], torch.ones(2, 2))


def test_another_partitioning_in_the_default_store_is_an_error_that_keeps_it(config):
    store = sarlite.kv.init_kvstore(sarlite.RangePartitionBook(0, 1, [[0, 10]], [[0, 16]]))
    with pytest.raises(ValueError, match="over another partitioning.*replace_kvstore=True"):
        sarlite.distributed.DistGraph("g", part_config=config)
    assert sarlite.kv.get_kvstore() is store


def test_replace_kvstore_makes_a_new_default_store_and_the_old_one_keeps_working(config):
    old = sarlite.kv.init_kvstore(sarlite.RangePartitionBook(0, 1, [[0, 10]], [[0, 16]]))
    t = DistTensor((10,), torch.int64, "t", init_func=lambda shape, dtype, ids: ids)
    g = sarlite.distributed.DistGraph("g", part_config=config, replace_kvstore=True)
    assert sarlite.kv.get_kvstore() is g.ndata["feat"].kvstore is not old
    assert t.kvstore is old and torch.equal(t[[3, 7]], torch.tensor([3, 7]))


def test_dropping_the_first_graph_keeps_the_data_of_the_second(config):
    first = sarlite.distributed.DistGraph("g", part_config=config)
    expected = first.ndata["feat"][torch.arange(60)]
    second = sarlite.distributed.DistGraph("g", part_config=config)
    del first
    gc.collect()
    assert torch.equal(second.ndata["feat"][torch.arange(60)], expected)
