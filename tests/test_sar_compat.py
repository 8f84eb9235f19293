"""sarlite.sar: IntelLabs SAR's public API on sarlite, checked against single-process DGL.

The behaviours SAR's own homogeneous tests check (tests/test_sar.py, test_comm.py,
test_patch_dgl.py in IntelLabs/SAR), in this project's words: full-graph and MFG outputs
and gradients equal DGL in every mode, SAR's collectives, parameter sync and gradient
sums, DistributedBN1D against torch's BatchNorm1d, Config read when a call runs, and the
sampler. One spawn of 2 gloo workers computes everything; each test checks one behaviour.
"""
import dgl
import dgl.nn as dglnn
import pytest
import torch
import torch.distributed as dist
from torch import nn

import sarlite
import sarlite.sar as sar
from conftest import random_graph
from harness import spawn

TOL = {"rtol": 1e-4, "atol": 1e-5}
WORLD = 2


class Model(nn.Module):
    """GraphConv, SAGE and GAT layers; takes one graph or one block per layer."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([
            dglnn.GraphConv(4, 6, allow_zero_in_degree=True),
            dglnn.SAGEConv(6, 5, "mean"),
            dglnn.GATConv(5, 3, num_heads=2, allow_zero_in_degree=True)])

    def forward(self, graphs, x):
        graphs = graphs if isinstance(graphs, list) else [graphs] * len(self.convs)
        for i, (conv, graph) in enumerate(zip(self.convs, graphs)):
            x = conv(graph, x)
            x = x.flatten(1) if i == len(self.convs) - 1 else torch.relu(x)
        return x


def _graph():
    g = random_graph(num_nodes=60, num_edges=300)
    g.ndata["features"] = g.ndata.pop("feat")
    g.ndata["labels"] = g.ndata.pop("label")
    g.ndata["probe"] = torch.randn(60, 6, generator=torch.Generator().manual_seed(1))
    return g


def _rows(rank, shape):
    """This rank's rows of a tensor whose concatenation the test rebuilds."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(10 + rank))


def _pass(model, graphs, x, probe):
    """Output, input gradient and summed parameter gradients of one forward/backward."""
    model.zero_grad()
    x = x.clone().requires_grad_()
    out = model(graphs, x)
    (out * probe).sum().backward()
    sar.gather_grads(model)
    return out.detach(), x.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


class _Counter:
    """Counts the row exchanges' calls: ``all_to_all_single`` and the ``isend``/``irecv``
    of ring exchanges (gloo); :meth:`remove` puts the real functions back."""

    def __init__(self):
        self.calls = 0
        self._real = dist.all_to_all_single, dist.isend, dist.irecv
        dist.all_to_all_single, dist.isend, dist.irecv = (self._counted(f) for f in self._real)

    def _counted(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)
        return call

    def remove(self):
        dist.all_to_all_single, dist.isend, dist.irecv = self._real


def _engine(rank, world, config, state, out):
    sar.initialize_comms(rank, world, "127.0.0.1", "gloo")        # reuses the group
    sar.patch_dgl()
    pd = sar.load_dgl_partition_data(config, sar.rank())
    out["keys"] = sorted(pd.node_features)
    out["node_ranges"] = pd.node_ranges
    out["shard_edges"] = [(s.edges[0], s.edges[1], sorted(s.edge_features))
                          for s in pd.all_shard_edges]
    out["missing"] = sar.suffix_key_lookup(pd.node_features, "no_such_feature")
    x = sar.suffix_key_lookup(pd.node_features, "features")
    probe = sar.suffix_key_lookup(pd.node_features, "probe")[:, :6]
    model = Model()
    model.load_state_dict(state)
    lo = pd.node_ranges[rank][0]
    out["lo"] = lo

    g = sar.construct_full_graph(pd)
    counter = _Counter()
    out["sar"] = _pass(model, g, x, probe) + (g.mode,)
    default_calls, counter.calls = counter.calls, 0
    sar.Config.disable_sr = True                          # after construction
    out["sa"] = _pass(model, g, x, probe) + (g.mode,)
    sar.Config.disable_sr = False
    counter.calls = 0
    sar.Config.max_collective_size = 1
    out["tiny"] = _pass(model, g, x, probe) + (g.mode,)
    sar.Config.max_collective_size = 0
    out["calls"] = (default_calls, counter.calls)
    counter.remove()
    block = sar.construct_full_graph(pd).get_full_partition_graph()
    out["one-shot"] = _pass(model, block, x, probe) + (type(block).__name__,)

    seeds = torch.arange(0, pd.node_ranges[rank][1] - lo, 3) + lo    # global ids
    out["seeds"] = seeds
    for name, keep, one_shot in [("mfg", True, False), ("mfg-nokeep", False, False),
                                 ("mfg-one-shot", True, True)]:
        blocks = sar.construct_mfgs(pd, seeds, 3, keep)
        if one_shot:
            blocks = [b.get_full_partition_graph() for b in blocks]
        result = _pass(model, blocks, x[blocks[0].input_nodes], probe[blocks[-1].output_nodes])
        grad_x = torch.zeros_like(x).index_add_(0, blocks[0].input_nodes, result[1])
        out[name] = (result[0], grad_x, result[2], blocks[-1].output_nodes + lo)
    try:
        sar.construct_mfgs(pd, torch.tensor([pd.node_ranges[-1][1]]), 1)
    except ValueError as err:
        out["bad_seed"] = str(err)

    dist_graph = sarlite.distributed.DistGraph.from_partition_data(
        sarlite.load_partition_data(config))
    out["converted"] = _pass(model, sar.convert_dist_graph(dist_graph), x, probe)


def _comm(rank, world, out):
    reduced = {}
    for name, op in [("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX),
                     ("min", dist.ReduceOp.MIN)]:
        t = torch.tensor([rank + 1.0, -rank, 5.0])
        sar.comm.all_reduce(t, op, move_to_comm_device=True)
        reduced[name] = t
    out["all_reduce"] = reduced
    recv = [torch.full((world,), -1) for _ in range(world)]
    sar.comm.all_to_all(recv, [torch.full((world,), k) for k in range(world)])
    out["all_to_all"] = recv
    ring = []
    for k in range(world):
        got = torch.full((world,), -1)
        sar.comm.exchange_single_tensor((rank - k) % world, (rank + k) % world, got,
                                        torch.full((world,), (rank + k) % world))
        ring.append(got)
    out["ring"] = ring
    out["exchanged"] = sar.comm.exchange_tensors(
        [torch.full((rank + k + 1, 2), 10 * rank + k) for k in range(world)])

    torch.manual_seed(rank)
    model = Model()
    out["before_sync"] = {k: v.clone() for k, v in model.state_dict().items()}
    sar.sync_params(model)
    out["after_sync"] = model.state_dict()
    for p in model.parameters():
        p.grad = torch.full_like(p, rank + 1.0)
    sar.gather_grads(model)
    out["gathered"] = {n: p.grad for n, p in model.named_parameters()}


def _norms(rank, world, out):
    h = _rows(rank, (7 + rank, 5)).requires_grad_()
    weights = _rows(100 + rank, (7 + rank, 5))
    bn = sar.DistributedBN1D(5)
    with torch.no_grad():
        bn.weight.copy_(torch.arange(5.0) + 1)
        bn.bias.fill_(0.5)
    y = bn(h)
    (y * weights).sum().backward()
    sar.gather_grads(bn)
    out["bn"] = (bn.distributed, y.detach(), h.grad, bn.weight.grad, bn.bias.grad)
    bn.eval()
    out["bn_eval"] = bn(h).detach()
    bn.reset_parameters()
    out["bn_reset"] = (bn.weight.detach().clone(), bn.bias.detach().clone())

    local = sar.DistributedBN1D(5, distributed=False, affine=False)
    hl = h.detach().clone().requires_grad_()
    yl = local(hl)
    (yl * weights).sum().backward()
    out["bn_local"] = (yl.detach(), hl.grad)

    x = h.detach().clone().requires_grad_()
    mean = sar.distributed_bn.MeanOp.apply(x)
    msq = sar.distributed_bn.VarOp.apply(x)
    (mean * torch.arange(5.0) + msq).sum().backward()
    out["meanvar"] = (mean.detach(), msq.detach(), x.grad)


def _sampling(rank, world, config, out):
    pd = sar.load_dgl_partition_data(config, rank)
    g = sar.construct_full_graph(pd)
    lo = pd.node_ranges[rank][0]
    features = sar.suffix_key_lookup(pd.node_features, "features")
    labels = sar.suffix_key_lookup(pd.node_features, "labels")
    train = sar.suffix_key_lookup(pd.node_features, "train_mask").nonzero().view(-1) + lo
    sampler = sar.core.sampling.DistNeighborSampler(
        [2, 3], input_node_features={"features": features},
        output_node_features={"labels": labels})
    epochs = {}
    for precompute in (False, True):
        torch.manual_seed(rank)
        loader = sar.core.sampling.DataLoader(g, train, sampler, batch_size=4, shuffle=True,
                                              precompute_optimized_batches=precompute)
        batches = []
        for blocks in loader:
            first, last = blocks[0], blocks[-1]
            batches.append({
                "src": first.srcdata[dgl.NID], "features": first.srcdata["features"],
                "dst": last.dstdata[dgl.NID], "labels": last.dstdata["labels"],
                "edges": [(b.srcdata[dgl.NID][b.edges()[0]], b.dstdata[dgl.NID][b.edges()[1]])
                          for b in blocks]})
        epochs[precompute] = (len(loader), batches)
    out["train"] = train
    out["epochs"] = epochs


def _everything(rank, world, config, state):
    out = {}
    _engine(rank, world, config, state, out)
    _comm(rank, world, out)
    _norms(rank, world, out)
    _sampling(rank, world, config, out)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The graph, its id mapping, the model and every worker's results."""
    g = _graph()
    path = tmp_path_factory.mktemp("sar")
    orig, _ = sarlite.partition_graph(g, "g", WORLD, path, return_mapping=True)
    torch.manual_seed(0)
    model = Model()
    results = spawn(_everything, WORLD, str(path / "g.json"), model.state_dict(),
                    timeout=180)
    return g, orig, model, results


def _reference(g, model, seeds=None):
    """DGL's output, input gradient and parameter gradients (optionally at some rows)."""
    model.zero_grad()
    x = g.ndata["features"].clone().requires_grad_()
    out = model(g, x)
    rows = slice(None) if seeds is None else seeds
    (out[rows] * g.ndata["probe"][rows]).sum().backward()
    return out[rows].detach(), x.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


def _check_against_dgl(run, key):
    g, orig, model, results = run
    out, grad_x, grads = _reference(g, model)
    torch.testing.assert_close(torch.cat([r[key][0] for r in results]), out[orig], **TOL)
    torch.testing.assert_close(torch.cat([r[key][1] for r in results]), grad_x[orig], **TOL)
    for name, grad in grads.items():
        for r in results:
            torch.testing.assert_close(r[key][2][name], grad, **TOL)


# -- data loading -------------------------------------------------------------------------
def test_partition_data_has_dgl_keys_with_type_prefixes(run):
    keys = run[3][0]["keys"]
    assert {"_N/features", "_N/labels", "_N/train_mask", dgl.NTYPE} <= set(keys)


def test_node_ranges_are_contiguous_global_ranges_per_partition(run):
    ranges = run[3][0]["node_ranges"]
    assert ranges[0][0] == 0 and ranges[-1][1] == 60 and ranges[0][1] == ranges[1][0]


def test_shard_edges_hold_every_owned_edge_grouped_by_source_partition(run):
    g, orig, _, results = run
    ranges = results[0]["node_ranges"]
    total = 0
    for r in results:
        for j, (src, dst, keys) in enumerate(r["shard_edges"]):
            assert ((src >= ranges[j][0]) & (src < ranges[j][1])).all()
            assert g.has_edges_between(orig[src], orig[dst]).all()
            assert dgl.ETYPE in keys
            total += src.numel()
    assert total == g.num_edges()


def test_suffix_key_lookup_of_an_absent_feature_is_an_empty_long_tensor(run):
    missing = run[3][0]["missing"]
    assert missing.dtype == torch.int64 and missing.numel() == 0


def test_suffix_key_lookup_refuses_an_ambiguous_suffix():
    with pytest.raises(KeyError, match="several"):
        sar.suffix_key_lookup({"_N/train_mask": 1, "_N/val_mask": 2}, "mask")


# -- full graph and MFGs ------------------------------------------------------------------
def test_full_graph_outputs_and_gradients_equal_dgl_in_sar_mode(run):
    _check_against_dgl(run, "sar")
    assert all(r["sar"][3] == "sar" for r in run[3])


def test_disable_sr_set_after_construction_runs_sa_with_the_same_results(run):
    _check_against_dgl(run, "sa")
    assert all(r["sa"][3] == "sa" for r in run[3])


def test_one_shot_block_outputs_and_gradients_equal_dgl(run):
    _check_against_dgl(run, "one-shot")
    assert all(r["one-shot"][3] == "DistributedBlock" for r in run[3])


def test_tiny_max_collective_size_splits_exchanges_and_keeps_results(run):
    _check_against_dgl(run, "tiny")
    for r in run[3]:
        default_calls, tiny_calls = r["calls"]
        assert tiny_calls > default_calls > 0


def test_convert_dist_graph_gives_the_full_graph_of_a_sarlite_distgraph(run):
    _check_against_dgl(run, "converted")


@pytest.mark.parametrize("key", ["mfg", "mfg-nokeep", "mfg-one-shot"])
def test_mfgs_from_global_seed_ids_give_dgl_results_at_the_seeds(run, key):
    g, orig, model, results = run
    seeds = torch.cat([r["seeds"] for r in results])
    assert all(torch.equal(r[key][3], r["seeds"]) for r in results)
    out, grad_x, grads = _reference(g, model, orig[seeds])
    torch.testing.assert_close(torch.cat([r[key][0] for r in results]), out, **TOL)
    torch.testing.assert_close(torch.cat([r[key][1] for r in results]), grad_x[orig], **TOL)
    for name, grad in grads.items():
        torch.testing.assert_close(results[0][key][2][name], grad, **TOL)


def test_mfg_seeds_outside_the_worker_are_refused_naming_global_ids(run):
    assert "global ids of this worker's nodes" in run[3][0]["bad_seed"]


# -- comm ---------------------------------------------------------------------------------
def test_all_reduce_sums_maxes_and_mins_in_place(run):
    reduced = run[3][1]["all_reduce"]
    torch.testing.assert_close(reduced["sum"], torch.tensor([3.0, -1.0, 10.0]))
    torch.testing.assert_close(reduced["max"], torch.tensor([2.0, 0.0, 5.0]))
    torch.testing.assert_close(reduced["min"], torch.tensor([1.0, -1.0, 5.0]))


def test_all_to_all_and_ring_exchange_deliver_each_rank_its_own_rows(run):
    for rank, r in enumerate(run[3]):
        for got in r["all_to_all"] + r["ring"]:
            assert torch.equal(got, torch.full((WORLD,), rank))


def test_exchange_tensors_returns_what_each_rank_sent_here(run):
    for rank, r in enumerate(run[3]):
        for src, got in enumerate(r["exchanged"]):
            assert torch.equal(got, torch.full((src + rank + 1, 2), 10 * src + rank))


def test_sync_params_copies_rank_0_parameters_everywhere(run):
    results = run[3]
    rank0 = results[0]["before_sync"]
    assert not torch.equal(rank0["convs.0.weight"], results[1]["before_sync"]["convs.0.weight"])
    for r in results:
        for name, value in r["after_sync"].items():
            assert torch.equal(value, rank0[name])


def test_gather_grads_sums_the_gradients_of_all_ranks(run):
    for r in run[3]:
        for grad in r["gathered"].values():
            assert torch.equal(grad, torch.full_like(grad, 3.0))


def test_sar_cpu_backends_run_on_gloo_with_a_warning(caplog):
    with caplog.at_level("WARNING", logger="sarlite.sar"):
        assert [sar.comm.effective_backend(b) for b in ("ccl", "mpi", "gloo", "nccl")] == \
            ["gloo", "gloo", "gloo", "nccl"]
    assert "'ccl'" in caplog.text and "'mpi'" in caplog.text


def test_initialize_comms_refuses_an_unknown_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        sar.initialize_comms(0, 2, "127.0.0.1", "tcp")


def test_rank_before_initialize_comms_is_a_clear_error():
    with pytest.raises(RuntimeError, match="initialize_comms"):
        sar.rank()


def test_nfs_ip_init_uses_master_addr_without_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    assert sar.nfs_ip_init(1, str(tmp_path / "ip")) == "10.1.2.3"
    assert not (tmp_path / "ip").exists()


def test_nfs_ip_init_passes_rank_0_address_through_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    written = sar.nfs_ip_init(0, str(tmp_path / "ip"))
    assert sar.nfs_ip_init(1, str(tmp_path / "ip")) == written == sar.comm.get_socket()[1]


# -- batch normalisation ------------------------------------------------------------------
def test_distributed_bn1d_equals_batchnorm1d_on_the_concatenated_rows(run):
    results = run[3]
    h = torch.cat([_rows(r, (7 + r, 5)) for r in range(WORLD)]).requires_grad_()
    weights = torch.cat([_rows(100 + r, (7 + r, 5)) for r in range(WORLD)])
    bn = nn.BatchNorm1d(5)
    with torch.no_grad():
        bn.weight.copy_(torch.arange(5.0) + 1)
        bn.bias.fill_(0.5)
    y = bn(h)
    (y * weights).sum().backward()
    assert all(r["bn"][0] for r in results)          # distributed once comms exist
    torch.testing.assert_close(torch.cat([r["bn"][1] for r in results]), y.detach(), **TOL)
    torch.testing.assert_close(torch.cat([r["bn"][2] for r in results]), h.grad, **TOL)
    torch.testing.assert_close(results[0]["bn"][3], bn.weight.grad, **TOL)
    torch.testing.assert_close(results[1]["bn"][4], bn.bias.grad, **TOL)
    torch.testing.assert_close(torch.cat([r["bn_eval"] for r in results]), y.detach(), **TOL)


def test_local_bn1d_equals_batchnorm1d_on_this_workers_rows(run):
    for rank, r in enumerate(run[3]):
        h = _rows(rank, (7 + rank, 5)).requires_grad_()
        y = nn.BatchNorm1d(5, affine=False)(h)
        (y * _rows(100 + rank, (7 + rank, 5))).sum().backward()
        torch.testing.assert_close(r["bn_local"][0], y.detach(), **TOL)
        torch.testing.assert_close(r["bn_local"][1], h.grad, **TOL)


def test_bn1d_reset_parameters_restores_ones_and_zeros(run):
    weight, bias = run[3][0]["bn_reset"]
    assert torch.equal(weight, torch.ones(5)) and torch.equal(bias, torch.zeros(5))


def test_mean_and_var_ops_are_global_statistics_with_global_gradients(run):
    results = run[3]
    x = torch.cat([_rows(r, (7 + r, 5)) for r in range(WORLD)]).requires_grad_()
    mean, msq = x.mean(0), (x ** 2).mean(0)
    (WORLD * (mean * torch.arange(5.0) + msq).sum()).backward()   # every rank's loss
    for r in results:
        torch.testing.assert_close(r["meanvar"][0], mean.detach(), **TOL)
        torch.testing.assert_close(r["meanvar"][1], msq.detach(), **TOL)
    torch.testing.assert_close(torch.cat([r["meanvar"][2] for r in results]), x.grad, **TOL)


# -- patch_dgl ----------------------------------------------------------------------------
def test_patch_dgl_routes_gat_edge_softmax_and_keeps_dgl_results_on_dgl_graphs():
    original = dgl.nn.pytorch.conv.gatconv.edge_softmax
    try:
        sar.patch_dgl()
        patched = dgl.nn.pytorch.conv.gatconv.edge_softmax
        assert patched is not original
        g = _graph()
        logits = torch.randn(g.num_edges(), 2)
        torch.testing.assert_close(patched(g, logits), original(g, logits))
        torch.testing.assert_close(sar.patched_edge_softmax(g, logits), original(g, logits))
    finally:
        sarlite.uninstall_dgl_dispatch()


def test_hetero_graph_shard_manager_is_sarlite_s_graph_of_several_types():
    assert sar.HeteroGraphShardManager is sarlite.HeteroGraphShardManager


# -- sampling -----------------------------------------------------------------------------
@pytest.mark.parametrize("precompute", [False, True])
def test_data_loader_uses_each_seed_once_with_equal_batch_counts(run, precompute):
    results = run[3]
    counts = {r["epochs"][precompute][0] for r in results}
    assert len(counts) == 1
    for r in results:
        count, batches = r["epochs"][precompute]
        assert len(batches) == count and all(b["dst"].numel() > 0 for b in batches)
        seen = torch.cat([b["dst"] for b in batches])
        assert torch.equal(torch.sort(seen).values, torch.sort(r["train"]).values)


def test_sampled_blocks_carry_the_features_and_labels_of_their_nodes(run):
    g, orig, _, results = run
    for r in results:
        for b in r["epochs"][False][1]:
            torch.testing.assert_close(b["features"], g.ndata["features"][orig[b["src"]]])
            assert torch.equal(b["labels"], g.ndata["labels"][orig[b["dst"]]])


def test_sampled_edges_exist_and_respect_the_fanouts(run):
    g, orig, _, results = run
    for r in results:
        for b in r["epochs"][False][1]:
            for fanout, (src, dst) in zip([2, 3], b["edges"]):
                assert g.has_edges_between(orig[src], orig[dst]).all()
                if dst.numel():
                    assert torch.bincount(dst).max() <= fanout
