"""KVStore and DistTensor API in one process: creation, metadata, and bad input."""
import gc

import pytest
import torch

import sarlite.kv.store
from sarlite.kv import DistTensor, KVStore, get_kvstore, init_kvstore
from sarlite.partition import EdgePartitionPolicy, NodePartitionPolicy, RangePartitionBook

NODES, EDGES = 10, 16


@pytest.fixture
def store() -> KVStore:
    return init_kvstore(RangePartitionBook(0, 1, [[0, NODES]], [[0, EDGES]]))


def test_without_a_store_creating_a_dist_tensor_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(sarlite.kv.store, "_default", None)
    with pytest.raises(RuntimeError, match=r"DistGraph\(graph_name, part_config=.*init_kvstore"):
        DistTensor((NODES, 2), torch.float32)


def test_policy_is_inferred_from_the_first_dimension(store):
    assert DistTensor((NODES, 2), torch.float32).part_policy.policy_str == "node~_N"
    assert DistTensor((EDGES,), torch.int64).part_policy.policy_str == "edge~_N:_E:_N"


def test_a_first_dimension_matching_nodes_and_edges_is_ambiguous():
    init_kvstore(RangePartitionBook(0, 1, [[0, NODES]], [[0, NODES]]))
    with pytest.raises(ValueError, match="ambiguous; pass part_policy"):
        DistTensor((NODES, 2), torch.float32)


def test_a_first_dimension_matching_nothing_is_an_error(store):
    with pytest.raises(ValueError, match=r"matches neither 10 \(nodes\) nor 16 \(edges\)"):
        DistTensor((NODES + 1, 2), torch.float32)


def test_explicit_policy_must_cover_the_first_dimension(store):
    policy = EdgePartitionPolicy(store.partition_book)
    with pytest.raises(ValueError, match="covers 16 ids"):
        DistTensor((NODES, 2), torch.float32, part_policy=policy)


def test_dgl_style_init_func_gets_the_local_shape_and_dtype(store):
    t = DistTensor((NODES, 2), torch.int32, "ones",
                   init_func=lambda shape, dtype: torch.ones(shape, dtype=dtype))
    assert torch.equal(t[0:3], torch.ones(3, 2, dtype=torch.int32))


def test_init_func_with_ids_gets_the_global_ids_of_the_shard(store):
    t = DistTensor((NODES,), torch.int64, "ids",
                   init_func=lambda shape, dtype, ids: ids * 10)
    assert torch.equal(t[[4, 2]], torch.tensor([40, 20]))


def test_init_func_returning_the_wrong_shape_is_an_error(store):
    with pytest.raises(ValueError, match=r"init_func must return a tensor of shape \(10, 2\)"):
        DistTensor((NODES, 2), torch.float32, init_func=lambda s, d: torch.zeros(NODES, 3))


def test_same_name_refers_to_the_same_rows(store):
    a = DistTensor((NODES, 2), torch.float32, "shared")
    b = DistTensor((NODES, 2), torch.float32, "shared")
    a[[1]] = torch.ones(1, 2)
    assert torch.equal(b[[1]], torch.ones(1, 2)) and a.name == b.name == "node~_N:shared"
    assert a.tensor_name == "shared" and len(a) == NODES and a.shape == (NODES, 2)


def test_recreating_a_name_with_another_shape_is_an_error(store):
    x = DistTensor((NODES, 2), torch.float32, "x")     # alive, so "x" exists
    with pytest.raises(ValueError, match=r"already exists with shape \(10, 2\)"):
        DistTensor((NODES, 3), torch.float32, "x")
    assert x.shape == (NODES, 2)


def test_an_anonymous_tensor_is_freed_with_its_object_unless_named_persistent(store):
    names = set(store.data_name_list())
    t = DistTensor((NODES, 2), torch.float32)
    kept = DistTensor((NODES, 2), torch.float32, "kept", persistent=True)
    assert t.name in store and t.name not in names
    anonymous = t.name
    del t, kept
    gc.collect()
    assert anonymous not in store and "node~_N:kept" in store
    with pytest.raises(ValueError, match="anonymous DistTensor cannot be persistent"):
        DistTensor((NODES, 2), torch.float32, persistent=True)


def test_kvstore_keeps_a_registry_of_named_tensors(store):
    policy = NodePartitionPolicy(store.partition_book)
    store.init_data("emb", (NODES, 4), torch.float64, policy)
    assert "emb" in store.data_name_list()
    assert store.get_data_meta("emb") == (torch.float64, (NODES, 4), policy)
    assert torch.equal(store.get_partid("emb", [0, 9]), torch.tensor([0, 0]))
    assert sorted(store.all_possible_part_policy) == ["edge~_N:_E:_N", "node~_N"]
    store.push("emb", torch.tensor([3, 3]), torch.tensor([[1.0] * 4, [2.0] * 4],
                                                         dtype=torch.float64))
    assert torch.equal(store.pull("emb", [3]), torch.full((1, 4), 2.0, dtype=torch.float64))
    with pytest.raises(ValueError, match="already exists"):
        store.init_data("emb", (NODES, 4), torch.float64, policy)
    store.delete_data("emb")
    with pytest.raises(KeyError, match="no tensor named 'emb'"):
        store.pull("emb", [0])
    assert get_kvstore() is store


def test_ids_out_of_range_are_an_index_error(store):
    t = DistTensor((NODES, 2), torch.float32)
    with pytest.raises(IndexError, match=r"ids must be in \[0, 10\), got values in \[-1, 3\]"):
        t[torch.tensor([3, -1])]


def test_float_ids_are_a_type_error(store):
    t = DistTensor((NODES, 2), torch.float32)
    with pytest.raises(TypeError, match="ids must be integers"):
        t[torch.tensor([1.0])]


def test_pushing_another_dtype_is_a_type_error(store):
    t = DistTensor((NODES, 2), torch.float32)
    with pytest.raises(TypeError, match="has dtype torch.float64 but the tensor has dtype "
                                        "torch.float32"):
        t[[0]] = torch.zeros(1, 2, dtype=torch.float64)


def test_pushing_rows_of_another_shape_is_a_value_error(store):
    t = DistTensor((NODES, 2), torch.float32)
    with pytest.raises(ValueError, match=r"must have shape \(2, 2\) \(one row per id\)"):
        t[[0, 1]] = torch.zeros(2, 3)


def test_accumulating_into_a_bool_tensor_is_an_error(store):
    t = DistTensor((NODES,), torch.bool)
    with pytest.raises(TypeError, match="bool and cannot be accumulated"):
        t.scatter_add([0], torch.ones(1, dtype=torch.bool))


def test_add_data_keeps_the_given_cpu_tensor_as_the_shard(store):
    rows = torch.arange(NODES * 2, dtype=torch.float32).reshape(NODES, 2)
    store.add_data("node~_N:x", rows, NodePartitionPolicy(store.partition_book))
    assert store.data_store["node~_N:x"].data_ptr() == rows.data_ptr()
    DistTensor((NODES, 2), torch.float32, "x")[[1]] = torch.zeros(1, 2)
    assert torch.equal(rows[1], torch.zeros(2))


def test_added_data_outlives_the_dist_tensors_that_refer_to_it(store):
    store.add_data("node~_N:x", torch.ones(NODES), NodePartitionPolicy(store.partition_book))
    view = DistTensor((NODES,), torch.float32, "x")
    del view
    gc.collect()
    assert "node~_N:x" in store


def test_add_data_replaces_added_rows_of_the_same_shape_and_dtype_only(store):
    policy = NodePartitionPolicy(store.partition_book)
    store.add_data("node~_N:x", torch.ones(NODES), policy)
    store.add_data("node~_N:x", torch.zeros(NODES), policy)
    assert torch.equal(DistTensor((NODES,), torch.float32, "x")[[0]], torch.zeros(1))
    with pytest.raises(ValueError, match=r"added with shape \(10,\).*cannot replace"):
        store.add_data("node~_N:x", torch.zeros(NODES, 2), policy)


def test_add_data_does_not_replace_a_tensor_a_dist_tensor_created(store):
    made = DistTensor((NODES,), torch.float32, "y")
    with pytest.raises(ValueError, match="created by a DistTensor"):
        store.add_data(made.name, torch.zeros(NODES), made.part_policy)


def test_add_data_needs_one_row_per_owned_id(store):
    with pytest.raises(ValueError, match="must have 10 rows"):
        store.add_data("node~_N:x", torch.zeros(3), NodePartitionPolicy(store.partition_book))
