"""The CUDA/NCCL path: the same exact numbers on GPUs (skipped without CUDA)."""
import dgl.nn as dglnn
import pytest
import torch

import sarlite
from conftest import random_graph
from harness import spawn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: the NCCL path is tested on GPUs only")


def _gat_on_gpu(rank, world, config, state, mode):
    sarlite.install_dgl_dispatch()
    import torch.distributed as dist
    assert dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device())
    data = sarlite.load_partition_data(config, device=device)
    g = sarlite.construct_full_graph(data, mode=mode, device=device)
    conv = dglnn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True).to(device)
    conv.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    sarlite.all_reduce_gradients(conv)
    return out.detach().cpu(), x.grad.cpu(), conv.fc.weight.grad.cpu()


@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
def test_gat_on_cuda_with_nccl_matches_dgl(tmp_path, mode):
    world = min(torch.cuda.device_count(), 2)
    g = random_graph(num_nodes=50, num_edges=250)
    orig, _ = sarlite.partition_graph(g, "g", world, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    conv = dglnn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True)
    x = g.ndata["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    results = spawn(_gat_on_gpu, world, str(tmp_path / "g.json"), conv.state_dict(), mode,
                    timeout=300, device="cuda")
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(torch.cat([r[0] for r in results]), out[orig].detach(), **tol)
    torch.testing.assert_close(torch.cat([r[1] for r in results]), x.grad[orig], **tol)
    torch.testing.assert_close(results[0][2], conv.fc.weight.grad, **tol)
