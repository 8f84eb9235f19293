"""Heterogeneous layer cases for the exactness tests: a graph, models and a worker.

The graph is shaped like ogbn-mag (``sarlite.data.mag_like_graph``, small) plus a node type
``venue`` that has no in-edges and a relation ``venue -hosts-> paper`` with a handful of
edges, so that on 3 or 4 parts some partition gets none of them. Every model is two
``HeteroGraphConv`` layers, run the same way on single-process DGL (the reference) and on
sarlite's distributed graph; outputs, input gradients and parameter gradients are compared
row by row through the partitioning's ``orig_nids``.
"""
from __future__ import annotations

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F

import sarlite
from layer_cases import dgl_graphs_refused
from sarlite.data import mag_like_graph

IN, HIDDEN, OUT = 6, 5, 3
KINDS = ("gcn", "sage", "gat", "rgcn")
VARIANTS = ("backward", "frozen", "autograd.grad")


def hetero_graph() -> dgl.DGLGraph:
    """The test graph (deterministic)."""
    base = mag_like_graph(num_papers=120, num_authors=90, num_institutions=8,
                          num_fields=15, num_classes=3, feat_dim=4, seed=3)
    data = {c: base.edges(etype=c) for c in base.canonical_etypes}
    data[("venue", "hosts", "paper")] = (torch.tensor([0, 1, 1, 2]),
                                         torch.tensor([0, 7, 50, 119]))
    counts = {t: base.num_nodes(t) for t in base.ntypes}
    counts["venue"] = 3
    return dgl.heterograph(data, num_nodes_dict=counts)


class RelGraphConv(nn.Module):
    """R-GCN layer: a weight per relation (passed to ``GraphConv`` through
    ``HeteroGraphConv``'s ``mod_kwargs``), a self-loop weight and a bias."""

    def __init__(self, in_dim: int, out_dim: int, rels: list[str]):
        super().__init__()
        self.rels = rels
        self.conv = dglnn.HeteroGraphConv(
            {rel: dglnn.GraphConv(in_dim, out_dim, norm="right", weight=False, bias=False,
                                  allow_zero_in_degree=True) for rel in rels},
            aggregate="sum")
        self.weight = nn.Parameter(torch.randn(len(rels), in_dim, out_dim) * 0.3)
        self.loop = nn.Linear(in_dim, out_dim)

    def forward(self, g, x: dict) -> dict:
        kwargs = {rel: {"weight": self.weight[i]} for i, rel in enumerate(self.rels)}
        out = self.conv(g, x, mod_kwargs=kwargs)
        return {t: h + self.loop(x[t][:g.num_dst_nodes(t)]) for t, h in out.items()}


def _layer(kind: str, in_dim: int, out_dim: int, rels: list) -> nn.Module:
    if kind == "rgcn":
        return RelGraphConv(in_dim, out_dim, [c[1] for c in rels])
    if kind == "gcn":
        make = lambda: dglnn.GraphConv(in_dim, out_dim, norm="both",  # noqa: E731
                                       allow_zero_in_degree=True)
    elif kind == "sage":
        make = lambda: dglnn.SAGEConv((in_dim, in_dim), out_dim, "mean")  # noqa: E731
    else:
        make = lambda: dglnn.GATConv((in_dim, in_dim), out_dim, num_heads=2,  # noqa: E731
                                     allow_zero_in_degree=True)
    return dglnn.HeteroGraphConv({c: make() for c in rels}, aggregate="sum")


class TwoLayers(nn.Module):
    """Two heterogeneous layers with an activation between (ReLU unless ``act`` says
    otherwise); attention heads are flattened."""

    def __init__(self, kind: str, rels: list, act=F.relu):
        super().__init__()
        self.act = act
        heads = 2 if kind == "gat" else 1
        self.first = _layer(kind, IN, HIDDEN, rels)
        self.second = _layer(kind, HIDDEN * heads, OUT, rels)

    def forward(self, g, x: dict) -> dict:
        """``g``: one graph for both layers, or a message-flow graph per layer."""
        first, second = g if isinstance(g, (list, tuple)) else (g, g)
        h = {t: self.act(v.flatten(1)) for t, v in self.first(first, x).items()}
        if isinstance(g, (list, tuple)):       # a block's outputs are its destinations
            h = {t: v[:second.num_src_nodes(t)] for t, v in h.items()}
        return {t: v.flatten(1) for t, v in self.second(second, h).items()}


def build(kind: str, seed: int = 0, act=F.relu) -> nn.Module:
    torch.manual_seed(seed)
    return TwoLayers(kind, hetero_graph().canonical_etypes, act)


def full_inputs(g) -> dict:
    gen = torch.Generator().manual_seed(1)
    return {t: torch.randn(g.num_nodes(t), IN, generator=gen) for t in g.ntypes}


def probes(g) -> dict:
    gen = torch.Generator().manual_seed(2)
    return {t: torch.randn(g.num_nodes(t), 2 * OUT, generator=gen) for t in g.ntypes}


def run(model: nn.Module, g, inputs: dict, probe: dict, variant: str) -> dict:
    """Forward, the loss ``sum(out * probe)`` and its gradients (see ``layer_cases``)."""
    wants = variant != "frozen"
    leaves = {t: v.detach().clone().requires_grad_(wants) for t, v in inputs.items()}
    out = model(g, leaves)
    loss = sum((out[t] * probe[t][:, :out[t].shape[1]]).sum() for t in out)
    params = dict(model.named_parameters())
    names = list(leaves) if wants else []
    if variant == "autograd.grad":
        grads = torch.autograd.grad(loss, [leaves[t] for t in names] + list(params.values()),
                                    allow_unused=True)
        assert all(p.grad is None for p in params.values()), "autograd.grad wrote .grad"
        input_grads = dict(zip(names, grads[:len(names)]))
        param_grads = dict(zip(params, grads[len(names):]))
    else:
        loss.backward()
        input_grads = {t: leaves[t].grad for t in names}
        param_grads = {n: p.grad for n, p in params.items()}
    return {"out": {t: v.detach() for t, v in out.items()},
            "inputs": {t: v for t, v in input_grads.items() if v is not None},
            "params": {n: v for n, v in param_grads.items() if v is not None}}


def reference() -> dict:
    """Single-process DGL on the unpartitioned graph: ``{(kind, variant): result}``."""
    g = hetero_graph()
    inputs, probe = full_inputs(g), probes(g)
    return {(kind, variant): run(build(kind), g, inputs, probe, variant)
            for kind in KINDS for variant in VARIANTS}


def this_rank(part_config: str, orig_nids: dict):
    """This rank's partition, the original ids of its owned nodes by type, and its rows of
    the inputs and the probes."""
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(part_config)
    g_full = hetero_graph()
    owned = {t: orig_nids[t][slice(*data.owned_range(t))] for t in data.ntypes}
    inputs = {t: v[owned[t]] for t, v in full_inputs(g_full).items()}
    probe = {t: v[owned[t]] for t, v in probes(g_full).items()}
    return data, owned, inputs, probe


def engine(name: str) -> dict:
    """The construction keywords of an engine named ``"sar"``, ``"one-shot"``, ... on
    DGL's kernels, or ``"sar-torch"``, ... on sarlite's torch kernels."""
    if name.endswith("-torch"):
        return {"mode": name[:-len("-torch")], "kernels": "torch"}
    return {"mode": name, "kernels": "dgl"}


def worker(rank: int, world_size: int, part_config: str, orig_nids: dict, modes) -> dict:
    """Every kind, mode and variant on this worker's partition. Parameter gradients are
    summed over the ranks; outputs and input gradients are this rank's owned rows, with
    the original ids of those rows."""
    data, owned, inputs, probe = this_rank(part_config, orig_nids)
    results = {"owned": owned}
    for mode in modes:
        g = sarlite.construct_full_graph(data, **engine(mode))
        for kind in KINDS:
            for variant in VARIANTS:
                model = build(kind)
                with dgl_graphs_refused(mode.endswith("-torch")):
                    result = run(model, g, inputs, probe, variant)
                for name, p in model.named_parameters():
                    p.grad = result["params"].get(name)
                sarlite.all_reduce_gradients(model)
                result["params"] = {n: p.grad for n, p in model.named_parameters()
                                    if p.grad is not None}
                results[(mode, kind, variant)] = result
    return results


def seeds_of(rank: int, owned: dict) -> dict:
    """The seeds rank ``rank`` asks for, as local ids: papers on rank 0, authors on rank
    1, both on rank 2, none on rank 3 (ranks may seed different types, or none)."""
    kinds = {0: ("paper",), 1: ("author",), 2: ("paper", "author")}.get(rank, ())
    return {t: torch.arange(0, len(owned[t]), 3) for t in kinds}


def mfg_worker(rank: int, world_size: int, part_config: str, orig_nids: dict,
               modes) -> dict:
    """Every kind and mode on this rank's message-flow graphs for its seeds: outputs at
    the seeds (by original id), input gradients scattered to the owned rows, summed
    parameter gradients (loss: ``sum(out * probe)`` over the seeds only)."""
    data, owned, inputs, probe = this_rank(part_config, orig_nids)
    seeds = seeds_of(rank, owned)
    results = {"seeds": {t: owned[t][ids] for t, ids in seeds.items()}, "owned": owned}
    for mode in modes:
        blocks = sarlite.construct_mfgs(data, seeds, 2, **engine(mode))
        first, last = blocks[0].input_nodes, blocks[-1].output_nodes
        for kind in KINDS:
            model = build(kind)
            x = {t: inputs[t][first[t]].requires_grad_() for t in data.ntypes}
            with dgl_graphs_refused(mode.endswith("-torch")):
                out = model(blocks, x)
                loss = sum((out[t] * probe[t][last[t]][:, :out[t].shape[1]]).sum()
                           for t in out)
                loss.backward()
            grads = {t: torch.zeros_like(inputs[t]).index_add_(0, first[t], v.grad)
                     for t, v in x.items() if v.grad is not None}
            sarlite.all_reduce_gradients(model)
            results[(mode, kind)] = {
                "out": {t: v.detach() for t, v in out.items()}, "inputs": grads,
                "params": {n: p.grad for n, p in model.named_parameters()
                           if p.grad is not None}}
    return results


def mfg_reference(seeds: dict) -> dict:
    """Single-process DGL with the loss over ``seeds`` (``{ntype: original ids}``) only."""
    g = hetero_graph()
    inputs, full_probe = full_inputs(g), probes(g)
    probe = {t: torch.zeros_like(v) for t, v in full_probe.items()}
    for t, ids in seeds.items():
        probe[t][ids] = full_probe[t][ids]
    return {kind: run(build(kind), g, inputs, probe, "backward") for kind in KINDS}
