"""The CUDA path: the same exact numbers on GPUs (skipped without CUDA), with NCCL on one
GPU per rank, and with gloo for ranks that share one GPU.

On CUDA the engine picks its torch kernels by itself (``kernels`` "auto"): the DGL that pip
installs has no CUDA kernels, and these tests build no DGL graph on the device.
"""
import pytest
import torch

import sarlite
from conftest import SMALL_LAYERS, random_graph
from harness import spawn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: the CUDA path is tested on GPUs only")
LAYERS = SMALL_LAYERS


def _layer_on_gpu(rank, world, config, layer, state, mode, backend, rows="auto"):
    sarlite.install_dgl_dispatch()
    import torch.distributed as dist
    assert dist.get_backend() == backend
    device = torch.device("cuda", torch.cuda.current_device())    # with gloo: every rank's 0
    data = sarlite.load_partition_data(config, device=device)
    g = sarlite.construct_full_graph(data, mode=mode, device=device, max_rows_per_step=rows)
    conv = LAYERS[layer]().to(device)
    conv.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    sarlite.all_reduce_gradients(conv)
    grads = [p.grad.cpu() for p in conv.parameters() if p.grad is not None]
    return out.detach().cpu(), x.grad.cpu(), grads


def _dgl_on_cpu(tmp_path, layer, world):
    """The unpartitioned graph's DGL layer on the CPU, its output and input gradient, and
    the partition of the graph into ``world`` parts (``(layer, x, out, orig)``)."""
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", world, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    conv = LAYERS[layer]()
    x = g.ndata["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    return conv, x, out, orig


def _assert_equal_to_dgl(results, conv, x, out, orig):
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig].detach(), **tol)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), x.grad[orig], **tol)
    expected = [p.grad for p in conv.parameters() if p.grad is not None]
    for got, want in zip(results[0][2], expected, strict=True):
        torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
def test_layers_on_cuda_with_nccl_match_dgl_on_cpu(tmp_path, mode, layer, world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    conv, x, out, orig = _dgl_on_cpu(tmp_path, layer, world)
    results = spawn(_layer_on_gpu, world, str(tmp_path / "g.json"), layer, conv.state_dict(),
                    mode, "nccl", timeout=300, device="cuda")
    _assert_equal_to_dgl(results, conv, x, out, orig)


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("mode, rows", [("sar", 2), ("sar", "whole"), ("sa", 2),
                                        ("one-shot", "whole")])
def test_two_gloo_ranks_on_one_gpu_match_dgl_on_cpu_also_in_tiny_steps(tmp_path, mode, rows,
                                                                       layer):
    """Graphs and kernels on CUDA, collectives through the CPU (gloo): the halo exchange
    and the chunked steps between ranks on a machine with one GPU."""
    conv, x, out, orig = _dgl_on_cpu(tmp_path, layer, 2)
    results = spawn(_layer_on_gpu, 2, str(tmp_path / "g.json"), layer, conv.state_dict(),
                    mode, "gloo", rows, timeout=300)
    _assert_equal_to_dgl(results, conv, x, out, orig)
