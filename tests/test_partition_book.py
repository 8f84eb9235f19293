"""RangePartitionBook and the partition policies follow DGL's semantics."""
import numpy as np
import pytest
import torch

from sarlite import EdgePartitionPolicy, NodePartitionPolicy, RangePartitionBook

NODE_MAP = [[0, 3], [3, 3], [3, 8]]      # part 1 owns no node
EDGE_MAP = [[0, 5], [5, 6], [6, 12]]


@pytest.mark.parametrize("convert", [lambda x: x, np.array, torch.tensor,
                                     lambda x: {"_N": x}])
def test_book_accepts_lists_arrays_tensors_and_typed_dicts(convert):
    book = RangePartitionBook(2, 3, convert(NODE_MAP), EDGE_MAP)
    assert book.num_partitions() == 3 and book.partid == 2
    assert book.metadata()[2] == {"machine_id": 2, "num_nodes": 5, "num_edges": 6}


def test_id_to_partition_and_local_maps():
    book = RangePartitionBook(2, 3, NODE_MAP, EDGE_MAP)
    assert book.nid2partid(np.array([0, 2, 3, 7])).tolist() == [0, 0, 2, 2]
    assert book.eid2partid([4, 5, 6, 11]).tolist() == [0, 1, 2, 2]
    assert book.partid2nids(2).tolist() == [3, 4, 5, 6, 7]
    assert book.partid2eids(1).tolist() == [5]
    assert book.nid2localnid(torch.tensor([3, 7]), 2).tolist() == [0, 4]
    assert book.eid2localeid([6, 11]).tolist() == [0, 5]


def test_out_of_range_and_foreign_ids_are_rejected():
    book = RangePartitionBook(2, 3, NODE_MAP, EDGE_MAP)
    with pytest.raises(IndexError, match=r"\[0, 8\)"):
        book.nid2partid([8])
    with pytest.raises(IndexError, match="not all owned by partition 2"):
        book.nid2localnid([0], 2)
    with pytest.raises(ValueError, match="partid 3"):
        book.partid2nids(3)


def test_inconsistent_maps_are_rejected():
    with pytest.raises(ValueError, match="contiguous"):
        RangePartitionBook(0, 2, [[0, 3], [4, 8]], EDGE_MAP[:2])
    with pytest.raises(ValueError, match="num_parts"):
        RangePartitionBook(0, 2, NODE_MAP, EDGE_MAP)


def test_policies_map_ids_and_sizes():
    book = RangePartitionBook(2, 3, NODE_MAP, EDGE_MAP)
    nodes, edges = NodePartitionPolicy(book), EdgePartitionPolicy(book)
    assert nodes.policy_str == "node~_N" and edges.policy_str == "edge~_N:_E:_N"
    assert nodes.get_part_size() == 5 and nodes.get_size() == 8
    assert edges.get_part_size() == 6 and edges.get_size() == 12
    assert nodes.to_local([4]).tolist() == [1] and nodes.to_partid([1, 4]).tolist() == [0, 2]
    assert edges.to_local([7]).tolist() == [1] and edges.to_partid([5]).tolist() == [1]
