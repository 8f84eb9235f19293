"""sarlite.sar on heterogeneous graphs: IntelLabs SAR's typed API on sarlite's engine.

SAR's heterogeneous behaviour (its tests/test_sar.py and test_hetero_graph_shard_manager.py,
its examples/rgcn-hetero scripts), in this project's words: ``load_dgl_partition_data``
returns SAR's typed layout; the full graph and the message-flow graphs of
``construct_full_graph``/``construct_mfgs`` give single-process DGL's outputs and gradients
for ``HeteroGraphConv`` models; and the graph answers the relation views, types, sizes,
ids, degrees and data scopes the examples use. One spawn of 2 gloo workers computes
everything; each test checks one behaviour.
"""
import dgl
import dgl.nn as dglnn
import pytest
import torch
from torch import nn

import sarlite
import sarlite.sar as sar
from harness import outcome, spawn
from hetero_cases import IN, OUT, build, full_inputs, hetero_graph, probes, run

WORLD = 2
TOL = {"rtol": 1e-4, "atol": 1e-4}
PAPER_FIELDS = ("features", "labels", "train_mask")


class ExampleLayer(nn.Module):
    """An R-GCN layer written the way SAR's rgcn-hetero example writes it: a data scope,
    a weight per relation handed to ``GraphConv`` through ``mod_kwargs``, and a self-loop
    on the destination rows when ``g.tgt_in_src`` (DGL graphs have no such attribute)."""

    def __init__(self, in_dim: int, out_dim: int, ntypes: list, rels: list):
        super().__init__()
        self.rels = rels
        self.conv = dglnn.HeteroGraphConv({r: dglnn.GraphConv(in_dim, out_dim, norm="right",
                                                              weight=False, bias=False)
                                           for r in rels})
        self.weight = nn.ModuleDict({r: nn.Linear(in_dim, out_dim, bias=False) for r in rels})
        self.loop = nn.ModuleDict({t: nn.Linear(in_dim, out_dim) for t in ntypes})

    def forward(self, g, x: dict) -> dict:
        with g.local_scope():
            dst = {t: v[:g.number_of_dst_nodes(t)] for t, v in x.items()}
            out = self.conv(g, x, mod_kwargs={r: {"weight": self.weight[r].weight.T}
                                              for r in self.rels})
            loop = getattr(g, "tgt_in_src", True)
        return {t: h + self.loop[t](dst[t]) if loop else h for t, h in out.items()}


class ExampleModel(nn.Module):
    def __init__(self, g):
        super().__init__()
        rels = sorted(set(g.etypes))
        self.layers = nn.ModuleList([ExampleLayer(IN, 5, g.ntypes, rels),
                                     ExampleLayer(5, 2 * OUT, g.ntypes, rels)])

    def forward(self, graphs, h: dict) -> dict:
        graphs = graphs if isinstance(graphs, list) else [graphs] * len(self.layers)
        h = {t: torch.relu(v) for t, v in self.layers[0](graphs[0], h).items()}
        return self.layers[1](graphs[1], h)


def _graph() -> dgl.DGLGraph:
    """hetero_cases' graph (a node type without in-edges, a sparse relation) with SAR's
    field names on ``paper``."""
    g = hetero_graph()
    papers = g.num_nodes("paper")
    gen = torch.Generator().manual_seed(5)
    g.nodes["paper"].data["features"] = torch.randn(papers, 3, generator=gen)
    g.nodes["paper"].data["labels"] = torch.arange(papers) % 3
    g.nodes["paper"].data["train_mask"] = torch.arange(papers) % 4 == 0
    return g


def _models(g) -> dict:
    torch.manual_seed(0)
    return {"example": ExampleModel(g), "gat": build("gat")}


def _global_seeds(pd, rank: int) -> torch.Tensor:
    """Global ids of this rank's seeds: every third paper, and on rank 1 every fifth
    author too (ranks seed different types)."""
    types = pd.node_features[dgl.NTYPE]
    names = pd.node_type_names
    wanted = [("paper", 3)] + ([("author", 5)] if rank == 1 else [])
    local = torch.cat([(types == names.index(t)).nonzero().view(-1)[::step]
                       for t, step in wanted])
    return local + pd.node_ranges[rank][0]


def _layout(pd, orig_nids: dict) -> dict:
    """What load_dgl_partition_data returned, edges mapped back to original ids."""
    book = pd.partition_book
    shards = []
    for shard in pd.all_shard_edges:
        src_t, src = book.map_to_per_ntype(shard.edges[0])
        dst_t, dst = book.map_to_per_ntype(shard.edges[1])
        etype = shard.edge_features[dgl.ETYPE]
        orig = [(int(orig_nids[pd.node_type_names[s]][i]),
                 int(orig_nids[pd.node_type_names[d]][j]))
                for s, i, d, j in zip(src_t.tolist(), src.tolist(), dst_t.tolist(),
                                      dst.tolist())]
        shards.append({"src": shard.edges[0], "dst": shard.edges[1], "etype": etype,
                       "types": (src_t, dst_t), "orig": orig})
    return {"keys": sorted(pd.node_features), "ntype": pd.node_features[dgl.NTYPE],
            "node_ranges": pd.node_ranges, "ntypes": pd.node_type_names,
            "etypes": pd.edge_type_names, "book": type(pd.partition_book).__name__,
            "shards": shards,
            "paper_rows": {f: pd.node_features[f"paper/{f}"] for f in PAPER_FIELDS},
            "expanded": sar.suffix_key_lookup(pd.node_features, "train_mask", True,
                                              pd.node_type_names),
            "plain": sar.suffix_key_lookup(pd.node_features, "labels")}


def _views(g) -> dict:
    """The types, sizes, ids, degrees and relation views the examples read."""
    return {
        "class": type(g).__name__, "tgt_in_src": g.tgt_in_src, "ntypes": g.ntypes,
        "srctypes": g.srctypes, "dsttypes": g.dsttypes, "etypes": g.etypes,
        "canonical": g.canonical_etypes, "num_nodes": g.num_nodes(),
        "per_type": {t: (g.number_of_nodes(t), g.num_src_nodes(t), g.num_dst_nodes(t),
                         g.srcnodes(t), g.dstnodes(t)) for t in g.ntypes},
        "edges": {c: g.num_edges(c) for c in g.canonical_etypes},
        "num_edges": g.num_edges(),
        "degrees": {c: (g.in_degrees(etype=c), g.out_degrees(etype=c))
                    for c in g.canonical_etypes},
        "same_view": g["writes"] is g["author", "writes", "paper"],
        "view_types": [(g[c].srctypes, g[c].dsttypes, g[c].num_src_nodes(),
                        g[c].num_dst_nodes()) for c in g.canonical_etypes]}


def _scopes(g) -> dict:
    """Data set on a relation view lands in its type's node data; local_scope drops what
    was set inside it and keeps what was set before."""
    writes = g["author", "writes", "paper"]
    writes.srcdata["kept"] = torch.ones(writes.num_src_nodes(), 2)
    g.edata["w"] = {c: torch.ones(g.num_edges(c)) for c in g.canonical_etypes}
    with g.local_scope():
        g.srcdata["inner"] = {t: torch.zeros(g.num_src_nodes(t)) for t in g.srctypes}
        writes.dstdata["inner_view"] = torch.zeros(writes.num_dst_nodes())
        g.edata["inner_e"] = {c: torch.ones(g.num_edges(c)) for c in g.canonical_etypes}
        inside = (sorted(g.srcdata["inner"]), sorted(g.dstdata["inner_view"]))
    return {"kept": sorted(g.srcdata["kept"]), "inside": inside,
            "after": sorted(g.srcdata.keys()), "after_e": sorted(g.edata.keys())}


def _errors(g, pd) -> dict:
    lo = pd.node_ranges[sar.rank()][0]
    return {"no_ntype": outcome(lambda: g.srcnodes()),
            "unknown_etype": outcome(lambda: g["no_such_relation"]),
            "unknown_ntype": outcome(lambda: g.num_nodes("no_such_type")),
            "degrees_no_etype": outcome(lambda: g.in_degrees()),
            "seed_outside": outcome(lambda: sar.construct_mfgs(pd, torch.tensor([lo - 1]),
                                                               1)),
            "expand_no_types": outcome(lambda: sar.suffix_key_lookup(
                pd.node_features, "train_mask", expand_to_all=True))}


def _pass(model, graphs, x: dict, probe: dict, rows) -> tuple:
    """Outputs, input gradients and summed parameter gradients of one forward/backward;
    ``rows(t)`` picks the probe's rows of the outputs of type ``t``."""
    model.zero_grad()
    x = {t: v.clone().requires_grad_() for t, v in x.items()}
    out = model(graphs, x)
    sum((out[t] * probe[t][rows(t)][:, :out[t].shape[1]]).sum() for t in out).backward()
    sar.gather_grads(model)
    return ({t: v.detach() for t, v in out.items()},
            {t: v.grad for t, v in x.items() if v.grad is not None},
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})


def _worker(rank, world, config, orig_nids, states):
    sar.initialize_comms(rank, world, "127.0.0.1", "gloo")        # reuses the group
    sar.patch_dgl()
    pd = sar.load_dgl_partition_data(config, rank)
    book = pd.partition_book
    owned = {t: orig_nids[t][book.partid2nids(rank, t)] for t in pd.node_type_names}
    full = _graph()
    inputs = {t: v[owned[t]] for t, v in full_inputs(full).items()}
    probe = {t: v[owned[t]] for t, v in probes(full).items()}
    out = {"owned": owned, "layout": _layout(pd, orig_nids)}

    g = sar.construct_full_graph(pd).to("cpu")
    out["views"] = _views(g)
    models = _models(full)
    for name, model in models.items():
        model.load_state_dict(states[name])
        x = {t: inputs[t][g.srcnodes(t)] for t in g.srctypes}
        out[("full", name)] = _pass(model, g, x, probe, lambda t: g.dstnodes(t))
    sar.Config.disable_sr = True
    out[("sa", "example")] = _pass(models["example"], g, x, probe, lambda t: g.dstnodes(t))
    sar.Config.disable_sr = False

    seeds = _global_seeds(pd, rank)
    blocks = sar.construct_mfgs(pd, seeds, 2)
    out["seeds"] = {t: owned[t][blocks[-1].dstnodes(t)] for t in pd.node_type_names}
    out["blocks"] = [_views(b) for b in blocks]
    for name, model in models.items():
        x = {t: inputs[t][blocks[0].srcnodes(t)] for t in blocks[0].srctypes}
        result = _pass(model, blocks, x, probe, lambda t: blocks[-1].dstnodes(t))
        grads = {t: torch.zeros_like(inputs[t]).index_add_(0, blocks[0].srcnodes(t), v)
                 for t, v in result[1].items()}
        out[("mfg", name)] = (result[0], grads, result[2])
    out["scopes"] = (_scopes(sar.construct_full_graph(pd)), _scopes(blocks[0]))
    out["errors"] = _errors(g, pd)
    return out


@pytest.fixture(scope="module")
def run_sar(tmp_path_factory):
    """The graph, its id mapping, the models' states and every worker's results."""
    g = _graph()
    path = tmp_path_factory.mktemp("sar_hetero")
    orig_nids, _ = sarlite.partition_graph(g, "h", WORLD, path, return_mapping=True)
    states = {name: m.state_dict() for name, m in _models(g).items()}
    results = spawn(_worker, WORLD, str(path / "h.json"), orig_nids, states, timeout=240)
    return g, orig_nids, states, results


def _reference(g, name: str, states: dict, seeds: dict | None = None) -> dict:
    """DGL on the unpartitioned graph: outputs, input and parameter gradients, with the
    loss over ``seeds`` (``{ntype: original ids}``) only when given."""
    model = _models(g)[name]
    model.load_state_dict(states[name])
    probe = probes(g)
    if seeds is not None:
        probe = {t: torch.zeros_like(v).index_copy_(0, seeds[t], v[seeds[t]]) if t in seeds
                 else torch.zeros_like(v) for t, v in probe.items()}
    return run(model, g, full_inputs(g), probe, "backward")


def _assert_rows(ours: dict, ref: dict, owned: dict) -> None:
    for t, value in ours.items():
        torch.testing.assert_close(value, ref[t][owned[t]], **TOL)


def _assert_params(results, key, ref: dict) -> None:
    for r in results:
        params = r[key][2]
        assert sorted(params) == sorted(ref["params"])
        for n, grad in ref["params"].items():
            torch.testing.assert_close(params[n], grad, **TOL)


# -- load_dgl_partition_data ----------------------------------------------------------------
def test_node_features_use_dgl_typed_keys_with_ntype(run_sar):
    keys = run_sar[3][0]["layout"]["keys"]
    assert {f"paper/{f}" for f in PAPER_FIELDS} | {dgl.NTYPE} <= set(keys)
    assert not [k for k in keys if k != dgl.NTYPE and not k.startswith("paper/")]


def test_type_names_and_partition_book_follow_the_partitioning(run_sar):
    g, _, _, results = run_sar
    layout = results[0]["layout"]
    assert sorted(layout["ntypes"]) == sorted(g.ntypes)
    assert sorted(layout["etypes"]) == sorted(g.canonical_etypes)
    assert layout["book"] == "RangePartitionBook"


def test_node_ranges_tile_every_node_of_every_type(run_sar):
    g, _, _, results = run_sar
    ranges = results[0]["layout"]["node_ranges"]
    assert ranges[0][0] == 0 and ranges[-1][1] == g.num_nodes()
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_ntype_names_the_type_of_each_owned_node_in_id_order(run_sar):
    for r, result in enumerate(run_sar[3]):
        layout = result["layout"]
        lo, hi = layout["node_ranges"][r]
        ntype = layout["ntype"]
        assert ntype.numel() == hi - lo
        for t, name in enumerate(layout["ntypes"]):
            assert int((ntype == t).sum()) == len(result["owned"][name])


def test_typed_node_features_hold_the_owned_rows_of_their_type(run_sar):
    g = run_sar[0]
    for result in run_sar[3]:
        papers = result["owned"]["paper"]
        for field, rows in result["layout"]["paper_rows"].items():
            assert torch.equal(rows, g.nodes["paper"].data[field][papers]), field


def test_shards_hold_every_edge_once_grouped_by_source_partition_and_type(run_sar):
    g, _, _, results = run_sar
    ranges = results[0]["layout"]["node_ranges"]
    etypes = results[0]["layout"]["etypes"]
    seen = {c: [] for c in g.canonical_etypes}
    for r, result in enumerate(results):
        for j, shard in enumerate(result["layout"]["shards"]):
            assert ((shard["src"] >= ranges[j][0]) & (shard["src"] < ranges[j][1])).all()
            assert ((shard["dst"] >= ranges[r][0]) & (shard["dst"] < ranges[r][1])).all()
            assert torch.equal(shard["etype"], torch.sort(shard["etype"]).values)
            for t, pair in zip(shard["etype"].tolist(), shard["orig"]):
                seen[etypes[t]].append(pair)
    for c in g.canonical_etypes:
        src, dst = g.edges(etype=c)
        assert sorted(seen[c]) == sorted(zip(src.tolist(), dst.tolist())), c


def test_suffix_key_lookup_expands_a_typed_field_to_all_owned_nodes(run_sar):
    g = run_sar[0]
    for result in run_sar[3]:
        layout = result["layout"]
        is_paper = layout["ntype"] == layout["ntypes"].index("paper")
        expanded = layout["expanded"]
        assert expanded.shape == is_paper.shape
        assert torch.equal(expanded[is_paper], layout["paper_rows"]["train_mask"])
        assert not expanded[~is_paper].any()
        assert torch.equal(layout["plain"], layout["paper_rows"]["labels"])


# -- the full graph and the MFGs equal DGL ----------------------------------------------------
@pytest.mark.parametrize("name", ["example", "gat"])
def test_full_graph_outputs_and_gradients_equal_dgl(run_sar, name):
    g, _, states, results = run_sar
    ref = _reference(g, name, states)
    for r in results:
        _assert_rows(r[("full", name)][0], ref["out"], r["owned"])
        _assert_rows(r[("full", name)][1], ref["inputs"], r["owned"])
    _assert_params(results, ("full", name), ref)


def test_disable_sr_runs_the_hetero_graph_in_sa_mode_with_the_same_results(run_sar):
    g, _, states, results = run_sar
    ref = _reference(g, "example", states)
    for r in results:
        _assert_rows(r[("sa", "example")][0], ref["out"], r["owned"])
        _assert_rows(r[("sa", "example")][1], ref["inputs"], r["owned"])
    _assert_params(results, ("sa", "example"), ref)


@pytest.mark.parametrize("name", ["example", "gat"])
def test_mfgs_from_global_seed_ids_of_several_types_give_dgl_results(run_sar, name):
    g, _, states, results = run_sar
    seeds = {t: torch.cat([r["seeds"][t] for r in results]) for t in g.ntypes}
    ref = _reference(g, name, states, seeds)
    for r in results:
        out, grads, _ = r[("mfg", name)]
        for t, value in out.items():
            torch.testing.assert_close(value, ref["out"][t][r["seeds"][t]], **TOL)
        _assert_rows(grads, ref["inputs"], r["owned"])
    _assert_params(results, ("mfg", name), ref)


def test_mfg_seeds_are_the_global_ids_asked_for_by_type(run_sar):
    results = run_sar[3]
    assert len(results[0]["seeds"]["paper"]) > 0 and len(results[1]["seeds"]["author"]) > 0
    assert len(results[0]["seeds"]["author"]) == 0
    assert all(len(r["seeds"][t]) == 0 for r in results for t in ("venue", "institution"))


# -- the graph's types, sizes, ids and views ----------------------------------------------------
def test_full_graph_is_a_hetero_graph_shard_manager_with_dgl_types(run_sar):
    g, _, _, results = run_sar
    for r in results:
        views = r["views"]
        assert views["class"] == "HeteroGraphShardManager"
        assert sorted(views["ntypes"]) == sorted(g.ntypes)
        assert views["srctypes"] == views["dsttypes"] == views["ntypes"]
        assert sorted(views["canonical"]) == sorted(g.canonical_etypes)
        assert views["etypes"] == [c[1] for c in views["canonical"]]
        assert views["tgt_in_src"] is True


def test_full_graph_counts_per_type_add_up_to_the_whole_graph(run_sar):
    g, _, _, results = run_sar
    assert sum(r["views"]["num_nodes"] for r in results) == g.num_nodes()
    assert sum(r["views"]["num_edges"] for r in results) == g.num_edges()
    for t in g.ntypes:
        assert sum(r["views"]["per_type"][t][0] for r in results) == g.num_nodes(t)
    for c in g.canonical_etypes:
        assert sum(r["views"]["edges"][c] for r in results) == g.num_edges(c)


def test_full_graph_srcnodes_and_dstnodes_are_all_owned_ids(run_sar):
    for r in run_sar[3]:
        for t, (n, n_src, n_dst, src, dst) in r["views"]["per_type"].items():
            assert n == n_src == n_dst == len(r["owned"][t])
            assert torch.equal(src, torch.arange(n)) and torch.equal(dst, torch.arange(n))


def test_degrees_per_relation_are_the_whole_graph_s(run_sar):
    g, _, _, results = run_sar
    for r in results:
        for c, (in_deg, out_deg) in r["views"]["degrees"].items():
            assert torch.equal(in_deg, g.in_degrees(etype=c)[r["owned"][c[2]]]), c
            assert torch.equal(out_deg, g.out_degrees(etype=c)[r["owned"][c[0]]]), c


def test_relation_views_by_name_and_canonical_type_are_one_view_of_its_types(run_sar):
    for r in run_sar[3]:
        views = r["views"]
        assert views["same_view"]
        for c, (srctypes, dsttypes, n_src, n_dst) in zip(views["canonical"],
                                                         views["view_types"]):
            assert (srctypes, dsttypes) == ([c[0]], [c[2]])
            assert (n_src, n_dst) == (len(r["owned"][c[0]]), len(r["owned"][c[2]]))


def test_mfg_blocks_count_their_nodes_and_edges_per_type(run_sar):
    for r in run_sar[3]:
        for block in r["blocks"]:
            per_type = block["per_type"]
            assert block["num_nodes"] == sum(v[0] for v in per_type.values())
            assert all(v[0] == v[1] + v[2] for v in per_type.values())
            assert block["num_edges"] == sum(block["edges"].values())
            assert block["tgt_in_src"] is True


def test_mfg_sources_start_with_the_destinations_and_chain_between_layers(run_sar):
    for r in run_sar[3]:
        first, last = r["blocks"]
        for t in first["per_type"]:
            _, _, n_dst, src, dst = first["per_type"][t]
            assert torch.equal(src[:n_dst], dst)
            assert torch.equal(dst, last["per_type"][t][3])


def test_relation_view_data_is_its_types_data_and_local_scope_restores_it(run_sar):
    for r in run_sar[3]:
        for scopes in r["scopes"]:
            assert scopes["kept"] == ["author"]
            assert scopes["inside"][1] == ["paper"]
            assert "inner" not in scopes["after"] and "inner_view" not in scopes["after"]
            assert "kept" in scopes["after"]
            assert scopes["after_e"] == ["w"]


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case, kind, words", [
    ("no_ntype", "ValueError", "several node types"),
    ("unknown_etype", "KeyError", "unknown edge type"),
    ("unknown_ntype", "KeyError", "unknown node type"),
    ("degrees_no_etype", "ValueError", "several edge types"),
    ("seed_outside", "ValueError", "this worker's nodes"),
    ("expand_no_types", "ValueError", "type_list")])
def test_bad_input_is_refused_with_one_clear_error(run_sar, case, kind, words):
    for r in run_sar[3]:
        got_kind, message = r["errors"][case]
        assert got_kind == kind and words in message, (got_kind, message)
