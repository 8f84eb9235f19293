"""Bad input and mismatched calls on several ranks end with one clear error, never a hang."""
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as tdist

import sarlite
from harness import outcome, spawn
from sarlite.kv import DistTensor, init_kvstore
from sarlite.partition import RangePartitionBook

NODES = 12


def _setup(rank, world):
    init_kvstore(RangePartitionBook(rank, world, [[0, 5], [5, NODES]], [[0, 1], [1, 2]]))
    return DistTensor((NODES, 2), torch.float32, "x",
                      init_func=lambda shape, dtype, ids: ids.float().unsqueeze(1).repeat(1, 2))


def _bad_inputs(rank, world):
    x = _setup(rank, world)
    y = DistTensor((NODES, 2), torch.float32, "y")
    everything = torch.arange(NODES)
    out = {"range": outcome(lambda: x[torch.tensor([1, 100 if rank == 1 else 7])])}
    before = x[everything]
    dtype = torch.float64 if rank == 0 else torch.float32
    out["dtype"] = outcome(lambda: x.__setitem__(torch.tensor([0, 9]),
                                                  torch.zeros(2, 2, dtype=dtype)))
    out["unchanged"] = torch.equal(x[everything], before)
    out["shapes"] = outcome(lambda: DistTensor((NODES, 2 + rank), torch.float32, "z"))
    out["recreate"] = outcome(lambda: DistTensor((NODES, 3), torch.float32, "x"))
    out["mismatch"] = outcome(lambda: (x if rank == 0 else y)[torch.tensor([3])])
    out["after"] = torch.equal(x[torch.tensor([9, 2])], torch.tensor([[9.0] * 2, [2.0] * 2]))
    return out


@pytest.fixture(scope="module")
def outcomes():
    return spawn(_bad_inputs, 2, timeout=120)


def test_ids_out_of_range_raise_on_their_rank_and_collective_error_elsewhere(outcomes):
    assert outcomes[1]["range"][0] == "IndexError"
    assert "ids must be in [0, 12), got values in [1, 100]" in outcomes[1]["range"][1]
    assert outcomes[0]["range"] == ("CollectiveError", "pull of 'node~_N:x': rank 1 passed "
                                    "invalid input (its own error says what); no rank "
                                    "changed any data")


def test_a_dtype_mismatch_on_push_changes_no_data_on_any_rank(outcomes):
    assert outcomes[0]["dtype"][0] == "TypeError" and "dtype torch.float64" in \
        outcomes[0]["dtype"][1]
    assert outcomes[1]["dtype"][0] == "CollectiveError"
    assert outcomes[0]["unchanged"] and outcomes[1]["unchanged"]


def test_ranks_creating_different_shapes_all_get_a_value_error_listing_them(outcomes):
    for kind, message in (o["shapes"] for o in outcomes):
        assert kind == "ValueError"
        assert "rank 0: ('node~_N:z', (12, 2)" in message
        assert "rank 1: ('node~_N:z', (12, 3)" in message


def test_recreating_an_existing_name_with_another_shape_fails_on_every_rank(outcomes):
    for kind, message in (o["recreate"] for o in outcomes):
        assert kind == "ValueError" and "already exists with shape (12, 2)" in message


def test_ranks_calling_different_operations_all_get_a_collective_error(outcomes):
    for kind, message in (o["mismatch"] for o in outcomes):
        assert kind == "CollectiveError" and "different KV operation" in message


def test_the_ranks_keep_working_after_the_errors(outcomes):
    assert outcomes[0]["after"] and outcomes[1]["after"]


TIMEOUT_S = 10.0                 # short, yet long enough for a loaded machine's rendezvous
# The collective timeout it sets x 3, plus 30 s for a loaded machine: 60 s, far below the
# 600 s default that a pull ignoring the configured timeout would wait.
TIMED_OUT_WITHIN_S = TIMEOUT_S * 3 + 30
SPAWN_S = 120                    # the test's whole run, hangs included


def _one_rank_calls(rank, world):
    x = _setup(rank, world)
    store = tdist.distributed_c10d._get_default_store()
    start = time.monotonic()
    if rank == 0:
        result = outcome(lambda: x[torch.tensor([1, 8])])
        elapsed = time.monotonic() - start
        store.set("rank 0 done", "1")
        return result, elapsed
    try:                # rank 1 never makes the call, and stays until rank 0 is done
        store.wait(["rank 0 done"], timedelta(seconds=SPAWN_S))
    except RuntimeError:                         # rank 0 and its store are gone
        pass
    return ("skipped", ""), time.monotonic() - start


def test_a_pull_made_by_only_some_ranks_times_out_with_a_clear_message():
    (kind, message), elapsed = spawn(_one_rank_calls, 2, timeout=SPAWN_S,
                                     collective_timeout=timedelta(seconds=TIMEOUT_S))[0]
    assert kind == "CollectiveError"
    assert message.startswith("pull of 'node~_N:x': sarlite: collective")
    assert "did not make the same call" in message
    assert 0.9 * TIMEOUT_S <= elapsed < TIMED_OUT_WITHIN_S     # the timeout, not a hang
