"""sarlite's distributed sampler gives DGL 2.1's frontiers and blocks wherever DGL's are
determined, compared with DGL's own ``dgl.distributed.sample_neighbors`` and
``DistNodeDataLoader`` on DGL's standalone DistGraph (run in a subprocess by
``tests/dgl_reference.py``) over the same partition files.

What DGL determines: the node types, the edge types (DGL 2.1 keeps only those that got
an edge), the node counts, which edges a seed gets when its fanout covers its degree, how
many it gets otherwise, and the order of the seeds' groups (each seed's edges together,
the seeds in the order given; with several partitions, this rank's own partition first,
then the others by rank). DGL's order *within* one seed's edges is its sampler's random
choice (it changes from call to call, also for fanout -1), so edges are compared as
multisets per seed group.
"""
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dgl
import pytest
import torch

import sarlite
from conftest import random_graph
from dgl_reference import describe_batch, describe_frontier
from harness import spawn
from sarlite.sampling import (DistGraph, DistNodeDataLoader, sample_etype_neighbors,
                              sample_neighbors)

HOMO_QUERIES = [{"seeds": [7, 2, 11, 40], "fanout": f, "edge_dir": d}
                for f, d in [(-1, "in"), (100, "in"), (2, "in"), (-1, "out")]]
HETERO_QUERIES = [{"seeds": s, "fanout": f, "edge_dir": d}
                  for s in ({"a": [3, 1, 7]}, {"b": [2, 0]}, {"a": [5], "b": [4]})
                  for f, d in [(-1, "in"), (100, "in"), (2, "in"), (-1, "out")]] + \
    [{"seeds": s, "fanout": 2, "edge_dir": "in", "per_type": True}
     for s in ({"a": [3, 1, 7]}, {"a": [5], "b": [4]})]
LOADERS = {"homo": {"seeds": list(range(0, 30, 2)), "fanouts": [-1, -1], "batch_size": 4},
           "hetero": {"seeds": {"a": list(range(12))}, "fanouts": [-1, -1],
                      "batch_size": 5}}


def _hetero_graph() -> dgl.DGLGraph:
    gen = torch.Generator().manual_seed(3)

    def edges(n, src, dst):
        return torch.randint(0, src, (n,), generator=gen), torch.randint(0, dst, (n,),
                                                                          generator=gen)
    g = dgl.heterograph({("a", "r1", "b"): edges(80, 30, 20),
                         ("b", "r2", "a"): edges(60, 20, 30),
                         ("a", "r3", "a"): edges(50, 30, 30),
                         ("c", "r4", "a"): edges(10, 5, 30)},
                        {"a": 30, "b": 20, "c": 5})
    g.nodes["a"].data["x"] = torch.randn(30, 3, generator=gen)
    return g


GRAPHS = {"homo": lambda: random_graph(60, 300, seed=4),
          "hetero": _hetero_graph}
QUERIES = {"homo": HOMO_QUERIES, "hetero": HETERO_QUERIES}


@pytest.fixture(scope="module", params=["homo", "hetero"])
def case(request, tmp_path_factory):
    """``(kind, one-part config, two-part config, two-part orig ids, DGL's answer)``."""
    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    g = GRAPHS[kind]()
    sarlite.partition_graph(g, kind, 1, root / "one")
    mapping = sarlite.partition_graph(g, kind, 2, root / "two", return_mapping=True)
    ask = {"graph_name": kind, "part_config": str(root / "one" / f"{kind}.json"),
           "frontiers": QUERIES[kind], "loaders": [LOADERS[kind]]}
    (root / "ask.json").write_text(json.dumps(ask))
    script = Path(__file__).with_name("dgl_reference.py")
    subprocess.run([sys.executable, str(script), str(root / "ask.json"),
                    str(root / "answer.json")], check=True, timeout=300,
                   capture_output=True)
    answer = json.loads((root / "answer.json").read_text())
    return kind, ask["part_config"], str(root / "two" / f"{kind}.json"), mapping, answer


def _ids(value):
    if isinstance(value, dict):
        return {k: torch.tensor(v) for k, v in value.items()}
    return torch.tensor(value)


def _groups(edges: list, edge_dir: str) -> list:
    """``[(seed, Counter of (src, dst, eid))]`` in the order the seed groups come."""
    src, dst, eid = edges
    seeds = dst if edge_dir == "in" else src
    out = []
    for s, d, e, seed in zip(src, dst, eid, seeds):
        if not out or out[-1][0] != seed:
            out.append((seed, Counter()))
        out[-1][1][(s, d, e)] += 1
    return out


def _sizes(groups: list) -> list:
    return [(seed, sum(c.values())) for seed, c in groups]


def _frontiers(g, queries) -> list:
    return [describe_frontier((sample_etype_neighbors if q.get("per_type") else
                               sample_neighbors)(g, _ids(q["seeds"]), q["fanout"],
                                                 edge_dir=q["edge_dir"])) for q in queries]


def _standalone_frontiers(config, queries) -> list:
    return _frontiers(DistGraph(config), queries)


def _pooled(kind: str, query: dict) -> bool:
    """DGL's ``sample_neighbors`` picks ``fanout`` edges of a seed from all its edge types
    together: which types get them is random, only the seed's total is determined."""
    return kind == "hetero" and query["fanout"] == 2 and not query.get("per_type")


def test_frontier_types_and_counts_are_dgl_s(case):
    kind, one, _, _, answer = case
    for q, ours, theirs in zip(QUERIES[kind], _standalone_frontiers(one, QUERIES[kind]),
                               answer["frontiers"]):
        assert (ours["ntypes"], ours["num_nodes"]) == (theirs["ntypes"], theirs["num_nodes"])
        if not _pooled(kind, q):
            assert ours["etypes"] == theirs["etypes"], q


def test_pooled_sampling_gives_each_seed_dgl_s_total_over_edge_types(case):
    kind, one, _, _, answer = case
    for q, ours, theirs in zip(QUERIES[kind], _standalone_frontiers(one, QUERIES[kind]),
                               answer["frontiers"]):
        if _pooled(kind, q):
            totals = [Counter(seed for edges in f["edges"].values() for seed in edges[1])
                      for f in (ours, theirs)]
            assert totals[0] == totals[1], q


def test_frontier_seed_groups_come_in_dgl_s_order_with_dgl_s_counts(case):
    kind, one, _, _, answer = case
    for q, ours, theirs in zip(QUERIES[kind], _standalone_frontiers(one, QUERIES[kind]),
                               answer["frontiers"]):
        if _pooled(kind, q):
            continue
        for etype, edges in theirs["edges"].items():
            assert _sizes(_groups(ours["edges"][etype], q["edge_dir"])) == \
                _sizes(_groups(edges, q["edge_dir"])), (q, etype)


def test_frontier_edges_are_dgl_s_where_the_fanout_covers_the_degree(case):
    kind, one, _, _, answer = case
    for q, ours, theirs in zip(QUERIES[kind], _standalone_frontiers(one, QUERIES[kind]),
                               answer["frontiers"]):
        if q["fanout"] == 2:          # random picks: checked against the full frontier
            continue
        for etype, edges in theirs["edges"].items():
            assert _groups(ours["edges"][etype], q["edge_dir"]) == \
                _groups(edges, q["edge_dir"]), (q, etype)


def test_sampled_edges_are_edges_of_the_full_frontier(case):
    kind, one, _, _, answer = case
    full = {json.dumps(q["seeds"]) + q["edge_dir"]: f for q, f in
            zip(QUERIES[kind], answer["frontiers"]) if q["fanout"] == -1}
    for q, ours in zip(QUERIES[kind], _standalone_frontiers(one, QUERIES[kind])):
        whole = full[json.dumps(q["seeds"]) + q["edge_dir"]]["edges"]
        for etype, edges in ours["edges"].items():
            assert set(zip(*edges)) <= set(zip(*whole[etype])), (q, etype)


def test_loader_blocks_are_dgl_s_with_full_fanouts(case):
    kind, one, _, _, answer = case
    spec = LOADERS[kind]
    g = DistGraph(one)
    loader = DistNodeDataLoader(g, _ids(spec["seeds"]),
                                dgl.dataloading.NeighborSampler(spec["fanouts"]),
                                batch_size=spec["batch_size"], shuffle=False)
    ours = [describe_batch(*batch) for batch in loader]
    assert len(ours) == len(answer["loaders"][0])
    for mine, theirs in zip(ours, answer["loaders"][0]):
        assert mine["output"] == theirs["output"]
        seeds = theirs["output"] if isinstance(theirs["output"], dict) else \
            {"_N": theirs["output"]}
        for a, b in zip(mine["blocks"], theirs["blocks"]):
            assert a["etypes"] == b["etypes"]
            for t in b["dst"]:       # the seeds first, in order; the rest as a set
                assert _starts_with(a["dst"][t], b["dst"][t], seeds.get(t, []),
                                    seeds.get(t, []))
                assert _starts_with(a["src"][t], b["src"][t], a["dst"][t], b["dst"][t])
            assert {e: Counter(zip(*v)) for e, v in a["edges"].items()} == \
                {e: Counter(zip(*v)) for e, v in b["edges"].items()}


def _starts_with(ours: list, theirs: list, our_first: list, their_first: list) -> bool:
    """Each starts with its ``first`` ids, in order, and both hold the same ids."""
    return ours[:len(our_first)] == our_first and \
        theirs[:len(their_first)] == their_first and sorted(ours) == sorted(theirs)


def _two_workers(rank, world, config, queries):
    return _frontiers(DistGraph(config), queries)


def _new_ids(mapping, seeds):
    """Seeds given in original ids, in the two-part partition's ids (same order)."""
    orig_nids = mapping[0]
    if isinstance(seeds, dict):
        return {t: [int(torch.nonzero(orig_nids[t] == s)) for s in ids]
                for t, ids in seeds.items()}
    return [int(torch.nonzero(orig_nids == s)) for s in seeds]


def _to_orig(mapping, frontier_edges: dict) -> dict:
    orig_nids, orig_eids = mapping
    out = {}
    for name, (src, dst, eid) in frontier_edges.items():
        s, _, d = name.split(":")
        nid = (lambda t: orig_nids[t]) if isinstance(orig_nids, dict) else (lambda t: orig_nids)
        c = tuple(name.split(":"))
        eids = orig_eids[c] if isinstance(orig_eids, dict) else orig_eids
        out[name] = [nid(s)[src].tolist(), nid(d)[dst].tolist(), eids[eid].tolist()]
    return out


def test_two_workers_frontiers_hold_dgl_s_edges_own_partition_first(case):
    kind, _, two, mapping, answer = case
    queries = [dict(q, seeds=_new_ids(mapping, q["seeds"])) for q in QUERIES[kind]
               if q["fanout"] != 2]
    reference = [f for q, f in zip(QUERIES[kind], answer["frontiers"]) if q["fanout"] != 2]
    book = sarlite.load_partition_book(two, 0)[0]
    for rank, frontiers in enumerate(spawn(_two_workers, 2, two, queries)):
        for q, ours, theirs in zip(queries, frontiers, reference):
            assert (ours["ntypes"], ours["etypes"]) == (theirs["ntypes"], theirs["etypes"])
            edges = _to_orig(mapping, ours["edges"])
            for etype, expected in theirs["edges"].items():
                assert Counter(zip(*edges[etype])) == Counter(zip(*expected)), (q, etype)
            for etype, (src, dst, _) in ours["edges"].items():
                seeds = dst if q["edge_dir"] == "in" else src
                ntype = etype.split(":")[2 if q["edge_dir"] == "in" else 0]
                owners = book.nid2partid(torch.tensor(seeds, dtype=torch.int64), ntype) \
                    if book.has_named_types else book.nid2partid(torch.tensor(seeds))
                order = [0 if o == rank else 1 + int(o) for o in owners.tolist()]
                assert order == sorted(order), (rank, q, etype)
