"""One-sided reads (``KVStore(one_sided_reads=True)``, the DGL facade's store): the ranks
that read call ``pull`` alone and the owners answer from a serving thread."""
import io
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as tdist

import sarlite
import sarlite.distributed as sd
from conftest import random_graph
from harness import outcome, spawn
from sarlite.comm import traffic
from sarlite.kv import DistTensor, KVStore, init_kvstore
from sarlite.partition import RangePartitionBook

NODES = 13
RANGES = [[0, 4], [4, 9], [9, NODES]]           # three owners
TENSORS = {"f": ((NODES, 3), torch.float32), "i": ((NODES,), torch.int64),
           "b": ((NODES, 2), torch.bool), "d": ((NODES, 2, 2), torch.float64)}


def _book(rank, world):
    return RangePartitionBook(rank, world, RANGES[:world - 1] + [[RANGES[world - 1][0], NODES]],
                              [[r, r + 1] for r in range(world)])


def _init(shape, dtype, ids):
    """Rows that depend on the global id only (so every rank can predict every row)."""
    width = math.prod(shape[1:])
    values = ids.to(torch.float64).unsqueeze(1) * 10 + torch.arange(width)
    if dtype == torch.bool:
        return (values.to(torch.int64) % 3 == 0).reshape(shape)
    return values.to(dtype).reshape(shape)


def _expected(name):
    shape, dtype = TENSORS[name]
    return _init(shape, dtype, torch.arange(NODES))


def _fill(store):
    for name, (shape, dtype) in TENSORS.items():
        store.init_data(name, shape, dtype, init_func=_init)


def _pid_gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        # reaped before open (ENOENT) or between open and read (ESRCH)
        return True


def _pid_stopped(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def _wait_until(check, seconds=30.0):
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


# -- three ranks, every owner alive ----------------------------------------------------

ASKED = torch.tensor([12, 0, 7, 7, 4, 9, 3, 12, 5])          # unordered, duplicates


def _reads(rank, world):
    book = _book(rank, world)
    one, coll = KVStore(book, one_sided_reads=True), KVStore(book)
    _fill(one)
    _fill(coll)
    out = {"flags": (one.one_sided_reads, coll.one_sided_reads)}

    # a read right after a creation, with no barrier between, finds the new tensor
    fresh = []
    for k in range(20):
        one.init_data(f"fresh{k}", (NODES,), torch.int64, init_func=_init)
        if rank == 0:
            fresh.append(one.pull(f"fresh{k}", torch.arange(NODES)))
    out["fresh"] = fresh

    # rank 0 reads alone; the others wait in torch.distributed's own barrier
    if rank == 0:
        out["alone"] = {name: one.pull(name, ASKED) for name in TENSORS}
    tdist.barrier()
    out["collective"] = {name: coll.pull(name, ASKED) for name in TENSORS}

    # every rank reads at once, from two threads each
    gen = torch.Generator().manual_seed(rank)
    batches = [torch.randint(0, NODES, (int(n),), generator=gen)
               for n in torch.randint(0, 20, (40,), generator=gen)]
    wrong = []

    def read(part):
        for ids in part:
            for name in TENSORS:
                if not torch.equal(one.pull(name, ids), _expected(name)[ids]):
                    wrong.append((name, ids.tolist()))
    threads = [threading.Thread(target=read, args=(batches[k::2],)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["wrong_at_once"] = wrong
    tdist.barrier()

    # other forms of ids, on rank 1 alone
    if rank == 1:
        out["forms"] = {"list": one.pull("f", [8, 2, 2]), "array": one.pull("f", np.array([8, 2])),
                        "slice": one.pull("f", slice(2, 11, 3)), "empty": one.pull("f", torch.tensor([], dtype=torch.int64)),
                        "int": one.pull("i", torch.tensor([10]))}
        traffic.reset()
        out["repeated"] = one.pull("f", [12, 12, 12, 0, 0])
        out["repeated_traffic"] = traffic.snapshot()["kv_pull"]
    tdist.barrier()

    # rows this rank owns: no message at all, not even to itself
    traffic.reset()
    own = torch.arange(*book.node_ranges[rank].tolist()).flip(0)
    out["own"] = (one.pull("d", own), own)
    tdist.barrier()
    out["traffic"] = traffic.snapshot()

    # the collective store's pull still pairs with the other ranks' KV calls
    out["mismatch"] = outcome(lambda: coll.pull("f", ASKED) if rank == 0 else
                              coll.push("f", torch.tensor([1]), torch.zeros(1, 3)))
    out["bad_ids"] = outcome(lambda: one.pull("f", [NODES])) if rank == 2 else None
    return out


@pytest.fixture(scope="module")
def reads():
    return spawn(_reads, 3, timeout=180)


def test_the_option_is_per_store(reads):
    assert all(out["flags"] == (True, False) for out in reads)


def test_a_read_by_rank_0_alone_equals_the_collective_read(reads):
    for name in TENSORS:
        assert torch.equal(reads[0]["alone"][name], _expected(name)[ASKED])
        for out in reads:
            assert torch.equal(reads[0]["alone"][name], out["collective"][name])
        assert reads[0]["alone"][name].dtype == TENSORS[name][1]


def test_a_tensor_can_be_read_as_soon_as_its_creation_returns(reads):
    expected = _init((NODES,), torch.int64, torch.arange(NODES))
    assert len(reads[0]["fresh"]) == 20
    assert all(torch.equal(rows, expected) for rows in reads[0]["fresh"])


def test_every_rank_reading_at_once_from_two_threads_gets_exact_rows(reads):
    assert [out["wrong_at_once"] for out in reads] == [[], [], []]


def test_lists_arrays_slices_and_empty_ids_read_one_sidedly(reads):
    forms, f = reads[1]["forms"], _expected("f")
    assert torch.equal(forms["list"], f[[8, 2, 2]]) and torch.equal(forms["array"], f[[8, 2]])
    assert torch.equal(forms["slice"], f[2:11:3]) and forms["empty"].shape == (0, 3)
    assert torch.equal(forms["int"], _expected("i")[[10]])


def test_each_distinct_row_is_asked_for_once(reads):
    assert torch.equal(reads[1]["repeated"], _expected("f")[[12, 12, 12, 0, 0]])
    # one id to each of two owners (8 bytes and a 16-byte header each), one row of 12
    # bytes (and a 16-byte header) back from each
    assert reads[1]["repeated_traffic"] == {"sent": 2 * (16 + 8), "received": 2 * (16 + 12)}


def test_reading_only_owned_rows_sends_no_message(reads):
    for out in reads:
        rows, own = out["own"]
        assert torch.equal(rows, _expected("d")[own])
        assert "kv_pull" not in out["traffic"] and "kv_pull/served" not in out["traffic"]


def test_a_store_without_the_option_keeps_collective_reads(reads):
    for out in reads[:2]:
        kind, message = out["mismatch"]
        assert kind == "CollectiveError" and "different KV operation" in message


def test_ids_out_of_range_raise_on_the_reader_alone(reads):
    kind, message = reads[2]["bad_ids"]
    assert kind == "IndexError" and "ids must be in [0, 13)" in message


# -- the DGL pattern through the facade --------------------------------------------------

def _dgl_pattern(rank, world, config):
    torch.distributed.init_process_group(backend="gloo")
    g = sd.DistGraph("g", part_config=config)
    native = sarlite.sampling.DistGraph("g", part_config=config)
    pred = sd.DistTensor((g.num_nodes(), 2), torch.float32, "pred")
    nodes = sd.node_split(np.arange(g.num_nodes()), g.get_partition_book(), force_even=True)
    pred[nodes] = nodes.float().unsqueeze(1).repeat(1, 2)     # every rank writes (collective)
    g.barrier()
    rows, saved = None, io.BytesIO()
    if g.rank() == 0:
        rows = pred[np.arange(g.num_nodes())]                   # rank 1 is in the barrier
        torch.save(pred, saved)                                 # as DGL's example does
    torch.distributed.barrier()
    return {"rows": rows, "facade": g._client.one_sided_reads, "saved": saved.getvalue(),
            "native": native._client.one_sided_reads, "same_store": native._client is g._client}


def test_rank_0_reads_a_dist_tensor_while_rank_1_waits_in_a_barrier(tmp_path):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    out = spawn(_dgl_pattern, 2, str(tmp_path / "g.json"), init=False, timeout=120)
    expected = torch.arange(60).float().unsqueeze(1).repeat(1, 2)
    assert torch.equal(out[0]["rows"], expected)
    assert [(o["facade"], o["native"], o["same_store"]) for o in out] == [(True, True, True)] * 2
    assert torch.equal(torch.load(io.BytesIO(out[0]["saved"])), expected)   # saved rows


def _native_default(rank, world, config):
    g = sarlite.sampling.DistGraph("g", part_config=config)
    return g._client.one_sided_reads, outcome(lambda: pickle.dumps(g.ndata["feat"]))


def test_sarlite_s_own_dist_graph_keeps_collective_reads(tmp_path):
    sarlite.partition_graph(random_graph(), "g", 2, tmp_path)
    for one_sided, (kind, message) in spawn(_native_default, 2, str(tmp_path / "g.json"),
                                            timeout=120):
        assert not one_sided and kind == "TypeError" and "reads are collective" in message


# -- owners that died or do not answer -------------------------------------------------

DEAD_READ_TIMEOUT_S = 600.0      # the read timeout of the dead-owner run (the default's)
# "At once": a tenth of that read timeout, far above the milliseconds a refused connection
# takes even on a loaded machine, far below a read that waited for the timeout.
AT_ONCE_S = DEAD_READ_TIMEOUT_S / 10


def _dead_owner(rank, world):
    init_kvstore(_book(rank, world), one_sided_reads=True,
                 read_timeout=timedelta(seconds=DEAD_READ_TIMEOUT_S))
    x = DistTensor((NODES, 2), torch.float32, "x",
                   init_func=lambda shape, dtype, ids: ids.float().unsqueeze(1).repeat(1, 2))
    pids = [None] * world
    tdist.all_gather_object(pids, os.getpid())
    if rank == 2:                     # dies abruptly (no exit hooks) once its result is out
        threading.Timer(1.0, os._exit, (0,)).start()
        return None
    store = tdist.distributed_c10d._get_default_store()
    if rank == 1:
        store.wait(["rank 0 done"], timedelta(seconds=60))   # serves, meanwhile
        return None
    _wait_until(lambda: _pid_gone(pids[2]))
    out = {"alive": x[torch.tensor([5, 1])]}
    start = time.monotonic()
    out["dead"] = outcome(lambda: x[torch.tensor([10, 5])])
    out["elapsed"] = time.monotonic() - start
    out["again"] = outcome(lambda: x[torch.tensor([11, 0])])
    out["alive_after"], out["own"] = x[torch.tensor([6])], x[torch.tensor([3, 0])]
    store.set("rank 0 done", "1")
    return out


def test_a_dead_owner_gives_a_clear_error_at_once_and_the_rest_keeps_working():
    out = spawn(_dead_owner, 3, timeout=120)[0]
    assert torch.equal(out["alive"], torch.tensor([[5.0, 5.0], [1.0, 1.0]]))
    kind, message = out["dead"]
    assert kind == "CollectiveError" and out["elapsed"] < AT_ONCE_S
    assert "one-sided read of 'node~_N:x'" in message and "rank 2 did not answer" in message
    assert out["again"][0] == "CollectiveError" and "rank 2 did not answer" in out["again"][1]
    assert torch.equal(out["alive_after"], torch.tensor([[6.0, 6.0]]))
    assert torch.equal(out["own"], torch.tensor([[3.0, 3.0], [0.0, 0.0]]))


READ_TIMEOUT_S = 3.0
# The read timeout it sets x 3, plus 30 s for a loaded machine: 39 s, far below the 600 s
# default that a read ignoring the configured timeout would wait.
TIMED_OUT_WITHIN_S = READ_TIMEOUT_S * 3 + 30


def _silent_owner(rank, world):
    init_kvstore(_book(rank, world), one_sided_reads=True,
                 read_timeout=timedelta(seconds=READ_TIMEOUT_S))
    x = DistTensor((NODES, 2), torch.float32, "x")
    pids = [None] * world
    tdist.all_gather_object(pids, os.getpid())
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)          # frozen until rank 0 continues it
        return None
    _wait_until(lambda: _pid_stopped(pids[1]))
    start = time.monotonic()
    result = outcome(lambda: x[torch.tensor([7])])
    elapsed = time.monotonic() - start
    os.kill(pids[1], signal.SIGCONT)
    return result, elapsed


def test_an_owner_that_does_not_answer_fails_the_read_after_the_read_timeout():
    (kind, message), elapsed = spawn(_silent_owner, 2, timeout=120)[0]
    assert kind == "CollectiveError" and "one-sided read of 'node~_N:x'" in message
    assert "rank 1 did not answer" in message
    assert READ_TIMEOUT_S * 0.9 <= elapsed < TIMED_OUT_WITHIN_S


# -- leaving the process -----------------------------------------------------------------

def _first_to_finish(rank, world):
    init_kvstore(_book(rank, world), one_sided_reads=True)
    x = DistTensor((NODES, 2), torch.float32, "x", persistent=True,
                   init_func=lambda shape, dtype, ids: ids.float().unsqueeze(1).repeat(1, 2))
    if rank == 0:
        return None                   # rank 0 is done and exits; rank 1 still reads its rows
    time.sleep(2.0)
    return x[torch.tensor([2, 3, 11])]


def test_a_rank_that_finished_answers_until_the_others_have_finished():
    rows = spawn(_first_to_finish, 2, timeout=120)[1]
    assert torch.equal(rows, torch.tensor([[2.0, 2.0], [3.0, 3.0], [11.0, 11.0]]))


EXIT_SCRIPT = '''
import sys
import torch
import torch.distributed as dist
import sarlite
from sarlite.kv import DistTensor, init_kvstore
from sarlite.partition import RangePartitionBook

def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ranges = [[10 * r, 10 * r + 10] for r in range(world)]
    book = RangePartitionBook(rank, world, ranges, [[r, r + 1] for r in range(world)])
    init_kvstore(book, one_sided_reads=True)
    x = DistTensor((10 * world, 4), torch.float32, "x",
                   init_func=lambda shape, dtype, ids: ids.float().unsqueeze(1).repeat(1, 4))
    if rank == 0:               # the others are in the barrier meanwhile
        rows = x[torch.arange(10 * world)]
        assert torch.equal(rows[:, 3], torch.arange(10 * world).float())
        print("read ok", flush=True)
    dist.barrier()
    if sys.argv[1] == "finalize":
        sarlite.finalize()

main()
'''
ABORT_TEXT = ("terminate called", "Aborted", "core dumped", "SIGABRT", "Signals.SIG",
              "Traceback", "Fatal Python error")


def run_exit_script(path, mode, timeout=60):
    """Run ``EXIT_SCRIPT`` (written at ``path``) under torchrun with two processes;
    ``(returncode, output)``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parents[1]))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "--monitor_interval", "0.5", str(path),
                           mode], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("mode", ["plain", "finalize"])
def test_a_script_that_read_one_sidedly_exits_cleanly(tmp_path, mode):
    script = tmp_path / "exit_after_reads.py"
    script.write_text(EXIT_SCRIPT)
    for _ in range(2):
        code, output = run_exit_script(script, mode)
        assert code == 0 and "read ok" in output, output
        assert not [text for text in ABORT_TEXT if text in output], output
