"""One GATConv layer on the small random graph, single-process and on workers: the shared
case of the engine-option tests (tests/test_sar_options.py, tests/test_rows_per_step.py)."""
import dgl.nn as dglnn
import torch

import sarlite
from harness import record_rows_per_call


def reference(g):
    """The layer (seeded), its output and the input gradient of ``out.sum()`` on ``g``."""
    torch.manual_seed(0)
    conv = dglnn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True)
    x = g.ndata["feat"].clone().requires_grad_()
    out = conv(g, x)
    out.sum().backward()
    return conv, out.detach(), x.grad


def worker(rank, world, config, state, engine: dict):
    """The same on this worker's partition, built with ``construct_full_graph(data,
    **engine)``: output, input gradient, summed weight gradient, the largest rows per peer
    of every row exchange call made, and the graph's class name."""
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data, **engine)
    conv = dglnn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True)
    conv.load_state_dict(state)
    x = data.node_features["feat"].clone().requires_grad_()
    sizes = []
    record_rows_per_call(sizes)
    out = conv(g, x)
    out.sum().backward()
    sarlite.all_reduce_gradients(conv)
    return out.detach(), x.grad, conv.fc.weight.grad, sizes, type(g).__name__
