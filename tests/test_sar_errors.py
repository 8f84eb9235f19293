"""Bad input to the SAR engine gets one clear error; failures never hang."""
import dgl.function as fn
import dgl.nn as dglnn
import pytest
import torch
from dgl import DGLError

import sarlite
from conftest import random_graph
from harness import WorkerError, spawn


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A 2-part and a 3-part partitioning of a graph with isolated nodes."""
    out = tmp_path_factory.mktemp("errparts")
    g = random_graph(num_nodes=40, num_edges=150, isolated=6)
    for n in (2, 3):
        sarlite.partition_graph(g, f"g{n}", n, out / f"p{n}")
    return out


def _udf_reducer(rank, world, config):
    g = sarlite.construct_full_graph(sarlite.load_partition_data(config))
    g.ndata["h"] = torch.ones(g.num_nodes(), 2)
    try:
        g.update_all(fn.copy_u("h", "m"), lambda nodes: {"h": nodes.mailbox["m"].prod(1)})
    except NotImplementedError as err:
        return str(err)
    return None


def test_unsupported_reducer_names_it_and_points_to_one_shot(parts):
    messages = spawn(_udf_reducer, 2, str(parts / "p2" / "g2.json"), timeout=120)
    for message in messages:
        assert message is not None and "<lambda>" in message and "one-shot" in message


def _one_shot_std(rank, world, config):
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data, mode="one-shot")
    g.ndata["h"] = data.node_features["feat"]
    g.update_all(fn.copy_u("h", "m"), lambda nodes: {"s": nodes.mailbox["m"].std(1, unbiased=False)})
    return g.ndata["s"]


def test_one_shot_accepts_any_reducer(parts, tmp_path):
    g = random_graph(num_nodes=40, num_edges=150, isolated=6)
    orig, _ = sarlite.partition_graph(g, "g", 2, tmp_path, return_mapping=True)
    got = torch.cat(spawn(_one_shot_std, 2, str(tmp_path / "g.json"), timeout=120))
    g.update_all(fn.copy_u("feat", "m"), lambda nodes: {"s": nodes.mailbox["m"].std(1, unbiased=False)})
    torch.testing.assert_close(got, g.ndata["s"][orig], rtol=1e-4, atol=1e-5)


def _load(rank, world, config):
    sarlite.load_partition_data(config)


def test_world_size_different_from_partitions_is_a_clear_error(parts):
    with pytest.raises(WorkerError, match="world size 2 does not match the 3 partitions"):
        spawn(_load, 2, str(parts / "p3" / "g3.json"), timeout=120)


def _graphconv_zero_in_degree(rank, world, config):
    g = sarlite.construct_full_graph(sarlite.load_partition_data(config))
    if not bool((g.in_degrees() == 0).any()):
        return None                      # this rank has no such node: nothing to check
    conv = dglnn.GraphConv(4, 2)
    try:
        conv(g, torch.ones(g.num_nodes(), 4))
    except DGLError as err:
        return str(err)
    return "no error"


def test_graphconv_raises_dgls_zero_in_degree_error(parts):
    messages = [m for m in spawn(_graphconv_zero_in_degree, 2,
                                 str(parts / "p2" / "g2.json"), timeout=120) if m]
    assert messages and all("0-in-degree nodes" in m for m in messages)


def _dies_mid_forward(rank, world, config):
    data = sarlite.load_partition_data(config)
    g = sarlite.construct_full_graph(data)

    def message(edges):
        if rank == 1:
            raise RuntimeError("worker 1 breaks inside a message function")
        return {"m": edges.src["h"]}
    g.ndata["h"] = data.node_features["feat"]
    g.update_all(message, fn.sum("m", "out"))


def test_a_worker_that_raises_mid_forward_ends_the_others_with_an_error(parts):
    with pytest.raises(WorkerError) as info:
        spawn(_dies_mid_forward, 3, str(parts / "p3" / "g3.json"), timeout=150,
              kill_on_error=False)
    errors = info.value.errors
    assert sorted(errors) == [0, 1, 2]
    assert "worker 1 breaks" in errors[1]
    for survivor in (0, 2):
        assert "CollectiveError" in errors[survivor]
        assert "Another worker probably died" in errors[survivor]
