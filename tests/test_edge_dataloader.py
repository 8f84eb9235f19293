"""DistEdgeDataLoader with DGL's edge prediction sampler and negative sampler; empty batches
and mean_loss: exact gradients under DDP and under sarlite's gradient all-reduce."""
import dgl
import pytest
import torch
import torch.nn.functional as F
from dgl.dataloading import NeighborSampler, as_edge_prediction_sampler
from dgl.dataloading.negative_sampler import Uniform
from torch import nn

import sarlite
from conftest import random_graph
from harness import spawn
from sarlite.sampling import (DistEdgeDataLoader, DistGraph, DistNeighborSampler,
                              is_empty_batch, mean_loss)

COUNTS = (11, 3)            # edges per rank: 3 batches of 4 on rank 0, 1 on rank 1


def _pair(graph):
    src, dst = graph.edges()
    nid = graph.ndata[dgl.NID]
    return torch.stack([nid[src], nid[dst]])


def _edge_batches(rank, world, config):
    g = DistGraph(config)
    eids = torch.arange(rank, g.num_edges(), world)[:COUNTS[rank]]
    torch.manual_seed(rank)
    out = {"eids": eids}
    sampler = as_edge_prediction_sampler(
        NeighborSampler([2, -1], prefetch_node_feats=["feat"]), exclude="self",
        negative_sampler=Uniform(2), prefetch_labels=["w"])
    loader = DistEdgeDataLoader(g, eids, sampler, batch_size=4, shuffle=True)
    batches = []
    for input_nodes, pair, neg, blocks in loader:
        batches.append({"input": input_nodes, "pair": _pair(pair), "pair_nid": pair.ndata[
            dgl.NID], "pair_eid": pair.edata[dgl.EID], "neg": _pair(neg),
            "neg_nodes": neg.num_nodes(), "empty": is_empty_batch((input_nodes, pair, neg,
                                                                   blocks)),
            "out": blocks[-1].dstdata[dgl.NID], "first_src": blocks[0].srcdata[dgl.NID],
            "block_eids": torch.cat([b.edata[dgl.EID] for b in blocks]),
            "feat": blocks[0].srcdata["feat"], "w": pair.edata["w"]})
    out["prediction"] = (len(loader), batches)
    # DGL 2.1's distributed examples: a node sampler with EdgeCollator's keywords
    reverse = torch.arange(g.num_edges()).flip(0)
    loader = DistEdgeDataLoader(g, eids, DistNeighborSampler([-1]), batch_size=5,
                                negative_sampler=Uniform(1), exclude="reverse_id",
                                reverse_eids=reverse, num_workers=2)
    out["collator"] = (len(loader), [(pair.edata[dgl.EID], blocks[0].edata[dgl.EID],
                                      neg.num_edges())
                                     for _, pair, neg, blocks in loader])
    loader = DistEdgeDataLoader(g, {"_E": eids}, NeighborSampler([1]), batch_size=6)
    out["positive_only"] = [(len(batch), batch[1].edata[dgl.EID]) for batch in loader]
    return out


@pytest.fixture(scope="module")
def edge_runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("edges")
    g = random_graph(num_nodes=70, num_edges=400, seed=5)
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 2, path, return_mapping=True)
    new_nid = torch.empty_like(orig_nids)
    new_nid[orig_nids] = torch.arange(orig_nids.numel())
    src, dst = g.edges()
    ends = torch.stack([new_nid[src[orig_eids]], new_nid[dst[orig_eids]]])  # by new eid
    data = {"feat": g.ndata["feat"][orig_nids], "w": g.edata["w"][orig_eids]}  # by new id
    return ends, data, spawn(_edge_batches, 2, str(path / "g.json"), timeout=120)


def test_link_prediction_batches_hold_the_edges_their_negatives_and_blocks(edge_runs):
    ends, data, results = edge_runs
    for rank, out in enumerate(results):
        length, batches = out["prediction"]
        assert length == len(batches) == 3
        seen = []
        for batch in batches:
            eids = batch["pair_eid"]
            seen.append(eids)
            assert torch.equal(batch["pair"], ends[:, eids])
            assert torch.equal(batch["w"], data["w"][eids])             # prefetch_labels
            assert torch.equal(batch["feat"], data["feat"][batch["input"]])
            assert torch.equal(batch["neg"][0], batch["pair"][0].repeat_interleave(2))
            assert batch["neg_nodes"] == batch["pair_nid"].numel()
            assert torch.equal(batch["out"], batch["pair_nid"])
            assert torch.equal(batch["input"], batch["first_src"])
            assert not torch.isin(batch["block_eids"], eids).any()      # exclude="self"
            assert batch["empty"] == (eids.numel() == 0)
            if batch["empty"]:
                assert batch["neg"].numel() == batch["input"].numel() == 0
        assert torch.equal(torch.cat(seen).sort().values, out["eids"].sort().values)
    assert [b["empty"] for b in results[1]["prediction"][1]] == [False, True, True]


def test_edge_collator_keywords_wrap_a_node_sampler(edge_runs):
    _, _, results = edge_runs
    for out in results:
        length, batches = out["collator"]
        assert length == len(batches) == 3
        for eids, block_eids, num_neg in batches:
            excluded = torch.cat([eids, 399 - eids])                  # reverse_id
            assert not torch.isin(block_eids, excluded).any()
            assert num_neg == eids.numel()
        assert torch.equal(torch.cat([b[0] for b in batches]), out["eids"])
        assert [n for n, _ in out["positive_only"]] == [3, 3]        # no negative graph
        assert torch.equal(torch.cat([e for _, e in out["positive_only"]]), out["eids"])


def test_bad_edge_loader_arguments_are_refused_before_any_communication():
    sampler = as_edge_prediction_sampler(NeighborSampler([2]))
    with pytest.raises(TypeError, match="belong to as_edge_prediction_sampler"):
        DistEdgeDataLoader(None, [0, 1], sampler, exclude="self")
    with pytest.raises(NotImplementedError, match="g_sampling"):
        DistEdgeDataLoader(None, [0, 1], NeighborSampler([2]), g_sampling=object())
    with pytest.raises(ValueError, match="reverse_types"):
        DistEdgeDataLoader(None, [0, 1], NeighborSampler([2]), exclude="reverse_types")
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['use_ddp'\\]"):
        DistEdgeDataLoader(None, [0, 1], sampler, use_ddp=True)
    with pytest.raises(ValueError, match="duplicate edge ids"):
        DistEdgeDataLoader(None, [0, 0], sampler)
    with pytest.raises(ValueError, match="one type"):
        DistEdgeDataLoader(None, {("a", "b", "c"): [0]}, sampler)


# -- mean_loss ---------------------------------------------------------------------------

class Skipping(nn.Module):
    """Uses ``extra`` only when the batch has rows: DDP needs mean_loss's model link."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 4)
        self.extra = nn.Linear(3, 4)

    def forward(self, x):
        out = self.linear(x)
        return out + self.extra(x) if x.shape[0] else out


def _data():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(12, 3, generator=gen), torch.randint(0, 4, (12,), generator=gen)


def _grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _mean_loss_steps(rank, world, splits, state):
    x, y = _data()
    out = {}
    for name, (lo, hi) in splits[rank].items():
        rows = slice(lo, hi)
        model = Skipping()
        model.load_state_dict(state)
        ddp = nn.parallel.DistributedDataParallel(model)
        losses = []
        for _ in range(2):                      # a second step: DDP is still in step
            ddp.zero_grad()
            pred = ddp(x[rows])
            loss = mean_loss(F.cross_entropy(pred, y[rows], reduction="none"), ddp)
            loss.backward()
            losses.append(loss.item())
        out[name] = {"ddp": _grads(model), "loss": losses[0],
                     "plain": F.cross_entropy(pred, y[rows]).item()}
        model = Skipping()
        model.load_state_dict(state)
        pred = model(x[rows])
        mean_loss(F.cross_entropy(pred, y[rows], reduction="none"), model,
                  grad_reduction="sum").backward()
        sarlite.all_reduce_gradients(model)
        out[name]["sum"] = _grads(model)
    try:
        mean_loss(torch.ones(2), grad_reduction="avg")
    except ValueError as err:
        out["error"] = str(err)
    return out


@pytest.fixture(scope="module")
def loss_runs():
    # uneven: 8 and 4 rows; empty: rank 1 has none; equal: 6 and 6
    splits = [{"uneven": (0, 8), "empty": (0, 8), "equal": (0, 6)},
              {"uneven": (8, 12), "empty": (8, 8), "equal": (6, 12)}]
    torch.manual_seed(0)
    state = Skipping().state_dict()
    return splits, state, spawn(_mean_loss_steps, 2, splits, state, timeout=90)


@pytest.mark.parametrize("case", ["uneven", "empty", "equal"])
def test_mean_loss_gives_the_gradient_of_the_mean_over_all_ranks(loss_runs, case):
    splits, state, results = loss_runs
    x, y = _data()
    rows = torch.cat([torch.arange(*split[case]) for split in splits])
    model = Skipping()
    model.load_state_dict(state)
    F.cross_entropy(model(x[rows]), y[rows]).backward()
    expected = _grads(model)
    for out in results:
        for reduction in ("ddp", "sum"):
            for name, grad in expected.items():
                torch.testing.assert_close(out[case][reduction][name], grad,
                                           rtol=1e-5, atol=1e-6)


def test_mean_loss_value_is_the_local_mean_for_equal_batches_and_zero_when_empty(loss_runs):
    _, _, results = loss_runs
    for out in results:
        assert out["equal"]["loss"] == pytest.approx(out["equal"]["plain"], rel=1e-6)
    assert results[1]["empty"]["loss"] == 0.0
    assert torch.isnan(torch.tensor(results[1]["empty"]["plain"]))   # what a plain mean gives
    assert "grad_reduction must be one of" in results[0]["error"]


def test_is_empty_batch_reads_every_batch_form_and_mean_loss_runs_alone():
    empty = dgl.to_block(dgl.graph(([], []), num_nodes=3), torch.zeros(0, dtype=torch.int64))
    full = dgl.to_block(dgl.graph(([0], [1]), num_nodes=3), torch.tensor([1]))
    assert is_empty_batch([full, empty]) and not is_empty_batch([empty, full])
    assert is_empty_batch(torch.zeros(0)) and not is_empty_batch(torch.zeros(1))
    assert is_empty_batch([]) and not is_empty_batch([3, 4])       # DistDataLoader lists
    assert is_empty_batch(dgl.graph(([], []), num_nodes=2))          # a pair graph
    with pytest.raises(TypeError, match="is_empty_batch takes"):
        is_empty_batch(3)
    losses = torch.tensor([1.0, 3.0], requires_grad=True)
    mean_loss(losses).backward()                                     # one process: W = 1
    assert torch.equal(losses.grad, torch.tensor([0.5, 0.5]))
    nothing = torch.zeros(0, requires_grad=True)
    loss = mean_loss(nothing)
    assert loss.item() == 0.0 and loss.requires_grad


def _typed_edge_batches(rank, world, config):
    g = DistGraph(config)
    eids = {"r1": torch.arange(rank, g.num_edges("r1"), world),
            "r2": torch.arange(rank, 10, world)}
    sampler = as_edge_prediction_sampler(NeighborSampler([-1]), negative_sampler=Uniform(1))
    batches = []
    for _, pair, neg, blocks in DistEdgeDataLoader(g, eids, sampler, batch_size=16):
        ends = {c: torch.stack([pair.nodes[c[0]].data[dgl.NID][pair.edges(etype=c)[0]],
                                pair.nodes[c[2]].data[dgl.NID][pair.edges(etype=c)[1]]])
                for c in pair.canonical_etypes}
        batches.append(({c: pair.edges[c].data[dgl.EID] for c in pair.canonical_etypes},
                        ends, {c: neg.num_edges(c) for c in neg.canonical_etypes}))
    truth = {name: torch.stack(g.find_edges(ids, etype=name)) for name, ids in eids.items()}
    return eids, batches, truth


def test_typed_edge_batches_cover_each_rank_s_edges_of_every_type_with_their_ends(tmp_path):
    gen = torch.Generator().manual_seed(8)
    g = dgl.heterograph({("a", "r1", "b"): (torch.randint(0, 30, (70,), generator=gen),
                                            torch.randint(0, 20, (70,), generator=gen)),
                         ("b", "r2", "a"): (torch.randint(0, 20, (40,), generator=gen),
                                            torch.randint(0, 30, (40,), generator=gen))})
    sarlite.partition_graph(g, "typed", 2, tmp_path)
    for eids, batches, truth in spawn(_typed_edge_batches, 2, str(tmp_path / "typed.json")):
        for name, c in (("r1", ("a", "r1", "b")), ("r2", ("b", "r2", "a"))):
            got = torch.cat([b[0][c] for b in batches])
            order = got.argsort()
            assert torch.equal(got[order], eids[name].sort().values)
            ends = torch.cat([b[1][c] for b in batches], 1)[:, order]
            assert torch.equal(ends, truth[name][:, eids[name].argsort()])
            assert sum(b[2][c] for b in batches) == len(got)   # one negative per edge
