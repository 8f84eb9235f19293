"""The rendezvous store's health records against a process that is not one of the run's.

torch's store has no authentication, so anyone who reaches its port can write keys. What
sarlite reads back from it must carry the run key's tag: forged failure and heartbeat
records are ignored. The first tests use the record functions on a store of their own;
the last ones attack a real ``sarlite train`` run on this host, as another local
process would.
"""
from __future__ import annotations

import ipaddress
import signal
import time
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from faults import (env, error_lines, seconds_until_gone, start_train, wait_training,
                    workers, write_config)
from sarlite.runtime import runkey
from sarlite.runtime.health import Failure, _record, _recorded
from sarlite.launch import LaunchSpec, _store_address
from harness import free_port

PREFIX = "sarlite/0/"


@pytest.fixture
def store():
    return TCPStore("127.0.0.1", free_port(), None, True, timeout=timedelta(seconds=5),
                    wait_for_workers=False)


def _forge(store, line: str) -> None:
    store.append(PREFIX + "failures", "\n" + line + "\n")
    store.add(PREFIX + "failure_count", 1)


def test_a_failure_recorded_with_the_run_key_is_the_runs_failure(store):
    key = runkey.new_key()
    failure = Failure(1, 2, "rank 1 | read a bad file\nsecond line")
    assert _record(store, PREFIX, failure, key, 2) == failure
    assert _recorded(store, PREFIX, key, 2) == failure


@pytest.mark.parametrize("line", ["1|1|6869|0123456789abcdef0123456789abcdef",
                                  "1|1|6869", "garbage", "|||", "1|1|zz|" + "0" * 32])
def test_a_failure_record_without_the_run_keys_tag_is_ignored(store, line):
    _forge(store, line)
    assert _recorded(store, PREFIX, runkey.new_key(), 2) is None


@pytest.mark.parametrize("rank, code", [(5, 1), (-1, 1), (1, 0)])
def test_a_tagged_failure_of_no_rank_of_the_run_or_with_status_0_is_ignored(store, rank,
                                                                             code):
    key = runkey.new_key()
    _forge(store, Failure(rank, code, "x").encode(key, PREFIX))
    assert _recorded(store, PREFIX, key, 2) is None


def test_a_failure_of_another_attempt_is_ignored(store):
    key = runkey.new_key()
    _forge(store, Failure(1, 1, "x").encode(key, "sarlite/1/"))
    assert _recorded(store, PREFIX, key, 2) is None


def test_garbage_appended_before_a_real_failure_does_not_hide_it(store):
    key = runkey.new_key()
    store.append(PREFIX + "failures", "unterminated garbage without a newline")
    failure = Failure(0, 2, "real")
    assert _record(store, PREFIX, failure, key, 2) == failure


@pytest.mark.parametrize("nnodes, addr, bound", [(1, "127.0.0.1", "127.0.0.1"),
                                                 (2, "10.0.0.1", "10.0.0.1"),
                                                 (2, "localhost", "")])
def test_the_launchers_store_binds_the_master_address_unless_it_is_loopback_on_many_hosts(
        nnodes, addr, bound):
    spec = LaunchSpec(nproc=2, nnodes=nnodes, master_addr=addr,
                      master_port=29500 if nnodes > 1 else 0)
    assert _store_address(spec) == bound


# -- a real run ------------------------------------------------------------------------

def _attacker(run) -> TCPStore:
    """A client of the run's store, found as a local process finds it."""
    port = int(workers(run)[0].environ()["MASTER_PORT"])
    return TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=5))


def _listening(run) -> list[str]:
    """Addresses the run's processes listen on (TCP)."""
    found = []
    for proc in run.tree():
        connections = getattr(proc, "net_connections", None) or proc.connections
        found += [c.laddr.ip for c in connections(kind="tcp") if c.status == "LISTEN"]
    return found


def test_a_one_host_run_listens_on_loopback_only(tmp_path):
    run = start_train(write_config(tmp_path, epochs=100_000))
    try:
        wait_training(run, tmp_path / "run" / "metrics.jsonl", 2)
        addresses = _listening(run)
    finally:
        run.kill_all()
    assert addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses), \
        addresses


def test_forged_failure_records_do_not_stop_a_run(tmp_path):
    run = start_train(write_config(tmp_path, epochs=100_000))
    metrics = tmp_path / "run" / "metrics.jsonl"
    try:
        wait_training(run, metrics, 2)
        store = _attacker(run)
        for line in ("5|0|6869|" + "0" * 32, "1|1|6869|" + "0" * 32, "1|1|6869", "junk"):
            _forge(store, line)
        epochs = metrics.read_text().count("\n")
        time.sleep(4)                                    # several heartbeats
        assert run.proc.poll() is None, run.output()
        assert metrics.read_text().count("\n") > epochs
    finally:
        run.kill_all()


HEARTBEAT_S = 4                  # SARLITE_HEARTBEAT_TIMEOUT of the frozen worker's run
COLLECTIVE_TIMEOUT_S = 600       # SARLITE_TIMEOUT of that run (sarlite's default)
# The heartbeat deadline x 3, plus 30 s for a loaded machine: 42 s. A forged heartbeat
# that hid the freeze would leave the run to the collective timeout, far above it.
NAMED_WITHIN_S = HEARTBEAT_S * 3 + 30


def test_a_forged_heartbeat_does_not_hide_a_frozen_worker(tmp_path):
    config = write_config(tmp_path, epochs=100_000)
    environ = {**env(), "SARLITE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_S),
               "SARLITE_TIMEOUT": str(COLLECTIVE_TIMEOUT_S)}
    run = start_train(config, environ=environ)
    try:
        wait_training(run, tmp_path / "run" / "metrics.jsonl", 2)
        store = _attacker(run)
        frozen = workers(run)[1]
        since = time.monotonic()
        frozen.send_signal(signal.SIGSTOP)
        for seq in range(1, 40):                      # "busy", and ever newer
            try:
                store.set(PREFIX + "beat/1", f"{10 ** 6 + seq}|1|{'0' * 32}")
            except RuntimeError:                      # the run ended with its store
                break
            time.sleep(0.25)
        gone = seconds_until_gone(run, since, timeout=NAMED_WITHIN_S)
        _, err = run.output() if gone is not None else ("", "")
    finally:
        run.kill_all()
    assert gone is not None, f"the frozen worker was not named within {NAMED_WITHIN_S} s"
    lines = error_lines(err)
    assert len(lines) == 1 and "rank 1 sent no heartbeat" in lines[0], err
