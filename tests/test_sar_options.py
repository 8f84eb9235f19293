"""Engine options: pipeline depth and mode, passed per graph, give the same exact numbers."""
import dgl.nn as dglnn
import pytest
import torch

import sarlite
from conftest import random_graph
import gat_case
from harness import spawn


@pytest.mark.parametrize("mode,depth", [(None, 0), (None, 2), ("sa", 3), ("one-shot", 1)])
def test_pipeline_depth_and_mode_keep_results_exact(tmp_path, mode, depth):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    conv, out, xgrad = gat_case.reference(g)
    engine = {"pipeline_depth": depth, **({"mode": mode} if mode is not None else {})}
    results = spawn(gat_case.worker, 3, str(tmp_path / "g.json"), conv.state_dict(), engine,
                    timeout=120)
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig],
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), xgrad[orig],
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(results[0][2], conv.fc.weight.grad, rtol=1e-4, atol=1e-5)
    expected = "DistributedBlock" if mode == "one-shot" else "GraphShardManager"
    assert all(r[4] == expected for r in results)


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        sarlite.core.options.check_mode("fast")


def _sage_on(rank, world, config, state):
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data)
    conv = dglnn.SAGEConv(4, 3, "pool")
    conv.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = conv(g, x, edge_weight=g.edata["w"][:, 0])      # partition edge features in edata
    out.sum().backward()
    return out.detach(), x.grad


def test_engine_runs_on_partitions_written_by_dgl_with_their_edge_features(tmp_path):
    import dgl
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = dgl.distributed.partition_graph(g, "g", 3, str(tmp_path), return_mapping=True)
    torch.manual_seed(0)
    conv = dglnn.SAGEConv(4, 3, "pool")
    x = g.ndata["feat"].clone().requires_grad_()
    out = conv(g, x, edge_weight=g.edata["w"][:, 0])
    out.sum().backward()
    results = spawn(_sage_on, 3, str(tmp_path / "g.json"), conv.state_dict(), timeout=120)
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig].detach(),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), x.grad[orig],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
def test_max_collective_rows_bounds_every_call_and_keeps_results_exact(tmp_path, mode):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    conv, out, xgrad = gat_case.reference(g)
    results = spawn(gat_case.worker, 3, str(tmp_path / "g.json"), conv.state_dict(),
                    {"mode": mode, "max_collective_rows": 2}, timeout=120)
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig],
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), xgrad[orig],
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(results[0][2], conv.fc.weight.grad, rtol=1e-4, atol=1e-5)
    sizes = [s for r in results for s in r[3]]
    assert len(sizes) > 6 and max(sizes) <= 2        # many calls, none above the bound


def _options_asked(rank, world, config, state):
    data = sarlite.load_partition_data(config)
    asked = []

    def options():
        asked.append(len(asked))
        mode = "sar" if len(asked) % 2 else "sa"
        return sarlite.core.EngineOptions(mode, len(asked) % 3, 1 + len(asked) % 4)
    g = sarlite.construct_full_graph(data, options=options)
    conv = dglnn.SAGEConv(4, 3, "mean")
    conv.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = conv(g, conv(g, x)[:, :1].repeat(1, 4))
    out.sum().backward()
    return out.detach(), x.grad, len(asked)


def test_an_options_callable_is_asked_at_every_call_and_results_stay_exact(tmp_path):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    conv = dglnn.SAGEConv(4, 3, "mean")
    x = g.ndata["feat"].clone().requires_grad_()
    out = conv(g, conv(g, x)[:, :1].repeat(1, 4))
    out.sum().backward()
    results = spawn(_options_asked, 3, str(tmp_path / "g.json"), conv.state_dict(),
                    timeout=120)
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig].detach(),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), x.grad[orig],
                               rtol=1e-4, atol=1e-5)
    assert all(r[2] >= 2 for r in results)


def test_engine_options_reject_a_bad_row_bound():
    with pytest.raises(ValueError, match="max_collective_rows must be a positive integer"):
        sarlite.core.EngineOptions(max_collective_rows=0)
