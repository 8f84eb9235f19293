"""Node classifiers built only from ``dgl.nn`` layers and ``DistributedBatchNorm1d``.

Each model is ``forward(graphs, x) -> (num_out, num_classes)`` where ``graphs`` is one
graph for every layer (the same full graph repeated, or the message-flow graphs of
``construct_mfgs``), so the same module runs on a ``DGLGraph``, a ``GraphShardManager``,
a ``DistributedBlock`` or MFGs.
"""
from __future__ import annotations

from pathlib import Path

import dgl.nn as dglnn
import torch
import torch.nn.functional as F
from torch import nn

from ..core import DistributedBatchNorm1d
from ..kv import DistEmbedding, SparseAdam, load_dist_tensors, save_dist_tensors
from .config import ModelConfig


def _conv(kind: str, in_dim: int, out_dim: int, heads: int, last: bool) -> nn.Module:
    zero_ok = {"allow_zero_in_degree": True}
    if kind == "gcn":
        return dglnn.GraphConv(in_dim, out_dim, **zero_ok)
    if kind == "sage":
        return dglnn.SAGEConv(in_dim, out_dim, "mean")
    if kind == "gat":
        return dglnn.GATConv(in_dim, out_dim, num_heads=1 if last else heads, **zero_ok)
    if kind == "gin":
        return dglnn.GINConv(nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(),
                                           nn.Linear(out_dim, out_dim)), "sum")
    if kind == "mlp":
        return nn.Linear(in_dim, out_dim)
    raise ValueError(f"unknown model type {kind!r}")


class LayeredGNN(nn.Module):
    """``layers`` message-passing layers with ReLU, dropout, optional batch norm and
    residual connections between them (GCN, GraphSAGE, GAT, GIN, or an MLP)."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        widths = [in_dim] + [cfg.hidden * (cfg.heads if cfg.type == "gat" else 1)] * \
            (cfg.layers - 1) + [num_classes]
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(cfg.layers):
            last = i == cfg.layers - 1
            out = widths[i + 1] if cfg.type != "gat" or last else cfg.hidden
            self.convs.append(_conv(cfg.type, widths[i], out, cfg.heads, last))
            if not last and cfg.batch_norm:
                self.norms.append(DistributedBatchNorm1d(widths[i + 1]))

    def forward(self, graphs, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, conv in enumerate(self.convs):
            last = i == len(self.convs) - 1
            h_in = F.dropout(h, self.cfg.dropout, self.training)
            h_new = conv(h_in) if self.cfg.type == "mlp" else conv(graphs[i], h_in)
            h_new = h_new.flatten(1)
            if not last:
                if self.cfg.batch_norm:
                    h_new = self.norms[i](h_new)
                h_new = F.relu(h_new)
                if self.cfg.residual and h_new.shape[1] == h.shape[1]:
                    h_new = h_new + h[:h_new.shape[0]]
            h = h_new
        return h


class Propagated(nn.Module):
    """SGC (``k`` hops of normalised propagation, then a linear layer) or APPNP (an MLP,
    then ``k`` steps of personalised-PageRank propagation)."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        if cfg.type == "sgc":
            self.net = dglnn.SGConv(in_dim, num_classes, k=cfg.layers,
                                    allow_zero_in_degree=True)
        else:
            self.mlp = nn.Sequential(nn.Linear(in_dim, cfg.hidden), nn.ReLU(),
                                     nn.Dropout(cfg.dropout),
                                     nn.Linear(cfg.hidden, num_classes))
            self.net = dglnn.APPNPConv(k=cfg.layers, alpha=0.1)

    def forward(self, graphs, x: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, self.cfg.dropout, self.training)
        if self.cfg.type == "sgc":
            return self.net(graphs[0], x)
        return self.net(graphs[0], self.mlp(x))


def build_model(cfg: ModelConfig, in_dim: int, num_classes: int) -> nn.Module:
    """The classifier ``cfg`` describes. ``graphs_needed(model)`` graphs feed its forward."""
    if cfg.type in ("sgc", "appnp"):
        return Propagated(cfg, in_dim, num_classes)
    return LayeredGNN(cfg, in_dim, num_classes)


def graphs_needed(cfg: ModelConfig) -> int:
    """How many message-passing graphs ``forward`` reads (one per layer, or one)."""
    return 1 if cfg.type in ("sgc", "appnp") else cfg.layers


class RelGraphConv(nn.Module):
    r"""One R-GCN layer on a heterogeneous graph (Schlichtkrull et al.):

    .. math::
        h_v' = W_0 h_v + b + \sum_{r} \frac{1}{|N_r(v)|} \sum_{u \in N_r(v)} W_r h_u

    built from ``dgl.nn.HeteroGraphConv`` with one ``GraphConv(norm="right")`` per
    relation ``r``, whose weight :math:`W_r` is passed in through ``mod_kwargs``; the
    self-loop :math:`W_0` and bias :math:`b` are shared by the node types. Input and
    output are ``{ntype: (num_nodes, dim)}`` (on a message-flow graph: source rows in,
    destination rows out); types without in-edges get the self-loop term only.
    """

    def __init__(self, in_dim: int, out_dim: int, relations: list):
        super().__init__()
        self.rels = [c[1] for c in relations]
        self.conv = dglnn.HeteroGraphConv(
            {c: dglnn.GraphConv(in_dim, out_dim, norm="right", weight=False, bias=False,
                                allow_zero_in_degree=True) for c in relations},
            aggregate="sum")
        self.weight = nn.Parameter(torch.empty(len(relations), in_dim, out_dim))
        nn.init.xavier_uniform_(self.weight)
        self.loop = nn.Linear(in_dim, out_dim)

    def forward(self, g, x: dict) -> dict:
        weights = {rel: {"weight": self.weight[i]} for i, rel in enumerate(self.rels)}
        out = self.conv(g, x, mod_kwargs=weights)
        self_loop = {t: self.loop(h[:g.num_dst_nodes(t)]) for t, h in x.items()}
        return {t: out[t] + h if t in out else h for t, h in self_loop.items()}


def _seeded_tables(totals: dict[str, int], dim: int, seed: int):
    """``(ntype, (totals[ntype], dim) table)`` in type-name order, drawn from one seeded
    generator: the initial input rows of the featureless types, whatever the
    partitioning and whichever class holds them."""
    gen = torch.Generator().manual_seed(seed)
    for ntype in sorted(totals):
        yield ntype, torch.randn(totals[ntype], dim, generator=gen) * dim ** -0.5


class OwnedEmbeddings(nn.Module):
    """Learnable input rows for the node types without features, in full-graph training:
    on every worker, the rows of the nodes it owns (so each row has one owner and gets
    its whole gradient there; these parameters are never all-reduced).

    ``forward(rows=None)`` gives ``{ntype: owned rows}``, or with ``rows`` (``{ntype:
    local ids}``, the input nodes of message-flow graphs) those rows only.
    """

    def __init__(self, owned: dict[str, tuple[int, int]], totals: dict[str, int], dim: int,
                 seed: int):
        super().__init__()
        self.rows = nn.ParameterDict()
        for ntype, table in _seeded_tables(totals, dim, seed):
            self.rows[ntype] = nn.Parameter(table[slice(*owned[ntype])].clone())

    def forward(self, rows: dict | None = None) -> dict:
        return {t: v if rows is None else v[rows[t]] for t, v in self.rows.items()}


class SampledEmbeddings:
    """Learnable input rows for the node types without features, in sampled training:
    a :class:`~sarlite.kv.DistEmbedding` per type over the graph's KV store (initial
    rows as :class:`OwnedEmbeddings`'), trained by :class:`~sarlite.kv.SparseAdam`.

    ``embeddings(rows)`` pulls the rows of the global ids ``{ntype: ids}`` (a
    collective: every rank calls it for every batch) and records them for :meth:`step`;
    ``embeddings()`` gives this rank's owned rows (the full-graph evaluation's inputs,
    without gradient). :meth:`step` sends the recorded gradients to the rows' owners and
    updates them (a collective after every backward pass).
    """

    def __init__(self, graph, ntypes: list[str], dim: int, seed: int, lr: float):
        totals = {t: graph.num_nodes(t) for t in ntypes}
        self.tables = {ntype: DistEmbedding(
            totals[ntype], dim, f"rgcn_input_{ntype}",
            init_func=lambda shape, dtype, ids, table=table: table[ids],
            part_policy=graph.get_node_partition_policy(ntype))
            for ntype, table in _seeded_tables(totals, dim, seed)}
        self.optimizer = SparseAdam(list(self.tables.values()), lr=lr)

    def __call__(self, rows: dict | None = None) -> dict:
        if rows is None:
            return {t: e.weight.local_partition for t, e in self.tables.items()}
        return {t: e(rows[t]) for t, e in self.tables.items()}

    def step(self) -> None:
        self.optimizer.step()

    def save(self, path: Path) -> None:
        """Save the rows and the optimizer's state under the directory ``path``, in
        global id order. Collective."""
        save_dist_tensors(path / "rows", {t: e.weight for t, e in self.tables.items()})
        self.optimizer.save(path / "optimizer")

    def load(self, path: Path) -> None:
        """Restore what :meth:`save` wrote. Collective; ``FileNotFoundError`` /
        ``ValueError`` (on every rank) when it is missing or does not fit."""
        load_dist_tensors(path / "rows", {t: e.weight for t, e in self.tables.items()})
        self.optimizer.load(path / "optimizer")


class HeteroClassifier(nn.Module):
    """Classifies the nodes of one ``target`` type of a heterogeneous graph: R-GCN layers
    over every relation (``rgcn``), or an MLP on the target's features alone (``mlp``).

    ``forward(graphs, x, rows=None)`` takes ``{ntype: features}`` of the types that have
    features (and, for message-flow graphs or sampled blocks, ``rows``: the input nodes
    ``{ntype: ids}`` whose embedding rows the first graph reads) and returns ``(target
    nodes of the last graph, num_classes)``. :attr:`replicated` is the part that is the
    same on every worker (its gradients are all-reduced); the embeddings of featureless
    types (``embeddings``) are this worker's own rows or, in sampled training, rows of a
    :class:`SampledEmbeddings`.
    """

    def __init__(self, cfg: ModelConfig, in_dims: dict[str, int], num_classes: int,
                 relations: list, target: str,
                 embeddings: OwnedEmbeddings | SampledEmbeddings | None):
        super().__init__()
        self.cfg, self.target = cfg, target
        self.embeddings = embeddings
        self.replicated = nn.ModuleDict()
        if cfg.type == "mlp":
            self.replicated["mlp"] = nn.Sequential(
                nn.Linear(in_dims[target], cfg.hidden), nn.ReLU(), nn.Dropout(cfg.dropout),
                nn.Linear(cfg.hidden, num_classes))
            return
        self.replicated["inputs"] = nn.ModuleDict(
            {t: nn.Linear(dim, cfg.hidden) for t, dim in in_dims.items()})
        widths = [cfg.hidden] * cfg.layers + [num_classes]
        self.replicated["layers"] = nn.ModuleList(
            [RelGraphConv(widths[i], widths[i + 1], relations) for i in range(cfg.layers)])
        ntypes = sorted({c[0] for c in relations} | {c[2] for c in relations})
        self.replicated["norms"] = nn.ModuleList(
            [DistributedBatchNorm1d(cfg.hidden, ntypes=ntypes) for _ in range(cfg.layers - 1)]
            if cfg.batch_norm else [])

    def forward(self, graphs, x: dict, rows: dict | None = None) -> torch.Tensor:
        parts = self.replicated
        if self.cfg.type == "mlp":     # the target rows of the last graph come first
            own = x[self.target][:graphs[-1].num_dst_nodes(self.target)]
            return parts["mlp"](F.dropout(own, self.cfg.dropout, self.training))
        h = {t: parts["inputs"][t](v) for t, v in x.items()}
        if self.embeddings is not None:
            h.update(self.embeddings(rows))
        for i, layer in enumerate(parts["layers"]):
            h = layer(graphs[i], {t: F.dropout(v, self.cfg.dropout, self.training)
                                  for t, v in h.items()})
            if i < len(parts["layers"]) - 1:
                if self.cfg.batch_norm:
                    h = parts["norms"][i](h)
                h = {t: F.relu(v) for t, v in h.items()}
        return h[self.target]


def replicated(model: nn.Module) -> nn.Module:
    """The part of ``model`` that every worker holds alike (gradients all-reduced,
    parameters synchronised): ``model.replicated`` when it has one, else the model."""
    return getattr(model, "replicated", model)
