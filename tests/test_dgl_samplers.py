"""DGL's own sampler objects on sarlite's DistGraph: every sampled edge is a real edge with
its global id, fanouts hold, the full-neighbour sampler gives the true in-neighbourhood,
exclusion works, and DGL's prefetch names are pulled; the loaders agree on batch counts."""
import dgl
import dgl.nn as dglnn
import pytest
import torch
from dgl.dataloading import MultiLayerFullNeighborSampler, NeighborSampler

import sarlite
from conftest import random_graph
from harness import spawn
from sarlite.sampling import (DistDataLoader, DistGraph, DistNeighborSampler,
                              DistNodeDataLoader, is_empty_batch)

FANOUTS = [2, 3]


def _blocks(blocks):
    """Per block: global (src, dst, eid) of each edge, and the src / dst node ids."""
    out = []
    for block in blocks:
        src, dst = block.edges()
        sid, did = block.srcdata[dgl.NID], block.dstdata[dgl.NID]
        out.append({"edges": torch.stack([sid[src], did[dst], block.edata[dgl.EID]]),
                    "src": sid, "dst": did})
    return out


def _sample(rank, world, config):
    g = DistGraph(config)
    seeds = torch.arange(rank, g.num_nodes(), 3 * world)        # owned here and elsewhere
    dgl.seed(rank)
    out = {"seeds": seeds}
    _, output_nodes, blocks = NeighborSampler(FANOUTS).sample(g, seeds)
    out["neighbor"] = (output_nodes, _blocks(blocks))
    _, _, blocks = MultiLayerFullNeighborSampler(2).sample(g, seeds)
    out["full"] = _blocks(blocks)
    excluded = torch.arange(rank, g.num_edges(), 2)             # every other edge id
    _, _, blocks = MultiLayerFullNeighborSampler(1).sample(g, seeds, excluded)
    out["excluded"] = (excluded, _blocks(blocks))
    frontier = g.sample_neighbors({"_N": seeds}, -1, edge_dir="out",
                                  exclude_edges={"_E": excluded})
    out["out_dir"] = torch.stack([*frontier.edges(), frontier.edata[dgl.EID]])
    eids = torch.arange(rank, g.num_edges(), 7)
    pair = g.edge_subgraph(eids)
    whole = g.edge_subgraph(eids, relabel_nodes=False)
    out["edge_subgraph"] = (eids, pair.ndata[dgl.NID][torch.stack(pair.edges())],
                            pair.edata[dgl.EID], torch.stack(whole.edges()),
                            whole.num_nodes())
    neg_src, neg_dst = dgl.dataloading.negative_sampler.Uniform(3)(g, eids)
    out["negatives"] = (eids, neg_src, neg_dst)
    # DGL's prefetch names through the loader; uneven seed counts (rank 1 has fewer)
    sampler = NeighborSampler(FANOUTS, prefetch_node_feats=["feat"],
                              prefetch_labels=["label"], prefetch_edge_feats=["w"])
    mine = seeds[:9] if rank == 0 else seeds[:2]
    loader = DistNodeDataLoader(g, mine, sampler, batch_size=4, num_workers=4)
    convs = [dglnn.SAGEConv(4, 3, "mean"), dglnn.SAGEConv(3, 2, "mean")]
    batches = []
    for input_nodes, output_nodes, blocks in loader:
        pred = convs[1](blocks[1], convs[0](blocks[0], blocks[0].srcdata["feat"]))
        batches.append({"input": input_nodes, "output": output_nodes,
                        "feat": blocks[0].srcdata["feat"], "label": blocks[-1].dstdata["label"],
                        "w": [b.edata["w"] for b in blocks], "blocks": _blocks(blocks),
                        "empty": is_empty_batch((input_nodes, output_nodes, blocks)),
                        "pred": tuple(pred.shape)})
    out["loader"] = (len(loader), batches)
    plain = DistDataLoader(torch.arange(10 + 5 * rank), 4, shuffle=True, drop_last=True,
                           collate_fn=lambda items: torch.tensor(items, dtype=torch.int64))
    out["plain"] = (len(plain), [batch for batch in plain])
    # sarlite's own sampler keeps working in the new loader
    loader = DistNodeDataLoader(g, mine, DistNeighborSampler(FANOUTS), batch_size=4)
    out["own"] = [output_nodes for _, output_nodes, _ in loader]
    return out


class Reference:
    """The unpartitioned graph in the partition's node and edge ids."""

    def __init__(self, g, orig_nids, orig_eids):
        self.new_nid = torch.empty_like(orig_nids)
        self.new_nid[orig_nids] = torch.arange(orig_nids.numel())
        src, dst = g.edges()
        self.src, self.dst = self.new_nid[src[orig_eids]], self.new_nid[dst[orig_eids]]
        self.g, self.orig_nids, self.orig_eids = g, orig_nids, orig_eids

    def check_real(self, edges):
        """Every (src, dst, eid) column is edge ``eid`` of the graph."""
        src, dst, eid = edges
        assert torch.equal(self.src[eid], src) and torch.equal(self.dst[eid], dst)

    def in_eids(self, node, excluded=()):
        eids = (self.dst == node).nonzero().squeeze(1)
        return sorted(set(eids.tolist()) - set(excluded))


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    path = tmp_path_factory.mktemp("dglsamplers")
    g = random_graph(num_nodes=90, num_edges=600, seed=3)
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 2, path, return_mapping=True)
    results = spawn(_sample, 2, str(path / "g.json"), timeout=120)
    return Reference(g, orig_nids, orig_eids), results


def test_neighbor_sampler_blocks_hold_real_edges_and_respect_fanouts(sampled):
    ref, results = sampled
    for out in results:
        output_nodes, blocks = out["neighbor"]
        assert torch.equal(output_nodes, out["seeds"])
        assert torch.equal(blocks[-1]["dst"], out["seeds"])
        for layer, (block, fanout) in enumerate(zip(blocks, FANOUTS)):
            ref.check_real(block["edges"])
            src, dst, eid = block["edges"]
            assert eid.unique().numel() == eid.numel()            # no replacement
            assert torch.equal(block["src"][:block["dst"].numel()], block["dst"])
            for node in block["dst"].tolist():
                assert int((dst == node).sum()) == min(fanout, len(ref.in_eids(node)))
            if layer:
                assert torch.equal(blocks[layer - 1]["dst"], block["src"])


def test_full_neighbor_sampler_gives_the_true_in_neighbourhood(sampled):
    ref, results = sampled
    for out in results:
        blocks = out["full"]
        for block in blocks:
            ref.check_real(block["edges"])
            _, dst, eid = block["edges"]
            for node in block["dst"].tolist():
                assert sorted(eid[dst == node].tolist()) == ref.in_eids(node)
            sources = set(ref.src[torch.isin(ref.dst, block["dst"])].tolist())
            assert set(block["src"].tolist()) == sources | set(block["dst"].tolist())


def test_excluded_edges_are_never_sampled(sampled):
    ref, results = sampled
    for out in results:
        excluded, (block,) = out["excluded"]
        ref.check_real(block["edges"])
        _, dst, eid = block["edges"]
        for node in block["dst"].tolist():
            assert sorted(eid[dst == node].tolist()) == ref.in_eids(node, excluded.tolist())
        src, _, eid = out["out_dir"]
        ref.check_real(out["out_dir"])
        expected = {e for node in out["seeds"].tolist()
                    for e in (ref.src == node).nonzero().squeeze(1).tolist()}
        assert set(eid.tolist()) == expected - set(excluded.tolist())
        assert set(src.tolist()) <= set(out["seeds"].tolist())


def test_edge_subgraph_and_uniform_negatives(sampled):
    ref, results = sampled
    for out in results:
        eids, pair_ends, pair_eids, whole_ends, whole_nodes = out["edge_subgraph"]
        assert torch.equal(pair_eids, eids)
        ref.check_real(torch.cat([pair_ends, eids[None]]))
        ref.check_real(torch.cat([whole_ends, eids[None]]))
        assert whole_nodes == ref.g.num_nodes()
        eids, neg_src, neg_dst = out["negatives"]
        assert torch.equal(neg_src, ref.src[eids].repeat_interleave(3))
        assert neg_dst.numel() == 3 * eids.numel()
        assert 0 <= int(neg_dst.min()) and int(neg_dst.max()) < ref.g.num_nodes()


def test_dgl_sampler_in_the_loader_pulls_its_prefetch_names_and_pads_with_empty_batches(
        sampled):
    ref, results = sampled
    lengths = [out["loader"][0] for out in results]
    assert lengths == [3, 3]                               # 9 seeds / 4 on rank 0
    for out in results:
        _, batches = out["loader"]
        assert len(batches) == 3
        seen = []
        for batch in batches:
            old_in = ref.orig_nids[batch["input"]]
            old_out = ref.orig_nids[batch["output"]]
            assert torch.equal(batch["feat"], ref.g.ndata["feat"][old_in])
            assert torch.equal(batch["label"], ref.g.ndata["label"][old_out])
            for block, w in zip(batch["blocks"], batch["w"]):
                ref.check_real(block["edges"])
                assert torch.equal(w, ref.g.edata["w"][ref.orig_eids[block["edges"][2]]])
            assert batch["empty"] == (batch["output"].numel() == 0)
            assert batch["pred"] == (batch["output"].numel(), 2)
            seen.append(batch["output"])
        assert torch.equal(torch.cat(seen), out["seeds"][:9 if out is results[0] else 2])
    empties = [batch["empty"] for batch in results[1]["loader"][1]]
    assert empties == [False, True, True]


def test_plain_dist_dataloader_agrees_on_the_batch_count(sampled):
    _, results = sampled
    (len0, batches0), (len1, batches1) = results[0]["plain"], results[1]["plain"]
    assert len0 == len1 == 3 == len(batches0) == len(batches1)   # floor(10/4)=2, floor(15/4)
    assert [b.numel() for b in batches0] == [4, 4, 0]
    assert [b.numel() for b in batches1] == [4, 4, 4]
    assert len(set(torch.cat(batches1).tolist())) == 12


def test_sarlite_sampler_still_works_in_the_loader(sampled):
    _, results = sampled
    for out, count in zip(results, (9, 2)):
        assert len(out["own"]) == 3
        assert torch.equal(torch.cat(out["own"]), out["seeds"][:count])
