"""The layers of the exactness matrix, each wrapped as ``forward(g, inputs) -> (n, d)``.

``inputs`` holds ``feat`` (float node features), ``bfeat`` (binary node features: exact
ties under max), ``w`` (positive scalar edge weights), ``ef`` (edge feature vectors) and
``etype`` (integer edge types, 3 of them). The same wrapper runs on the full DGL graph
(reference) and on a distributed graph. Every ``dgl.nn.pytorch`` conv layer that takes a
graph is here except the CuGraph ones (they need cugraph), DGNConv (it needs eigenvectors
of the whole graph's Laplacian) and EGATConv (DGL refuses this graph's zero-in-degree
nodes: it is tested in ``test_engine_contract.py``); the Dense* layers take adjacency matrices, not graphs. A case's second entry says
what it must raise in a mode (a refusal) or ``EXACT``.
"""
from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import dgl
import dgl.function as fn
import dgl.nn as dglnn
import dgl.ops
import torch
from dgl.nn.functional import edge_softmax as dgl_edge_softmax
from torch import nn

import sarlite

FEAT, BFEAT, EF, PROBE = 6, 5, 3, 48


class Layer(nn.Module):
    """A ``dgl.nn`` layer applied to one input, with its output flattened to 2-D."""

    def __init__(self, layer: nn.Module, feature: str = "feat", edge_weight: bool = False):
        super().__init__()
        self.layer, self.feature, self.edge_weight = layer, feature, edge_weight

    def forward(self, g, inputs):
        kwargs = {"edge_weight": inputs["w"]} if self.edge_weight else {}
        out = self.layer(g, inputs[self.feature], **kwargs)
        return out.reshape(out.shape[0], -1)


class GatedMessage(nn.Module):
    """A custom layer whose message function has parameters and reads src, dst and edge
    fields; mean reducer."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(FEAT + EF, 1)
        self.out = nn.Linear(FEAT, 4)

    @sarlite.message_has_parameters(lambda self: tuple(self.gate.parameters()))
    def message(self, edges):
        gate = torch.sigmoid(self.gate(torch.cat([edges.src["h"], edges.data["ef"]], 1)))
        return {"m": edges.src["h"] * gate * edges.dst["s"]}

    def forward(self, g, inputs):
        with g.local_scope():
            g.srcdata["h"] = inputs["feat"]
            g.dstdata["s"] = torch.tanh(inputs["feat"][:, :1])
            g.edata["ef"] = inputs["ef"]
            g.update_all(self.message, fn.mean("m", "agg"))
            return self.out(g.dstdata["agg"])


class CopyEdgesThenSum(nn.Module):
    """``apply_edges(copy_u)``, an edge weighting, then ``copy_e`` + ``sum``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(FEAT, 4)

    def forward(self, g, inputs):
        with g.local_scope():
            g.srcdata["h"] = self.lin(inputs["feat"])
            g.apply_edges(fn.copy_u("h", "e"))
            g.edata["e"] = g.edata["e"] * inputs["w"].unsqueeze(1)
            g.update_all(fn.copy_e("e", "m"), fn.sum("m", "out"))
            return g.dstdata["out"]


class UdfMin(nn.Module):
    """A Python message function (``edges.src`` minus ``edges.dst``) under ``min``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(FEAT, 4)

    def forward(self, g, inputs):
        with g.local_scope():
            g.ndata["h"] = self.lin(inputs["feat"])
            g.update_all(lambda e: {"m": e.src["h"] - 0.5 * e.dst["h"]}, fn.min("m", "o"))
            return g.ndata["o"]


class TwoLayerBatchNorm(nn.Module):
    """SAGEConv -> batch norm -> ReLU -> GraphConv; batch norm is global when distributed."""

    def __init__(self, distributed: bool):
        super().__init__()
        self.conv1 = dglnn.SAGEConv(FEAT, 8, "mean")
        self.bn = (sarlite.DistributedBatchNorm1d if distributed else nn.BatchNorm1d)(8)
        self.conv2 = dglnn.GraphConv(8, 4, allow_zero_in_degree=True)

    def forward(self, g, inputs):
        return self.conv2(g, torch.relu(self.bn(self.conv1(g, inputs["feat"]))))


class Multi(nn.Module):
    """A layer called as ``layer(g, *args(inputs))``; tuple outputs are concatenated
    (node-shaped ones only)."""

    def __init__(self, layer: nn.Module, args):
        super().__init__()
        self.layer, self.args = layer, args

    def forward(self, g, inputs):
        out = self.layer(g, *self.args(inputs))
        outs = out if isinstance(out, tuple) else (out,)
        rows = [o for o in outs if o.shape[0] == outs[0].shape[0]]
        return torch.cat([o.reshape(o.shape[0], -1) for o in rows], 1)


class ClosureMessage(nn.Module):
    """A message function closing over an ``nn.Linear``, with no declaration at all."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(FEAT, 1)

    def forward(self, g, inputs):
        with g.local_scope():
            g.srcdata["h"] = inputs["feat"]
            g.update_all(lambda e: {"m": e.src["h"] * torch.sigmoid(self.gate(e.src["h"]))},
                         fn.sum("m", "o"))
            return g.dstdata["o"]


class TutorialGCN(nn.Module):
    """DGL tutorial style: hand-written ``update_all`` inside ``local_scope``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(FEAT * 2, 4)

    def forward(self, g, inputs):
        with g.local_scope():
            g.ndata["h"] = inputs["feat"]
            g.update_all(fn.copy_u("h", "m"), fn.mean("m", "h_N"))
            return self.lin(torch.cat([inputs["feat"], g.ndata["h_N"]], 1))


class TutorialGAT(nn.Module):
    """DGL tutorial style: a hand-written GAT calling ``edge_softmax`` and ``dgl.ops``."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(FEAT, 4, bias=False)
        self.attn = nn.Linear(8, 1, bias=False)

    def edge_attention(self, edges):
        z2 = torch.cat([edges.src["z"], edges.dst["z"]], dim=1)
        return {"e": torch.nn.functional.leaky_relu(self.attn(z2))}

    def forward(self, g, inputs):
        with g.local_scope():
            g.ndata["z"] = self.fc(inputs["feat"])
            g.apply_edges(self.edge_attention)
            alpha = dgl_edge_softmax(g, g.edata["e"])
            return dgl.ops.u_mul_e_sum(g, g.ndata["z"], alpha)


class OpsCalls(nn.Module):
    """A user model calling ``dgl.ops`` kernels and ``dgl.nn.functional.edge_softmax``
    directly (``max`` leaves ``-inf`` at nodes without in-edges in ``dgl.ops``)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(FEAT, 4)

    def forward(self, g, inputs):
        h = self.lin(inputs["feat"])
        alpha = dgl.nn.functional.edge_softmax(g, dgl.ops.u_dot_v(g, h, h))
        top = dgl.ops.gspmm(g, "mul", "max", h, inputs["w"].unsqueeze(1))
        return torch.cat([dgl.ops.u_mul_e_sum(g, h, alpha), dgl.ops.copy_u_mean(g, h),
                          torch.where(torch.isinf(top), torch.zeros_like(top), top),
                          dgl.ops.copy_e_sum(g, dgl.ops.u_sub_v(g, h, h))], 1)


class Pooled(nn.Module):
    """Graph-level readouts (sum, mean, attention, Set2Set) broadcast back to the nodes."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(FEAT, 4)
        self.attention = dglnn.GlobalAttentionPooling(nn.Linear(4, 1))
        self.set2set = dglnn.Set2Set(4, n_iters=2, n_layers=1)

    def forward(self, g, inputs):
        h = self.lin(inputs["feat"])
        pooled = torch.cat([dglnn.SumPooling()(g, h) * 0.01, dglnn.AvgPooling()(g, h),
                            self.attention(g, h), self.set2set(g, h)], 1)
        return torch.cat([h, dgl.broadcast_nodes(g, pooled)], 1)


class NormalisedGraphConv(nn.Module):
    """``EdgeWeightNorm`` feeding ``GraphConv(norm="none")``, as DGL's docs show."""

    def __init__(self, norm: str):
        super().__init__()
        self.norm = dglnn.EdgeWeightNorm(norm)
        self.conv = dglnn.GraphConv(FEAT, 5, norm="none", allow_zero_in_degree=True)

    def forward(self, g, inputs):
        return self.conv(g, inputs["feat"], edge_weight=self.norm(g, inputs["w"]))


class ProjectedAPPNP(nn.Module):
    """A linear projection, then APPNP propagation (which has no parameters)."""

    def __init__(self, edge_weight: bool = False):
        super().__init__()
        self.lin = nn.Linear(FEAT, 5)
        self.prop = dglnn.APPNPConv(k=3, alpha=0.1)
        self.edge_weight = edge_weight

    def forward(self, g, inputs):
        kwargs = {"edge_weight": inputs["w"]} if self.edge_weight else {}
        return self.prop(g, self.lin(inputs["feat"]), **kwargs)


class HGT(nn.Module):
    """HGTConv on the homogeneous graph with one node type and 3 edge types."""

    def __init__(self):
        super().__init__()
        self.conv = dglnn.HGTConv(FEAT, 2, 2, num_ntypes=1, num_etypes=3, dropout=0.0)

    def forward(self, g, inputs):
        ntype = torch.zeros(inputs["feat"].shape[0], dtype=torch.int64)
        return self.conv(g, inputs["feat"], ntype, inputs["etype"])


def _layer(make, *args, **kwargs):
    return lambda distributed: Layer(make(), *args, **kwargs)


def _multi(make, args):
    return lambda distributed: Multi(make(), args)


def _pna_refusal(mode, world_size):
    """Sequential modes cannot fold PNA's Python reducer; one-shot cannot give PNA's
    graph-size normalisation rows for a partition."""
    return FOLD if mode != "one-shot" else ("PNAConv is not supported on more" if
                                            world_size > 1 else None)


def _udf_reducer(mode, world_size):
    """A Python reducer: sequential modes refuse it, one-shot runs it."""
    return FOLD if mode != "one-shot" else None


Z = {"allow_zero_in_degree": True}
FOLD = "cannot be folded"
EXACT = None
ETYPE = lambda i: (i["feat"], i["etype"])      # noqa: E731
EDGE = lambda i: (i["feat"], i["ef"])          # noqa: E731

# name -> (builder(distributed), refusal(mode, world_size) -> regex, or EXACT)
CASES = {
    "GraphConv-both": (_layer(lambda: dglnn.GraphConv(FEAT, 5, norm="both", **Z)), EXACT),
    "GraphConv-right": (_layer(lambda: dglnn.GraphConv(FEAT, 8, norm="right", **Z)), EXACT),
    "GraphConv-none-edge_weight": (_layer(lambda: dglnn.GraphConv(FEAT, 5, norm="none", **Z),
                                          edge_weight=True), EXACT),
    "GraphConv-both-edge_weight": (_layer(lambda: dglnn.GraphConv(FEAT, 5, norm="both", **Z),
                                          edge_weight=True), EXACT),
    "EdgeWeightNorm-right": (lambda d: NormalisedGraphConv("right"), EXACT),
    "EdgeWeightNorm-both": (lambda d: NormalisedGraphConv("both"), EXACT),
    "SAGEConv-mean": (_layer(lambda: dglnn.SAGEConv(FEAT, 5, "mean")), EXACT),
    "SAGEConv-gcn": (_layer(lambda: dglnn.SAGEConv(FEAT, 5, "gcn")), EXACT),
    "SAGEConv-pool": (_layer(lambda: dglnn.SAGEConv(FEAT, 5, "pool")), EXACT),
    "SAGEConv-mean-edge_weight": (_layer(lambda: dglnn.SAGEConv(FEAT, 5, "mean"),
                                         edge_weight=True), EXACT),
    "SAGEConv-lstm": (_layer(lambda: dglnn.SAGEConv(FEAT, 3, "lstm")), _udf_reducer),
    "GATConv-3heads-residual": (_layer(lambda: dglnn.GATConv(FEAT, 4, num_heads=3,
                                                             residual=True, **Z)), EXACT),
    "GATConv-edge_weight": (_layer(lambda: dglnn.GATConv(FEAT, 4, num_heads=2, **Z),
                                   edge_weight=True), EXACT),
    "GATv2Conv": (_layer(lambda: dglnn.GATv2Conv(FEAT, 4, num_heads=2, **Z)), EXACT),
    "EdgeGATConv": (_multi(lambda: dglnn.EdgeGATConv(FEAT, EF, 4, num_heads=2, **Z), EDGE),
                    EXACT),
    "GINConv-sum": (_layer(lambda: dglnn.GINConv(nn.Linear(FEAT, 5), "sum")), EXACT),
    "GINConv-mean-edge_weight": (_layer(lambda: dglnn.GINConv(nn.Linear(FEAT, 5), "mean"),
                                        edge_weight=True), EXACT),
    "GINEConv": (_multi(lambda: dglnn.GINEConv(nn.Linear(FEAT, 5)),
                        lambda i: (i["feat"], i["ef"].repeat(1, 2))), EXACT),
    "SGConv-k2": (_layer(lambda: dglnn.SGConv(FEAT, 5, k=2, **Z)), EXACT),
    "SGConv-edge_weight": (_layer(lambda: dglnn.SGConv(FEAT, 5, k=2, **Z),
                                  edge_weight=True), EXACT),
    "APPNPConv": (lambda d: ProjectedAPPNP(), EXACT),
    "APPNPConv-edge_weight": (lambda d: ProjectedAPPNP(edge_weight=True), EXACT),
    "TAGConv": (_layer(lambda: dglnn.TAGConv(FEAT, 5, k=2)), EXACT),
    "TAGConv-edge_weight": (_layer(lambda: dglnn.TAGConv(FEAT, 5, k=2), edge_weight=True),
                            EXACT),
    "DotGatConv": (_layer(lambda: dglnn.DotGatConv(FEAT, 4, num_heads=2, **Z)), EXACT),
    "AGNNConv": (_layer(lambda: dglnn.AGNNConv(learn_beta=True, **Z)), EXACT),
    "EdgeConv": (_layer(lambda: dglnn.EdgeConv(FEAT, 5, **Z)), EXACT),
    "RelGraphConv-basis": (_multi(lambda: dglnn.RelGraphConv(FEAT, 5, 3, "basis", 2),
                                  ETYPE), EXACT),
    "RelGraphConv-bdd": (_multi(lambda: dglnn.RelGraphConv(FEAT, FEAT, 3, "bdd", 2), ETYPE),
                         EXACT),
    "RelGraphConv-none": (_multi(lambda: dglnn.RelGraphConv(FEAT, 5, 3), ETYPE), EXACT),
    "GatedGraphConv-1etype": (_multi(lambda: dglnn.GatedGraphConv(FEAT, FEAT, 2, 1),
                                     lambda i: (i["feat"],)), EXACT),
    "GatedGraphConv-3etypes": (_multi(lambda: dglnn.GatedGraphConv(FEAT, FEAT, 2, 3), ETYPE),
                               lambda m, n: "subset of edges"),
    "TWIRLSConv": (_multi(lambda: dglnn.TWIRLSConv(FEAT, 4, 5, prop_step=2),
                          lambda i: (i["feat"],)), lambda m, n: "TWIRLSConv"),
    "GatedGCNConv-no-batch_norm": (_multi(lambda: dglnn.GatedGCNConv(FEAT, EF, FEAT,
                                                                     batch_norm=False),
                                          EDGE), EXACT),
    "GMMConv-sum": (_multi(lambda: dglnn.GMMConv(FEAT, 4, EF, 2, "sum", **Z), EDGE), EXACT),
    "GMMConv-max": (_multi(lambda: dglnn.GMMConv(FEAT, 4, EF, 2, "max", **Z), EDGE), EXACT),
    "ChebConv-lambda_max": (_multi(lambda: dglnn.ChebConv(FEAT, 4, 3),
                                   lambda i: (i["feat"], [2.0])), EXACT),
    "NNConv-sum": (_multi(lambda: dglnn.NNConv(FEAT, 4, nn.Linear(EF, FEAT * 4), "sum"),
                          EDGE), EXACT),
    "NNConv-mean": (_multi(lambda: dglnn.NNConv(FEAT, 4, nn.Linear(EF, FEAT * 4), "mean"),
                           EDGE), EXACT),
    "AtomicConv": (_multi(lambda: dglnn.AtomicConv(torch.tensor([1.0, 2.0]),
                                                   torch.tensor([0.5, 1.0]),
                                                   torch.tensor([1.0, 1.0])),
                          lambda i: (i["feat"][:, :1], i["w"].unsqueeze(1))), _udf_reducer),
    "CFConv": (_multi(lambda: dglnn.CFConv(FEAT, EF, 5, 4), EDGE), EXACT),
    "GCN2Conv": (_multi(lambda: dglnn.GCN2Conv(FEAT, 1, alpha=0.1, lambda_=1, **Z),
                        lambda i: (i["feat"], i["feat"] * 0.5)), EXACT),
    "GCN2Conv-edge_weight": (_multi(lambda: dglnn.GCN2Conv(FEAT, 1, alpha=0.1, lambda_=1,
                                                          **Z),
                                    lambda i: (i["feat"], i["feat"] * 0.5, i["w"])), EXACT),
    "HGTConv": (lambda d: HGT(), EXACT),
    "EGNNConv": (_multi(lambda: dglnn.EGNNConv(FEAT, 5, 4, EF),
                        lambda i: (i["feat"], i["feat"][:, :3], i["ef"])), EXACT),
    "PNAConv": (_multi(lambda: dglnn.PNAConv(FEAT, FEAT, ["mean", "max", "std"],
                                             ["identity", "amplification"], 2.5,
                                             edge_feat_size=EF), EDGE), _pna_refusal),
    "custom-message-parameters": (lambda d: GatedMessage(), EXACT),
    "custom-closure-linear": (lambda d: ClosureMessage(), EXACT),
    "custom-apply_edges-copy_u": (lambda d: CopyEdgesThenSum(), EXACT),
    "custom-udf-min": (lambda d: UdfMin(), EXACT),
    "tutorial-gcn-local_scope": (lambda d: TutorialGCN(), EXACT),
    "tutorial-gat-edge_softmax": (lambda d: TutorialGAT(), EXACT),
    "dgl.ops-calls": (lambda d: OpsCalls(), EXACT),
    "pooling-readouts": (lambda d: Pooled(), EXACT),
    "MaxPooling": (_multi(lambda: dglnn.MaxPooling(), lambda i: (i["feat"],)),
                   lambda m, n: "op='max'"),
    "LabelPropagation": (_multi(lambda: dglnn.LabelPropagation(3, 0.5),
                                lambda i: (i["bfeat"],)), EXACT),
    "two-layer-batchnorm": (lambda d: TwoLayerBatchNorm(d), EXACT),
    # binary features: exact ties under max
    "GINConv-max-ties": (_layer(lambda: dglnn.GINConv(nn.Linear(BFEAT, 5), "max"), "bfeat"),
                         EXACT),
    "SAGEConv-pool-ties": (_layer(lambda: dglnn.SAGEConv(BFEAT, 5, "pool"), "bfeat"), EXACT),
}
TIE_CASES = {"GINConv-max-ties", "SAGEConv-pool-ties"}
INPUTS = ("feat", "bfeat", "w", "ef")
VARIANTS = ("backward", "frozen", "autograd.grad")


def build(name: str, distributed: bool) -> nn.Module:
    """A fresh module for case ``name`` (parameters are then loaded from the reference)."""
    return CASES[name][0](distributed)


# the engine configurations the matrix runs: a mode, or a mode with tiny chunks (two rows
# of a remote shard fetched, used and freed per step), each on DGL's kernels and, named
# with "-torch", on sarlite's torch kernels (kernels="torch")
_ON_DGL = {"sar": {"mode": "sar"}, "sa": {"mode": "sa"}, "one-shot": {"mode": "one-shot"},
           "sar-chunk2": {"mode": "sar", "max_rows_per_step": 2}}
ENGINES = {**_ON_DGL, **{f"{name}-torch": {**engine, "kernels": "torch"}
                         for name, engine in _ON_DGL.items()}}


def refusal(case: str, engine: str, world_size: int) -> str | None:
    """The error a case must raise under ``engine`` (see :data:`ENGINES`) on
    ``world_size`` workers (None: exact)."""
    rule = CASES[case][1]
    return rule(ENGINES[engine]["mode"], world_size) if rule is not None else None


def run_case(model: nn.Module, g, inputs: dict, probe: torch.Tensor, variant: str) -> dict:
    """Forward, a probe loss ``sum(out * probe)`` and its gradients, three ways.

    ``backward``: float inputs require a gradient, ``loss.backward()``. ``frozen``: no input
    requires a gradient (a first layer on raw features), ``loss.backward()``.
    ``autograd.grad``: ``torch.autograd.grad`` for inputs and parameters; no ``.grad`` may
    be written. Returns the output, input gradients and (local) parameter gradients.
    """
    wants = variant != "frozen"
    leaves = {k: v.detach().clone().requires_grad_(wants and v.is_floating_point())
              for k, v in inputs.items()}
    out = model(g, leaves)
    loss = (out * probe[:, :out.shape[1]]).sum()
    names = [k for k in INPUTS if leaves[k].requires_grad]
    params = dict(model.named_parameters())
    if not loss.requires_grad:                 # nothing to differentiate (no parameters)
        input_grads, param_grads = {}, {}
    elif variant == "autograd.grad":
        grads = torch.autograd.grad(loss, [leaves[k] for k in names] + list(params.values()),
                                    allow_unused=True)
        written = [n for n, p in params.items() if p.grad is not None]
        assert not written, f"autograd.grad wrote .grad of {written}"
        input_grads = dict(zip(names, grads[:len(names)]))
        param_grads = dict(zip(params, grads[len(names):]))
    else:
        loss.backward()
        input_grads = {k: leaves[k].grad for k in names}
        param_grads = {n: p.grad for n, p in params.items()}
    return {"out": out.detach(), **{f"grad_{k}": input_grads.get(k) for k in INPUTS},
            "params": {n: g_ for n, g_ in param_grads.items() if g_ is not None}}


def summed_params(model: nn.Module, grads: dict) -> dict:
    """``grads`` (by parameter name) summed over ranks (collective)."""
    for name, p in model.named_parameters():
        p.grad = grads.get(name)
    sarlite.all_reduce_gradients(model)
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _agree(status: str) -> bool:
    """Whether every rank ended the case the same way (all ok, or all raised)."""
    import torch.distributed as dist
    statuses = [None] * dist.get_world_size()
    dist.all_gather_object(statuses, status)
    return len(set(statuses)) == 1


@contextmanager
def dgl_graphs_refused(refused: bool):
    """With ``refused``, building a DGL graph fails: a run on the torch kernels must not
    need one (the DGL that pip installs could not hold it on a GPU)."""
    if not refused:
        yield
        return
    error = AssertionError("a DGL graph was built on the torch kernels")
    with mock.patch("dgl.create_block", side_effect=error), \
            mock.patch("dgl.graph", side_effect=error):
        yield


def worker(rank: int, world_size: int, part_config: str, states: dict, modes) -> dict:
    """Run every case in every mode and variant on this worker's partition.

    A case that raises is recorded with its message (expected refusals raise on every
    rank alike). If the ranks end a case differently their collectives no longer match,
    so the remaining cases are not run and are reported as such.
    """
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(part_config)
    inputs = {k: data.node_features[k] for k in ("feat", "bfeat")}
    inputs.update({k: data.edge_features[k] for k in ("w", "ef", "etype")})
    results = {"eids": torch.cat([s.eids for s in data.shards])}
    stopped = None
    for mode in modes:
        g = sarlite.construct_full_graph(data, **ENGINES[mode])
        for name, state in states.items():
            for variant in VARIANTS:
                key = (mode, name, variant)
                if stopped is not None:
                    results[key] = {"error": f"not run: ranks disagreed on {stopped}"}
                    continue
                model = build(name, distributed=True)
                model.load_state_dict(state)
                try:
                    with dgl_graphs_refused(ENGINES[mode].get("kernels") == "torch"):
                        result = run_case(model, g, inputs, data.node_features["probe"],
                                          variant)
                    result["params"] = summed_params(model, result["params"])
                except Exception as err:          # noqa: BLE001 - recorded, compared later
                    result = {"error": f"{type(err).__name__}: {err}"}
                results[key] = result
                if not _agree("error" if "error" in result else "ok"):
                    stopped = key
    return results
