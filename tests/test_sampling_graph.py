"""GraphShardManager.sampling_graph: the owned in-edges over global node and edge ids."""
import dgl
import pytest
import torch

import sarlite
from conftest import random_graph
from harness import spawn


def _sampling_graphs(rank, world, config):
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data, mode="sar")
    sg = g.sampling_graph
    src, dst = sg.edges()
    block = sarlite.construct_mfgs(data, torch.arange(3), 1)[0]
    try:
        block.sampling_graph
        refused = "no error"
    except RuntimeError as err:
        refused = str(err)
    return (sg.num_nodes(), src, dst, sg.edata[dgl.EID], g.edata["w"], data.node_ranges,
            refused)


@pytest.fixture(scope="module", params=[2, 3])
def partitioned(request, tmp_path_factory):
    g = random_graph(num_nodes=60, num_edges=300)
    path = tmp_path_factory.mktemp(f"parts{request.param}")
    orig_n, orig_e = sarlite.partition_graph(g, "g", request.param, path, return_mapping=True)
    return g, orig_n, orig_e, spawn(_sampling_graphs, request.param, str(path / "g.json"),
                                    timeout=120)


def test_sampling_graph_holds_every_owned_in_edge_under_its_global_ids(partitioned):
    g, orig_n, orig_e, results = partitioned
    old_src, old_dst = g.edges()
    all_eids = []
    for rank, (num_nodes, src, dst, eids, w, ranges, _) in enumerate(results):
        assert num_nodes == g.num_nodes()
        lo, hi = ranges[rank].tolist()
        old = orig_e[eids]                           # the original id of every edge
        assert torch.equal(orig_n[src], old_src[old])
        assert torch.equal(orig_n[dst], old_dst[old])
        assert bool(((dst >= lo) & (dst < hi)).all())
        assert torch.equal(w, g.edata["w"][old])     # same edge order as the manager's edata
        owned_in = int(torch.isin(old_dst, orig_n[lo:hi]).sum())
        assert eids.numel() == owned_in
        all_eids.append(eids)
    assert torch.equal(torch.cat(all_eids).sort().values, torch.arange(g.num_edges()))


def test_message_flow_graphs_have_no_sampling_graph(partitioned):
    for *_, refused in partitioned[3]:
        assert "sampling_graph needs a full graph" in refused
