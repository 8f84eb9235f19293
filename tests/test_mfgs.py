"""construct_mfgs: label-only layers give the full-graph results at the seed nodes."""
import dgl.nn as dglnn
import pytest
import torch
from torch import nn

import sarlite
from conftest import random_graph
from harness import spawn

TOL = {"rtol": 1e-4, "atol": 1e-5}


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = dglnn.GraphConv(4, 6, norm="both", allow_zero_in_degree=True)
        self.conv2 = dglnn.GATConv(6, 3, num_heads=2, allow_zero_in_degree=True)

    def forward(self, graphs, x):
        h = torch.relu(self.conv1(graphs[0], x))
        return self.conv2(graphs[1], h).flatten(1)


def _seeds_of(rank, world, num_owned):
    """Every third owned node, except that the last rank has no seeds at all."""
    return torch.arange(0, num_owned, 3) if rank < world - 1 else torch.zeros(0, dtype=int)


def _label_only(rank, world, config, state, mode, kernels):
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    seeds = _seeds_of(rank, world, data.num_owned_nodes)
    mfgs = sarlite.construct_mfgs(data, seeds, 2, mode=mode, kernels=kernels)
    model = TwoLayers()
    model.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    out = model(mfgs, x[mfgs[0].input_nodes])
    (out * data.node_features["probe"][mfgs[-1].output_nodes]).sum().backward()
    sarlite.all_reduce_gradients(model)
    lo = int(data.node_ranges[rank, 0])
    return (mfgs[-1].output_nodes + lo, out.detach(), x.grad,
            {n: p.grad for n, p in model.named_parameters()})


@pytest.mark.parametrize("world,kernels", [(2, "dgl"), (3, "dgl"), (2, "torch")])
@pytest.mark.parametrize("mode", ["sar", "sa", "one-shot"])
def test_label_only_blocks_match_full_graph_at_the_seeds(tmp_path, world, kernels, mode):
    g = random_graph(num_nodes=60, num_edges=300)
    g.ndata["probe"] = torch.randn(60, 6, generator=torch.Generator().manual_seed(1))
    orig, _ = sarlite.partition_graph(g, "g", world, tmp_path, return_mapping=True)
    torch.manual_seed(0)
    model = TwoLayers()
    results = spawn(_label_only, world, str(tmp_path / "g.json"), model.state_dict(),
                    mode, kernels, timeout=180)
    seeds = torch.cat([r[0] for r in results])          # new (reshuffled) global ids
    assert results[-1][0].numel() == 0 and seeds.numel() > 0
    x = g.ndata["feat"].clone().requires_grad_()
    out = model([g, g], x)
    (out[orig[seeds]] * g.ndata["probe"][orig[seeds]]).sum().backward()
    torch.testing.assert_close(torch.cat([r[1] for r in results]), out[orig[seeds]].detach(),
                               **TOL)
    torch.testing.assert_close(torch.cat([r[2] for r in results]), x.grad[orig], **TOL)
    for name, param in model.named_parameters():
        torch.testing.assert_close(results[0][3][name], param.grad, **TOL)


def _bad_seeds(rank, world, config):
    data = sarlite.load_partition_data(config)
    try:
        sarlite.construct_mfgs(data, [data.num_owned_nodes], 1)
    except ValueError as err:
        return str(err)


def test_seed_ids_outside_the_owned_range_are_rejected(tmp_path):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    for message in spawn(_bad_seeds, 2, str(tmp_path / "g.json"), timeout=120):
        assert "seed_nodes must be local ids" in message
