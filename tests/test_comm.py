"""torch.distributed plumbing: set-up, exchanges, parameter sync, traffic counters."""
import pytest
import torch

import sarlite
from harness import spawn
from sarlite.comm import all_to_all_rows, ring_exchange, start_known_rows, traffic


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


def _known_exchange(rank, world):
    # rank r sends (r + k) % 3 rows to rank k, so rank k expects (j + k) % 3 from rank j
    chunks = [torch.full(((rank + k) % 3, 2), float(10 * rank + k)) for k in range(world)]
    traffic.reset()
    pending = start_known_rows(chunks, [(j + rank) % 3 for j in range(world)], kind="known")
    rows = pending.wait()
    return rows.tolist(), traffic.snapshot()["known"]


def test_an_exchange_of_known_sizes_delivers_rank_0s_rows_first_and_counts_their_bytes():
    for rank, (rows, counted) in enumerate(spawn(_known_exchange, 3, timeout=120)):
        assert rows == [[float(10 * j + rank)] * 2 for j in range(3)
                        for _ in range((j + rank) % 3)]
        sent_rows = sum((rank + k) % 3 for k in range(3) if k != rank)
        assert counted["sent"] == sent_rows * 2 * 4


def _known_into(rank, world, rows_out, max_rows):
    import torch.distributed as dist
    sent = []
    post = dist.all_to_all_single

    def recorded(output, input, *args, **kwargs):
        sent.append(input.data_ptr())
        return post(output, input, *args, **kwargs)
    dist.all_to_all_single = recorded
    # rank r sends r + 1 rows to every other rank: pieces of one tensor, in rank order
    rows = torch.arange(3.0 * (rank + 1) * world).reshape(-1, 3) + 100 * rank
    counts = [0 if k == rank else rank + 1 for k in range(world)]
    out = torch.empty(sum(j + 1 for j in range(world) if j != rank) + rows_out, 3)
    try:
        got = start_known_rows(list(rows[:sum(counts)].split(counts)),
                               [0 if j == rank else j + 1 for j in range(world)],
                               kind="known", max_rows=max_rows, out=out).wait()
    except ValueError as error:
        return str(error)
    return got.tolist(), got.data_ptr() == out.data_ptr(), sent[0] == rows.data_ptr()


def _expected_known(rank, world):
    # rank j's piece for this rank follows its pieces for the ranks before it but itself
    def start(j):
        return (j + 1) * sum(1 for k in range(rank) if k != j)
    return [[100.0 * j + 3 * (start(j) + i) + c for c in range(3)]
            for j in range(world) if j != rank for i in range(j + 1)]


def test_an_exchange_of_known_sizes_receives_into_the_buffer_it_is_given():
    for rank, (values, same, _) in enumerate(spawn(_known_into, 3, 0, None, timeout=120)):
        assert values == _expected_known(rank, 3) and same


def test_an_exchange_sends_the_pieces_of_one_tensor_as_they_lie_without_a_copy():
    for _, _, unpacked in spawn(_known_into, 3, 0, None, timeout=120):
        assert unpacked


def test_an_exchange_of_known_sizes_in_calls_of_at_most_max_rows_delivers_the_same_rows():
    for rank, (values, same, _) in enumerate(spawn(_known_into, 3, 0, 1, timeout=120)):
        assert values == _expected_known(rank, 3) and same


def test_an_exchange_of_known_sizes_refuses_a_receive_buffer_of_the_wrong_size():
    for rank, message in enumerate(spawn(_known_into, 2, 1, None, timeout=120)):
        assert f"receive buffer of {2 - rank} rows of width 3" in message


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


def _ring_into(rank, world, rows_out):
    send_to, recv_from = (rank + 1) % world, (rank - 1) % world
    out = torch.empty(rows_out, 2)
    try:
        got = ring_exchange(torch.full((2, 2), float(rank)), send_to, 2, recv_from,
                            kind="ring", out=out).wait()
    except ValueError as error:
        return str(error)
    return got.tolist(), got.data_ptr() == out.data_ptr()


def test_a_ring_exchange_receives_into_the_buffer_it_is_given():
    for rank, (values, same) in enumerate(spawn(_ring_into, 2, 2, timeout=120)):
        assert values == [[float(1 - rank)] * 2] * 2 and same


def test_a_ring_exchange_refuses_a_receive_buffer_of_the_wrong_size_before_sending():
    for message in spawn(_ring_into, 2, 3, timeout=120):
        assert "receive buffer of 2 rows of width 2" in message and "(3, 2)" in message


def _empty_sides(rank, world):
    peer = 1 - rank
    alone = None
    if rank == 0:                     # rank 1 makes no matching call: none is needed
        alone = tuple(ring_exchange(torch.empty(0, 2), peer, 0, peer, kind="ring").wait().shape)
    rows = torch.full((2 if rank == 0 else 0, 2), 7.0)
    one_way = ring_exchange(rows, peer, 0 if rank == 0 else 2, peer, kind="ring").wait()
    return alone, one_way.tolist()


def test_a_ring_exchange_posts_no_message_for_a_side_without_rows():
    (alone, sent), (_, received) = spawn(_empty_sides, 2, timeout=120)
    assert alone == (0, 2) and sent == []
    assert received == [[7.0, 7.0]] * 2


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


def _wrapped_collectives(rank, world):
    from sarlite import comm
    traffic.reset()
    x = torch.tensor([float(rank), 10.0 - rank])
    out = {op: comm.all_reduce(x, op, kind="values").tolist() for op in ("sum", "max", "min")}
    out["input_kept"] = x.tolist()
    out["gathered"] = comm.all_gather_object({"rank": rank}, "values")
    out["object"] = comm.broadcast_object(f"from {rank}", src=2, kind="values")
    out["tensor"] = comm.broadcast(torch.full((2,), float(rank)), src=1, kind="values").tolist()
    comm.barrier("values")
    leaf = torch.tensor([1.0, 2.0], requires_grad=True)
    total = comm.all_reduce_autograd(leaf * (rank + 1), "autograd")
    (total * (rank + 1)).sum().backward()        # global loss: sum over ranks of these
    out["autograd"], out["grad"] = total.tolist(), leaf.grad.tolist()
    comm.agree_row_shapes("agree", {"h": torch.ones(rank + 1, 3), "e": torch.zeros(2, 2)})
    out["traffic"] = traffic.snapshot()
    return out


@pytest.fixture(scope="module")
def wrapped():
    return spawn(_wrapped_collectives, 3, timeout=120)


def test_wrapped_collectives_give_every_rank_the_reduced_gathered_and_broadcast_values(wrapped):
    for rank, out in enumerate(wrapped):
        assert out["sum"] == [3.0, 27.0] and out["max"] == [2.0, 10.0]
        assert out["min"] == [0.0, 8.0] and out["input_kept"] == [float(rank), 10.0 - rank]
        assert out["gathered"] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
        assert out["object"] == "from 2" and out["tensor"] == [1.0, 1.0]


def test_all_reduce_autograd_sums_values_and_gradients_over_ranks_and_counts_bytes(wrapped):
    for rank, out in enumerate(wrapped):
        assert out["autograd"] == [6.0, 12.0]             # (1 + 2 + 3) * [1, 2]
        # d/d leaf_r of sum_s (s + 1) * total = (r + 1) * (1 + 2 + 3)
        assert out["grad"] == [6.0 * (rank + 1)] * 2
        assert out["traffic"]["autograd"] == {"sent": 16, "received": 16}   # 8 fwd + 8 bwd
        assert out["traffic"]["agree/row_shapes"] == {"sent": 16, "received": 16}


def test_wrapped_collectives_without_a_process_group_return_the_local_value():
    from sarlite import comm
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    assert comm.all_reduce(x, "max", kind="t").tolist() == [1.0, 2.0]
    comm.all_reduce_autograd(x * 3, "t").sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert comm.all_gather_object("me", "t") == ["me"]
    assert comm.broadcast_object("me", kind="t") == "me"
    assert comm.broadcast(x, kind="t").tolist() == [1.0, 2.0]
    comm.barrier("t")
    comm.agree_row_shapes("t", {"h": torch.ones(2, 3)})
    with pytest.raises(ValueError, match="op must be one of"):
        comm.all_reduce(x, "mean", kind="t")
