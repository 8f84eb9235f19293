"""RangePartitionBook and the partition policies on heterogeneous layouts, as DGL 2.1.

The hand-built layout has three partitions; homogeneous node ids are sorted by partition,
then by node type id (user 0, item 1, tag 2)::

    partition 0: user [0, 3)    item [3, 5)    tag  (none)
    partition 1: user (none)    item [5, 8)    tag  [8, 10)
    partition 2: user [10, 12)  item [12, 13)  tag  [13, 14)

so type-wise, users 0-2 live in partition 0 and users 3-4 in partition 2. The edges::

    partition 0: likes [0, 2)   user:tags (none)   item:tags [2, 3)    follows [3, 5)
    partition 1: likes [5, 6)   user:tags [6, 8)   item:tags (none)    follows (none)
    partition 2: likes [8, 11)  user:tags [11, 12) item:tags [12, 14)  follows [14, 15)

where the relation name ``tags`` is shared by ``user:tags:tag`` and ``item:tags:tag``.
"""
import json

import dgl
import numpy as np
import pytest
import torch
from dgl.distributed import graph_partition_book as dgl_gpb

from sarlite import EdgePartitionPolicy, NodePartitionPolicy, RangePartitionBook
from sarlite.partition.book import PartitionPolicy

NTYPES = {"user": 0, "item": 1, "tag": 2}
NODE_MAP = {"user": [[0, 3], [5, 5], [10, 12]],
            "item": [[3, 5], [5, 8], [12, 13]],
            "tag": [[5, 5], [8, 10], [13, 14]]}
ETYPES = {"user:likes:item": 0, "user:tags:tag": 1, "item:tags:tag": 2,
          "user:follows:user": 3}
EDGE_MAP = {"user:likes:item": [[0, 2], [5, 6], [8, 11]],
            "user:tags:tag": [[2, 2], [6, 8], [11, 12]],
            "item:tags:tag": [[2, 3], [8, 8], [12, 14]],
            "user:follows:user": [[3, 5], [8, 8], [14, 15]]}
LIKES = ("user", "likes", "item")
HOMOGENEOUS_ETYPE = ("_N", "_E", "_N")


def book(part: int = 0, node_map=None, edge_map=None, ntypes=None, etypes=None):
    return RangePartitionBook(part, 3, node_map or NODE_MAP, edge_map or EDGE_MAP,
                              ntypes or NTYPES, etypes or ETYPES)


def _tuple(etype: str) -> tuple:
    return tuple(etype.split(":"))


# -- types ------------------------------------------------------------------------------
def test_types_are_listed_in_type_id_order():
    gpb = book()
    assert gpb.ntypes == ["user", "item", "tag"]
    assert gpb.etypes == ["likes", "tags", "tags", "follows"]
    assert gpb.canonical_etypes == [LIKES, ("user", "tags", "tag"), ("item", "tags", "tag"),
                                    ("user", "follows", "user")]


def test_one_node_type_and_one_edge_type_make_a_book_homogeneous_as_in_dgl():
    assert RangePartitionBook(0, 1, [[0, 3]], [[0, 2]]).is_homogeneous
    assert not book().is_homogeneous
    one_named_type = RangePartitionBook(0, 1, {"user": [[0, 3]]},
                                        {"user:follows:user": [[0, 2]]})
    assert one_named_type.ntypes == ["user"] and one_named_type.is_homogeneous


def test_edge_types_may_be_named_by_relation_string_or_tuple():
    gpb = book()
    for name in ("likes", "user:likes:item", LIKES, list(LIKES)):
        assert gpb.to_canonical_etype(name) == LIKES
        assert gpb.partid2eids(2, name).tolist() == [3, 4, 5]
        assert gpb.eid2partid([0, 1, 2, 3], name).tolist() == [0, 0, 1, 2]


def test_a_relation_name_shared_by_two_canonical_types_is_ambiguous():
    with pytest.raises(ValueError, match="'tags' is ambiguous.*'user'.*'item'"):
        book().to_canonical_etype("tags")
    with pytest.raises(ValueError, match="ambiguous"):
        book().eid2partid([0], "tags")


def test_unknown_types_are_rejected_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"node type 'paper'.*\['user', 'item', 'tag'\]"):
        book().nid2partid([0], "paper")
    with pytest.raises(ValueError, match=r"edge type 'cites'.*\('user', 'likes', 'item'\)"):
        book().partid2eids(0, "cites")
    with pytest.raises(ValueError, match="unknown edge type"):
        book().to_canonical_etype(("user", "likes", "tag"))


def test_a_homogeneous_book_still_refuses_other_types_as_not_implemented():
    gpb = RangePartitionBook(0, 2, [[0, 3], [3, 5]], [[0, 7], [7, 9]])
    for call in (lambda: gpb.nid2partid([0], "paper"),
                 lambda: gpb.partid2eids(0, ("paper", "cites", "paper")),
                 lambda: gpb.map_to_homo_nid([0], "author"),
                 lambda: gpb.to_canonical_etype("cites"),
                 lambda: NodePartitionPolicy(gpb, "paper")):
        with pytest.raises(NotImplementedError, match="homogeneous graphs only"):
            call()


# -- ranges and sizes -------------------------------------------------------------------
def test_node_and_edge_ranges_are_each_partitions_homogeneous_block():
    assert book().node_ranges.tolist() == [[0, 5], [5, 10], [10, 14]]
    assert book().edge_ranges.tolist() == [[0, 5], [5, 8], [8, 15]]


def test_typed_ranges_are_copies_of_the_stored_ranges_of_one_type():
    gpb = book()
    assert gpb.typed_node_ranges("tag").tolist() == NODE_MAP["tag"]
    assert gpb.typed_edge_ranges("item:tags:tag").tolist() == EDGE_MAP["item:tags:tag"]
    assert torch.equal(gpb.typed_node_ranges("_N"), gpb.node_ranges)
    assert torch.equal(gpb.typed_edge_ranges("_E"), gpb.edge_ranges)
    gpb.typed_node_ranges("tag")[0, 0] = 99
    assert gpb.typed_node_ranges("tag").tolist() == NODE_MAP["tag"]


def test_sizes_count_one_type_or_all_types_for_the_homogeneous_names():
    gpb = book()
    assert [gpb._num_nodes(t) for t in ("user", "item", "tag", "_N")] == [5, 6, 3, 14]
    assert [gpb._num_edges(t) for t in ("likes", "user:tags:tag", "follows")] == [6, 3, 3]
    assert gpb._num_edges() == gpb._num_edges("_E") == gpb._num_edges("_N:_E:_N") == 15


def test_local_type_offsets_are_where_each_type_starts_in_this_partition():
    assert book(0).local_ntype_offset == [0, 3, 5, 5]
    assert book(1).local_ntype_offset == [0, 0, 3, 5]
    assert book(1).local_etype_offset == [0, 1, 3, 3, 3]


def test_metadata_counts_the_nodes_and_edges_of_all_types_per_partition():
    assert book().metadata() == [{"machine_id": 0, "num_nodes": 5, "num_edges": 5},
                                 {"machine_id": 1, "num_nodes": 5, "num_edges": 3},
                                 {"machine_id": 2, "num_nodes": 4, "num_edges": 7}]


# -- id maps ----------------------------------------------------------------------------
def test_homogeneous_node_ids_belong_to_the_block_that_holds_them():
    gpb = book()
    assert gpb.nid2partid(torch.arange(14)).tolist() == [0] * 5 + [1] * 5 + [2] * 4
    assert gpb.partid2nids(1).tolist() == [5, 6, 7, 8, 9]
    assert gpb.nid2localnid([5, 7], 1).tolist() == [0, 2]


def test_homogeneous_edge_type_names_take_homogeneous_ids():
    gpb = book()
    for name in ("_E", "_N:_E:_N", HOMOGENEOUS_ETYPE):
        assert gpb.eid2partid([4, 5, 14], name).tolist() == [0, 1, 2]
        assert gpb.partid2eids(1, name).tolist() == [5, 6, 7]
        assert gpb.map_to_homo_eid([9], name).tolist() == [9]


def test_typewise_ids_number_a_types_runs_partition_after_partition():
    gpb = book()
    owned = [gpb.partid2nids(p, "user").tolist() for p in range(3)]
    assert owned == [[0, 1, 2], [], [3, 4]]
    assert gpb.nid2partid([0, 2, 3, 4], "user").tolist() == [0, 0, 2, 2]
    assert gpb.partid2nids(1, "item").tolist() == [2, 3, 4]


def test_a_type_with_no_edges_in_a_partition_owns_no_ids_there():
    gpb = book(1)
    assert gpb.partid2eids(0, "user:tags:tag").tolist() == []
    assert gpb.partid2eids(1, "item:tags:tag").tolist() == []
    assert gpb.eid2partid([0, 1, 2], "user:tags:tag").tolist() == [1, 1, 2]


def test_local_ids_count_from_the_types_first_id_in_the_partition():
    gpb = book(0)
    assert gpb.nid2localnid([2, 3, 4], 1, "item").tolist() == [0, 1, 2]
    assert gpb.nid2localnid([3, 4], 2, "user").tolist() == [0, 1]
    assert gpb.eid2localeid([3, 5], 2, "likes").tolist() == [0, 2]
    assert gpb.nid2localnid([1], ntype="user").tolist() == [1]


def test_local_ids_of_ids_the_partition_does_not_own_are_rejected():
    with pytest.raises(IndexError, match="'user' node ids are not all owned by partition"):
        book(0).nid2localnid([3], 0, "user")
    with pytest.raises(IndexError, match="not all owned by partition 1"):
        book(0).eid2localeid([0], 1, "likes")


def test_map_to_per_ntype_splits_homogeneous_ids_into_type_and_typewise_ids():
    types, typed = book().map_to_per_ntype(torch.tensor([0, 3, 8, 10, 12, 13]))
    assert types.tolist() == [0, 1, 2, 0, 1, 2]
    assert typed.tolist() == [0, 0, 0, 3, 5, 2]


def test_map_to_per_etype_splits_homogeneous_edge_ids():
    types, typed = book().map_to_per_etype([2, 6, 7, 13, 14])
    assert types.tolist() == [2, 1, 1, 2, 3] and typed.tolist() == [0, 0, 1, 2, 2]


def test_map_to_homo_ids_inverts_map_to_per_type():
    gpb = book()
    for to_typed, to_homo, names, total in (
            (gpb.map_to_per_ntype, gpb.map_to_homo_nid, gpb.ntypes, 14),
            (gpb.map_to_per_etype, gpb.map_to_homo_eid, gpb.canonical_etypes, 15)):
        homo = torch.arange(total)
        types, typed = to_typed(homo)
        for index, name in enumerate(names):
            assert torch.equal(to_homo(typed[types == index], name), homo[types == index])


def test_ids_out_of_a_types_range_raise_index_error():
    with pytest.raises(IndexError, match=r"'user' node ids must be in \[0, 5\)"):
        book().nid2partid([5], "user")
    with pytest.raises(IndexError, match=r"'user:likes:item' edge ids must be in \[0, 6\)"):
        book().map_to_homo_eid([-1], "likes")
    with pytest.raises(IndexError, match=r"node ids must be in \[0, 14\)"):
        book().map_to_per_ntype([14])


def test_ids_come_back_as_int64_tensors():
    gpb = book()
    int32 = torch.tensor([3], dtype=torch.int32)
    outputs = (gpb.nid2partid(np.array([1], dtype=np.int32), "user"),
               gpb.partid2nids(0, "tag"), gpb.nid2localnid(int32, 2, "user"),
               *gpb.map_to_per_etype(int32), gpb.map_to_homo_eid([1], "follows"))
    assert all(out.dtype == torch.int64 for out in outputs)


# -- construction and validation --------------------------------------------------------
@pytest.mark.parametrize("convert", [list, np.array, torch.tensor])
@pytest.mark.parametrize("key", [str, _tuple])
def test_maps_may_hold_lists_arrays_or_tensors_keyed_by_strings_or_tuples(convert, key):
    gpb = RangePartitionBook(1, 3, {k: convert(v) for k, v in NODE_MAP.items()},
                             {key(k): convert(v) for k, v in EDGE_MAP.items()},
                             NTYPES, {key(k): v for k, v in ETYPES.items()})
    assert gpb.canonical_etypes == book().canonical_etypes
    assert gpb.typed_edge_ranges("likes").tolist() == EDGE_MAP["user:likes:item"]
    assert gpb.nid2localnid([2, 4], ntype="item").tolist() == [0, 2]


@pytest.mark.parametrize("ntypes", [{"user": 0, "item": 1, "tag": 3},
                                    {"user": 0, "item": 0, "tag": 1},
                                    {"user": 0, "item": 1, "tag": "2"}])
def test_type_ids_must_be_0_to_t_minus_1(ntypes):
    with pytest.raises(ValueError, match=r"node type ids must be 0\.\.2"):
        book(ntypes=ntypes)


def test_map_keys_must_be_exactly_the_declared_types():
    with pytest.raises(ValueError, match="key 'paper' is not among the types"):
        book(node_map=dict(NODE_MAP, paper=[[0, 0]] * 3))
    with pytest.raises(ValueError, match=r"no ranges for the node type\(s\) \['tag'\]"):
        book(node_map={k: v for k, v in NODE_MAP.items() if k != "tag"})
    edge_map = dict(EDGE_MAP, **{"user:likes:tag": [[0, 0]] * 3})
    with pytest.raises(ValueError, match="key 'user:likes:tag' is not among the types"):
        book(edge_map=edge_map)


def test_each_types_ranges_need_one_row_of_start_and_end_per_partition():
    with pytest.raises(ValueError, match="'tag' has 2 ranges but num_parts is 3"):
        book(node_map=dict(NODE_MAP, tag=[[5, 5], [8, 10]]))
    with pytest.raises(ValueError, match=r"'tag' must have shape \(num_parts, 2\)"):
        book(node_map=dict(NODE_MAP, tag=[5, 10, 14]))


@pytest.mark.parametrize("ntype, ranges", [
    ("tag", [[5, 5], [9, 10], [13, 14]]),    # a gap after item's run in partition 1
    ("tag", [[5, 5], [7, 10], [13, 14]]),    # overlaps item's run in partition 1
    ("item", [[3, 5], [6, 8], [12, 13]]),    # partition 1 starts after partition 0 ends
    ("user", [[1, 3], [5, 5], [10, 12]])],   # partition 0 does not start at 0
    ids=["gap", "overlap", "gap-between-partitions", "not-from-0"])
def test_the_types_ranges_must_tile_each_partition_after_the_previous(ntype, ranges):
    with pytest.raises(ValueError, match="node map is not contiguous"):
        book(node_map=dict(NODE_MAP, **{ntype: ranges}))


# -- policies ---------------------------------------------------------------------------
def test_node_policy_of_a_type_maps_typewise_ids():
    policy = NodePartitionPolicy(book(2), "user")
    assert policy.is_node and policy.policy_str == "node~user"
    assert policy.type_name == "user"
    assert policy.get_part_size() == 2 and policy.get_size() == 5
    assert policy.to_partid([0, 4]).tolist() == [0, 2]
    assert policy.to_local([3, 4]).tolist() == [0, 1]


@pytest.mark.parametrize("etype", ["likes", "user:likes:item", LIKES])
def test_edge_policy_of_a_type_names_its_canonical_type(etype):
    policy = EdgePartitionPolicy(book(2), etype)
    assert policy.policy_str == "edge~user:likes:item" and policy.type_name == LIKES
    assert policy.get_part_size() == 3 and policy.get_size() == 6
    assert policy.to_partid([1, 2, 3]).tolist() == [0, 1, 2]
    assert policy.to_local([3, 5]).tolist() == [0, 2]


def test_policy_strings_name_types_as_dgl_2_does():
    gpb = book(1)
    assert PartitionPolicy("node~tag", gpb).type_name == "tag"
    assert PartitionPolicy("edge~item:tags:tag", gpb).type_name == ("item", "tags", "tag")
    assert PartitionPolicy("edge~likes", gpb).policy_str == "edge~user:likes:item"
    assert PartitionPolicy("edge", gpb).policy_str == "edge~_N:_E:_N"
    assert PartitionPolicy("node", gpb).get_size() == 14
    assert EdgePartitionPolicy(gpb, "user:follows:user").get_part_size() == 0


@pytest.mark.parametrize("make", [lambda b: PartitionPolicy("edge~tags", b),
                                  lambda b: PartitionPolicy("node~paper", b),
                                  lambda b: EdgePartitionPolicy(b, "cites"),
                                  lambda b: NodePartitionPolicy(b, "paper"),
                                  lambda b: PartitionPolicy("vertex~user", b)],
                         ids=["ambiguous", "unknown-node", "unknown-edge", "node-class",
                              "bad-kind"])
def test_policies_reject_ambiguous_and_unknown_types(make):
    with pytest.raises(ValueError):
        make(book())


# -- against DGL ------------------------------------------------------------------------
def _books(part: int, meta: dict):
    """sarlite's book from the JSON-style maps and DGL's from their converted copies."""
    ours = RangePartitionBook(part, meta["num_parts"], meta["node_map"], meta["edge_map"],
                              meta["ntypes"], meta["etypes"])
    theirs = dgl_gpb.RangePartitionBook(
        part, meta["num_parts"], {k: np.array(v) for k, v in meta["node_map"].items()},
        {_tuple(k): np.array(v) for k, v in meta["edge_map"].items()}, meta["ntypes"],
        {_tuple(k): v for k, v in meta["etypes"].items()})
    return ours, theirs


def _same(mine, dgls) -> None:
    assert mine.dtype == torch.int64 and mine.tolist() == dgls.tolist()


def _assert_ids_match(ours, theirs, kind: str, names: list) -> None:
    """Every id method for one kind ("node" or "edge") answers as DGL, for each type."""
    part, parts = theirs.partid, range(theirs.num_partitions())
    size, short = getattr(theirs, f"_num_{kind}s"), kind[0]
    for name in names:
        ids = torch.arange(size(name))
        assert getattr(ours, f"_num_{kind}s")(name) == size(name)
        _same(getattr(ours, f"{short}id2partid")(ids, name),
              getattr(theirs, f"{short}id2partid")(ids, name))
        for p in parts:
            _same(getattr(ours, f"partid2{short}ids")(p, name),
                  getattr(theirs, f"partid2{short}ids")(p, name))
        owned = getattr(theirs, f"partid2{short}ids")(part, name)
        _same(getattr(ours, f"{short}id2local{short}id")(owned, part, name),
              getattr(theirs, f"{short}id2local{short}id")(owned, part, name))
        if name not in ("_N", HOMOGENEOUS_ETYPE):
            _same(getattr(ours, f"map_to_homo_{short}id")(ids, name),
                  getattr(theirs, f"map_to_homo_{short}id")(ids, name))
    homo = torch.arange(size(names[0]))
    for mine, dgls in zip(getattr(ours, f"map_to_per_{short}type")(homo),
                          getattr(theirs, f"map_to_per_{short}type")(homo)):
        _same(mine, dgls)


def _assert_book_matches(ours, theirs) -> None:
    assert (ours.ntypes, ours.etypes, ours.canonical_etypes) == \
        (theirs.ntypes, theirs.etypes, theirs.canonical_etypes)
    assert ours.local_ntype_offset == theirs.local_ntype_offset
    assert ours.local_etype_offset == theirs.local_etype_offset
    assert ours.metadata() == theirs.metadata()
    assert ours.is_homogeneous == theirs.is_homogeneous
    _assert_ids_match(ours, theirs, "node", ["_N"] + theirs.ntypes)
    _assert_ids_match(ours, theirs, "edge", [HOMOGENEOUS_ETYPE] + theirs.canonical_etypes)
    for rel in theirs.etypes:
        if theirs.etypes.count(rel) == 1:
            assert ours.to_canonical_etype(rel) == theirs.to_canonical_etype(rel)


def _assert_policies_match(ours, theirs) -> None:
    pairs = [(NodePartitionPolicy(ours, t), dgl_gpb.NodePartitionPolicy(theirs, t))
             for t in ["_N"] + theirs.ntypes]
    pairs += [(EdgePartitionPolicy(ours, t), dgl_gpb.EdgePartitionPolicy(theirs, t))
              for t in [HOMOGENEOUS_ETYPE] + theirs.canonical_etypes]
    pairs += [(PartitionPolicy(p.policy_str, ours), p) for _, p in pairs]
    for mine, dgls in pairs:
        assert (mine.policy_str, mine.type_name, mine.is_node, mine.part_id) == \
            (dgls.policy_str, dgls.type_name, dgls.is_node, dgls.part_id)
        assert (mine.get_part_size(), mine.get_size()) == \
            (dgls.get_part_size(), dgls.get_size())
        ids = torch.arange(dgls.get_size())
        _same(mine.to_partid(ids), dgls.to_partid(ids))
        owned = ids[dgls.to_partid(ids) == dgls.part_id]
        _same(mine.to_local(owned), dgls.to_local(owned))


HAND_BUILT = {"num_parts": 3, "node_map": NODE_MAP, "edge_map": EDGE_MAP,
              "ntypes": NTYPES, "etypes": ETYPES}


@pytest.mark.parametrize("part", range(3))
def test_hand_built_layout_answers_as_dgl(part):
    _assert_book_matches(*_books(part, HAND_BUILT))


@pytest.mark.parametrize("part", range(3))
def test_hand_built_layout_policies_answer_as_dgl(part):
    _assert_policies_match(*_books(part, HAND_BUILT))


@pytest.fixture(scope="module")
def dgl_layout(tmp_path_factory) -> dict:
    """The partition JSON that DGL's partition_graph writes for a small heterograph
    (every type in every partition: DGL 2.1's partitioner needs that)."""
    sizes = {"user": 24, "item": 18, "tag": 18}

    def into(src: str, dst: str):
        dst_ids = torch.arange(sizes[dst])
        return (dst_ids * 7 + 3) % sizes[src], dst_ids

    graph = dgl.heterograph({("user", "follows", "user"): into("user", "user"),
                             ("user", "clicks", "item"): into("user", "item"),
                             ("item", "tagged", "tag"): into("item", "tag"),
                             ("user", "tagged", "tag"): into("user", "tag")},
                            num_nodes_dict=sizes)
    out = tmp_path_factory.mktemp("dgl_hetero")
    dgl.seed(0)
    dgl.distributed.partition_graph(graph, "hg", 3, out, part_method="random")
    return json.loads((out / "hg.json").read_text())


@pytest.mark.parametrize("part", range(3))
def test_partition_graph_output_answers_as_dgl(dgl_layout, part):
    _assert_book_matches(*_books(part, dgl_layout))


@pytest.mark.parametrize("part", range(3))
def test_partition_graph_output_policies_answer_as_dgl(dgl_layout, part):
    _assert_policies_match(*_books(part, dgl_layout))
