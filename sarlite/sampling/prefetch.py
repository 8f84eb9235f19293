"""Filling in a sampled batch: DGL's lazy features pulled from a DistGraph, and the move
to the loader's device.

DGL's samplers mark the data a batch needs with :class:`dgl.LazyFeature` placeholders
(``prefetch_node_feats``, ``prefetch_labels``, ``prefetch_edge_feats``) and leave the reads
to the data loader. Here the reads are :class:`~sarlite.kv.DistTensor` pulls, which are
collectives, so every rank walks its batch in the same order: the graphs in the order the
sampler returned them, their source, destination (or node) and edge data in name order.
A rank's batch has the same structure on every rank (the same sampler, called once per
batch, also on empty batches), so the pulls line up.
"""
from __future__ import annotations

import dgl
import torch
from dgl.frame import LazyFeature


def _frames(g, graph: dgl.DGLGraph) -> list[tuple[object, object, str]]:
    """``(data view of graph, data view of g, "node"|"edge")`` for each frame of a graph or
    block, per type, in a fixed order: source, destination (or node) data by node type,
    then edge data by canonical edge type."""
    if graph.is_block:
        nodes = [(graph.srcnodes[t].data, t) for t in graph.srctypes] + \
            [(graph.dstnodes[t].data, t) for t in graph.dsttypes]
    else:
        nodes = [(graph.nodes[t].data, t) for t in graph.ntypes]
    return [(view, g.nodes[t].data, "node") for view, t in nodes] + \
        [(graph.edges[c].data, g.edges[c].data, "edge") for c in graph.canonical_etypes]


def _fill_graph(g, graph: dgl.DGLGraph) -> None:
    for view, source, kind in _frames(g, graph):
        for key in sorted(view.keys()):
            column = view[key]
            if not isinstance(column, LazyFeature):
                continue
            name = column.name or key
            if name not in source:
                raise KeyError(f"the sampler asks for {kind} data {name!r}, which the graph "
                               f"does not have (it has {sorted(source)})")
            ids = column.id_ if column.id_ is not None else view[
                dgl.NID if kind == "node" else dgl.EID]
            view[key] = source[name][ids]


def fetch_lazy_features(g, result):
    """``result`` (a sampler's output: graphs, tensors, lists and tuples of them) with every
    :class:`dgl.LazyFeature` in its graphs replaced by the rows of ``g``'s node / edge data
    of the same type it names (ids from the placeholder, else ``dgl.NID`` /
    ``dgl.EID``).
    Graphs are filled in place.

    Collective and blocking (one pull per placeholder): every rank calls it on a batch of
    the same structure. Raises ``KeyError`` when a placeholder names missing data.
    """
    if isinstance(result, dgl.DGLGraph):
        _fill_graph(g, result)
    elif isinstance(result, (list, tuple)):
        for item in result:
            fetch_lazy_features(g, item)
    return result


def to_device(result, device):
    """``result`` with its graphs and tensors (also inside lists, tuples and dicts) on
    ``device``; ``result`` itself when ``device`` is ``None``. Local."""
    if device is None:
        return result
    if isinstance(result, (dgl.DGLGraph, torch.Tensor)):
        return result.to(device)
    if isinstance(result, tuple):
        return tuple(to_device(item, device) for item in result)
    if isinstance(result, list):
        return [to_device(item, device) for item in result]
    if isinstance(result, dict):
        return {key: to_device(value, device) for key, value in result.items()}
    return result
