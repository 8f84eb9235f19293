"""HeteroGraphConv on sarlite's heterogeneous graph equals single-process DGL exactly.

For GraphConv, SAGEConv, GATConv and an R-GCN layer (a weight per relation) as
``HeteroGraphConv`` modules, two layers deep, in modes sar, sa and one-shot, each on
DGL's kernels and on sarlite's torch kernels, on 1 to 4 workers: outputs of every node
type, input gradients of every type (with ``backward()`` and with
``torch.autograd.grad``; none with frozen inputs) and every parameter gradient. The graph has a node type without in-edges and a relation that some
partitions get no edge of (see ``hetero_cases``).
"""
import pytest
import torch

import sarlite
from harness import spawn
from hetero_cases import (KINDS, VARIANTS, hetero_graph, mfg_reference, mfg_worker,
                          reference, worker)

MODES = ("sar", "sa", "one-shot")
KERNELS = {"dgl": "", "torch": "-torch"}       # the suffix of the engine's name
ENGINES = [mode + suffix for suffix in KERNELS.values() for mode in MODES]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def expected():
    return reference()


@pytest.fixture(scope="module", params=[1, 2, 3, 4])
def distributed(request, tmp_path_factory):
    num_parts = request.param
    out = tmp_path_factory.mktemp(f"hetero{num_parts}")
    orig_nids, _ = sarlite.partition_graph(hetero_graph(), "h", num_parts, out,
                                           return_mapping=True)
    return spawn(worker, num_parts, str(out / "h.json"), orig_nids, ENGINES, timeout=300)


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    return ours.shape == theirs.shape and \
        bool(torch.allclose(ours, theirs, atol=TOLERANCE, rtol=TOLERANCE))


def _rows_match(per_rank: list, key, field: str, reference: dict) -> list[str]:
    """Types whose rows (from every rank, by original id) differ from the reference."""
    bad = []
    for ntype, full in reference[field].items():
        for result in per_rank:
            ids = result["owned"][ntype]
            ours = result[key][field].get(ntype)
            if ours is None:
                ours = torch.zeros(len(ids), *full.shape[1:])
            if not _close(ours, full[ids]):
                bad.append(ntype)
    extra = [t for r in per_rank for t, v in r[key][field].items()
             if t not in reference[field] and v.abs().max() > 0]
    return sorted(set(bad + extra))


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_hetero_layer_matches_single_process_dgl(expected, distributed, mode, kind,
                                                 variant, kernels):
    key, ref = (mode + KERNELS[kernels], kind, variant), expected[(kind, variant)]
    assert _rows_match(distributed, key, "out", ref) == []
    assert _rows_match(distributed, key, "inputs", ref) == []
    if variant == "frozen":
        assert all(not r[key]["inputs"] for r in distributed)
    params = distributed[0][key]["params"]
    assert sorted(params) == sorted(ref["params"])
    assert [n for n in params if not _close(params[n], ref["params"][n])] == []


CROSS = ("sum", "mean", "max", "stack")
RELATIONS = ("writes", "cites", "hosts")


def _x(g, ntype: str) -> torch.Tensor:
    return torch.arange(g.num_nodes(ntype) * 2.0).view(-1, 2)


def _multi_update(rank, world, config, orig_nids):
    import dgl.function as fn
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data)
    full = hetero_graph()
    owned = {t: orig_nids[t][slice(*data.owned_range(t))] for t in data.ntypes}
    g.ndata["x"] = {t: _x(full, t)[owned[t]] for t in g.ntypes}
    merged = {}
    for cross in CROSS:
        g.multi_update_all({rel: (fn.copy_u("x", "m"), fn.sum("m", "h")) for rel in RELATIONS},
                           cross)
        merged[cross] = g.ndata["h"]
    g.apply_edges(fn.u_sub_v("x", "x", "d"), etype="cites")
    return owned, merged, g.edges["cites"].data["d"], torch.cat(
        [s.eids for s in data.relations[("paper", "cites", "paper")]])


def test_multi_update_all_and_apply_edges_match_dgl(tmp_path):
    import dgl.function as fn
    full = hetero_graph()
    orig_nids, orig_eids = sarlite.partition_graph(full, "h", 2, tmp_path,
                                                   return_mapping=True)
    full.ndata["x"] = {t: _x(full, t) for t in full.ntypes}
    per_rank = spawn(_multi_update, 2, str(tmp_path / "h.json"), orig_nids)
    for cross in CROSS:
        full.multi_update_all({rel: (fn.copy_u("x", "m"), fn.sum("m", "h"))
                               for rel in RELATIONS}, cross)
        for owned, merged, _, _ in per_rank:
            assert set(merged[cross]) == {"paper"}
            assert torch.equal(merged[cross]["paper"],
                               full.nodes["paper"].data["h"][owned["paper"]]), cross
    full.apply_edges(fn.u_sub_v("x", "x", "d"), etype="cites")
    cites = ("paper", "cites", "paper")
    for _, _, d, eids in per_rank:
        assert torch.equal(d, full.edges["cites"].data["d"][orig_eids[cites][eids]])


def _normalised(rank, world, config, orig_nids):
    data = sarlite.load_partition_data(config)
    full = hetero_graph()
    owned = {t: orig_nids[t][slice(*data.owned_range(t))] for t in data.ntypes}
    torch.manual_seed(0)
    norm = sarlite.DistributedBatchNorm1d(2, ntypes=data.ntypes)
    x = {t: (_x(full, t) ** 1.5)[owned[t]].requires_grad_() for t in data.ntypes}
    out = norm(x)
    sum((out[t] * (1 + torch.arange(2.0))).sum() for t in out).backward()
    sarlite.all_reduce_gradients(norm)
    return owned, {t: v.detach() for t, v in out.items()}, {t: v.grad for t, v in x.items()}, \
        {n: p.grad for n, p in norm.named_parameters()}, norm.state_dict()


def test_batch_norm_per_node_type_matches_torch_on_the_whole_graph(tmp_path):
    full = hetero_graph()
    orig_nids, _ = sarlite.partition_graph(full, "h", 3, tmp_path, return_mapping=True)
    norms = torch.nn.ModuleDict({t: torch.nn.BatchNorm1d(2) for t in sorted(full.ntypes)})
    x = {t: (_x(full, t) ** 1.5).requires_grad_() for t in full.ntypes}
    out = {t: norms[t](x[t]) for t in full.ntypes}
    sum((out[t] * (1 + torch.arange(2.0))).sum() for t in out).backward()
    for owned, ours, grads, params, state in spawn(_normalised, 3, str(tmp_path / "h.json"),
                                                   orig_nids):
        for t in full.ntypes:
            assert _close(ours[t], out[t].detach()[owned[t]])
            assert _close(grads[t], x[t].grad[owned[t]])
            assert _close(params[f"norms.{t}.weight"], norms[t].weight.grad)
            assert _close(state[f"norms.{t}.running_var"], norms[t].running_var)


@pytest.fixture(scope="module")
def mfgs(tmp_path_factory):
    """Every rank's MFG results on 4 workers, and the reference for their seeds."""
    out = tmp_path_factory.mktemp("hetero_mfgs")
    orig_nids, _ = sarlite.partition_graph(hetero_graph(), "h", 4, out, return_mapping=True)
    per_rank = spawn(mfg_worker, 4, str(out / "h.json"), orig_nids, ENGINES, timeout=300)
    seeds = {}
    for result in per_rank:
        for t, ids in result["seeds"].items():
            seeds[t] = torch.cat([seeds.get(t, ids[:0]), ids])
    return per_rank, mfg_reference(seeds)


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_hetero_mfgs_give_the_full_graph_outputs_at_seeds_of_any_types(mfgs, mode, kind,
                                                                      kernels):
    per_rank, reference = mfgs
    ref = reference[kind]
    mode = mode + KERNELS[kernels]
    for result in per_rank:
        got = result[(mode, kind)]
        assert all(len(v) == 0 for t, v in got["out"].items() if t not in result["seeds"])
        for t, ids in result["seeds"].items():
            assert _close(got["out"][t], ref["out"][t][ids]), t
        for t, grad in got["inputs"].items():
            assert _close(grad, ref["inputs"].get(t, torch.zeros(1))[result["owned"][t]]), t
    params = per_rank[0][(mode, kind)]["params"]
    assert [n for n in ref["params"] if not _close(params[n], ref["params"][n])] == []
