"""The installed stack: ``import dgl`` works by itself on every supported torch, through the
start-up hook that sarlite installs (``_sarlite_dgl_hook.py``), and only where DGL alone
would fail; the hook costs nothing at start-up and has a switch.

Each test runs a fresh interpreter of this environment from an empty folder, as a user's
script starts, so that the hook's ``.pth`` file (not the checkout) is what is tested.
"""
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import _sarlite_dgl_hook as hook

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, cwd, *args: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", hook.ENV)} | env
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=120)


def test_import_dgl_then_sarlite_works_from_any_folder(tmp_path):
    result = _python("import dgl, dgl.nn, dgl.distributed, sarlite; print(dgl.__version__)",
                     tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "2.1.0"


def test_hook_changes_import_dgl_only_where_dgl_alone_fails(tmp_path):
    alone = _python("import dgl", tmp_path, **{hook.ENV: "0"})
    hooked = _python("import dgl, dgl.graphbolt as gb, _sarlite_dgl_hook as h\n"
                     "print(h.reason()); print(gb.__file__)", tmp_path)
    assert hooked.returncode == 0, hooked.stderr[-2000:]
    reason, graphbolt_file = hooked.stdout.strip().splitlines()
    if alone.returncode == 0:         # DGL loads as it is (torch 2.2.1): untouched
        assert reason == "None" and graphbolt_file.endswith("__init__.py")
    else:                             # the hook stood in, and says why
        last_error = alone.stderr.strip().splitlines()[-1]
        assert "graphbolt" in alone.stderr and graphbolt_file == "None"
        assert last_error.split(": ", 1)[-1] in reason


def test_start_up_hook_imports_nothing_heavy(tmp_path):
    result = _python("import sys; print(sorted({'torch', 'dgl', 'numpy', 'sarlite'} & "
                     "set(sys.modules)), '_sarlite_dgl_hook' in sys.modules)", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "True"]


@pytest.mark.parametrize("value", ["0", "off", "false", "NO"])
def test_hook_is_off_when_the_environment_says_so(tmp_path, value):
    result = _python("import sys, _sarlite_dgl_hook as h\n"
                     "print(any(isinstance(f, h.GraphboltFinder) for f in sys.meta_path))",
                     tmp_path, **{hook.ENV: value})
    assert result.stdout.strip() == "False", result.stderr


def test_a_placeholder_name_refuses_use_with_the_reason():
    module = types.ModuleType("fake.graphbolt")
    module.something = 1
    hook._make_empty(module, "no library for this torch")
    placeholder = module.FusedCSCSamplingGraph
    assert "something" not in vars(module)      # what the failed import left is gone
    assert not isinstance(object(), placeholder)
    with pytest.raises(ImportError, match="fake.graphbolt.fused_csc_sampling_graph is not "
                                          "available: no library for this torch"):
        module.fused_csc_sampling_graph()
    with pytest.raises(AttributeError):
        module.__wrapped__


OTHER_TORCH = r"""
import os, sys, tempfile
import torch
torch.__version__ = "2.11.0+cu130"            # DGL 2.1.0 has no graphbolt library for it
import dgl, dgl.nn as dglnn                     # the start-up hook ran before this line
import _sarlite_dgl_hook
assert "torch 2.11.0+cu130" in _sarlite_dgl_hook.reason()
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


def test_dgl_loads_under_a_torch_without_its_graphbolt_library_and_stays_exact(tmp_path):
    """As on a GPU machine whose torch is newer than DGL 2.1.0's (simulated by the version
    string, so that this also runs on torch 2.2.1): DGL imports, and sarlite's torch
    kernels train a GATConv exactly as DGL does."""
    from harness import free_port
    done = _python(OTHER_TORCH, tmp_path, str(REPO), str(free_port()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("exact")


@pytest.mark.parametrize("torch_version,numpy_version,refused", [
    ("2.2.1+cu121", "2.0.0", True), ("2.2.1+cu121", "1.26.4", False),
    ("2.3.0", "2.0.0", False), ("2.13.0+cpu", "2.4.6", False)])
def test_torch_before_2_3_beside_numpy_2_is_refused_at_import(monkeypatch, torch_version,
                                                             numpy_version, refused):
    import numpy
    import torch

    import sarlite
    monkeypatch.setattr(torch, "__version__", torch_version)
    monkeypatch.setattr(numpy, "__version__", numpy_version)
    if refused:
        with pytest.raises(ImportError, match=r"built for numpy 1.x .* install numpy<2"):
            sarlite._check_torch_numpy()
    else:
        sarlite._check_torch_numpy()
