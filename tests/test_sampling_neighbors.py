"""sample_neighbors and in_subgraph across partitions: properties against the known graph."""
import dgl
import pytest
import torch

import sarlite
from conftest import random_graph
from harness import spawn
from sarlite.comm import CollectiveError
from sarlite.sampling import DistGraph, in_subgraph, sample_neighbors

FANOUT = 3


def _graph() -> dgl.DGLGraph:
    """60 nodes, the last 5 without edges; 'p' is 1 on even edge ids, 0 on odd ones."""
    g = random_graph(num_nodes=60, num_edges=300)
    g.edata["p"] = (torch.arange(300) % 2 == 0).float()
    return g


def _seeds(rank, world, num_nodes):
    """Every node, spread over the ranks so that most are owned elsewhere; the last of
    several ranks asks for nothing."""
    if world > 1 and rank == world - 1:
        return torch.zeros(0, dtype=torch.int64)
    return torch.arange(rank, num_nodes, max(world - 1, 1))


def _edges(frontier):
    src, dst = frontier.edges()
    return torch.stack([src, dst, frontier.edata[dgl.EID]])


def _sample_all(rank, world, config):
    g = DistGraph(config)
    seeds = _seeds(rank, world, g.num_nodes())
    out = {"seeds": seeds}
    for edge_dir in ("in", "out"):
        dgl.seed(11)
        out[edge_dir] = _edges(sample_neighbors(g, seeds, FANOUT, edge_dir=edge_dir))
    dgl.seed(11)
    out["again"] = _edges(sample_neighbors(g, seeds, FANOUT))
    dgl.seed(12)
    out["other_seed"] = _edges(sample_neighbors(g, seeds, FANOUT))
    out["prob"] = _edges(sample_neighbors(g, seeds, FANOUT, prob="p"))
    out["replace"] = _edges(sample_neighbors(g, seeds, FANOUT, replace=True))
    out["all"] = _edges(in_subgraph(g, seeds))
    return out


class Reference:
    """The unpartitioned graph in the partition's (reshuffled) node and edge ids."""

    def __init__(self, g, orig_nids, orig_eids):
        new = torch.empty_like(orig_nids)
        new[orig_nids] = torch.arange(orig_nids.numel())
        src, dst = g.edges()
        self.src, self.dst = new[src[orig_eids]], new[dst[orig_eids]]   # by new edge id
        self.p = g.edata["p"][orig_eids]
        self.g, self.orig_nids, self.orig_eids = g, orig_nids, orig_eids

    def check_edges_exist(self, edges):
        src, dst, eid = edges
        assert torch.equal(self.src[eid], src) and torch.equal(self.dst[eid], dst)

    def degree(self, edge_dir, weighted=False):
        end = self.dst if edge_dir == "in" else self.src
        return torch.bincount(end, weights=self.p if weighted else None,
                              minlength=self.orig_nids.numel()).long()


@pytest.fixture(scope="module", params=[1, 2, 3])
def sampled(request, tmp_path_factory):
    world = request.param
    g = _graph()
    path = tmp_path_factory.mktemp(f"parts{world}")
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", world, path, return_mapping=True)
    results = spawn(_sample_all, world, str(path / "g.json"), timeout=90)
    return Reference(g, orig_nids, orig_eids), results


def _per_seed(edges, seeds, edge_dir):
    end = edges[1] if edge_dir == "in" else edges[0]
    assert bool(torch.isin(end, seeds).all())
    return torch.bincount(end, minlength=int(seeds.max()) + 1 if seeds.numel() else 0)[seeds]


@pytest.mark.parametrize("edge_dir", ["in", "out"])
def test_each_seed_gets_min_of_fanout_and_degree_distinct_existing_edges(sampled, edge_dir):
    ref, results = sampled
    for out in results:
        edges, seeds = out[edge_dir], out["seeds"]
        ref.check_edges_exist(edges)
        assert edges[2].unique().numel() == edges.shape[1]
        expected = ref.degree(edge_dir)[seeds].clamp(max=FANOUT)
        assert torch.equal(_per_seed(edges, seeds, edge_dir), expected)


def test_zero_degree_seeds_get_no_edges(sampled):
    ref, results = sampled
    isolated = ref.orig_nids.argsort()[-5:]            # new ids of the 5 isolated nodes
    for out in results:
        for edge_dir in ("in", "out"):
            assert not bool(torch.isin(out[edge_dir][:2], isolated).any())


def test_edges_with_zero_probability_are_never_picked(sampled):
    ref, results = sampled
    for out in results:
        edges, seeds = out["prob"], out["seeds"]
        ref.check_edges_exist(edges)
        assert bool((ref.p[edges[2]] > 0).all())
        expected = ref.degree("in", weighted=True)[seeds].clamp(max=FANOUT)
        assert torch.equal(_per_seed(edges, seeds, "in"), expected)


def test_sampling_with_replacement_gives_every_seed_with_edges_fanout_edges(sampled):
    ref, results = sampled
    for out in results:
        edges, seeds = out["replace"], out["seeds"]
        ref.check_edges_exist(edges)
        has_edges = ref.degree("in")[seeds] > 0
        assert torch.equal(_per_seed(edges, seeds, "in"), has_edges.long() * FANOUT)


def test_the_same_dgl_seed_gives_the_same_sample(sampled):
    _, results = sampled
    for out in results:
        assert torch.equal(out["in"], out["again"])
    assert any(not torch.equal(out["in"], out["other_seed"]) for out in results)


def test_in_subgraph_equals_dgl_in_subgraph_on_the_whole_graph(sampled):
    ref, results = sampled
    for out in results:
        expected = dgl.in_subgraph(ref.g, ref.orig_nids[out["seeds"]]).edata[dgl.EID]
        got = ref.orig_eids[out["all"][2]]
        assert torch.equal(got.sort().values, expected.sort().values)
        ref.check_edges_exist(out["all"])


def _weighted(rank, world, config):
    g = DistGraph(config)
    dgl.seed(5)
    picked = _edges(sample_neighbors(g, torch.arange(rank, 400, world), 1, prob="p"))[2]
    errors = []
    for seeds, kwargs in (([0], {"fanout": -2}), ([0], {"fanout": 2, "edge_dir": "both"}),
                          ([10 ** 6] if rank == 0 else [0], {"fanout": 1}),
                          ([0, 1], {"fanout": 1, "prob": "negative"})):
        try:
            sample_neighbors(g, seeds, **kwargs)
            errors.append("no error")
        except (ValueError, CollectiveError) as err:
            errors.append(f"{type(err).__name__}: {err}")
    return picked, errors


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """400 nodes, each with one in-edge of weight 1 and one of weight 9."""
    dst = torch.arange(400).repeat_interleave(2)
    src = (dst + torch.tensor([1, 2]).repeat(400)) % 400
    g = dgl.graph((src, dst))
    g.edata["p"] = torch.tensor([1.0, 9.0]).repeat(400)
    g.edata["negative"] = torch.tensor([1.0, -1.0]).repeat(400)
    path = tmp_path_factory.mktemp("weighted")
    _, orig_eids = sarlite.partition_graph(g, "g", 2, path, return_mapping=True)
    return g.edata["p"][orig_eids], spawn(_weighted, 2, str(path / "g.json"), timeout=90)


def test_picks_follow_the_probabilities(weighted):
    p, results = weighted
    picked = torch.cat([r[0] for r in results])
    assert picked.numel() == 400                       # one pick per node
    heavy = float((p[picked] == 9.0).float().mean())
    assert 0.84 < heavy < 0.96                         # 0.9 +- 3 standard deviations


def test_bad_arguments_fail_every_rank_without_a_hang(weighted):
    (_, errors0), (_, errors1) = weighted[1]
    for errors in (errors0, errors1):
        assert "ValueError: fanout must be" in errors[0]
        assert "ValueError: edge_dir must be" in errors[1]
        assert "ValueError: prob feature 'negative' has negative values" in errors[3]
    assert "ValueError: seed node ids must be in [0, 400)" in errors0[2]
    assert "CollectiveError" in errors1[2] and "rank 0 passed invalid input" in errors1[2]
