"""Node classifiers built only from ``dgl.nn`` layers and ``DistributedBatchNorm1d``.

Each model is ``forward(graphs, x) -> (num_out, num_classes)`` where ``graphs`` is one
graph for every layer (the same full graph repeated, or the message-flow graphs of
``construct_mfgs``), so the same module runs on a ``DGLGraph``, a ``GraphShardManager``,
a ``DistributedBlock`` or MFGs.
"""
from __future__ import annotations

import dgl.nn as dglnn
import torch
import torch.nn.functional as F
from torch import nn

from ..core import DistributedBatchNorm1d
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
