"""The embedded synthetic generators: deterministic, well-formed, learnable."""
import torch

from sarlite.data import homophilous_graph, powerlaw_graph

FIELDS = {"feat", "label", "train_mask", "val_mask", "test_mask"}


def test_homophilous_graph_is_deterministic_by_seed():
    a, b = homophilous_graph(num_nodes=500, seed=3), homophilous_graph(num_nodes=500, seed=3)
    c = homophilous_graph(num_nodes=500, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a.edges(), b.edges()))
    assert torch.equal(a.ndata["feat"], b.ndata["feat"])
    assert not torch.equal(a.ndata["feat"], c.ndata["feat"])


def test_homophilous_graph_is_simple_symmetric_and_homophilous():
    g = homophilous_graph(num_nodes=2000, avg_degree=10, homophily=0.8)
    src, dst = g.edges()
    assert set(g.ndata) == FIELDS and g.ndata["feat"].shape == (2000, 64)
    assert not (src == dst).any()
    keys = src * 2000 + dst
    assert keys.unique().numel() == keys.numel()
    assert torch.equal(keys.sort().values, (dst * 2000 + src).sort().values)
    same = (g.ndata["label"][src] == g.ndata["label"][dst]).float().mean()
    assert same > 0.75
    assert 8 < g.num_edges() / 2000 <= 10


def test_masks_partition_the_nodes():
    g = homophilous_graph(num_nodes=1000, train_frac=0.2, val_frac=0.1)
    masks = torch.stack([g.ndata[k] for k in ("train_mask", "val_mask", "test_mask")])
    assert (masks.sum(0) == 1).all()
    assert masks.sum(1).tolist() == [200, 100, 700]


def test_powerlaw_graph_has_skewed_degrees():
    g = powerlaw_graph(num_nodes=4000, avg_degree=8)
    degrees = g.in_degrees().float()
    assert set(g.ndata) == FIELDS
    assert degrees.max() > 20 * degrees.mean()
