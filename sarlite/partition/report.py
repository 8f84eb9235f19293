"""Partition report: sizes, balance, edge cut and the exact-training communication bound.

The halo that matters for exact full-graph training is the *in-halo* of a partition: the
remote source nodes of the edges it owns. In every layer each partition must receive one
row per in-halo node, so ``sum_p in_halo_p * width * 4`` bytes (fp32) per layer and
direction is a lower bound on the traffic of exact training.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace

import dgl
import torch

from .files import is_heterogeneous, load_partition, read_part_config


def _balance(values: list[int]) -> float:
    """``max / mean`` of a per-part quantity (1.0 is perfect balance)."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


@dataclass
class PartitionReport:
    """Per-part sizes and overall quality of a partitioning.

    ``halo_nodes[p]`` counts the distinct remote sources of the edges part ``p`` owns;
    ``edge_cut`` counts the owned edges whose source is remote (each cut edge once).
    For a heterogeneous graph, ``typed_nodes[ntype][p]`` and ``typed_halo[ntype][p]``
    split the owned nodes and the halo of part ``p`` by node type, and
    ``relation_cut["src:rel:dst"]`` is the edge cut of one relation (else all three are
    ``None``).
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
    typed_nodes: dict[str, list[int]] | None = None
    typed_halo: dict[str, list[int]] | None = None
    relation_cut: dict[str, int] | None = None

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
        lines += self._typed_lines()
        lines.append("balance (max/mean): " + ", ".join(
            f"{k} {v:.3f}" for k, v in self.balance().items()))
        mib = self.comm_bytes_per_layer() / 2 ** 20
        lines.append(f"exact-training halo traffic per layer at width {self.feat_width} "
                     f"(fp32, one direction): {mib:.2f} MiB")
        return "\n".join(lines)

    def _typed_lines(self) -> list[str]:
        """Owned nodes and halo per node type, and the cut per relation (heterogeneous
        graphs only)."""
        if self.typed_nodes is None:
            return []
        lines = ["per node type (owned/halo per part): " + "; ".join(
            f"{ntype} " + " ".join(f"{n}/{h}" for n, h in zip(owned, self.typed_halo[ntype]))
            for ntype, owned in self.typed_nodes.items())]
        lines.append("edge cut per relation: " + ", ".join(
            f"{name} {cut}" for name, cut in self.relation_cut.items()))
        return lines


def partition_report(part_config: str | os.PathLike,
                     feat_width: int | None = None) -> PartitionReport:
    """Build the report of the partitioning described by ``part_config``.

    Reads each partition in turn (one partition's graph and node features in memory at a
    time). ``feat_width`` defaults to the width of the node feature ``feat`` if present
    (on any node type), else 1. Train counts come from the node field ``train_mask`` when
    it exists. A heterogeneous graph's report also splits the nodes and the halo by node
    type, and the cut by relation. Local; not a collective.
    """
    meta = read_part_config(part_config)
    typed = is_heterogeneous(meta)
    owned_nodes, owned_edges, halo_nodes, train_nodes, parts = [], [], [], [], []
    edge_cut = 0
    for part in range(meta["num_parts"]):
        graph, node_feats, _, book, _, ntypes, etypes = load_partition(part_config, part)
        sizes = _part_sizes(graph)
        owned_nodes.append(sizes["owned"])
        owned_edges.append(sizes["edges"])
        halo_nodes.append(int(sizes["halo"].numel()))
        edge_cut += sizes["cut"]
        parts.append(_typed_sizes(graph, sizes, ntypes, etypes) if typed else None)
        train_nodes.append(_field_total(node_feats, "train_mask"))
        if feat_width is None:
            feat_width = _feat_width(node_feats)
    report = PartitionReport(
        graph_name=meta["graph_name"], num_nodes=meta["num_nodes"],
        num_edges=meta["num_edges"], part_method=meta.get("part_method", "unknown"),
        owned_nodes=owned_nodes, owned_edges=owned_edges, halo_nodes=halo_nodes,
        train_nodes=None if None in train_nodes else train_nodes,
        edge_cut=edge_cut,
        feat_width=feat_width or 1)
    return _with_types(report, parts, book) if typed else report


def _part_sizes(graph) -> dict:
    """Owned nodes and edges of one partition graph, its halo (the distinct remote sources
    of its owned edges) and, per owned edge, whether its source is remote."""
    inner_node = graph.ndata["inner_node"].bool()
    inner_edge = graph.edata["inner_edge"].bool()
    src = graph.edges()[0][inner_edge]
    remote = ~inner_node[src]
    return {"owned": int(inner_node.sum()), "edges": int(inner_edge.sum()),
            "inner_node": inner_node, "inner_edge": inner_edge, "remote": remote,
            "halo": torch.unique(src[remote]), "cut": int(remote.sum())}


def _typed_sizes(graph, sizes: dict, ntypes: list, etypes: list) -> dict:
    """Owned nodes and halo per node type, and the cut per relation, of one partition."""
    node_type = graph.ndata[dgl.NTYPE].long()
    halo_type = node_type[sizes["halo"]]
    owned_type = node_type[sizes["inner_node"]]
    cut_type = graph.edata[dgl.ETYPE].long()[sizes["inner_edge"]][sizes["remote"]]
    count = len(ntypes)
    return {"nodes": dict(zip(ntypes, torch.bincount(owned_type, minlength=count).tolist())),
            "halo": dict(zip(ntypes, torch.bincount(halo_type, minlength=count).tolist())),
            "cut": dict(zip((":".join(c) for c in etypes),
                            torch.bincount(cut_type, minlength=len(etypes)).tolist()))}


def _with_types(report: PartitionReport, parts: list, book) -> PartitionReport:
    """``report`` with the per-type sizes of every part (``parts``) summed up."""
    ntypes, relations = book.ntypes, [":".join(c) for c in book.canonical_etypes]
    return replace(report,
                   typed_nodes={t: [p["nodes"][t] for p in parts] for t in ntypes},
                   typed_halo={t: [p["halo"][t] for p in parts] for t in ntypes},
                   relation_cut={r: sum(p["cut"][r] for p in parts) for r in relations})


def _field_total(node_feats: dict, name: str) -> int | None:
    """Sum of the node field ``name`` over the node types that have it (``None`` when
    none has)."""
    values = [v for key, v in node_feats.items() if key.split("/", 1)[-1] == name]
    return int(sum(int(v.sum()) for v in values)) if values else None


def _feat_width(node_feats: dict) -> int | None:
    for key, value in node_feats.items():
        if key.split("/", 1)[-1] == "feat" and value.dim() == 2:
            return value.shape[1]
    return None
