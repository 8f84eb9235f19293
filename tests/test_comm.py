"""torch.distributed plumbing: set-up, exchanges, parameter sync, traffic counters."""
import pytest
import torch

import sarlite
from harness import spawn
from sarlite.comm import all_to_all_rows, ring_exchange, traffic


def test_init_without_torchrun_environment_names_the_missing_variables(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="MASTER_ADDR"):
        sarlite.init()


def _variable_exchange(rank, world):
    chunks = [torch.full(((rank + k) % 3, 2), float(10 * rank + k)) for k in range(world)]
    traffic.reset()
    received = all_to_all_rows(chunks, kind="test")
    return [r.tolist() for r in received], traffic.snapshot()["test"], sarlite.init()


def test_variable_size_exchange_delivers_each_chunk_to_its_rank_and_counts_bytes():
    results = spawn(_variable_exchange, 3, timeout=120)
    for rank, (received, counted, init_again) in enumerate(results):
        assert init_again == (rank, 3)          # init reuses the existing group
        for k, rows in enumerate(received):
            assert rows == [[float(10 * k + rank)] * 2] * ((k + rank) % 3)
        sent_rows = sum((rank + k) % 3 for k in range(3) if k != rank)
        assert counted["sent"] == sent_rows * 2 * 4


def _ring_rounds(rank, world):
    seen = []
    for round_ in range(world):
        send_to, recv_from = (rank + round_) % world, (rank - round_) % world
        rows = torch.full((rank + 1, 1), float(rank))
        got = ring_exchange(rows, send_to, recv_from + 1, recv_from, kind="ring").wait()
        seen.append((recv_from, got.flatten().tolist()))
    return seen


def test_ring_round_r_receives_from_rank_minus_r():
    for rank, seen in enumerate(spawn(_ring_rounds, 4, timeout=120)):
        for round_, (peer, values) in enumerate(seen):
            assert peer == (rank - round_) % 4
            assert values == [float(peer)] * (peer + 1)


def _sync_and_reduce(rank, world):
    torch.manual_seed(rank)                       # different initial values per rank
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2),
                                torch.nn.Linear(2, 1))
    sarlite.sync_params(model)
    synced = {n: p.detach().clone() for n, p in model.state_dict().items()}
    x = torch.full((4, 3), float(rank + 1))
    if rank == 1:                                 # rank 1 skips the last layer
        model[1](model[0](x)).sum().backward()
    else:
        model(x).sum().backward()
    unused = torch.nn.Parameter(torch.ones(2))
    holder = torch.nn.Module()
    holder.model, holder.unused = model, unused
    local = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    sarlite.all_reduce_gradients(holder)
    return (synced, local,
            {n: p.grad for n, p in holder.named_parameters()})


def test_sync_params_copies_rank0_and_gradient_sum_tolerates_missing_grads():
    results = spawn(_sync_and_reduce, 3, timeout=120)
    states = [r[0] for r in results]
    for name, value in states[0].items():
        for other in states[1:]:
            assert torch.equal(other[name], value), name
    for name, reduced in results[0][2].items():
        if name == "unused":
            assert reduced is None                # no rank had a gradient
            continue
        expected = sum(r[1].get(name.removeprefix("model."), 0) for r in results)
        torch.testing.assert_close(reduced, expected)
        for other in results[1:]:
            assert torch.equal(other[2][name], reduced)
