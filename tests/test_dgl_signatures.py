"""Every sarlite name taken from DGL takes DGL 2.1's parameters, and DGL's calls work.

A signature matches when DGL's parameters come first, in DGL's order, with DGL's names,
kinds and defaults (sarlite may give a default where DGL has none), and sarlite's own
parameters come after them, keyword-only. Then each function is called the way a DGL
script calls it, positionally and by keyword, on a small graph.
"""
import inspect

import dgl
import dgl.dataloading
import dgl.distributed
import pytest
import torch
from dgl.distributed import graph_partition_book as dgl_book

import sarlite
import sarlite.distributed as sd
from conftest import random_graph
from harness import spawn
from sarlite.partition import writer
from sarlite.sampling import neighbor, split

P = inspect.Parameter

# DGL methods sarlite's classes do not have, and why
KNOWN_MISSING = {
    "get_data_name": "a policy's DGL-internal HeteroDataName (an RPC key)",
    "update": "a sparse optimizer's hook; sarlite's is update_local (local rows), and a "
              "subclass defining update is refused",
    "local_state_dict": "per-rank optimizer state; sarlite's save(f)/load(f) keep it in "
                        "global id order, loadable with any number of ranks",
    "load_local_state_dict": "as local_state_dict",
}

# (name, sarlite class, DGL class) whose constructor and common public methods must match
CLASSES = [
    ("DistGraph", sd.DistGraph, dgl.distributed.DistGraph),
    ("sampling.DistGraph", sarlite.sampling.DistGraph, dgl.distributed.DistGraph),
    ("DistTensor", sd.DistTensor, dgl.distributed.DistTensor),
    ("DistEmbedding", sd.DistEmbedding, dgl.distributed.DistEmbedding),
    ("SparseAdam", sd.optim.SparseAdam, dgl.distributed.optim.SparseAdam),
    ("SparseAdagrad", sd.optim.SparseAdagrad, dgl.distributed.optim.SparseAdagrad),
    ("RangePartitionBook", sd.RangePartitionBook, dgl_book.RangePartitionBook),
    ("PartitionPolicy", sd.PartitionPolicy, dgl_book.PartitionPolicy),
    ("NodePartitionPolicy", sd.NodePartitionPolicy, dgl_book.NodePartitionPolicy),
    ("EdgePartitionPolicy", sd.EdgePartitionPolicy, dgl_book.EdgePartitionPolicy),
    ("DistDataLoader", sd.DistDataLoader, dgl.distributed.DistDataLoader),
    ("DistNodeDataLoader", sd.DistNodeDataLoader, dgl.dataloading.DistNodeDataLoader),
    ("DistEdgeDataLoader", sd.DistEdgeDataLoader, dgl.dataloading.DistEdgeDataLoader),
]

# (name, sarlite function, DGL function)
FUNCTIONS = [(f"{where}.{name}", getattr(module, name), getattr(dgl.distributed, name))
             for where, module, names in (
                 ("sarlite.distributed", sd, [
                     "initialize", "partition_graph", "load_partition", "load_partition_book",
                     "load_partition_feats", "node_split", "edge_split", "sample_neighbors",
                     "sample_etype_neighbors", "in_subgraph", "find_edges", "exit_client"]),
                 ("sarlite", sarlite, [
                     "partition_graph", "load_partition", "load_partition_book",
                     "load_partition_feats", "node_split", "edge_split", "sample_neighbors",
                     "in_subgraph"]),
                 ("sarlite.sampling.split", split, ["node_split", "edge_split"]),
                 ("sarlite.sampling.neighbor", neighbor, ["sample_neighbors", "in_subgraph"]),
                 ("sarlite.partition.writer", writer, ["partition_graph"]))
             for name in names]


def mismatch(ours, theirs) -> str | None:
    """Why ``ours`` does not take ``theirs``' parameters, or ``None`` when it does."""
    mine = list(inspect.signature(ours).parameters.values())
    dgls = list(inspect.signature(theirs).parameters.values())
    named = [p for p in dgls if p.kind is not P.VAR_KEYWORD]
    head = mine[:len(named)]
    if [(p.name, p.kind) for p in head] != [(p.name, p.kind) for p in named]:
        return (f"parameters {[(p.name, p.kind.name) for p in head]}, DGL's "
                f"{[(p.name, p.kind.name) for p in named]}")
    for p, q in zip(head, named):
        if q.default is not P.empty and not (type(p.default) is type(q.default)
                                             and p.default == q.default):
            return f"default of {p.name} is {p.default!r}, DGL's is {q.default!r}"
    extras = mine[len(named):]
    positional = [p.name for p in extras if p.kind not in (P.KEYWORD_ONLY, P.VAR_KEYWORD)]
    if positional:
        return f"sarlite's extras {positional} are not keyword-only"
    if len(named) < len(dgls) and not any(p.kind is P.VAR_KEYWORD for p in extras):
        return "DGL takes **kwargs and sarlite does not"
    return None


def _methods(cls) -> list[str]:
    """Public methods defined by ``cls`` or its bases, properties excluded."""
    names = set()
    for klass in cls.__mro__[:-1]:
        for name, value in vars(klass).items():
            if not name.startswith("_") and callable(value) and \
                    not isinstance(value, (property, classmethod, staticmethod, type)):
                names.add(name)
    return sorted(names)


def test_the_mismatch_check_can_fail():
    def dgl_like(g, nodes, fanout, edge_dir="in"):
        pass

    def reordered(g, fanout, nodes, edge_dir="in"):
        pass

    def other_default(g, nodes, fanout, edge_dir="out"):
        pass

    def positional_extra(g, nodes, fanout, edge_dir="in", seed=0):
        pass

    def keyword_extra(g, nodes, fanout, edge_dir="in", *, seed=0):
        pass

    assert "parameters" in mismatch(reordered, dgl_like)
    assert "default of edge_dir" in mismatch(other_default, dgl_like)
    assert "not keyword-only" in mismatch(positional_extra, dgl_like)
    assert mismatch(keyword_extra, dgl_like) is None


@pytest.mark.parametrize("name, ours, theirs", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_function_takes_dgl_parameters_in_dgl_order(name, ours, theirs):
    assert mismatch(ours, theirs) is None, f"{name}: {mismatch(ours, theirs)}"


@pytest.mark.parametrize("name, ours, theirs", CLASSES, ids=[c[0] for c in CLASSES])
def test_constructor_takes_dgl_parameters_in_dgl_order(name, ours, theirs):
    assert mismatch(ours.__init__, theirs.__init__) is None, \
        f"{name}: {mismatch(ours.__init__, theirs.__init__)}"


@pytest.mark.parametrize("name, ours, theirs", CLASSES, ids=[c[0] for c in CLASSES])
def test_every_public_dgl_method_exists_with_dgl_parameters(name, ours, theirs):
    problems = {}
    for method in _methods(theirs):
        if method in KNOWN_MISSING:
            continue
        if not hasattr(ours, method):
            problems[method] = "missing"
        elif mismatch(getattr(ours, method), getattr(theirs, method)):
            problems[method] = mismatch(getattr(ours, method), getattr(theirs, method))
    assert not problems, f"{name}: {problems}"


def test_known_missing_methods_are_really_missing():
    for name, ours, theirs in CLASSES:
        for method in set(KNOWN_MISSING) & set(_methods(theirs)):
            assert not hasattr(ours, method), f"{name}.{method} exists: check its signature"


def test_a_dgl_style_update_override_is_refused_with_the_way_out():
    with pytest.raises(TypeError, match="override update_local"):
        type("MyAdam", (sarlite.SparseAdam,), {"update": lambda self, idx, grad, emb: None})


# -- calls in DGL's forms --------------------------------------------------------------

@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A 60-node graph partitioned into 1 and into 2 parts, both calling forms."""
    g = random_graph()
    out = tmp_path_factory.mktemp("parts")
    positional = sarlite.partition_graph(g, "g", 2, out / "pos", 1, "random", None, False,
                                         True, 1, "cut", None, False)
    keyword = sarlite.partition_graph(
        g=g, graph_name="g", num_parts=2, out_path=out / "kw", num_hops=1,
        part_method="random", balance_ntypes=None, balance_edges=False, return_mapping=True,
        num_trainers_per_machine=1, objtype="cut", graph_formats=None, use_graphbolt=False)
    single = sarlite.partition_graph(g, "g", 1, out / "one", part_method="random",
                                     return_mapping=True)
    return {"g": g, "positional": positional, "keyword": keyword, "single": single,
            "two": str(out / "pos" / "g.json"), "one": str(out / "one" / "g.json"),
            "out": out}


def test_partition_graph_positional_and_keyword_calls_give_the_same_partitions(parts):
    for ours, theirs in zip(parts["positional"], parts["keyword"]):
        assert torch.equal(ours, theirs)
    a = sarlite.load_partition(parts["two"], 1)[0]
    b = sarlite.load_partition(parts["out"] / "kw" / "g.json", 1)[0]
    assert torch.equal(a.ndata[dgl.NID], b.ndata[dgl.NID])


def test_partition_graph_objtype_vol_is_the_metis_objective(parts, tmp_path):
    sarlite.partition_graph(parts["g"], "g", 2, tmp_path, objtype="vol")
    assert sarlite.load_partition_book(tmp_path / "g.json", 0)[0].num_partitions() == 2


def test_partition_graph_saves_the_graph_formats_asked_for(parts, tmp_path):
    sarlite.partition_graph(parts["g"], "g", 2, tmp_path, graph_formats=["csc"])
    graph = dgl.distributed.load_partition(str(tmp_path / "g.json"), 0)[0]
    assert graph.formats()["created"] == ["csc"]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"num_trainers_per_machine": 2}, ValueError, "one trainer per partition"),
    ({"use_graphbolt": True}, NotImplementedError, "dgl_partition_to_graphbolt"),
    ({"objective": "vol"}, TypeError, "is DGL's 'objtype'"),
    ({"store_eids": True}, TypeError, "GraphBolt conversion"),
])
def test_partition_graph_refuses_dgl_options_it_cannot_honour(parts, tmp_path, kwargs,
                                                               error, message):
    with pytest.raises(error, match=message):
        sarlite.partition_graph(parts["g"], "g", 2, tmp_path, **kwargs)


def test_load_partition_in_dgl_forms(parts):
    positional = sarlite.load_partition(parts["two"], 0, False, False)
    keyword = sarlite.load_partition(part_config=parts["two"], part_id=0, load_feats=True,
                                     use_graphbolt=False)
    theirs = dgl.distributed.load_partition(parts["two"], 0)
    assert positional[1] == {} and positional[2] == {}
    assert sorted(keyword[1]) == sorted(theirs[1]) and sorted(keyword[2]) == sorted(theirs[2])
    assert torch.equal(keyword[0].ndata[dgl.NID], theirs[0].ndata[dgl.NID])
    with pytest.raises(NotImplementedError, match="GraphBolt"):
        sarlite.load_partition(parts["two"], 0, use_graphbolt=True)


def test_load_partition_feats_equals_dgl(parts):
    ours = sarlite.load_partition_feats(parts["two"], 1, True, False)
    theirs = dgl.distributed.load_partition_feats(parts["two"], 1, True, False)
    assert ours[1] is None and theirs[1] is None
    assert sorted(ours[0]) == sorted(theirs[0])
    for name, rows in theirs[0].items():
        assert torch.equal(ours[0][name], rows)
    nodes, edges = sd.load_partition_feats(part_config=parts["two"], part_id=1,
                                           load_nodes=False, load_edges=True)
    assert nodes is None and "_N:_E:_N/w" in edges


def test_load_partition_book_in_dgl_forms(parts):
    book, name, ntypes, etypes = sarlite.load_partition_book(parts["two"], 1)
    again = sd.load_partition_book(part_config=parts["two"], part_id=1)[0]
    theirs, their_name, *_ = dgl.distributed.load_partition_book(parts["two"], 1)
    assert (name, their_name) == ("g", "g") and list(ntypes) == ["_N"]
    ids = torch.arange(60)
    assert torch.equal(book.nid2partid(ids, "_N"), theirs.nid2partid(ids, "_N"))
    assert torch.equal(again.nid2partid(nids=ids, ntype="_N"), theirs.nid2partid(ids))


def test_partition_book_methods_in_dgl_forms_equal_dgl(parts):
    ours = sarlite.load_partition_book(parts["two"], 1)[0]
    theirs = dgl.distributed.load_partition_book(parts["two"], 1)[0]
    owned = theirs.partid2nids(1, "_N")
    etype = ("_N", "_E", "_N")
    eids = theirs.partid2eids(1, etype)
    assert torch.equal(ours.partid2nids(1, "_N"), owned)
    assert torch.equal(ours.partid2nids(partid=1, ntype="_N"), owned)
    assert torch.equal(ours.partid2eids(partid=1, etype=etype), eids)
    assert torch.equal(ours.eid2partid(eids, etype), theirs.eid2partid(eids, etype))
    assert torch.equal(ours.nid2localnid(owned, 1, "_N"), theirs.nid2localnid(owned, 1))
    assert torch.equal(ours.eid2localeid(eids=eids, partid=1, etype=etype),
                       theirs.eid2localeid(eids, 1))
    assert torch.equal(ours.map_to_homo_nid(owned, "_N"),
                       theirs.map_to_homo_nid(owned, "_N"))
    assert torch.equal(ours.map_to_homo_eid(ids=eids, etype=etype),
                       theirs.map_to_homo_eid(eids, etype))
    for mine, dgls in zip(ours.map_to_per_ntype(owned), theirs.map_to_per_ntype(owned)):
        assert torch.equal(mine, dgls)
    for mine, dgls in zip(ours.map_to_per_etype(eids), theirs.map_to_per_etype(eids)):
        assert torch.equal(mine, dgls)
    assert ours.to_canonical_etype("_E") == theirs.to_canonical_etype("_E") == etype
    assert ours.is_homogeneous and ours.metadata() == theirs.metadata()


def test_partition_book_refuses_other_types_naming_the_limit(parts):
    book = sarlite.load_partition_book(parts["two"], 0)[0]
    for call in (lambda: book.nid2partid([0], "paper"),
                 lambda: book.partid2eids(0, ("paper", "cites", "paper")),
                 lambda: book.map_to_homo_nid([0], "author"),
                 lambda: sd.NodePartitionPolicy(book, "paper")):
        with pytest.raises(NotImplementedError, match="homogeneous graphs only"):
            call()
    with pytest.raises(NotImplementedError, match="no servers"):
        book.shared_memory("g")


def test_partition_policies_in_dgl_forms_agree(parts):
    book = sarlite.load_partition_book(parts["two"], 1)[0]
    ids = torch.arange(60)
    for policy in (sd.PartitionPolicy("node~_N", book), sd.PartitionPolicy("node", book),
                   sd.NodePartitionPolicy(book, "_N"),
                   sd.NodePartitionPolicy(partition_book=book, ntype="_N")):
        assert policy.is_node and policy.policy_str == "node~_N"
        assert torch.equal(policy.to_partid(ids), book.nid2partid(ids))
    for policy in (sd.PartitionPolicy("edge~_N:_E:_N", book),
                   sd.PartitionPolicy("edge~_E", book),
                   sd.EdgePartitionPolicy(book, ("_N", "_E", "_N")),
                   sd.EdgePartitionPolicy(book, "_N:_E:_N")):
        assert not policy.is_node and policy.policy_str == "edge~_N:_E:_N"
        assert policy.get_part_size() == book.edge_ranges[1].diff().item()


def test_node_and_edge_split_in_dgl_forms(parts):
    book = sarlite.load_partition_book(parts["two"], 0)[0]
    mask = torch.arange(60) % 3 == 0
    expected = split.node_split(mask, book, rank=1)
    for ours in (sd.node_split, sarlite.distributed.node_split, split.node_split):
        assert torch.equal(ours(mask, book, "_N", 1, True, None), expected)
        assert torch.equal(ours(nodes=mask, partition_book=book, ntype="_N", rank=1,
                                force_even=True, node_trainer_ids=None), expected)
    edges = torch.arange(300) % 2 == 0
    expected = split.edge_split(edges, book, rank=0, force_even=False)
    for etype in ("_E", "_N:_E:_N", ("_N", "_E", "_N")):
        assert torch.equal(sd.edge_split(edges, book, etype, 0, False, None), expected)
        assert torch.equal(sd.edge_split(edges=edges, partition_book=book, etype=etype,
                                         rank=0, force_even=False, edge_trainer_ids=None),
                           expected)


def test_node_split_refuses_another_node_type(parts):
    book = sarlite.load_partition_book(parts["two"], 0)[0]
    with pytest.raises(NotImplementedError, match="node type 'paper'"):
        sd.node_split(torch.ones(60, dtype=torch.bool), book, "paper", 0)
    with pytest.raises(NotImplementedError, match="edge type 'cites'"):
        sd.edge_split(torch.ones(300, dtype=torch.bool), book, "cites", 0)


@pytest.fixture
def alone(parts, monkeypatch):
    """The facade's DistGraph of the 1-part partition in this process (no launcher)."""
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    return sd.DistGraph("g", None, parts["one"])


def _sorted_eids(frontier) -> torch.Tensor:
    return frontier.edata[dgl.EID].sort().values


def test_dist_graph_in_dgl_keyword_form(parts, alone):
    g = sd.DistGraph(graph_name="g", gpb=alone.get_partition_book(), part_config=parts["one"])
    assert (g.num_nodes(), g.num_edges()) == (60, 300)


def test_sample_neighbors_in_dgl_forms_equals_dgl_on_one_partition(parts, alone):
    g = parts["g"]                     # one random partition keeps every id
    seeds = torch.arange(0, 60, 2)
    dgl.seed(3)
    expected = _sorted_eids(dgl.sampling.sample_neighbors(g, seeds, 3))
    for call in (lambda: sd.sample_neighbors(alone, seeds, 3, "in", None, False, False),
                 lambda: sd.sample_neighbors(g=alone, nodes={"_N": seeds}, fanout=3,
                                             edge_dir="in", prob=None, replace=False,
                                             use_graphbolt=False)):
        dgl.seed(3)
        assert torch.equal(_sorted_eids(call()), expected)


def test_exclude_edges_drops_them_after_sampling_as_dgl_does(parts, alone):
    g = parts["g"]
    seeds = torch.arange(0, 60, 2)
    excluded = torch.arange(0, 300, 3)
    dgl.seed(4)
    expected = _sorted_eids(dgl.sampling.sample_neighbors(g, seeds, 3,
                                                          exclude_edges=excluded))
    dgl.seed(4)
    without = _sorted_eids(neighbor.sample_neighbors(alone, seeds, 3))
    dgl.seed(4)
    got = _sorted_eids(neighbor.sample_neighbors(alone, seeds, 3, exclude_edges=excluded))
    assert torch.equal(got, expected)
    assert torch.equal(got, without[~torch.isin(without, excluded)])   # same draws, minus
    assert got.numel() < without.numel()


def test_exclude_edges_takes_dgl_s_type_dict(parts, alone):
    seeds = torch.arange(60)
    dgl.seed(5)
    plain = _sorted_eids(sd.sample_neighbors(alone, seeds, -1, exclude_edges=[0, 1, 2]))
    dgl.seed(5)
    typed = _sorted_eids(sd.sample_neighbors(
        alone, seeds, -1, exclude_edges={("_N", "_E", "_N"): torch.tensor([0, 1, 2])}))
    assert torch.equal(plain, typed) and plain.numel() == 297


def test_in_subgraph_and_find_edges_in_dgl_forms(parts, alone):
    g = parts["g"]
    nodes = torch.tensor([1, 7, 30])
    expected = _sorted_eids(dgl.in_subgraph(g, nodes))
    assert torch.equal(_sorted_eids(sd.in_subgraph(alone, nodes)), expected)
    assert torch.equal(_sorted_eids(sd.in_subgraph(g=alone, nodes={"_N": nodes})), expected)
    src, dst = sd.find_edges(g=alone, edge_ids=torch.tensor([0, 5]))
    expected = g.find_edges(torch.tensor([0, 5]))
    assert torch.equal(src, expected[0]) and torch.equal(dst, expected[1])


def test_kv_objects_in_dgl_forms(alone):
    t = sd.DistTensor((60, 2), torch.float32, "t", None, None, False, True, True)
    u = sd.DistTensor(shape=(60,), dtype=torch.int64, name="u", init_func=None,
                      part_policy=alone.get_node_partition_policy(), persistent=False,
                      is_gdata=False, attach=False)
    t[torch.tensor([1, 2])] = torch.ones(2, 2)
    assert t.count_nonzero() == 4 and u.count_nonzero() == 0
    assert t.kvstore_key == t.name == "node~_N:t"
    emb = sd.DistEmbedding(60, 3, "e", None, None)
    emb2 = sd.DistEmbedding(num_embeddings=60, embedding_dim=3, name="e2", init_func=None,
                            part_policy=None)
    adam = sd.optim.SparseAdam([emb], 0.1, (0.9, 0.999), 1e-08)
    adagrad = sd.optim.SparseAdagrad(params=[emb2], lr=0.1, eps=1e-10)
    with torch.enable_grad():
        (emb(torch.tensor([3])).sum() + emb2(torch.tensor([4])).sum()).backward()
    adam.step()
    adagrad.step()
    assert emb.weight[torch.tensor([3])].abs().sum() > 0
    assert emb2.weight[torch.tensor([4])].abs().sum() > 0


# -- two workers ------------------------------------------------------------------------

def _two_workers(rank, world, config):
    g = sd.DistGraph("g", part_config=config)
    nodes = torch.arange(rank, 60, 2)
    mine = torch.arange(rank, 300, 2)             # rank r excludes edge ids = r mod 2
    kept = sd.sample_neighbors(g, nodes, -1, exclude_edges=mine)
    everything = sd.in_subgraph(g, nodes)
    t = sd.DistTensor((60,), torch.float32, "c",
                      lambda shape, dtype: torch.ones(shape, dtype=dtype))
    return {"kept": kept.edata[dgl.EID], "all": everything.edata[dgl.EID],
            "excluded": mine, "nonzero": t.count_nonzero()}


@pytest.fixture(scope="module")
def two_workers(parts):
    return spawn(_two_workers, 2, parts["two"], timeout=120)


def test_each_rank_s_exclude_edges_apply_to_its_own_result(two_workers):
    for out in two_workers:
        expected = out["all"][~torch.isin(out["all"], out["excluded"])]
        assert torch.equal(out["kept"].sort().values, expected.sort().values)
        assert out["kept"].numel() > 0


def test_count_nonzero_counts_every_rank_s_rows(two_workers):
    assert [out["nonzero"] for out in two_workers] == [60, 60]
