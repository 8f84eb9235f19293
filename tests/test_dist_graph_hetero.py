"""DistGraph on a heterogeneous partitioning: types, type-wise queries, data per type,
sampling per edge type and the node loader with ``{ntype: ids}``, against the
unpartitioned DGL heterograph (through the partitioning's ``orig_nids`` / ``orig_eids``)."""
import dgl
import pytest
import torch

import sarlite
from harness import spawn
from hetero_cases import hetero_graph
from sarlite.sampling import DistNeighborSampler, DistNodeDataLoader

WRITES = ("author", "writes", "paper")
HOSTS = ("venue", "hosts", "paper")
SEEDS = {"paper": 9, "author": 6, "venue": 1}


def _graph() -> dgl.DGLGraph:
    g = hetero_graph()
    g.nodes["author"].data["h"] = torch.randn(g.num_nodes("author"), 3,
                                              generator=torch.Generator().manual_seed(1))
    g.nodes["paper"].data["label"] = torch.arange(g.num_nodes("paper")) % 3
    g.edges[WRITES].data["w"] = torch.arange(g.num_edges(WRITES), dtype=torch.float32)
    return g


def _seeds(g, rank: int, world: int) -> dict:
    """Some type-wise seeds per type; the last rank of several has none."""
    gen = torch.Generator().manual_seed(10 + rank)
    if world > 1 and rank == world - 1:
        return {t: torch.zeros(0, dtype=torch.int64) for t in SEEDS}
    return {t: torch.randperm(g.num_nodes(t), generator=gen)[:n] for t, n in SEEDS.items()}


def _triples(frontier) -> dict:
    """``(src, dst, eid)`` rows of each edge type the frontier has."""
    return {c: torch.stack(frontier.edges(etype=c) + (frontier.edges[c].data[dgl.EID],), 1)
            for c in frontier.canonical_etypes}


def _of(triples: dict, c) -> torch.Tensor:
    """The rows of edge type ``c``: none when the frontier lacks the type (DGL 2.1 leaves
    out the edge types without sampled edges)."""
    return triples.get(c, torch.zeros(0, 3, dtype=torch.int64))


def _queries(rank, world, config):
    g = sarlite.distributed.DistGraph(config)
    out = {"types": (g.ntypes, g.etypes, g.canonical_etypes, g.is_homogeneous),
           "num_nodes": {t: g.num_nodes(t) for t in g.ntypes} | {None: g.num_nodes()},
           "num_edges": {c: g.num_edges(c) for c in g.canonical_etypes} |
           {None: g.num_edges()},
           "ids": ([g.get_ntype_id(t) for t in g.ntypes],
                   [g.get_etype_id(c) for c in g.canonical_etypes], g.get_etype_id("hosts")),
           "policies": (g.get_node_partition_policy("author").policy_str,
                        g.get_edge_partition_policy("writes").policy_str)}
    asked = {c: torch.randint(0, g.num_edges(c), (12,),
                              generator=torch.Generator().manual_seed(rank))
             for c in g.canonical_etypes}
    out["asked"] = asked
    out["ends"] = {c: g.find_edges(ids, c) for c, ids in asked.items()}
    out["in"] = {c: g.in_degrees(etype=c) for c in g.canonical_etypes}
    out["out"] = {c: g.out_degrees(torch.arange(g.num_nodes(c[0])), etype=c)
                  for c in g.canonical_etypes}
    out["ndata"] = {t: {k: v[torch.arange(g.num_nodes(t))] for k, v in g.nodes[t].data.items()}
                    for t in g.ntypes}
    out["edata"] = {c: {k: v[torch.arange(g.num_edges(c))] for k, v in g.edges[c].data.items()}
                    for c in g.canonical_etypes}
    seeds = _seeds(g, rank, world)
    out["seeds"] = seeds
    out["all_in"] = _triples(g.sample_neighbors(seeds, -1))
    out["all_out"] = _triples(g.sample_neighbors(seeds, -1, edge_dir="out"))
    fanout = {c: 2 if c != HOSTS else 0 for c in g.canonical_etypes}
    out["two_in"] = _triples(g.sample_neighbors(seeds, fanout))
    out["in_subgraph"] = _triples(sarlite.sampling.in_subgraph(g, seeds))
    out["prob"] = _triples(g.sample_neighbors(seeds, 2, prob="w"))
    subgraph = g.edge_subgraph({WRITES: asked[WRITES]}, relabel_nodes=False)
    out["edge_subgraph"] = (subgraph.num_nodes("author"), _triples(subgraph)[WRITES])
    return out


def _dgl_writer(g, name, world, out, return_mapping):
    # METIS is deterministic; DGL 2.1's writer crashes when a random split leaves a part
    # without edges of the small relation
    return dgl.distributed.partition_graph(g, name, world, out, part_method="metis",
                                           return_mapping=return_mapping)


CASES = {"sarlite1": (1, sarlite.partition_graph), "sarlite3": (3, sarlite.partition_graph),
         "dgl2": (2, _dgl_writer)}


@pytest.fixture(scope="module", params=sorted(CASES))
def run(request, tmp_path_factory):
    (world, writer), g = CASES[request.param], _graph()
    out = tmp_path_factory.mktemp("hetero")
    orig_nids, orig_eids = writer(g, "g", world, str(out), return_mapping=True)
    config = str(out / "g.json")
    results = [_queries(0, 1, config)] if world == 1 else \
        spawn(_queries, world, config, timeout=240)
    return g, orig_nids, orig_eids, results


def _original_edges(g, orig_nids, orig_eids, c, triples):
    """``(src, dst, eid)`` rows of new type-wise ids mapped to the original graph's."""
    return torch.stack([orig_nids[c[0]][triples[:, 0]], orig_nids[c[2]][triples[:, 1]],
                        orig_eids[c][triples[:, 2]]], 1)


def _rows(g, c, eids):
    src, dst = g.find_edges(eids, etype=c)
    return torch.stack([src, dst, eids], 1)


def _same_rows(a, b) -> bool:
    return a.shape == b.shape and torch.equal(torch.unique(a, dim=0), torch.unique(b, dim=0)) \
        and torch.unique(a, dim=0).shape[0] == a.shape[0]


def test_types_and_counts_are_the_heterographs(run):
    g, _, _, results = run
    for r in results:
        ntypes, etypes, canonical, homogeneous = r["types"]
        assert sorted(ntypes) == sorted(g.ntypes) and sorted(canonical) == \
            sorted(g.canonical_etypes) and sorted(etypes) == sorted(g.etypes)
        assert not homogeneous
        assert r["num_nodes"] == {t: g.num_nodes(t) for t in g.ntypes} | {None: g.num_nodes()}
        assert r["num_edges"] == {c: g.num_edges(c) for c in g.canonical_etypes} | \
            {None: g.num_edges()}


def test_type_ids_and_policies_follow_the_partition_book(run):
    _, _, _, results = run
    for r in results:
        ntypes, _, canonical, _ = r["types"]
        assert r["ids"] == (list(range(len(ntypes))), list(range(len(canonical))),
                            canonical.index(HOSTS))
        assert r["policies"] == ("node~author", "edge~author:writes:paper")


def test_find_edges_gives_type_wise_ends_of_type_wise_edge_ids(run):
    g, orig_nids, orig_eids, results = run
    for r in results:
        for c, eids in r["asked"].items():
            src, dst = r["ends"][c]
            expected = g.find_edges(orig_eids[c][eids], etype=c)
            assert torch.equal(orig_nids[c[0]][src], expected[0])
            assert torch.equal(orig_nids[c[2]][dst], expected[1])


def test_degrees_per_edge_type_match_dgl(run):
    g, orig_nids, _, results = run
    for r in results:
        for c in g.canonical_etypes:
            assert torch.equal(r["in"][c], g.in_degrees(orig_nids[c[2]], etype=c))
            assert torch.equal(r["out"][c], g.out_degrees(orig_nids[c[0]], etype=c))


def test_node_and_edge_data_per_type_are_the_originals(run):
    g, orig_nids, orig_eids, results = run
    for r in results:
        for t in g.ntypes:
            assert sorted(r["ndata"][t]) == sorted(g.nodes[t].data)
            for name, rows in r["ndata"][t].items():
                assert torch.equal(rows, g.nodes[t].data[name][orig_nids[t]].to(rows.dtype))
        assert sorted(r["edata"][WRITES]) == ["w"]
        assert torch.equal(r["edata"][WRITES]["w"], g.edges[WRITES].data["w"][orig_eids[WRITES]])


@pytest.mark.parametrize("key,direction", [("all_in", "in"), ("in_subgraph", "in"),
                                           ("all_out", "out")])
def test_sampling_every_neighbour_gives_exactly_the_edges_of_the_seeds(run, key, direction):
    g, orig_nids, orig_eids, results = run
    for r in results:
        for c in g.canonical_etypes:
            end = c[2] if direction == "in" else c[0]
            seeds = orig_nids[end][r["seeds"].get(end, torch.zeros(0, dtype=torch.int64))]
            eids = (g.in_edges(seeds, form="eid", etype=c) if direction == "in"
                    else g.out_edges(seeds, form="eid", etype=c))
            got = _original_edges(g, orig_nids, orig_eids, c, _of(r[key], c))
            assert _same_rows(got, _rows(g, c, eids)), (key, c)


@pytest.mark.parametrize("key", ["all_in", "all_out", "two_in", "in_subgraph", "prob"])
def test_a_frontier_has_every_node_type_and_the_edge_types_that_got_edges(run, key):
    """DGL 2.1's rule (dgl.distributed's _frontier_to_heterogeneous_graph): only the edge
    types holding a sampled edge, every edge type when none does."""
    g, _, _, results = run
    for r in results:
        triples = r[key]
        if not any(rows.shape[0] for rows in triples.values()):
            assert sorted(triples) == sorted(g.canonical_etypes), key
            continue
        assert all(rows.shape[0] for rows in triples.values()), key
        if key == "two_in":
            assert HOSTS not in triples                  # fanout 0: never an edge


def test_a_fanout_per_edge_type_picks_that_many_real_edges_of_each_type(run):
    g, orig_nids, orig_eids, results = run
    for r in results:
        for c in g.canonical_etypes:
            got = _original_edges(g, orig_nids, orig_eids, c, _of(r["two_in"], c))
            assert torch.equal(got, _rows(g, c, got[:, 2]))         # real edges, right ids
            seeds = orig_nids[c[2]][r["seeds"].get(c[2], torch.zeros(0, dtype=torch.int64))]
            limit = 0 if c == HOSTS else 2
            expected = torch.clamp(g.in_degrees(seeds, etype=c), max=limit)
            counts = (got[:, 1][:, None] == seeds[None, :]).sum(0)
            assert torch.equal(counts, expected), c
            assert torch.unique(got[:, 2]).numel() == got.shape[0]


def test_prob_weighs_the_edge_types_that_have_it_and_the_others_are_uniform(run):
    g, orig_nids, orig_eids, results = run
    for r in results:
        for c in g.canonical_etypes:
            got = _original_edges(g, orig_nids, orig_eids, c, _of(r["prob"], c))
            assert torch.equal(got, _rows(g, c, got[:, 2]))         # real edges, right ids
            seeds = orig_nids[c[2]][r["seeds"].get(c[2], torch.zeros(0, dtype=torch.int64))]
            candidates = g.in_edges(seeds, form="eid", etype=c)
            if c == WRITES:                     # w is the edge id: edge 0 is never picked
                assert bool((g.edges[c].data["w"][got[:, 2]] > 0).all())
                candidates = candidates[g.edges[c].data["w"][candidates] > 0]
            ends = g.find_edges(candidates, etype=c)[1]
            expected = torch.clamp((ends[:, None] == seeds[None, :]).sum(0), max=2)
            assert torch.equal((got[:, 1][:, None] == seeds[None, :]).sum(0), expected), c


def test_edge_subgraph_of_one_type_holds_those_edges_over_all_nodes(run):
    g, orig_nids, orig_eids, results = run
    for r in results:
        num_authors, triples = r["edge_subgraph"]
        assert num_authors == g.num_nodes("author")
        got = _original_edges(g, orig_nids, orig_eids, WRITES, triples)
        assert torch.equal(got, _rows(g, WRITES, orig_eids[WRITES][r["asked"][WRITES]]))


def _loader(rank, world, config):
    g = sarlite.distributed.DistGraph(config)
    papers = sarlite.distributed.node_split(torch.ones(g.num_nodes("paper"), dtype=torch.bool),
                                g.get_partition_book(), ntype="paper")
    venues = torch.arange(g.num_nodes("venue")) if rank == 0 else torch.zeros(0).long()
    fanouts = [{c: 3 for c in g.canonical_etypes}, -1]
    batches = []
    for sampler in (dgl.dataloading.NeighborSampler(fanouts),
                    DistNeighborSampler(fanouts, prefetch_node_feats=["h"],
                                        prefetch_labels=["label"])):
        loader = DistNodeDataLoader(g, {"paper": papers, "venue": venues}, sampler,
                                    batch_size=17, shuffle=True)
        for input_nodes, output_nodes, blocks in loader:
            batches.append((input_nodes, output_nodes,
                            [{c: torch.stack([b.srcnodes[c[0]].data[dgl.NID][b.edges(etype=c)[0]],
                                              b.dstnodes[c[2]].data[dgl.NID][b.edges(etype=c)[1]],
                                              b.edges[c].data[dgl.EID]], 1)
                              for c in b.canonical_etypes} for b in blocks],
                            {k: v for k, v in blocks[0].srcnodes["author"].data.items()},
                            {k: v for k, v in blocks[-1].dstnodes["paper"].data.items()}))
        batches.append(("epoch", len(loader), papers, venues))
    return batches


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    g = _graph()
    out = tmp_path_factory.mktemp("loader")
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 2, out, return_mapping=True)
    return g, orig_nids, orig_eids, spawn(_loader, 2, str(out / "g.json"), timeout=240)


def test_the_node_loader_uses_every_seed_of_every_type_once_per_epoch(loaded):
    _, _, _, results = loaded
    for r in results:
        epoch, seen = [], {"paper": [], "venue": []}
        for item in r:
            if item[0] == "epoch":
                _, length, papers, venues = item
                assert len(epoch) == length
                assert torch.equal(torch.sort(torch.cat(seen["paper"])).values,
                                   torch.sort(papers).values)
                assert torch.equal(torch.sort(torch.cat(seen["venue"])).values,
                                   torch.sort(venues).values)
                epoch, seen = [], {"paper": [], "venue": []}
                continue
            epoch.append(item)
            for t in seen:
                seen[t].append(item[1][t])


def test_sampled_blocks_hold_real_edges_with_their_global_ids(loaded):
    g, orig_nids, orig_eids, results = loaded
    for r in results:
        for item in r:
            if item[0] == "epoch":
                continue
            for block in item[2]:
                for c, triples in block.items():
                    got = _original_edges(g, orig_nids, orig_eids, c, triples)
                    assert torch.equal(got, _rows(g, c, got[:, 2]))


def test_sarlites_sampler_prefetches_features_and_labels_by_type(loaded):
    g, orig_nids, _, results = loaded
    prefetched = [item for r in results for item in r
                  if item[0] != "epoch" and "h" in item[3]]
    assert prefetched
    for input_nodes, output_nodes, _, src, dst in prefetched:
        assert torch.equal(src["h"], g.nodes["author"].data["h"][orig_nids["author"][
            input_nodes["author"]]])
        assert torch.equal(dst["label"], g.nodes["paper"].data["label"][orig_nids["paper"][
            output_nodes["paper"]]])
