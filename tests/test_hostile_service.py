"""The one-sided request service against a client that is not one of the run's ranks.

An owner's serving side (:func:`sarlite.kv.serving.accept_forever`) runs here in the
test process on loopback, with a run key and an answer function that serves rows of a
small tensor; the "attacker" speaks raw TCP to it, as any local process could. After
every attack a rank that holds the key must still be served: no attack may end the
service, and none may make it allocate what the request claims.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
import time

import psutil
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sarlite.runtime import runkey
from sarlite.kv.serving import (BYE, HELLO, MAGIC, MAX_IDS, NONCE, OK, PAIR, REFUSED, TAG,
                                  Byes, Limits, accept_forever, hello_tag, recv_exact)

ROWS = torch.arange(40, dtype=torch.float32).reshape(10, 4)


def _answer(code: int, ids: torch.Tensor):
    if code != 7:
        return 1, None
    return OK, ROWS[ids].contiguous().view(torch.uint8).reshape(-1)


class Owner:
    """Rank 0 of a 2-rank run, serving on loopback with ``key``."""

    def __init__(self, limits: Limits):
        self.key, self.byes = runkey.new_key(), Byes()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        threading.Thread(target=accept_forever, daemon=True,
                         args=(self.listener, _answer, self.key, limits, "test/served",
                               self.byes, 0)).start()

    def connect(self, key: bytes | None = None, rank: int = 1) -> socket.socket:
        """A connection that passed the handshake as ``rank`` with ``key`` (the run's by
        default)."""
        conn = socket.create_connection(self.address, timeout=5)
        challenge = recv_exact(conn, NONCE)
        nonce = os.urandom(NONCE)
        conn.sendall(PAIR.pack(MAGIC, rank) + nonce +
                     hello_tag(key or self.key, rank, 0, challenge, nonce, "request"))
        proof = conn.recv(TAG)
        assert proof == hello_tag(self.key, rank, 0, challenge, nonce, "answer"), proof
        return conn

    def read(self, ids: list[int], conn: socket.socket | None = None) -> torch.Tensor:
        """Rows ``ids`` as a rank of the run reads them."""
        conn = conn or self.connect()
        conn.sendall(PAIR.pack(7, len(ids)) + struct.pack(f"<{len(ids)}q", *ids))
        status, nbytes = PAIR.unpack(recv_exact(conn, PAIR.size))
        assert status == OK
        return torch.frombuffer(bytearray(recv_exact(conn, nbytes)),
                                dtype=torch.float32).reshape(-1, 4)


@pytest.fixture(scope="module")
def owner():
    return Owner(Limits(world_size=2, timeout=5.0, handshake=1.0))


def _send_and_end(conn: socket.socket, frame: bytes) -> None:
    """Send ``frame`` and end the sending side (the owner may have closed it already)."""
    try:
        conn.sendall(frame)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _closed(conn: socket.socket, timeout: float = 3.0) -> bool:
    """Whether the owner closed ``conn`` (without sending anything first)."""
    conn.settimeout(timeout)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_rank_with_the_run_key_reads_rows(owner):
    assert torch.equal(owner.read([1, 3, 9]), ROWS[[1, 3, 9]])


def test_the_old_hello_without_a_key_gets_no_row(owner):
    conn = socket.create_connection(owner.address, timeout=5)
    recv_exact(conn, NONCE)                          # the challenge
    conn.sendall(PAIR.pack(MAGIC, 1) + PAIR.pack(7, 2) + struct.pack("<2q", 0, 1))
    assert _closed(conn)


def test_a_hello_made_with_another_key_is_closed(owner):
    with pytest.raises(AssertionError):
        owner.connect(key=runkey.new_key())


@pytest.mark.parametrize("rank", [0, 2, -1, 2 ** 40])
def test_a_hello_claiming_no_peer_rank_is_closed(owner, rank):
    with pytest.raises((AssertionError, ConnectionError, OSError)):
        owner.connect(rank=rank)


def test_a_silent_connection_is_closed_after_the_handshake_time(owner):
    conn = socket.create_connection(owner.address, timeout=5)
    start = time.monotonic()
    recv_exact(conn, NONCE)                          # the challenge, then nothing
    assert _closed(conn, timeout=5) and time.monotonic() - start < 3


@pytest.mark.parametrize("count", [2 ** 31, 2 ** 40, -1, -(2 ** 62) + 1, MAX_IDS + 1])
def test_a_request_beyond_the_id_limit_is_refused_without_allocating(owner, count):
    before = psutil.Process().memory_info().rss
    conn = owner.connect()
    conn.sendall(PAIR.pack(7, count))
    assert PAIR.unpack(recv_exact(conn, PAIR.size)) == (REFUSED, 0)
    assert _closed(conn)
    assert psutil.Process().memory_info().rss - before < 64 << 20
    assert torch.equal(owner.read([2]), ROWS[[2]])


def test_an_answer_beyond_the_byte_limit_is_refused():
    small = Owner(Limits(world_size=2, timeout=5.0, max_answer_bytes=32))
    conn = small.connect()
    conn.sendall(PAIR.pack(7, 3) + struct.pack("<3q", 0, 1, 2))    # 48 bytes of rows
    assert PAIR.unpack(recv_exact(conn, PAIR.size)) == (REFUSED, 0)
    assert torch.equal(small.read([0, 1], conn), ROWS[[0, 1]])   # the connection goes on


def test_an_answer_that_raises_is_an_error_answer_and_the_service_goes_on(owner, capfd):
    conn = owner.connect()
    conn.sendall(PAIR.pack(7, 1) + struct.pack("<q", 10 ** 6))     # no such row
    status, nbytes = PAIR.unpack(recv_exact(conn, PAIR.size))
    assert status == -1 and nbytes == 0
    assert torch.equal(owner.read([4], conn), ROWS[[4]])
    assert "could not answer a one-sided request of rank 1" in capfd.readouterr().err


def test_connections_proving_themselves_at_once_are_bounded(owner):
    idle = [socket.create_connection(owner.address, timeout=5) for _ in range(40)]
    time.sleep(0.3)
    threads = threading.active_count()
    assert threads < 20, f"{threads} threads for 40 idle connections"
    for conn in idle:
        conn.close()
    assert torch.equal(owner.read([5]), ROWS[[5]])


def test_a_newer_connection_of_a_peer_replaces_its_older_one(owner):
    old = owner.connect()
    new = owner.connect()
    assert _closed(old)
    assert torch.equal(owner.read([6], new), ROWS[[6]])


def test_an_idle_authenticated_connection_is_closed_after_the_timeout():
    quick = Owner(Limits(world_size=2, timeout=0.5))
    conn = quick.connect()
    assert _closed(conn, timeout=5)


def test_leaving_counts_only_for_the_authenticated_peer(owner):
    conn = socket.create_connection(owner.address, timeout=5)
    recv_exact(conn, NONCE)
    conn.sendall(PAIR.pack(MAGIC, 1) + bytes(NONCE + TAG) + PAIR.pack(BYE, 0))
    assert _closed(conn)
    assert owner.byes.missing([1]) == [1]
    conn = owner.connect()
    conn.sendall(PAIR.pack(BYE, 0))
    assert PAIR.unpack(recv_exact(conn, PAIR.size)) == (OK, 0)
    assert owner.byes.missing([1]) == []


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=HELLO + 64))
def test_garbage_before_the_handshake_never_reaches_the_answer(owner, frame):
    conn = socket.create_connection(owner.address, timeout=5)
    recv_exact(conn, NONCE)
    _send_and_end(conn, frame)
    conn.settimeout(3)
    try:
        reply = conn.recv(1 << 16)
    except ConnectionResetError:
        reply = b""
    assert reply == b"", "a frame without the run key got an answer"
    conn.close()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=64),
                 st.tuples(st.integers(-(2 ** 63), 2 ** 63 - 1),
                           st.integers(-(2 ** 63), 2 ** 63 - 1)).map(lambda p: PAIR.pack(*p)),
                 st.tuples(st.just(7), st.integers(0, 12)).map(lambda p: PAIR.pack(*p))))
def test_any_frame_after_the_handshake_leaves_the_service_serving(owner, frame):
    conn = owner.connect()
    _send_and_end(conn, frame)
    conn.settimeout(6)
    try:
        while conn.recv(1 << 16):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    conn.close()
    assert torch.equal(owner.read([8]), ROWS[[8]])


# -- a real run ------------------------------------------------------------------------

def _attack_rank_0(rank, world):
    """Rank 1 attacks rank 0's service as a process without the key would, then reads as
    a rank; rank 0 says whether it took a forged leaving for rank 1's."""
    import torch.distributed as tdist

    from sarlite.kv import KVStore
    from sarlite.partition import RangePartitionBook
    book = RangePartitionBook(rank, world, [[0, 5], [5, 10]], [[0, 1], [1, 2]])
    store = KVStore(book, one_sided_reads=True)
    store.init_data("f", (10, 4), torch.float32, init_func=lambda shape, dtype, ids:
                    ROWS[ids].to(dtype))
    service = store._reader._service
    seen = {}
    if rank == 1:
        address = service._addresses[0]
        old = socket.create_connection(address, timeout=5)      # the protocol before keys
        old.sendall(PAIR.pack(MAGIC, 1) + PAIR.pack(7, 2) + struct.pack("<2q", 0, 1))
        seen["old protocol"] = _drained(old)
        huge = socket.create_connection(address, timeout=5)
        huge.sendall(PAIR.pack(MAGIC, 1) + bytes(NONCE + TAG) + PAIR.pack(7, 2 ** 31))
        seen["huge header"] = _drained(huge)
        bye = socket.create_connection(address, timeout=5)
        bye.sendall(PAIR.pack(MAGIC, 1) + bytes(NONCE + TAG) + PAIR.pack(BYE, 0))
        seen["forged leaving"] = _drained(bye)
        idle = [socket.create_connection(address, timeout=5) for _ in range(100)]
        seen["read"] = store.pull("f", torch.tensor([0, 4, 9]))
        for conn in idle:
            conn.close()
    tdist.barrier()
    if rank == 0:
        seen["rank 1 left"] = service._byes.missing([1]) == []
    tdist.barrier()         # rank 1 leaves (and says so, genuinely) only after rank 0 looked
    return seen


def _drained(conn: socket.socket) -> int:
    """Bytes the owner sent beyond its 16-byte challenge before it closed ``conn``."""
    got = b""
    conn.settimeout(15)
    try:
        while chunk := conn.recv(1 << 16):
            got += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return len(got) - NONCE


def test_a_runs_service_serves_nothing_without_the_key_and_keeps_serving():
    from harness import spawn
    owner, attacker = spawn(_attack_rank_0, 2)
    assert owner == {"rank 1 left": False}
    assert attacker["old protocol"] == 0 and attacker["huge header"] == 0
    assert attacker["forged leaving"] == 0
    assert torch.equal(attacker["read"], ROWS[[0, 4, 9]])
