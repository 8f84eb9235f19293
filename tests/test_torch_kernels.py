"""The ``kernels`` option: sharded graphs run their message passing on sarlite's torch
kernels (``kernels="torch"``) without building a single DGL graph, and the option is
checked and chosen as documented. Exactness on torch kernels is the whole layer matrix's
second run (tests/test_exactness.py, tests/test_hetero_exactness.py)."""
from unittest import mock

import dgl
import pytest
import torch

import sarlite
from conftest import SMALL_LAYERS, random_graph
from harness import spawn
from layer_cases import dgl_graphs_refused
from sarlite.core.local_blocks import make_block, resolve
from sarlite.core.kernels import EdgeIndex
from sarlite.core.options import EngineOptions
from sarlite.core.torch_block import TorchBlock

TOL = {"rtol": 1e-4, "atol": 1e-5}
LAYERS = SMALL_LAYERS


def test_auto_picks_dgls_kernels_on_cpu_and_torchs_elsewhere():
    assert resolve(None, "cpu") == "dgl"
    assert resolve(None, torch.device("cuda", 0)) == "torch"
    assert resolve("torch", "cpu") == "torch"
    assert EngineOptions(kernels="auto").kernels is None


def test_an_unknown_kernels_name_is_one_clear_error():
    with pytest.raises(ValueError, match="kernels must be one of"):
        EngineOptions(kernels="cuda")


def test_dgls_kernels_on_a_device_dgl_cannot_hold_name_the_torch_kernels():
    index = EdgeIndex(torch.tensor([0]), torch.tensor([0]), 1, 1)
    failure = dgl.DGLError("Device API cuda is not enabled")
    with mock.patch("dgl.create_block", side_effect=failure):
        with pytest.raises(RuntimeError, match="kernels='torch'"):
            make_block(index, "dgl")
    assert isinstance(make_block(index, "torch"), TorchBlock)


def _no_dgl_graphs(rank, world, config, states, engine):
    """Every layer forward and backward on a graph built with ``engine``, while any
    attempt to build a DGL graph fails; the outputs and input gradients."""
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data, **engine)
    results = {}
    with dgl_graphs_refused(True):
        for name, state in states.items():
            layer = LAYERS[name]()
            layer.load_state_dict(state)
            x = data.node_features["feat"].clone().requires_grad_()
            out = layer(g, x)
            out.sum().backward()
            results[name] = (out.detach(), x.grad)
    return results


@pytest.mark.parametrize("engine", [
    {"mode": "sar"}, {"mode": "sa"}, {"mode": "one-shot"},
    {"mode": "sar", "max_rows_per_step": 3}], ids=["sar", "sa", "one-shot", "sar-chunked"])
def test_torch_kernels_build_no_dgl_graph_and_match_dgl(tmp_path, engine):
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", 2, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    expected, states = {}, {}
    for name, make in LAYERS.items():
        layer = make()
        x = g.ndata["feat"].clone().requires_grad_()
        out = layer(g, x)
        out.sum().backward()
        expected[name], states[name] = (out.detach(), x.grad), layer.state_dict()
    results = spawn(_no_dgl_graphs, 2, str(tmp_path / "g.json"), states,
                    {**engine, "kernels": "torch"}, timeout=120)
    for name, (out, grad) in expected.items():
        torch.testing.assert_close(torch.cat([r[name][0] for r in results]), out[orig], **TOL)
        torch.testing.assert_close(torch.cat([r[name][1] for r in results]), grad[orig],
                                   **TOL)


@pytest.mark.parametrize("layer", ["sage", "gcn"])
def test_double_backward_through_one_shot_on_torch_kernels_equals_dgl(tmp_path, layer):
    """A gradient penalty (the gradient of a gradient) on one worker, no process group.
    (Through attention DGL drops edge_softmax's second-order term and the torch kernels
    keep it, so GAT is left out: see tests/test_kernels.py's gradgradcheck.)"""
    g = random_graph(num_nodes=50, num_edges=250)
    sarlite.partition_graph(g, "g", 1, tmp_path)
    block = sarlite.construct_full_graph(sarlite.load_partition_data(tmp_path / "g.json"),
                                         mode="one-shot", kernels="torch")
    torch.manual_seed(0)
    conv = LAYERS[layer]()
    results = []
    for graph in (g, block):
        conv.zero_grad()
        x = g.ndata["feat"].clone().requires_grad_()
        grad_x, = torch.autograd.grad(conv(graph, x).pow(2).sum(), x, create_graph=True)
        grad_x.pow(2).sum().backward()
        results.append([x.grad] + [p.grad.clone() for p in conv.parameters()])
    for ours, theirs in zip(results[1], results[0]):
        torch.testing.assert_close(ours, theirs, **TOL)

