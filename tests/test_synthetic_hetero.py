"""The ogbn-mag-shaped synthetic heterograph: deterministic, well-formed, relational."""
import dgl
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from sarlite.data import mag_like_graph

FORWARD = {("author", "affiliated_with", "institution"): "rev_affiliated_with",
           ("author", "writes", "paper"): "rev_writes",
           ("paper", "cites", "paper"): "cited_by",
           ("paper", "has_topic", "field_of_study"): "rev_has_topic"}
MASKS = ("train_mask", "val_mask", "test_mask")
SMALL = dict(num_papers=600, num_authors=700, num_institutions=30, num_fields=50)


@pytest.fixture(scope="module")
def graph() -> dgl.DGLGraph:
    return mag_like_graph()


def _reverse(etype: tuple[str, str, str]) -> tuple[str, str, str]:
    src, rel, dst = etype
    return dst, FORWARD[etype], src


def test_mag_like_graph_is_deterministic_by_seed():
    a, b = mag_like_graph(seed=3, **SMALL), mag_like_graph(seed=3, **SMALL)
    c = mag_like_graph(seed=4, **SMALL)
    for etype in a.canonical_etypes:
        assert all(torch.equal(x, y) for x, y in zip(a.edges(etype=etype),
                                                      b.edges(etype=etype)))
    for key, value in a.nodes["paper"].data.items():
        assert torch.equal(value, b.nodes["paper"].data[key])
    assert not torch.equal(a.nodes["paper"].data["feat"], c.nodes["paper"].data["feat"])
    assert not torch.equal(a.nodes["paper"].data["label"], c.nodes["paper"].data["label"])
    assert any(a.num_edges(e) != c.num_edges(e)
               or not torch.equal(a.edges(etype=e)[0], c.edges(etype=e)[0])
               for e in a.canonical_etypes)


def test_mag_like_graph_has_the_ogbn_mag_schema(graph):
    assert sorted(graph.ntypes) == ["author", "field_of_study", "institution", "paper"]
    assert set(graph.canonical_etypes) == set(FORWARD) | {_reverse(e) for e in FORWARD}
    assert len(graph.canonical_etypes) == 8
    sizes = {"paper": 4000, "author": 5000, "institution": 200, "field_of_study": 300}
    assert {t: graph.num_nodes(t) for t in graph.ntypes} == sizes
    for ntype in ("author", "institution", "field_of_study"):
        assert len(graph.nodes[ntype].data) == 0
    data = graph.nodes["paper"].data
    assert set(data) == {"feat", "label", "year", *MASKS}
    assert data["feat"].dtype == torch.float32 and data["feat"].shape == (4000, 64)
    for key in ("label", "year"):
        assert data[key].dtype == torch.int64 and data[key].shape == (4000,)
    for key in MASKS:
        assert data[key].dtype == torch.bool and data[key].shape == (4000,)
    assert data["label"].min() >= 0 and data["label"].max() < 8
    assert data["label"].unique().numel() == 8
    assert 2010 <= data["year"].min() and data["year"].max() <= 2019


def test_reverse_relations_are_exact_reverses(graph):
    for etype in FORWARD:
        src, dst = graph.edges(etype=etype, order="eid")
        rsrc, rdst = graph.edges(etype=_reverse(etype), order="eid")
        assert src.numel() > 0
        assert torch.equal(rsrc, dst) and torch.equal(rdst, src)


def test_relations_have_no_duplicate_edges_and_no_self_citations(graph):
    for src_type, rel, dst_type in graph.canonical_etypes:
        src, dst = graph.edges(etype=(src_type, rel, dst_type))
        keys = src * graph.num_nodes(dst_type) + dst
        assert keys.unique().numel() == keys.numel(), rel
    src, dst = graph.edges(etype="cites")
    assert not (src == dst).any()
    year = graph.nodes["paper"].data["year"]
    assert (year[src] >= year[dst]).all()


def test_every_type_has_in_edges_and_every_paper_has_an_author(graph):
    for ntype in graph.ntypes:
        incoming = sum(graph.in_degrees(etype=e) for e in graph.canonical_etypes
                       if e[2] == ntype)
        assert (incoming > 0).any(), ntype
    assert (graph.in_degrees(etype="writes") > 0).all()
    assert (graph.out_degrees(etype="has_topic") > 0).all()
    assert (graph.out_degrees(etype="affiliated_with") == 1).all()


def test_edges_follow_the_planted_classes(graph):
    # with homophily h = 0.6 and 8 classes an edge is same-class with chance about
    # h + (1 - h) / 8 = 0.65, against 1 / 8 without planted classes
    label = graph.nodes["paper"].data["label"]
    src, dst = graph.edges(etype="cites")
    assert (label[src] == label[dst]).float().mean() > 0.55
    for etype, ntype in (("writes", "author"), ("has_topic", "field_of_study")):
        src, dst = graph.edges(etype=etype)
        papers, other = (dst, src) if ntype == "author" else (src, dst)
        counts = torch.zeros(graph.num_nodes(ntype), 8).index_put_(
            (other, label[papers]), torch.ones(len(papers)), accumulate=True)
        size = counts.sum(1)
        # chance that two papers sharing an author (a field) share a class: ~0.44
        same = (counts * (counts - 1)).sum() / (size * (size - 1)).sum()
        assert same > 0.3, etype


def test_masks_are_disjoint_cover_all_papers_and_split_by_time():
    g = mag_like_graph(train_frac=0.5, val_frac=0.25, **SMALL)
    data = g.nodes["paper"].data
    masks = torch.stack([data[k] for k in MASKS])
    assert (masks.sum(0) == 1).all()
    assert masks.sum(1).tolist() == [300, 150, 150]
    year = data["year"]
    assert year[data["train_mask"]].max() <= year[data["val_mask"]].min()
    assert year[data["val_mask"]].max() <= year[data["test_mask"]].min()


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_papers=1), "num_papers"),
    (dict(num_authors=0), "num_authors"),
    (dict(num_institutions=0), "num_institutions"),
    (dict(num_fields=0), "num_fields"),
    (dict(num_classes=1), "num_classes"),
    (dict(feat_dim=0), "feat_dim"),
    (dict(num_papers=10.5), "num_papers"),
    (dict(avg_citations=0), "avg_citations"),
    (dict(avg_authors_per_paper=0.5), "avg_authors_per_paper"),
    (dict(avg_topics_per_paper=0), "avg_topics_per_paper"),
    (dict(homophily=1.5), "homophily"),
    (dict(homophily=-0.1), "homophily"),
    (dict(feature_signal=-1.0), "feature_signal"),
    (dict(train_frac=0.0), "train_frac"),
    (dict(train_frac=0.7, val_frac=0.3), "train_frac"),
    (dict(val_frac=-0.1), "val_frac"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mag_like_graph(**kwargs)


class _MLP(nn.Module):
    def __init__(self, in_dim: int, hidden: int, classes: int):
        super().__init__()
        self.hidden, self.out = nn.Linear(in_dim, hidden), nn.Linear(hidden, classes)

    def forward(self, g, feat):
        return self.out(F.relu(self.hidden(feat)))


class _RGCN(nn.Module):
    """Two HeteroGraphConv layers of per-relation GraphConvs; learnt inputs for the
    featureless node types."""

    def __init__(self, g: dgl.DGLGraph, in_dim: int, hidden: int, classes: int):
        super().__init__()
        self.embed = nn.ModuleDict({t: nn.Embedding(g.num_nodes(t), in_dim)
                                    for t in g.ntypes if t != "paper"})
        self.first = self._layer(g, in_dim, hidden)
        self.second = self._layer(g, hidden, classes)

    @staticmethod
    def _layer(g, in_dim, out_dim):
        return dgl.nn.HeteroGraphConv(
            {etype: dgl.nn.GraphConv(in_dim, out_dim, allow_zero_in_degree=True)
             for etype in g.canonical_etypes}, aggregate="sum")

    def forward(self, g, feat):
        inputs = {t: e.weight for t, e in self.embed.items()}
        inputs["paper"] = feat
        hidden = {t: F.relu(h) for t, h in self.first(g, inputs).items()}
        return self.second(g, hidden)["paper"]


def _test_accuracy(model: nn.Module, g: dgl.DGLGraph, epochs: int) -> float:
    """Full-graph Adam training; the test accuracy at the best validation epoch."""
    data = g.nodes["paper"].data
    feat, label = data["feat"], data["label"]
    train, val, test = (data[k] for k in MASKS)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    best_val, best_test = -1.0, 0.0
    for _ in range(epochs):
        model.train()
        loss = F.cross_entropy(model(g, feat)[train], label[train])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        model.eval()
        with torch.no_grad():
            correct = model(g, feat).argmax(1) == label
        val_acc, test_acc = correct[val].float().mean(), correct[test].float().mean()
        if val_acc > best_val:
            best_val, best_test = val_acc.item(), test_acc.item()
    return best_test


def test_rgcn_learns_far_better_than_an_mlp_on_paper_features(graph):
    torch.manual_seed(0)
    mlp = _test_accuracy(_MLP(64, 64, 8), graph, epochs=100)
    torch.manual_seed(0)
    rgcn = _test_accuracy(_RGCN(graph, 64, 32, 8), graph, epochs=50)
    print(f"test accuracy: MLP {mlp:.3f}, R-GCN {rgcn:.3f} (chance 0.125)")
    assert mlp < 0.5
    assert rgcn > 0.8
    assert rgcn - mlp >= 0.3
