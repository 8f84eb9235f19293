"""The engine's options on heterogeneous graphs, as on homogeneous ones.

Bounded exchange steps (``max_rows_per_step``) and the per-layer graphs of a memory plan
(one layer one-shot, the next sar in chunks, as ``engine.memory_budget`` makes them) give
the same outputs and gradients as single-process DGL, in sar and sa mode on 1 to 4
workers; 16-bit halos send half the float32 bytes and stay within the tolerance the
homogeneous tests document (``test_halo_dtype``), measured as there: the largest error of
a field (outputs, input gradients of every type, each parameter's gradient) relative to
its largest reference value. Models, graph and reference come from ``hetero_cases``; the
16-bit tests put SiLU between the layers instead of ReLU: a pre-activation within a
rounding error of zero flips ReLU's gradient, which moves a neighbour's input gradient by
its full size (seen with bfloat16: 9 of 120 paper rows), a property of ReLU, not of the
transport.

One exception, measured and bounded on its own (``GAT_PARAMS``): GAT's parameter
gradients on this graph exceed the homogeneous tolerance (largest 6.3e-2 with bfloat16,
``fc_dst`` of ``cites`` in the second layer, and 1.6e-2 with float16, ``attn_r`` of
``cited_by``; float32 is exact in the same runs), since attention gradients are sums
over the softmax's neighbours that largely cancel. Outputs and input gradients of every
kind, and the other kinds' parameter gradients, stay within ``TOLERANCE``.
"""
import pytest
import torch

import sarlite
from harness import spawn
import torch.nn.functional as F

from hetero_cases import (KINDS, VARIANTS, build, full_inputs, hetero_graph, probes,
                          reference, run, this_rank)
from sarlite.core.budget import LayerChoice, MemoryPlan
from test_halo_dtype import HALO_KINDS, TOLERANCE

EXACT = 1e-4
GAT_PARAMS = {"bfloat16": 1e-1, "float16": 3e-2}     # measured 6.3e-2, 1.6e-2 (see above)
STEP_ROWS = 2                        # tiny chunks: every shard is split
ENGINES = [(mode, how) for how in ("steps", "plan") for mode in ("sar", "sa")]
PLAN = MemoryPlan(budget=1, layers=(LayerChoice("one-shot"), LayerChoice("sar", STEP_ROWS)),
                  estimate=0, costs=())


def _graphs(data, mode: str, how: str):
    """Both layers' graph: one graph in chunks of STEP_ROWS, or the plan's two graphs."""
    if how == "steps":
        return sarlite.construct_full_graph(data, mode=mode, max_rows_per_step=STEP_ROWS)
    return PLAN.graphs(sarlite.construct_full_graph(data, mode=mode))


def _run(kind: str, graphs, inputs, probe, variant: str, act=F.relu) -> dict:
    """``hetero_cases.run`` with the parameter gradients summed over the ranks
    (collective)."""
    model = build(kind, act=act)
    result = run(model, graphs, inputs, probe, variant)
    for name, p in model.named_parameters():
        p.grad = result["params"].get(name)
    sarlite.all_reduce_gradients(model)
    result["params"] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return result


def _worker(rank, world, config, orig_nids):
    data, owned, inputs, probe = this_rank(config, orig_nids)
    results = {"owned": owned}
    for mode, how in ENGINES:
        graphs = _graphs(data, mode, how)
        for kind in KINDS:
            for variant in VARIANTS:
                results[mode, how, kind, variant] = _run(kind, graphs, inputs, probe,
                                                         variant)
    return results


@pytest.fixture(scope="module")
def expected():
    return reference()


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: f"world{n}")
def distributed(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("hetero_options")
    orig_nids, _ = sarlite.partition_graph(hetero_graph(), "h", request.param, out,
                                           return_mapping=True)
    return spawn(_worker, request.param, str(out / "h.json"), orig_nids, timeout=600)


def _error(per_rank: list, key, field: str, reference: dict, whole: bool = False) -> float:
    """Largest error of ``field`` (rows by original id, or summed parameter gradients)
    relative to the largest magnitude of the reference tensor, or with ``whole`` of the
    reference field (every node type)."""
    worst = 0.0
    widest = max((float(v.abs().max()) for v in reference[field].values() if v.numel()),
                 default=1.0)
    for name, full in reference[field].items():
        scale = widest if whole else (float(full.abs().max()) or 1.0)
        for result in per_rank:
            if field == "params":
                got, want = result[key][field][name], full
            else:
                ids = result["owned"][name]
                got = result[key][field].get(name, torch.zeros(len(ids), *full.shape[1:]))
                want = full[ids]
            if got.shape != want.shape:
                return float("inf")
            if got.numel():
                worst = max(worst, float((got - want).abs().max()) / scale)
    return worst


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode,how", ENGINES)
def test_bounded_steps_and_memory_plans_match_single_process_dgl(expected, distributed, mode,
                                                                 how, kind, variant):
    key, ref = (mode, how, kind, variant), expected[(kind, variant)]
    for field in ("out", "inputs", "params"):
        assert _error(distributed, key, field, ref) < EXACT, field


def _halo_bytes() -> int:
    return sum(v["sent"] for k, v in sarlite.comm.traffic.snapshot().items()
               if k in HALO_KINDS)


def _halo_worker(rank, world, config, orig_nids):
    data, owned, inputs, probe = this_rank(config, orig_nids)
    results = {"owned": owned}
    for dtype in ("float32", "bfloat16", "float16"):
        for mode in ("sar", "sa", "one-shot"):
            g = sarlite.construct_full_graph(data, mode=mode, halo_dtype=dtype)
            before = _halo_bytes()
            for kind in KINDS:
                results[dtype, mode, kind] = _run(kind, g, inputs, probe, "backward", F.silu)
            results[dtype, mode, "bytes"] = _halo_bytes() - before
    return results


@pytest.fixture(scope="module")
def smooth():
    """Single-process DGL's results of every kind with SiLU between the layers."""
    g = hetero_graph()
    return {kind: run(build(kind, act=F.silu), g, full_inputs(g), probes(g), "backward")
            for kind in KINDS}


@pytest.fixture(scope="module")
def halos(tmp_path_factory):
    out = tmp_path_factory.mktemp("hetero_halos")
    orig_nids, _ = sarlite.partition_graph(hetero_graph(), "h", 2, out, return_mapping=True)
    return spawn(_halo_worker, 2, str(out / "h.json"), orig_nids, timeout=300)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
def test_reduced_halos_on_a_heterogeneous_graph_send_half_the_bytes(halos, dtype, mode):
    for result in halos:
        assert result["float32", mode, "bytes"] > 0
        assert result[dtype, mode, "bytes"] == result["float32", mode, "bytes"] // 2


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
@pytest.mark.parametrize("kind", KINDS)
def test_reduced_halos_on_a_heterogeneous_graph_stay_within_the_tolerance(
        smooth, halos, dtype, mode, kind):
    ref = smooth[kind]
    errors = {field: _error(halos, (dtype, mode, kind), field, ref,
                            whole=field != "params")    # all nodes, as one tensor there
              for field in ("out", "inputs", "params")}
    params = errors.pop("params")
    assert max(errors.values()) < TOLERANCE[dtype], errors
    assert params < (GAT_PARAMS if kind == "gat" else TOLERANCE)[dtype], params
    exact = {field: _error(halos, ("float32", mode, kind), field, ref)
             for field in ("out", "inputs", "params")}
    assert max(exact.values()) < EXACT, exact
