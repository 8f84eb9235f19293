"""Heterogeneous partitions in DGL 2.x's format, written and read both ways.

DGL's ``load_partition`` reads what ``sarlite.partition_graph`` writes for a heterograph,
sarlite reads what ``dgl.distributed.partition_graph`` writes, and both say the same
about every node, edge and feature, by type.
"""
import json
import os

import dgl
import pytest
import torch

import sarlite

NUM_NODES = {"author": 50, "field": 12, "paper": 80}
RELATIONS = [("author", "writes", "paper"), ("paper", "cites", "paper"),
             ("paper", "has_topic", "field"), ("paper", "written_by", "author")]


def mag_like(seed: int = 0, edges: int = 240) -> dgl.DGLGraph:
    """A small graph shaped like ogbn-mag, dense enough for DGL 2.1's writer (which
    crashes when a partition gets no node of some type or no edge of some relation)."""
    gen = torch.Generator().manual_seed(seed)
    data = {rel: (torch.randint(0, NUM_NODES[rel[0]], (edges,), generator=gen),
                  torch.randint(0, NUM_NODES[rel[2]], (edges,), generator=gen))
            for rel in RELATIONS}
    g = dgl.heterograph(data, num_nodes_dict=NUM_NODES)
    g.nodes["paper"].data["feat"] = torch.randn(NUM_NODES["paper"], 4, generator=gen)
    g.nodes["paper"].data["train_mask"] = torch.arange(NUM_NODES["paper"]) % 3 == 0
    g.nodes["author"].data["x"] = torch.arange(NUM_NODES["author"], dtype=torch.float32)
    g.edges["cites"].data["w"] = torch.arange(edges, dtype=torch.float32)
    return g


@pytest.fixture(scope="module", params=["metis", "random"])
def written(request, tmp_path_factory):
    """``(graph, config, orig_nids, orig_eids)`` of sarlite's 3-part partitioning."""
    g = mag_like()
    out = tmp_path_factory.mktemp(f"het_{request.param}")
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 3, out, return_mapping=True,
                                                   part_method=request.param)
    return g, str(out / "g.json"), orig_nids, orig_eids


@pytest.fixture(scope="module")
def dgl_written(tmp_path_factory):
    """The same for ``dgl.distributed.partition_graph``."""
    g = mag_like()
    out = tmp_path_factory.mktemp("het_dgl")
    orig_nids, orig_eids = dgl.distributed.partition_graph(g, "g", 3, str(out),
                                                           return_mapping=True)
    return g, str(out / "g.json"), orig_nids, orig_eids


def _owned_edges(graph, book):
    """Per owned edge of a partition graph: (etype id, type-wise eid, type-wise src id,
    type-wise dst id), from the partition's own ids and the book."""
    inner = graph.edata["inner_edge"].bool()
    src, dst = graph.edges()
    etype, eid = book.map_to_per_etype(graph.edata[dgl.EID][inner])
    _, src_id = book.map_to_per_ntype(graph.ndata[dgl.NID][src[inner]])
    _, dst_id = book.map_to_per_ntype(graph.ndata[dgl.NID][dst[inner]])
    return etype, eid, src_id, dst_id


def _check_partition(g, config, orig_nids, orig_eids, part, load):
    """Everything partition ``part`` holds, read with ``load``, matches ``g``."""
    graph, nfeat, efeat, book, name, ntypes, etypes = load(config, part)
    assert name == "g" and ntypes == g.ntypes and etypes == g.canonical_etypes
    for ntype in g.ntypes:
        owned = book.partid2nids(part, ntype)
        for key, value in g.nodes[ntype].data.items():
            assert torch.equal(nfeat[f"{ntype}/{key}"], value[orig_nids[ntype][owned]])
    for c_etype in g.canonical_etypes:
        owned = book.partid2eids(part, c_etype)
        for key, value in g.edges[c_etype].data.items():
            assert torch.equal(efeat[":".join(c_etype) + f"/{key}"],
                               value[orig_eids[c_etype][owned]])
    etype, eid, src_id, dst_id = _owned_edges(graph, book)
    assert torch.equal(graph.edata[dgl.ETYPE][graph.edata["inner_edge"].bool()].long(),
                       etype)
    for t, c_etype in enumerate(g.canonical_etypes):
        mine = etype == t
        src, dst = g.find_edges(orig_eids[c_etype][eid[mine]], etype=c_etype)
        assert torch.equal(orig_nids[c_etype[0]][src_id[mine]], src)
        assert torch.equal(orig_nids[c_etype[2]][dst_id[mine]], dst)


def test_dgl_reads_sarlite_heterogeneous_partitions(written, monkeypatch):
    monkeypatch.setenv("DGL_DIST_DEBUG", "1")       # DGL then checks every id as well
    for part in range(3):
        _check_partition(*written, part, dgl.distributed.load_partition)


def test_sarlite_reads_its_own_heterogeneous_partitions(written):
    for part in range(3):
        _check_partition(*written, part, sarlite.load_partition)


def test_sarlite_reads_dgl_heterogeneous_partitions(dgl_written):
    for part in range(3):
        _check_partition(*dgl_written, part, sarlite.load_partition)


def test_sarlite_and_dgl_read_the_same_partition_alike(dgl_written):
    _, config, _, _ = dgl_written
    for part in range(3):
        ours = sarlite.load_partition(config, part)
        theirs = dgl.distributed.load_partition(config, part)
        for key in (dgl.NID, dgl.NTYPE, "inner_node"):
            assert torch.equal(ours[0].ndata[key], theirs[0].ndata[key])
        assert ours[1].keys() == theirs[1].keys() and ours[2].keys() == theirs[2].keys()
        assert ours[3].metadata() == theirs[3].metadata()
        ids = torch.arange(sum(NUM_NODES.values()))
        assert torch.equal(ours[3].map_to_per_ntype(ids)[1], theirs[3].map_to_per_ntype(ids)[1])


def test_orig_ids_are_dicts_by_node_type_and_canonical_edge_type_tuple(written, dgl_written):
    for g, _, orig_nids, orig_eids in (written, dgl_written):
        assert set(orig_nids) == set(g.ntypes)
        assert set(orig_eids) == set(g.canonical_etypes)
        for ntype, ids in orig_nids.items():
            assert torch.equal(torch.sort(ids).values, torch.arange(g.num_nodes(ntype)))


def test_the_json_keeps_dgl_2_type_maps(written):
    meta = json.loads(open(written[1]).read())
    assert meta["ntypes"] == {"author": 0, "field": 1, "paper": 2}
    assert set(meta["etypes"]) == set(meta["edge_map"]) == {":".join(r) for r in RELATIONS}
    assert all(len(ranges) == 3 for ranges in meta["node_map"].values())


def test_every_owned_node_has_all_its_in_edges_of_every_relation_and_their_sources(written):
    g, config, orig_nids, orig_eids = written
    for part in range(3):
        graph, _, _, book, *_ = sarlite.load_partition(config, part)
        etype, eid, _, _ = _owned_edges(graph, book)
        for t, c_etype in enumerate(g.canonical_etypes):
            dst_type = c_etype[2]
            mine = orig_nids[dst_type][book.partid2nids(part, dst_type)]
            expected = g.in_edges(mine, form="eid", etype=c_etype)
            held = orig_eids[c_etype][eid[etype == t]]
            assert torch.equal(torch.sort(held).values, torch.sort(expected).values)


def test_metis_holds_each_node_type_evenly_in_every_part(written):
    g, config, _, _ = written
    book = sarlite.load_partition_book(config, 0)[0]
    for ntype in g.ntypes:
        sizes = [len(book.partid2nids(p, ntype)) for p in range(3)]
        if json.loads(open(config).read())["part_method"] == "metis":
            assert max(sizes) - min(sizes) <= 1, (ntype, sizes)


def test_balance_ntypes_splits_a_node_type_evenly_by_class(tmp_path):
    g = mag_like()
    mask = g.nodes["paper"].data["train_mask"]
    orig_nids, _ = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True,
                                           balance_ntypes={"paper": mask})
    book = sarlite.load_partition_book(tmp_path / "g.json", 0)[0]
    train = [int(mask[orig_nids["paper"][book.partid2nids(p, "paper")]].sum())
             for p in range(3)]
    assert max(train) - min(train) <= 1, train


def test_a_partition_without_some_node_type_or_relation_is_written_and_read(tmp_path,
                                                                            monkeypatch):
    g = dgl.heterograph({("paper", "cites", "paper"): (torch.arange(29), torch.arange(1, 30)),
                         ("paper", "has", "field"): (torch.tensor([0]), torch.tensor([0]))},
                        num_nodes_dict={"paper": 30, "field": 1})
    g.nodes["field"].data["x"] = torch.ones(1, 2)
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    monkeypatch.setenv("DGL_DIST_DEBUG", "1")
    held = []
    for part in range(3):
        _check_partition(g, str(tmp_path / "g.json"), orig_nids, orig_eids, part,
                         sarlite.load_partition)
        _check_partition(g, str(tmp_path / "g.json"), orig_nids, orig_eids, part,
                         dgl.distributed.load_partition)
        held.append(sarlite.load_partition(tmp_path / "g.json", part)[1]["field/x"].shape[0])
    assert sorted(held) == [0, 0, 1]


def test_the_report_splits_nodes_and_halo_by_type_and_the_cut_by_relation(written):
    g, config, _, _ = written
    report = sarlite.partition_report(config)
    assert {t: sum(n) for t, n in report.typed_nodes.items()} == NUM_NODES
    for p in range(3):
        assert sum(h[p] for h in report.typed_halo.values()) == report.halo_nodes[p]
    assert sum(report.relation_cut.values()) == report.edge_cut
    assert set(report.relation_cut) == {":".join(r) for r in RELATIONS}
    assert report.train_nodes is not None and sum(report.train_nodes) == 27
    assert "edge cut per relation: author:writes:paper" in str(report)


def test_load_partition_data_gives_features_by_type_and_shards_by_relation(written):
    g, config, orig_nids, orig_eids = written
    for part in range(3):
        data = sarlite.load_partition_data(config, rank=part)
        owned = {t: orig_nids[t][slice(*data.owned_range(t))] for t in g.ntypes}
        assert torch.equal(data.node_features["feat"]["paper"],
                           g.nodes["paper"].data["feat"][owned["paper"]])
        assert data.node_features["train_mask"]["paper"].dtype == torch.bool
        assert set(data.node_features["x"]) == {"author"}
        for c_etype in g.canonical_etypes:
            shards = data.relations[c_etype]
            eids = orig_eids[c_etype][torch.cat([s.eids for s in shards])]
            src, dst = g.find_edges(eids, etype=c_etype)
            assert torch.equal(orig_nids[c_etype[0]][torch.cat([s.src for s in shards])], src)
            assert torch.equal(orig_nids[c_etype[2]][torch.cat([s.dst for s in shards])], dst)
            for j, shard in enumerate(shards):
                lo, hi = data.node_ranges[c_etype[0]][j].tolist()
                assert bool(((shard.src >= lo) & (shard.src < hi)).all())
        assert torch.equal(data.edge_features["w"][("paper", "cites", "paper")],
                           g.edges["cites"].data["w"][orig_eids[("paper", "cites", "paper")][
                               torch.cat([s.eids for s in data.relations[
                                   ("paper", "cites", "paper")]])]])


def test_sar_s_loader_reads_a_heterogeneous_partition_with_its_types(tmp_path):
    from sarlite.sar import load_dgl_partition_data
    g = mag_like()
    sarlite.partition_graph(g, "g", 1, tmp_path)
    data = load_dgl_partition_data(str(tmp_path / "g.json"), 0)
    assert sorted(data.node_type_names) == sorted(g.ntypes)
    assert sorted(map(tuple, data.edge_type_names)) == sorted(g.canonical_etypes)


@pytest.mark.parametrize("balance, message", [
    (torch.zeros(142), "must be a dict"),
    ({"venue": torch.zeros(3)}, "node type 'venue'"),
    ({"paper": torch.zeros(3)}, "3 entries but the graph has 80 'paper' nodes"),
])
def test_bad_balance_ntypes_of_a_heterograph_is_one_clear_error(tmp_path, balance, message):
    with pytest.raises(ValueError, match=message):
        sarlite.partition_graph(mag_like(), "g", 2, tmp_path, balance_ntypes=balance)
    assert not os.path.exists(tmp_path / "g.json")
