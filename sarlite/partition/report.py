"""Partition report: sizes, balance, edge cut and the exact-training communication bound.

The halo that matters for exact full-graph training is the *in-halo* of a partition: the
remote source nodes of the edges it owns. In every layer each partition must receive one
row per in-halo node, so ``sum_p in_halo_p * width * 4`` bytes (fp32) per layer and
direction is a lower bound on the traffic of exact training.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

from .files import load_partition, read_part_config


def _balance(values: list[int]) -> float:
    """``max / mean`` of a per-part quantity (1.0 is perfect balance)."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


@dataclass
class PartitionReport:
    """Per-part sizes and overall quality of a partitioning.

    ``halo_nodes[p]`` counts the distinct remote sources of the edges part ``p`` owns;
    ``edge_cut`` counts the owned edges whose source is remote (each cut edge once).
    """

    graph_name: str
    num_nodes: int
    num_edges: int
    part_method: str
    owned_nodes: list[int]
    owned_edges: list[int]
    halo_nodes: list[int]
    train_nodes: list[int] | None
    edge_cut: int
    feat_width: int

    @property
    def num_parts(self) -> int:
        return len(self.owned_nodes)

    def balance(self) -> dict[str, float]:
        """``max / mean`` per part of each quantity."""
        out = {"nodes": _balance(self.owned_nodes), "edges": _balance(self.owned_edges),
               "halo": _balance(self.halo_nodes)}
        if self.train_nodes is not None:
            out["train"] = _balance(self.train_nodes)
        return out

    def comm_bytes_per_layer(self, width: int | None = None, bytes_per_value: int = 4) -> int:
        """Lower bound on bytes one exact layer of this ``width`` must move (one direction)."""
        return sum(self.halo_nodes) * (width or self.feat_width) * bytes_per_value

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(num_parts=self.num_parts, balance=self.balance(),
                   comm_bytes_per_layer=self.comm_bytes_per_layer())
        return out

    def __str__(self) -> str:
        has_train = self.train_nodes is not None
        head = f"{'part':>5} {'nodes':>10} {'edges':>12} {'halo':>10}"
        lines = [f"partition report: {self.graph_name} ({self.num_nodes} nodes, "
                 f"{self.num_edges} edges, {self.num_parts} parts, {self.part_method})",
                 head + (f" {'train':>8}" if has_train else "")]
        for p in range(self.num_parts):
            row = (f"{p:>5} {self.owned_nodes[p]:>10} {self.owned_edges[p]:>12} "
                   f"{self.halo_nodes[p]:>10}")
            lines.append(row + (f" {self.train_nodes[p]:>8}" if has_train else ""))
        cut = self.edge_cut / max(self.num_edges, 1)
        lines.append(f"edge cut: {self.edge_cut} of {self.num_edges} edges ({cut:.1%})")
        lines.append("balance (max/mean): " + ", ".join(
            f"{k} {v:.3f}" for k, v in self.balance().items()))
        mib = self.comm_bytes_per_layer() / 2 ** 20
        lines.append(f"exact-training halo traffic per layer at width {self.feat_width} "
                     f"(fp32, one direction): {mib:.2f} MiB")
        return "\n".join(lines)


def partition_report(part_config: str | os.PathLike,
                     feat_width: int | None = None) -> PartitionReport:
    """Build the report of the partitioning described by ``part_config``.

    Reads each partition in turn (one partition's graph and node features in memory at a
    time). ``feat_width`` defaults to the width of the node feature ``feat`` if present,
    else 1. Train counts come from the node field ``train_mask`` when it exists.
    """
    meta = read_part_config(part_config)
    owned_nodes, owned_edges, halo_nodes, train_nodes = [], [], [], []
    edge_cut = 0
    for part in range(meta["num_parts"]):
        graph, node_feats, _, _, _, _, _ = load_partition(part_config, part)
        inner_node = graph.ndata["inner_node"].bool()
        inner_edge = graph.edata["inner_edge"].bool()
        src = graph.edges()[0][inner_edge]
        remote_src = src[~inner_node[src]]
        owned_nodes.append(int(inner_node.sum()))
        owned_edges.append(int(inner_edge.sum()))
        halo_nodes.append(int(torch.unique(remote_src).numel()))
        edge_cut += int(remote_src.numel())
        train = node_feats.get("_N/train_mask")
        train_nodes.append(None if train is None else int(train.sum()))
        feat = node_feats.get("_N/feat")
        if feat_width is None and feat is not None and feat.dim() == 2:
            feat_width = feat.shape[1]
    return PartitionReport(graph_name=meta["graph_name"], num_nodes=meta["num_nodes"],
                           num_edges=meta["num_edges"],
                           part_method=meta.get("part_method", "unknown"),
                           owned_nodes=owned_nodes, owned_edges=owned_edges,
                           halo_nodes=halo_nodes,
                           train_nodes=None if None in train_nodes else train_nodes,
                           edge_cut=edge_cut, feat_width=feat_width or 1)
