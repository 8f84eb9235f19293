"""Layout invariants of sarlite.partition_graph's output."""
import dgl
import dgl.function as fn
import pytest
import torch

import sarlite
from conftest import random_graph


def _partition(g, tmp_path, num_parts, **kwargs):
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", num_parts, tmp_path,
                                                   return_mapping=True, **kwargs)
    parts = [sarlite.load_partition(tmp_path / "g.json", p) for p in range(num_parts)]
    return orig_nids, orig_eids, parts


@pytest.mark.parametrize("method", ["metis", "random"])
def test_node_ranges_are_contiguous_disjoint_and_cover_all_nodes(tmp_path, method):
    g = random_graph()
    _, _, parts = _partition(g, tmp_path, 3, part_method=method)
    book = parts[0][3]
    ranges = book.node_ranges
    assert ranges[0, 0] == 0 and ranges[-1, 1] == g.num_nodes()
    assert torch.equal(ranges[1:, 0], ranges[:-1, 1])
    for p, (graph, *_rest) in enumerate(parts):
        inner = graph.ndata["inner_node"].bool()
        owned = graph.ndata[dgl.NID][inner]
        assert torch.equal(owned, torch.arange(*ranges[p].tolist()))
        assert inner[:int(inner.sum())].all(), "owned nodes must come first"


@pytest.mark.parametrize("method", ["metis", "random"])
def test_every_edge_is_owned_once_by_the_partition_of_its_destination(tmp_path, method):
    g = random_graph()
    orig_nids, orig_eids, parts = _partition(g, tmp_path, 3, part_method=method)
    new_of_orig = torch.empty_like(orig_nids)
    new_of_orig[orig_nids] = torch.arange(len(orig_nids))
    src, dst = g.edges()
    owned_eids = []
    for p, (graph, _, _, book, *_rest) in enumerate(parts):
        inner_edge = graph.edata["inner_edge"].bool()
        eids = graph.edata[dgl.EID][inner_edge]
        assert torch.equal(eids, torch.arange(*book.edge_ranges[p].tolist()))
        ls, ld = graph.edges()
        nid = graph.ndata[dgl.NID]
        # the stored endpoints are the reshuffled endpoints of the original edge
        assert torch.equal(nid[ls], new_of_orig[src[orig_eids[graph.edata[dgl.EID]]]])
        assert torch.equal(nid[ld], new_of_orig[dst[orig_eids[graph.edata[dgl.EID]]]])
        assert (book.nid2partid(nid[ld[inner_edge]]) == p).all()
        owned_eids.append(eids)
    assert torch.equal(torch.sort(torch.cat(owned_eids)).values, torch.arange(g.num_edges()))


def test_orig_nids_round_trip_node_and_edge_features(tmp_path):
    g = random_graph()
    orig_nids, orig_eids, parts = _partition(g, tmp_path, 3)
    feats = torch.cat([nf["_N/feat"] for _, nf, *_ in parts])
    weights = torch.cat([ef["_N:_E:_N/w"] for _, _, ef, *_ in parts])
    assert torch.equal(feats, g.ndata["feat"][orig_nids])
    assert torch.equal(weights, g.edata["w"][orig_eids])
    assert torch.equal(torch.sort(orig_nids).values, torch.arange(g.num_nodes()))


def test_halo_message_passing_equals_full_graph_on_owned_nodes(tmp_path):
    g = random_graph()
    orig_nids, _, parts = _partition(g, tmp_path, 4)
    with g.local_scope():
        g.update_all(fn.copy_u("feat", "m"), fn.sum("m", "h"))
        expected = g.ndata["h"][orig_nids]
    for graph, _, _, book, *_rest in parts:
        local = graph.ndata[dgl.NID]
        graph.ndata["feat"] = g.ndata["feat"][orig_nids[local]]
        owned_edges = dgl.edge_subgraph(graph, graph.edata["inner_edge"].bool(),
                                        relabel_nodes=False)
        owned_edges.update_all(fn.copy_u("feat", "m"), fn.sum("m", "h"))
        inner = graph.ndata["inner_node"].bool()
        assert torch.allclose(owned_edges.ndata["h"][inner], expected[local[inner]])


def test_one_hop_halo_holds_owned_out_edges_like_dgl(tmp_path):
    g = random_graph()
    _, _, parts = _partition(g, tmp_path, 2)
    graph = parts[0][0]
    inner = graph.ndata["inner_node"].bool()
    src, dst = graph.edges()
    halo_edge = ~graph.edata["inner_edge"].bool()
    assert inner[src[halo_edge]].all() and not inner[dst[halo_edge]].any()


def test_single_partition_holds_the_whole_graph(tmp_path):
    g = random_graph()
    orig_nids, orig_eids, parts = _partition(g, tmp_path, 1)
    graph, nfeat, *_ = parts[0]
    assert torch.equal(orig_nids, torch.arange(g.num_nodes()))
    assert torch.equal(orig_eids, torch.arange(g.num_edges()))
    assert graph.num_nodes() == g.num_nodes() and graph.num_edges() == g.num_edges()
    assert graph.edata["inner_edge"].bool().all()
    assert torch.equal(nfeat["_N/feat"], g.ndata["feat"])


def test_fixed_seed_gives_the_same_partition(tmp_path):
    g = random_graph(num_nodes=200, num_edges=1000)
    first = _partition(g, tmp_path / "a", 3, seed=7)[0]
    second = _partition(g, tmp_path / "b", 3, seed=7)[0]
    assert torch.equal(first, second)


def test_two_hop_halo_contains_the_one_hop_halo(tmp_path):
    g = random_graph()
    one = _partition(g, tmp_path / "one", 3)[2]
    two = _partition(g, tmp_path / "two", 3, num_hops=2)[2]
    for (g1, *_a), (g2, *_b) in zip(one, two):
        assert set(g1.ndata[dgl.NID].tolist()) <= set(g2.ndata[dgl.NID].tolist())
        assert int(g2.edata["inner_edge"].sum()) == int(g1.edata["inner_edge"].sum())
