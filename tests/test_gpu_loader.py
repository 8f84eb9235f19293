"""benchmarks/gpu/sitecustomize.py: DGL 2.1.0 loads under a torch it ships no graphbolt
library for (as on the GPU machine, whose torch is newer), and sarlite's torch kernels
then train a layer exactly. The other torch is simulated by its version string."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import os, sys, tempfile
import torch
torch.__version__ = "2.11.0+cu130"            # DGL 2.1.0 has no graphbolt for it
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks", "gpu"))
import sitecustomize                            # what PYTHONPATH does at start-up
assert sitecustomize.install.__name__ == "install"
import dgl, dgl.nn as dglnn
import sarlite
sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
from conftest import random_graph

g = random_graph(num_nodes=40, num_edges=200)
out_dir = tempfile.mkdtemp()
sarlite.partition_graph(g, "g", 1, out_dir)
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
sarlite.init(backend="gloo")
sarlite.install_dgl_dispatch()
torch.manual_seed(0)
conv = dglnn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True)
x = g.ndata["feat"].clone().requires_grad_()
conv(g, x).sum().backward()
expected, grad = conv(g, x).detach(), x.grad.clone()
data = sarlite.load_partition_data(os.path.join(out_dir, "g.json"))
graph = sarlite.construct_full_graph(data, kernels="torch")
y = data.node_features["feat"].clone().requires_grad_()
out = conv(graph, y)
out.sum().backward()
torch.testing.assert_close(out.detach(), expected, rtol=1e-4, atol=1e-5)
torch.testing.assert_close(y.grad, grad, rtol=1e-4, atol=1e-5)
sarlite.finalize()
print("exact")
"""


def test_dgl_loads_under_another_torch_and_the_torch_kernels_stay_exact():
    from harness import free_port
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO), str(free_port())],
                          capture_output=True, text=True, timeout=120,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("exact")
