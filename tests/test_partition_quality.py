"""METIS finds the planted communities; the balance options do what they say."""
import torch

import sarlite
from sarlite.data import homophilous_graph


def _report(g, tmp_path, **kwargs):
    sarlite.partition_graph(g, "g", 4, tmp_path, **kwargs)
    return sarlite.partition_report(tmp_path / "g.json")


def test_metis_cuts_far_fewer_edges_than_random_with_balanced_nodes(tmp_path):
    g = homophilous_graph(num_nodes=8000, avg_degree=10, num_classes=4, homophily=0.95)
    metis = _report(g, tmp_path / "metis", part_method="metis")
    random = _report(g, tmp_path / "random", part_method="random")
    assert metis.edge_cut < 0.25 * random.edge_cut
    assert metis.balance()["nodes"] <= 1.05


def test_balance_edges_evens_out_owned_edges_on_a_skewed_graph(tmp_path):
    g = sarlite.data.powerlaw_graph(num_nodes=4000, avg_degree=8)
    plain = _report(g, tmp_path / "plain").balance()["edges"]
    balanced = _report(g, tmp_path / "edges", balance_edges=True).balance()["edges"]
    assert balanced < 1.3 < plain, (balanced, plain)


def test_balance_ntypes_spreads_a_clustered_train_set(tmp_path):
    g = homophilous_graph(num_nodes=8000, avg_degree=10, num_classes=4, homophily=0.95)
    g.ndata["train_mask"] = g.ndata["label"] == 0     # one community, one METIS part
    plain = _report(g, tmp_path / "plain").balance()["train"]
    balanced = _report(g, tmp_path / "train",
                       balance_ntypes=g.ndata["train_mask"].long()).balance()["train"]
    # one folded METIS weight improves the spread but cannot bound it tightly
    assert balanced < 0.75 * plain, (balanced, plain)


def test_report_counts_add_up(tmp_path):
    g = homophilous_graph(num_nodes=2000, avg_degree=6)
    report = _report(g, tmp_path)
    assert sum(report.owned_nodes) == g.num_nodes()
    assert sum(report.owned_edges) == g.num_edges()
    assert sum(report.train_nodes) == int(g.ndata["train_mask"].sum())
    assert report.comm_bytes_per_layer(16) == sum(report.halo_nodes) * 16 * 4
    assert "edge cut" in str(report) and report.to_dict()["num_parts"] == 4


def test_metis_on_a_quarter_of_the_edges_of_a_dense_graph_cuts_nearly_as_few(tmp_path):
    g = homophilous_graph(num_nodes=8000, avg_degree=40, num_classes=4, homophily=0.9)
    full = _report(g, tmp_path / "full")
    # num_edges() counts both directions: a quarter of the undirected edges
    sampled = _report(g, tmp_path / "sampled", metis_max_edges=g.num_edges() // 8)
    assert sampled.edge_cut < 1.1 * full.edge_cut
    assert sampled.balance()["nodes"] <= 1.05
