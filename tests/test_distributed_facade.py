"""sarlite.distributed and sarlite.dgl: DGL's names, the refusals, both set-up orders, and
a DGL example script that changed one import line."""
import atexit
import sys
from pathlib import Path
from unittest import mock

import dgl
import dgl.dataloading
import dgl.distributed
import pytest
import torch
import torch.distributed as tdist

import sarlite
import sarlite.dgl as sdgl
import sarlite.distributed as sd
from conftest import random_graph
from harness import spawn
from sarlite.comm import context
from sarlite.sampling import split

DOC = Path(__file__).resolve().parents[1] / "docs" / "from-dgl.md"
DGL_NAMES = sorted(n for n in dir(dgl.distributed) if not n.startswith("_"))
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


# -- names -----------------------------------------------------------------------------

def test_every_public_dgl_distributed_name_is_either_provided_or_refused():
    both = [n for n in DGL_NAMES if n in sd.__all__ and n in sd.UNSUPPORTED]
    neither = [n for n in DGL_NAMES if n not in sd.__all__ and n not in sd.UNSUPPORTED]
    assert not both and not neither, (both, neither)


def test_every_exported_name_resolves():
    assert all(getattr(sd, name) is not None for name in sd.__all__)


def test_the_exports_are_sarlite_s_own_objects():
    assert sd.DistTensor is sarlite.DistTensor and sd.DistEmbedding is sarlite.DistEmbedding
    assert sd.optim.SparseAdam is sarlite.SparseAdam
    assert sd.optim.SparseAdagrad is sarlite.SparseAdagrad
    assert sd.nn.DistEmbedding is sarlite.DistEmbedding
    assert sd.sample_neighbors is sarlite.sampling.sample_neighbors
    assert sd.partition_graph is sarlite.partition_graph
    assert issubclass(sd.DistGraph, sarlite.sampling.DistGraph)
    assert sd.GraphPartitionBook is sd.RangePartitionBook


def test_the_top_level_holds_sarlite_s_own_names_and_points_to_the_facade():
    assert sarlite.node_split is split.node_split
    for name in ("DistGraph", "initialize"):
        with pytest.raises(AttributeError, match=f"sarlite.distributed.{name}"):
            getattr(sarlite, name)


def test_the_optim_and_nn_submodules_import_as_in_dgl():
    from sarlite.distributed.nn import DistEmbedding
    from sarlite.distributed.optim import SparseAdagrad, SparseAdam
    assert (SparseAdam, SparseAdagrad, DistEmbedding) == \
        (sarlite.SparseAdam, sarlite.SparseAdagrad, sarlite.DistEmbedding)


@pytest.mark.parametrize("name", sorted(sd.UNSUPPORTED))
def test_an_unsupported_name_raises_saying_why(name):
    with pytest.raises(NotImplementedError,
                       match=rf"dgl\.distributed\.{name}, which sarlite does not provide: "):
        getattr(sd, name)


def test_importing_an_unsupported_name_raises_the_same_error():
    with pytest.raises(NotImplementedError, match="sarlite has no servers and no RPC"):
        exec("from sarlite.distributed import start_server", {})


def test_an_unknown_name_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        sd.no_such_name
    assert not hasattr(sd, "no_such_name")


def test_the_doc_lists_every_unsupported_name():
    text = DOC.read_text()
    assert [name for name in sd.UNSUPPORTED if f"`{name}`" not in text] == []


# -- initialize in this process --------------------------------------------------------

@pytest.fixture
def no_launcher(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_initialize_without_a_launcher_runs_alone(no_launcher):
    assert sd.initialize("ip_config.txt") == (0, 1)
    assert not tdist.is_initialized()


def test_initialize_takes_dgl_s_arguments_and_ignores_them(no_launcher):
    assert sd.initialize("ip_config.txt", 1 << 20, "socket", 4, False) == (0, 1)
    assert sd.initialize(ip_config="ip_config.txt", max_queue_size=1 << 20, net_type=None,
                         num_worker_threads=1, use_graphbolt=True) == (0, 1)


def test_initialize_reads_the_launcher_without_making_a_group(no_launcher):
    no_launcher.setenv("RANK", "1")
    no_launcher.setenv("WORLD_SIZE", "2")
    no_launcher.setenv("MASTER_ADDR", "127.0.0.1")
    assert sd.initialize("ip_config.txt") == (1, 2)
    assert not tdist.is_initialized()


@pytest.mark.parametrize("env, error, message", [
    ({"RANK": "0"}, RuntimeError, "RANK is set but WORLD_SIZE is not"),
    ({"RANK": "zero", "WORLD_SIZE": "2"}, ValueError, "RANK='zero'"),
    ({"RANK": "1", "WORLD_SIZE": "2"}, RuntimeError, "MASTER_ADDR is not set"),
])
def test_initialize_names_a_broken_launcher_environment(no_launcher, env, error, message):
    no_launcher.delenv("MASTER_ADDR", raising=False)
    for name, value in env.items():
        no_launcher.setenv(name, value)
    with pytest.raises(error, match=message):
        sd.initialize("ip_config.txt")


def test_a_dist_graph_without_a_launcher_is_the_whole_graph(no_launcher, tmp_path):
    sarlite.partition_graph(random_graph(), "g", 1, tmp_path)
    sd.initialize("ip_config.txt")
    g = sd.DistGraph("g", part_config=str(tmp_path / "g.json"))
    assert (g.num_nodes(), g.num_edges()) == (60, 300) and not tdist.is_initialized()


# -- both set-up orders on two workers -------------------------------------------------

def _feats(g):
    return g.ndata["feat"][torch.arange(g.num_nodes())]


def _script_makes_the_group(rank, world, config):
    """DGL's examples: initialize, then init_process_group, then DistGraph."""
    initialized = sd.initialize("ip_config.txt")
    before = tdist.is_initialized()
    tdist.init_process_group(backend="gloo")
    group = tdist.group.WORLD
    with mock.patch.object(atexit, "register", wraps=atexit.register) as hooks:
        g = sd.DistGraph("g", part_config=config)
    nids = sd.node_split(g.ndata["train_mask"], g.get_partition_book(), force_even=True)
    return {"initialize": initialized, "before": before, "kept": tdist.group.WORLD is group,
            "feats": _feats(g), "nids": nids,
            "expected": split.node_split(g.ndata["train_mask"][torch.arange(60)],
                                         g.get_partition_book(), rank=rank),
            "settled": any(call.args == (context.settle,) for call in hooks.call_args_list)}


def _facade_makes_the_group(rank, world, config):
    """No init_process_group: node_split, the first collective entry point, joins."""
    initialized = sd.initialize("ip_config.txt", timeout=60)
    book = sarlite.load_partition_book(config, rank)[0]
    mask = torch.arange(60) % 4 == 1
    before = tdist.is_initialized()
    nids = sd.node_split(mask, book)
    after = tdist.is_initialized()
    g = sd.DistGraph("g", part_config=config)
    from sarlite.runtime import allocator
    return {"initialize": initialized, "before": before, "after": after,
            "world": tdist.get_world_size(), "nids": nids, "allocator": allocator.applied(),
            "expected": split.node_split(mask, book, rank=rank), "feats": _feats(g)}


def _dist_graph_makes_the_group(rank, world, config):
    before = tdist.is_initialized()
    g = sd.DistGraph("g", part_config=config)
    return {"before": before, "world": tdist.get_world_size(), "feats": _feats(g)}


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    g = random_graph()
    out = tmp_path_factory.mktemp("facade")
    orig_nids, _ = sarlite.partition_graph(g, "g", 2, out, return_mapping=True)
    train_ids = g.ndata["train_mask"][orig_nids].nonzero().squeeze(1)     # new ids
    return g.ndata["feat"][orig_nids], str(out / "g.json"), train_ids


@pytest.fixture(scope="module")
def script_order(partitioned):
    return spawn(_script_makes_the_group, 2, partitioned[1], init=False, timeout=120)


@pytest.fixture(scope="module")
def facade_order(partitioned):
    return spawn(_facade_makes_the_group, 2, partitioned[1], init=False, timeout=120)


def test_initialize_then_init_process_group_then_dist_graph_works(partitioned, script_order):
    feats = partitioned[0]
    for rank, out in enumerate(script_order):
        assert out["initialize"] == (rank, 2) and not out["before"]
        assert torch.equal(out["feats"], feats)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_group_the_facade_joins_keeps_freed_memory_for_mini_batches(facade_order):
    assert [out["allocator"] for out in facade_order] == ["retain", "retain"]


def test_the_script_s_own_process_group_is_kept(script_order):
    assert all(out["kept"] for out in script_order)


def test_the_script_s_own_gloo_group_is_settled_at_exit_as_sarlite_s(script_order):
    # a gloo thread may free the last collective's work while Python finalizes: abort
    assert all(out["settled"] for out in script_order)


def test_node_split_after_the_script_s_group_uses_the_process_rank(script_order):
    for out in script_order:
        assert torch.equal(out["nids"], out["expected"])


def test_without_init_process_group_the_first_collective_joins_the_group(partitioned,
                                                                          facade_order):
    feats = partitioned[0]
    for rank, out in enumerate(facade_order):
        assert out["initialize"] == (rank, 2)
        assert (out["before"], out["after"], out["world"]) == (False, True, 2)
        assert torch.equal(out["feats"], feats)


def test_node_split_as_the_first_call_splits_for_the_process_rank(facade_order):
    shares = [out["nids"] for out in facade_order]
    for out in facade_order:
        assert torch.equal(out["nids"], out["expected"])
    assert not bool(torch.isin(shares[0], shares[1]).any())


def test_dist_graph_alone_joins_the_group_without_initialize(partitioned):
    feats, config, _ = partitioned
    for out in spawn(_dist_graph_makes_the_group, 2, config, init=False, timeout=120):
        assert (out["before"], out["world"]) == (False, 2)
        assert torch.equal(out["feats"], feats)


# -- sarlite.dgl -----------------------------------------------------------------------

def test_sarlite_dgl_forwards_other_attributes_to_the_real_dgl():
    for name in ("NID", "EID", "to_block", "graph", "nn", "function", "sampling", "ops",
                 "__version__", "DGLGraph"):
        assert getattr(sdgl, name) is getattr(dgl, name), name


def test_sarlite_dgl_distributed_is_sarlite_distributed():
    assert sdgl.distributed is sd


def test_sarlite_dgl_dataloading_has_sarlite_s_distributed_loaders():
    assert sdgl.dataloading.DistNodeDataLoader is sd.DistNodeDataLoader
    assert sdgl.dataloading.DistEdgeDataLoader is sd.DistEdgeDataLoader
    assert sdgl.dataloading.DistDataLoader is sd.DistDataLoader
    assert sdgl.dataloading.DistGraph is sd.DistGraph


def test_sarlite_dgl_dataloading_forwards_the_rest_to_dgl():
    for name in ("NeighborSampler", "MultiLayerFullNeighborSampler",
                 "as_edge_prediction_sampler", "DataLoader", "negative_sampler"):
        assert getattr(sdgl.dataloading, name) is getattr(dgl.dataloading, name), name
    assert "NeighborSampler" in dir(sdgl.dataloading) and "to_block" in dir(sdgl)


def test_the_real_dgl_is_untouched():
    import dgl.distributed.dist_graph as dgl_dist_graph
    assert dgl.distributed.DistGraph is dgl_dist_graph.DistGraph
    assert dgl.dataloading.DistNodeDataLoader is not sd.DistNodeDataLoader
    assert dgl.distributed.initialize is not sd.initialize


def test_submodule_imports_beside_it_keep_the_sarlite_name():
    namespace = {}
    exec("import sarlite.dgl as dgl\nimport dgl.function as fn\nimport dgl.nn.pytorch as "
         "dglnn\n", namespace)
    assert namespace["dgl"] is sdgl and namespace["fn"] is dgl.function
    assert namespace["dglnn"] is dgl.nn.pytorch and namespace["dgl"].distributed is sd


def test_from_imports_of_the_replaced_submodules():
    from sarlite.dgl.dataloading import DistNodeDataLoader, NeighborSampler
    from sarlite.dgl.distributed import DistGraph
    assert (DistNodeDataLoader, NeighborSampler, DistGraph) == \
        (sd.DistNodeDataLoader, dgl.dataloading.NeighborSampler, sd.DistGraph)


def _dgl_example(rank, world, config):
    """The lines of DGL's dist GraphSAGE example, with ``import sarlite.dgl as dgl``."""
    import sarlite.dgl as dgl
    import dgl.nn.pytorch as dglnn
    dgl.distributed.initialize("ip_config.txt")
    torch.distributed.init_process_group(backend="gloo")
    g = dgl.distributed.DistGraph("g", part_config=config)
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], g.get_partition_book(),
                                           force_even=True)
    sampler = dgl.dataloading.NeighborSampler([3, 2])
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nid, sampler, batch_size=8,
                                                shuffle=True, drop_last=False)
    torch.manual_seed(0)
    layers = [dglnn.SAGEConv(4, 8, "mean"), dglnn.SAGEConv(8, 3, "mean")]
    seen, shapes = [], []
    for input_nodes, seeds, blocks in loader:
        x = g.ndata["feat"][input_nodes]
        h = layers[1](blocks[1], torch.relu(layers[0](blocks[0], x)))
        seen.append(seeds)
        shapes.append((tuple(h.shape), bool(torch.equal(blocks[-1].dstdata[dgl.NID], seeds))))
    return {"seen": torch.cat(seen), "shapes": shapes, "train_nid": train_nid}


def test_a_dgl_example_script_runs_with_one_import_changed(partitioned):
    _, config, train_ids = partitioned
    results = spawn(_dgl_example, 2, config, init=False, timeout=180)
    assert len(results[0]["shapes"]) == len(results[1]["shapes"]) > 0
    for out in results:
        assert torch.equal(out["seen"].sort().values, out["train_nid"].sort().values)
        assert all(ok and shape[1] == 3 for shape, ok in out["shapes"])
    union = torch.cat([out["train_nid"] for out in results])
    assert torch.equal(union.sort().values, train_ids)       # every training id, once
