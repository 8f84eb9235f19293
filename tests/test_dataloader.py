"""DistNodeDataLoader: blocks that dgl.nn runs unchanged, one batch count on every rank."""
import dgl
import dgl.nn as dglnn
import pytest
import torch
from torch import nn

import sarlite
from conftest import random_graph
from harness import spawn
from sarlite.sampling import DistGraph, DistNeighborSampler, DistNodeDataLoader, node_split

TOL = {"rtol": 1e-5, "atol": 1e-6}


class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([dglnn.SAGEConv(4, 5, "mean"),
                                    dglnn.SAGEConv(5, 3, "mean")])

    def forward(self, blocks, x):
        h = torch.relu(self.convs[0](blocks[0], x))
        return self.convs[1](blocks[1], h)


def _sampled_forward(rank, world, config, state):
    g = DistGraph(config)
    nids = node_split(g.ndata["train_mask"], g.get_partition_book())
    sampler = DistNeighborSampler([3, 2], prefetch_node_feats=["feat"],
                                  prefetch_labels=["label"])
    torch.manual_seed(rank)
    dgl.seed(rank)
    loader = DistNodeDataLoader(g, nids, sampler, batch_size=7, shuffle=True)
    model = SAGE()
    model.load_state_dict(state)
    batches = []
    for input_nodes, output_nodes, blocks in loader:
        out = model(blocks, blocks[0].srcdata["feat"])
        batches.append({"input": input_nodes, "output": output_nodes, "out": out.detach(),
                        "feat": blocks[0].srcdata["feat"],
                        "label": blocks[-1].dstdata["label"],
                        "blocks": [(b.srcdata[dgl.NID], b.dstdata[dgl.NID], b.edata[dgl.EID])
                                   for b in blocks]})
    return nids, len(loader), batches


def _dgl_blocks(g, orig_nids, orig_eids, blocks):
    """The same sampled blocks built by DGL from the unpartitioned graph."""
    out = []
    for src_nids, dst_nids, eids in blocks:
        frontier = dgl.edge_subgraph(g, orig_eids[eids], relabel_nodes=False)
        block = dgl.to_block(frontier, orig_nids[dst_nids])
        assert torch.equal(block.srcdata[dgl.NID].sort().values,
                           orig_nids[src_nids].sort().values)
        out.append(block)
    return out


def test_loader_blocks_give_single_process_dgl_outputs_through_sageconv(tmp_path):
    g = random_graph(num_nodes=80, num_edges=500, seed=2)
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 2, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    model = SAGE()
    results = spawn(_sampled_forward, 2, str(tmp_path / "g.json"), model.state_dict(),
                    timeout=90)
    seen = []
    for nids, num_batches, batches in results:
        assert num_batches == len(batches) == len(results[0][2])
        for batch in batches:
            old_in, old_out = orig_nids[batch["input"]], orig_nids[batch["output"]]
            assert torch.equal(batch["feat"], g.ndata["feat"][old_in])
            assert torch.equal(batch["label"], g.ndata["label"][old_out])
            blocks = _dgl_blocks(g, orig_nids, orig_eids, batch["blocks"])
            expected = model(blocks, g.ndata["feat"][blocks[0].srcdata[dgl.NID]])
            torch.testing.assert_close(batch["out"], expected, **TOL)
            seen.append(batch["output"])
    train = g.ndata["train_mask"][orig_nids].nonzero().squeeze(1)
    assert torch.equal(torch.cat(seen).sort().values, train)   # each training node once


def _uneven_epochs(rank, world, config, sizes):
    g = DistGraph(config)
    lo = int(g.get_partition_book().node_ranges[rank, 0])
    nids = torch.arange(lo, lo + sizes[rank])
    model = SAGE()
    x = torch.ones(g.num_nodes(), 4)
    epochs = {}
    for drop_last in (False, True):
        loader = DistNodeDataLoader(g, nids, DistNeighborSampler([2, 2]), batch_size=5,
                                    drop_last=drop_last)
        outputs = []
        for input_nodes, output_nodes, blocks in loader:    # a training step per batch
            model(blocks, x[input_nodes]).sum().backward()
            sarlite.all_reduce_gradients(model)
            outputs.append(output_nodes)
        epochs[drop_last] = (len(loader), outputs)
    errors = []
    for bad_nids, batch_size in (([1, 1], 2), ([1], 0)):
        try:
            DistNodeDataLoader(g, bad_nids, DistNeighborSampler([2]), batch_size=batch_size)
        except ValueError as err:
            errors.append(str(err))
    return epochs, errors


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    path = tmp_path_factory.mktemp("uneven")
    sarlite.partition_graph(random_graph(num_nodes=90, num_edges=400), "g", 3, path,
                            part_method="random")
    sizes = [23, 3, 0]                      # 5, 1 and 0 batches of 5 (4, 0, 0 dropping)
    return sizes, spawn(_uneven_epochs, 3, str(path / "g.json"), sizes, timeout=60)


@pytest.mark.parametrize("drop_last", [False, True])
def test_uneven_training_sets_give_every_rank_the_largest_batch_count(uneven, drop_last):
    sizes, results = uneven
    expected = 4 if drop_last else 5
    for rank, (epochs, _) in enumerate(results):
        length, outputs = epochs[drop_last]
        assert length == len(outputs) == expected
        kept = sizes[rank] // 5 * 5 if drop_last else sizes[rank]
        assert sum(o.numel() for o in outputs) == kept
        own = -(-kept // 5)                                 # this rank's own batches
        assert all(o.numel() > 0 for o in outputs[:own])
        assert all(o.numel() == 0 for o in outputs[own:])  # then empty padding batches


def test_duplicate_ids_and_bad_batch_sizes_are_rejected(uneven):
    for _, errors in uneven[1]:
        assert "duplicate node ids" in errors[0] and "batch_size must be" in errors[1]


def _own_seed_batches(rank, world, config):
    from unittest import mock

    from sarlite.sampling import dataloader, neighbor
    g = DistGraph(config)
    own = node_split(g.ndata["train_mask"], g.get_partition_book(), force_even=False)
    sampler = DistNeighborSampler([3, 2], prefetch_node_feats=["feat"],
                                  prefetch_labels=["label"])
    seeds = own[:6]

    def blocks_of(result):
        return [(b.srcdata[dgl.NID], b.dstdata[dgl.NID], b.edata[dgl.EID],
                 dict(b.srcdata), dict(b.dstdata)) for b in result[2]]
    dgl.seed(rank)
    collective = blocks_of(sampler.sample_blocks(g, seeds))
    dgl.seed(rank)
    local = blocks_of(sampler.sample_blocks(g, seeds, seeds_owned=True))
    calls = []
    counting = mock.patch.object(
        dataloader, "sample_etype_neighbors", side_effect=lambda *a, **k: (
            calls.append(1), neighbor.sample_etype_neighbors(*a, **k))[1])
    with counting:
        loader = DistNodeDataLoader(g, own, sampler, batch_size=4)
        batches = len(list(loader))
    foreign = torch.tensor([int(g.get_partition_book().node_ranges[1 - rank, 0])])
    try:
        neighbor.sample_owned_neighbors(g, foreign, 2)
        refusal = None
    except ValueError as err:
        refusal = str(err)
    return collective, local, batches, len(calls), refusal


@pytest.fixture(scope="module")
def own_seeds(tmp_path_factory):
    path = tmp_path_factory.mktemp("own")
    sarlite.partition_graph(random_graph(num_nodes=80, num_edges=500, seed=4), "g", 2, path)
    return spawn(_own_seed_batches, 2, str(path / "g.json"), timeout=60)


def test_own_seeds_sample_the_same_blocks_locally_as_through_the_owners(own_seeds):
    for collective, local, *_ in own_seeds:
        for (src, dst, eid, srcdata, dstdata), (src2, dst2, eid2, srcdata2, dstdata2) in zip(
                collective, local, strict=True):
            assert torch.equal(src, src2) and torch.equal(dst, dst2)
            assert torch.equal(eid, eid2)
            assert srcdata.keys() == srcdata2.keys() and dstdata.keys() == dstdata2.keys()
            for got, expected in ((srcdata2, srcdata), (dstdata2, dstdata)):
                assert all(torch.equal(got[k], expected[k]) for k in expected)


def test_a_loader_over_own_seeds_exchanges_only_the_hops_past_the_seeds(own_seeds):
    for _, _, batches, calls, _ in own_seeds:
        assert batches > 0 and calls == batches       # one of two hops per batch


def test_sampling_another_ranks_seeds_locally_is_refused(own_seeds):
    for *_, refusal in own_seeds:
        assert "belong to another rank" in refusal


def _loader_warnings(rank, world):
    import warnings

    from sarlite.runtime import allocator
    from sarlite.sampling import DistDataLoader
    seen = []
    for setting in (allocator.DEFAULT_THRESHOLD, allocator.RETAIN):
        allocator.configure(setting)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            DistDataLoader(torch.arange(10), batch_size=2)
        seen.append([str(w.message) for w in caught])
    return seen


def test_a_loader_under_the_full_graph_allocator_setting_advises_retain_once_on_rank_0():
    fixed, retained = zip(*spawn(_loader_warnings, 2, timeout=120))
    assert len(fixed[0]) == 1 and 'mmap_threshold="retain"' in fixed[0][0]
    assert fixed[1] == [] and retained == ([], [])
