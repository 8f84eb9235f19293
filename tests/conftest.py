"""Shared fixtures: small graphs and the location of the real datasets."""
import os
from pathlib import Path

import dgl
import dgl.nn
import pytest
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")
os.environ.setdefault("OMP_NUM_THREADS", "1")

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# Three small layers (4 features in, 3 out) for engine checks on ``random_graph``.
SMALL_LAYERS = {
    "sage": lambda: dgl.nn.SAGEConv(4, 3, "mean"),
    "gcn": lambda: dgl.nn.GraphConv(4, 3, allow_zero_in_degree=True),
    "gat": lambda: dgl.nn.GATConv(4, 3, num_heads=2, allow_zero_in_degree=True),
}


@pytest.fixture
def data_dir() -> Path:
    """The real datasets (../shared/data); tests using it skip when it is absent."""
    if not DATA_DIR.is_dir():
        pytest.skip(f"real datasets not found at {DATA_DIR} (../shared/data)")
    return DATA_DIR


def random_graph(num_nodes: int = 60, num_edges: int = 300, seed: int = 0,
                 isolated: int = 5, feat_dim: int = 4) -> dgl.DGLGraph:
    """A directed random graph whose last ``isolated`` nodes have no edges at all,
    with node features ``feat``, an integer node field ``label`` and edge features ``w``."""
    gen = torch.Generator().manual_seed(seed)
    active = num_nodes - isolated
    src = torch.randint(0, active, (num_edges,), generator=gen)
    dst = torch.randint(0, active, (num_edges,), generator=gen)
    g = dgl.graph((src, dst), num_nodes=num_nodes)
    g.ndata["feat"] = torch.randn(num_nodes, feat_dim, generator=gen)
    g.ndata["label"] = torch.randint(0, 3, (num_nodes,), generator=gen)
    g.ndata["train_mask"] = torch.rand(num_nodes, generator=gen) < 0.3
    g.edata["w"] = torch.randn(num_edges, 2, generator=gen)
    return g


def _without_default_kvstore(monkeypatch: pytest.MonkeyPatch) -> None:
    import sarlite.kv.store
    monkeypatch.setattr(sarlite.kv.store, "_default", None)


@pytest.fixture(autouse=True, scope="module")
def _module_starts_without_a_default_kvstore():
    """In-process module fixtures start with no default KV store (a DistGraph refuses to
    replace one over another partitioning); the previous one is restored afterwards."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _without_default_kvstore(monkeypatch)
        yield


@pytest.fixture(autouse=True)
def _test_starts_without_a_default_kvstore(monkeypatch):
    """Each test starts with no default KV store, whatever earlier tests left."""
    _without_default_kvstore(monkeypatch)
