"""A worker that dies in a collective, or ranks passing rows of different shapes: every other
rank ends with one clear error (a CollectiveError or a ValueError naming the call), never a
hang, a raw gloo traceback or a gloo abort."""
import os
import signal
import time
from datetime import timedelta

import pytest
import torch

import sarlite
from harness import WorkerError, outcome, spawn
from sarlite import comm

SHORT = timedelta(seconds=15)         # bounds a survivor's wait if gloo misses the death


def _die_on_rank_1() -> None:
    """Rank 1 is killed like an out-of-memory worker; the others give gloo a moment to see
    the closed connection (a broadcast root could otherwise hand its bytes to the kernel
    and return before the peer's death is noticed)."""
    if comm.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1.0)


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def _dies_before_sync_params(rank, world):
    model = _model()
    _die_on_rank_1()
    sarlite.sync_params(model)


def _dies_before_all_reduce_gradients(rank, world):
    model = _model()
    model(torch.ones(5, 4)).sum().backward()
    _die_on_rank_1()
    sarlite.all_reduce_gradients(model)


def _dies_before_batchnorm(rank, world):
    bn = sarlite.DistributedBatchNorm1d(3).train()
    x = torch.randn(6, 3, requires_grad=True)
    _die_on_rank_1()
    bn(x).sum().backward()


def _survivors_errors(fn) -> dict[int, str]:
    with pytest.raises(WorkerError) as info:
        spawn(fn, 3, timeout=120, kill_on_error=False, collective_timeout=SHORT)
    errors = info.value.errors
    assert sorted(errors) == [0, 1, 2]
    assert "worker 1 died" in errors[1]
    return errors


def _assert_one_collective_error(message: str, kind: str) -> None:
    first = message.splitlines()[0]
    assert first.startswith(f"CollectiveError: sarlite: collective {kind!r} failed on rank"), \
        message
    assert first.count("sarlite: collective") == 1           # wrapped once, not twice
    assert "Another worker probably died" in first


def test_a_worker_killed_before_sync_params_ends_the_others_with_a_collective_error():
    errors = _survivors_errors(_dies_before_sync_params)
    for survivor in (0, 2):
        _assert_one_collective_error(errors[survivor], "sync_params")


def test_a_worker_killed_before_all_reduce_gradients_ends_the_others_with_a_collective_error():
    errors = _survivors_errors(_dies_before_all_reduce_gradients)
    for survivor in (0, 2):
        _assert_one_collective_error(errors[survivor], "all_reduce_gradients")


def test_a_worker_killed_before_batchnorm_forward_ends_the_others_with_a_collective_error():
    errors = _survivors_errors(_dies_before_batchnorm)
    for survivor in (0, 2):
        _assert_one_collective_error(errors[survivor], "batchnorm")


def _mismatches(rank, world):
    width = 4 if rank == 1 else 3
    dtype = torch.float64 if rank == 2 else torch.float32
    rows = [torch.ones(k + 1, width) for k in range(world)]
    typed = [torch.ones(k + 1, 3, dtype=dtype) for k in range(world)]
    fields = {"h": torch.ones(rank + 2, 3), "e": torch.ones(2, 1)}
    return {
        "width": outcome(lambda: comm.all_to_all_rows(rows, kind="halo")),
        "dtype": outcome(lambda: comm.all_to_all_rows(typed, kind="halo")),
        "agree_width": outcome(lambda: comm.agree_row_shapes(
            "update_all", {**fields, "h": torch.ones(rank + 2, width)})),
        "agree_dtype": outcome(lambda: comm.agree_row_shapes(
            "apply_edges", {**fields, "e": torch.ones(2, 1, dtype=dtype)})),
        "agree_missing": outcome(lambda: comm.agree_row_shapes(
            "update_all", fields if rank != 2 else {"h": fields["h"]})),
        "agree_ok": outcome(lambda: comm.agree_row_shapes("update_all", fields)),
        "after": [r.shape[0] for r in comm.all_to_all_rows(
            [torch.ones(rank + 1, 3)] * world, kind="halo")],
    }


@pytest.fixture(scope="module")
def mismatches():
    return spawn(_mismatches, 3, timeout=120, collective_timeout=SHORT)


def test_rows_of_different_widths_fail_on_every_rank_before_reaching_gloo(mismatches):
    for kind, message in (m["width"] for m in mismatches):
        assert kind == "ValueError"
        assert message.startswith("all_to_all_rows 'halo': the ranks send rows of width 3 "
                                  "(torch.float32) on ranks 0, 2 but width 4 (torch.float32) "
                                  "on rank 1: every rank must send rows of the same width")


def test_rows_of_different_dtypes_fail_on_every_rank_naming_both(mismatches):
    for kind, message in (m["dtype"] for m in mismatches):
        assert kind == "ValueError"
        assert "width 3 (torch.float32) on ranks 0, 1 but width 3 (torch.float64) on " \
               "rank 2" in message


def test_agree_row_shapes_names_field_kind_and_both_shapes_on_every_rank(mismatches):
    for kind, message in (m["agree_width"] for m in mismatches):
        assert (kind, message) == (
            "ValueError", "update_all: field 'h' has trailing shape (3,) on ranks 0, 2 but (4,) "
                          "on rank 1: every rank must pass the same feature width")


def test_agree_row_shapes_names_a_dtype_difference_on_every_rank(mismatches):
    for kind, message in (m["agree_dtype"] for m in mismatches):
        assert (kind, message) == (
            "ValueError", "apply_edges: field 'e' has dtype torch.float32 on ranks 0, 1 but "
                          "torch.float64 on rank 2: every rank must pass the same dtype")


def test_agree_row_shapes_names_a_field_missing_on_some_rank(mismatches):
    for kind, message in (m["agree_missing"] for m in mismatches):
        assert (kind, message) == (
            "ValueError", "update_all: field 'e' is passed on ranks 0, 1 but missing on "
                          "rank 2: every rank must pass the same fields")


def test_ranks_keep_working_after_a_shape_mismatch(mismatches):
    for rank, m in enumerate(mismatches):
        assert m["agree_ok"] == ("ok", "")                # row counts may differ
        assert m["after"] == [1, 2, 3]                     # rank k sent k + 1 rows here
