"""The layers of the exactness matrix, each wrapped as ``forward(g, inputs) -> (n, d)``.

``inputs`` holds ``feat`` (float node features), ``bfeat`` (binary node features: exact
ties under max), ``w`` (positive scalar edge weights) and ``ef`` (edge feature vectors).
The same wrapper runs on the full DGL graph (reference) and on a distributed graph.
"""
from __future__ import annotations

import dgl.function as fn
import dgl.nn as dglnn
import torch
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


def build(name: str, distributed: bool) -> nn.Module:
    """A fresh module for case ``name`` (parameters are then loaded from the reference)."""
    zero_ok = {"allow_zero_in_degree": True}
    cases = {
        "GraphConv-both": lambda: Layer(dglnn.GraphConv(FEAT, 5, norm="both", **zero_ok)),
        "GraphConv-right": lambda: Layer(dglnn.GraphConv(FEAT, 8, norm="right", **zero_ok)),
        "GraphConv-none-edge_weight": lambda: Layer(
            dglnn.GraphConv(FEAT, 5, norm="none", **zero_ok), edge_weight=True),
        "SAGEConv-mean": lambda: Layer(dglnn.SAGEConv(FEAT, 5, "mean")),
        "SAGEConv-gcn": lambda: Layer(dglnn.SAGEConv(FEAT, 5, "gcn")),
        "SAGEConv-pool": lambda: Layer(dglnn.SAGEConv(FEAT, 5, "pool")),
        "GATConv-3heads-residual": lambda: Layer(
            dglnn.GATConv(FEAT, 4, num_heads=3, residual=True, **zero_ok)),
        "GATv2Conv": lambda: Layer(dglnn.GATv2Conv(FEAT, 4, num_heads=2, **zero_ok)),
        "GINConv-sum": lambda: Layer(dglnn.GINConv(nn.Linear(FEAT, 5), "sum")),
        "SGConv-k2": lambda: Layer(dglnn.SGConv(FEAT, 5, k=2, **zero_ok)),
        "APPNPConv": lambda: nn.Sequential(),      # replaced below (needs a projection)
        "TAGConv": lambda: Layer(dglnn.TAGConv(FEAT, 5, k=2)),
        "DotGatConv": lambda: Layer(dglnn.DotGatConv(FEAT, 4, num_heads=2, **zero_ok)),
        "EdgeConv": lambda: Layer(dglnn.EdgeConv(FEAT, 5, **zero_ok)),
        "custom-message-parameters": GatedMessage,
        "custom-apply_edges-copy_u": CopyEdgesThenSum,
        "custom-udf-min": UdfMin,
        "two-layer-batchnorm": lambda: TwoLayerBatchNorm(distributed),
        # binary features: exact ties under max
        "GINConv-max-ties": lambda: Layer(dglnn.GINConv(nn.Linear(BFEAT, 5), "max"), "bfeat"),
        "SAGEConv-pool-ties": lambda: Layer(dglnn.SAGEConv(BFEAT, 5, "pool"), "bfeat"),
    }
    if name == "APPNPConv":
        return ProjectedAPPNP()
    return cases[name]()


class ProjectedAPPNP(nn.Module):
    """A linear projection, then APPNP propagation (which has no parameters)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(FEAT, 5)
        self.prop = dglnn.APPNPConv(k=3, alpha=0.1)

    def forward(self, g, inputs):
        return self.prop(g, self.lin(inputs["feat"]))


CASES = ["GraphConv-both", "GraphConv-right", "GraphConv-none-edge_weight", "SAGEConv-mean",
         "SAGEConv-gcn", "SAGEConv-pool", "GATConv-3heads-residual", "GATv2Conv",
         "GINConv-sum", "SGConv-k2", "APPNPConv", "TAGConv", "DotGatConv", "EdgeConv",
         "custom-message-parameters", "custom-apply_edges-copy_u", "custom-udf-min",
         "two-layer-batchnorm", "GINConv-max-ties", "SAGEConv-pool-ties"]
TIE_CASES = {"GINConv-max-ties", "SAGEConv-pool-ties"}
INPUTS = ("feat", "bfeat", "w", "ef")


def run_case(model: nn.Module, g, inputs: dict, probe: torch.Tensor) -> dict:
    """Forward, a probe loss ``sum(out * probe)``, backward; outputs and gradients."""
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    out = model(g, leaves)
    (out * probe[:, :out.shape[1]]).sum().backward()
    return {"out": out.detach(), **{f"grad_{k}": v.grad for k, v in leaves.items()}}


def param_grads(model: nn.Module) -> dict:
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def worker(rank: int, world_size: int, part_config: str, states: dict, modes) -> dict:
    """Run every case in every mode on this worker's partition (the spawn target)."""
    data = sarlite.load_partition_data(part_config)
    inputs = {k: data.node_features[k] for k in ("feat", "bfeat")}
    inputs.update({k: data.edge_features[k] for k in ("w", "ef")})
    results = {"eids": torch.cat([s.eids for s in data.shards])}
    for mode in modes:
        g = sarlite.construct_full_graph(data, mode=mode)
        for name, state in states.items():
            model = build(name, distributed=True)
            model.load_state_dict(state)
            result = run_case(model, g, inputs, data.node_features["probe"])
            sarlite.all_reduce_gradients(model)
            result["params"] = param_grads(model)
            results[(mode, name)] = result
    return results
