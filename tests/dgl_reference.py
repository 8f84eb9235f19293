"""DGL 2.1's own distributed sampler on its standalone DistGraph, as a reference.

``python tests/dgl_reference.py REQUEST.json ANSWER.json`` loads the one-part
partitioning the request names with ``dgl.distributed.DistGraph`` in DGL's standalone
mode (no servers), runs each frontier query with ``dgl.distributed.sample_neighbors`` (or
``sample_etype_neighbors`` where the query says ``per_type``) and
each loader with ``dgl.dataloading.DistNodeDataLoader``, and writes what came out with
:func:`describe_frontier` and :func:`describe_batch`. It runs in a process of its own:
DGL's standalone mode starts an in-process key-value server that should not outlive the
query. The tests describe sarlite's results with the same functions.
"""
from __future__ import annotations

import json
import sys

import torch


def _ids(value) -> torch.Tensor | dict:
    if isinstance(value, dict):
        return {k: torch.tensor(v, dtype=torch.int64) for k, v in value.items()}
    return torch.tensor(value, dtype=torch.int64)


def describe_frontier(frontier) -> dict:
    """A frontier's node types, edge types, node counts and, per edge type, its
    ``[src, dst, eid]`` lists in the frontier's order."""
    import dgl
    return {
        "ntypes": list(frontier.ntypes),
        "etypes": [list(c) for c in frontier.canonical_etypes],
        "num_nodes": {t: frontier.num_nodes(t) for t in frontier.ntypes},
        "edges": {":".join(c): [t.tolist() for t in (*frontier.edges(etype=c),
                                                     frontier.edges[c].data[dgl.EID])]
                  for c in frontier.canonical_etypes},
    }


def describe_batch(input_nodes, output_nodes, blocks) -> dict:
    """A loader batch: its input and output nodes and, per block, its source and
    destination node ids per type and ``[src id, dst id, eid]`` per edge type."""
    import dgl

    def listed(ids):
        return {k: v.tolist() for k, v in ids.items()} if isinstance(ids, dict) \
            else ids.tolist()

    out = {"input": listed(input_nodes), "output": listed(output_nodes), "blocks": []}
    for block in blocks:
        src = {t: block.srcnodes[t].data[dgl.NID] for t in block.srctypes}
        dst = {t: block.dstnodes[t].data[dgl.NID] for t in block.dsttypes}
        edges = {}
        for c in block.canonical_etypes:
            s, d = block.edges(etype=c)
            edges[":".join(c)] = [src[c[0]][s].tolist(), dst[c[2]][d].tolist(),
                                  block.edges[c].data[dgl.EID].tolist()]
        out["blocks"].append({"src": {t: v.tolist() for t, v in src.items()},
                              "dst": {t: v.tolist() for t, v in dst.items()},
                              "etypes": [list(c) for c in block.canonical_etypes],
                              "edges": edges})
    return out


def main(request_path: str, answer_path: str) -> None:
    import dgl
    with open(request_path) as f:
        request = json.load(f)
    dgl.distributed.initialize(None)
    g = dgl.distributed.DistGraph(request["graph_name"], part_config=request["part_config"])
    answer = {"frontiers": [], "loaders": []}
    for query in request["frontiers"]:
        sample = dgl.distributed.sample_etype_neighbors if query.get("per_type") else \
            dgl.distributed.sample_neighbors
        frontier = sample(g, _ids(query["seeds"]), query["fanout"],
                          edge_dir=query["edge_dir"])
        answer["frontiers"].append(describe_frontier(frontier))
    for query in request["loaders"]:
        sampler = dgl.dataloading.NeighborSampler(query["fanouts"])
        loader = dgl.dataloading.DistNodeDataLoader(
            g, _ids(query["seeds"]), sampler, batch_size=query["batch_size"],
            shuffle=False)
        answer["loaders"].append([describe_batch(*batch) for batch in loader])
    with open(answer_path, "w") as f:
        json.dump(answer, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
