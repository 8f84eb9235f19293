"""The owner's side of one-sided requests (:mod:`sarlite.kv.service`): the wire format,
and the threads that accept connections and answer requests.

A connection must prove within :data:`HANDSHAKE_SECONDS` that it comes from a rank of the
run (a tag over this side's fresh challenge, made with the run's key); only then is it
served, as that rank, until it closes, breaks a limit of :class:`Limits` or stays idle.
Nothing a peer sends can end a serving thread with an exception: a request beyond the
limits is answered :data:`REFUSED` and the connection closed, an exception of the answer
function becomes an :data:`ANSWER_RAISED` answer.

Every thread here is a daemon that blocks only in socket calls (plain C), so it is ended
harmlessly if Python finalizes while it waits. The part of an answer that runs the
caller's ``answer`` function (torch code) is counted in :data:`busy`, which the exit hook
waits on.
"""
from __future__ import annotations

import socket
import collections
import hmac
import os
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import torch

from ..comm import traffic
from ..runtime import runkey

OK = 0
ANSWER_RAISED = -1          # status: the owner's answer function raised
REFUSED = -2                # status: the request broke the service's limits
MAGIC = 0x5341524C4954      # "SARLIT": the hello of a requester
BYE = -(2 ** 62)            # request code: the requester is leaving (reserved)
PAIR = struct.Struct("<qq")
NONCE = 16                  # bytes of each side's challenge
TAG = runkey.TAG_CHARS      # bytes of a tag on the wire (ASCII hex)
HELLO = PAIR.size + NONCE + TAG

MAX_IDS = 1 << 22           # ids in one request (32 MiB of int64)
MAX_ANSWER_BYTES = 1 << 30  # bytes in one answer
HANDSHAKE_SECONDS = 10.0    # a new connection must prove itself within this time

Answer = Callable[[int, torch.Tensor], "tuple[int, torch.Tensor | None]"]


def hello_tag(key: bytes, requester: int, owner: int, challenge: bytes, nonce: bytes,
              side: str) -> bytes:
    """The tag one side of a connection sends to prove it holds the run's key: ``side``
    is ``"request"`` (the requester's hello) or ``"answer"`` (the owner's reply)."""
    return runkey.tag(key, "one-sided", side, requester, owner, challenge,
                      nonce).encode("ascii")


@dataclass(frozen=True)
class Limits:
    """What one service accepts: ``world_size`` (so peers are ranks, and at most one
    connection per peer), ``timeout`` (seconds for each step of an answer, and how long
    an authenticated connection may stay idle), and the bounds above."""

    world_size: int
    timeout: float
    max_ids: int = MAX_IDS
    max_answer_bytes: int = MAX_ANSWER_BYTES
    handshake: float = HANDSHAKE_SECONDS

    @property
    def pending(self) -> int:
        """Connections that may be proving themselves at once."""
        return max(8, 2 * self.world_size)


class _Busy:
    """How many answers are in progress in this process (the atexit hook waits for 0)."""

    def __init__(self):
        self._count = 0
        self._idle = threading.Condition()

    def __enter__(self):
        with self._idle:
            self._count += 1

    def __exit__(self, *exc):
        with self._idle:
            self._count -= 1
            self._idle.notify_all()

    def wait_idle(self, seconds: float) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._count == 0, timeout=seconds)


class Byes:
    """The peers that said they are leaving, for one service (shared with its threads)."""

    def __init__(self):
        self._peers: set[int] = set()
        self._lock = threading.Lock()

    def add(self, peer: int) -> None:
        with self._lock:
            self._peers.add(peer)

    def missing(self, peers) -> list[int]:
        with self._lock:
            return [p for p in peers if p not in self._peers]


busy = _Busy()           # answers in progress in this process
_served = threading.Lock()   # serving threads add to one traffic counter


def recv_exact(sock: socket.socket, nbytes: int, eof_ok: bool = False) -> bytes | None:
    """Exactly ``nbytes`` from ``sock``; ``None`` at a clean end of stream before the first
    byte when ``eof_ok``. Raises ``ConnectionError`` on an end of stream otherwise."""
    buffer = bytearray(nbytes)
    view, got = memoryview(buffer), 0
    while got < nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            if eof_ok and got == 0:
                return None
            raise ConnectionError(f"the connection closed after {got} of {nbytes} bytes")
        got += n
    return bytes(buffer)


def recv_tensor(sock: socket.socket, nbytes: int) -> torch.Tensor:
    """``nbytes`` bytes from ``sock`` as a 1-D uint8 tensor (received in place)."""
    out = torch.empty(nbytes, dtype=torch.uint8)
    view, got = memoryview(out.numpy()), 0
    while got < nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError(f"the connection closed after {got} of {nbytes} bytes")
        got += n
    return out


def send_tensor(sock: socket.socket, tensor: torch.Tensor) -> None:
    """Send the raw bytes of ``tensor`` (any dtype; nothing when it is empty)."""
    if tensor.numel():
        sock.sendall(memoryview(tensor.contiguous().view(torch.uint8).numpy()))


class Peers:
    """The one authenticated connection of each peer, for one service: a newer one from
    the same peer replaces (closes) the older."""

    def __init__(self):
        self._conns: dict[int, socket.socket] = {}
        self._lock = threading.Lock()

    def admit(self, peer: int, conn: socket.socket) -> None:
        with self._lock:
            old, self._conns[peer] = self._conns.get(peer), conn
        if old is not None:
            _close(old, keep_fd=True)

    def drop(self, peer: int, conn: socket.socket) -> None:
        with self._lock:
            if self._conns.get(peer) is conn:
                del self._conns[peer]


def _close(conn: socket.socket, keep_fd: bool = False) -> None:
    """End ``conn`` for both sides; ``keep_fd`` leaves closing the descriptor to the
    thread that serves it (so that the number is not reused under it)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    if not keep_fd:
        conn.close()


class Pending:
    """The connections of one service that are still proving themselves, at most
    ``limit``: a new one beyond that evicts the oldest (a peer rank proves itself within
    a millisecond, so only connections that hold a place without proving lose it)."""

    def __init__(self, limit: int):
        self._limit, self._conns = limit, collections.deque()
        self._lock = threading.Lock()

    def add(self, conn: socket.socket) -> None:
        with self._lock:
            evicted = self._conns.popleft() if len(self._conns) >= self._limit else None
            self._conns.append(conn)
        if evicted is not None:
            _close(evicted, keep_fd=True)       # its thread sees the end and leaves

    def done(self, conn: socket.socket) -> None:
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)


def accept_forever(listener: socket.socket, answer: Answer, key: bytes, limits: Limits,
                   kind: str, byes: Byes, me: int) -> None:
    """The accepting thread of rank ``me``: one serving thread per connection, for ever,
    with at most ``limits.pending`` connections proving themselves at once (see
    :class:`Pending`). ``kind`` is the traffic counter of what is served; ``byes``
    collects the peers that said they are leaving."""
    pending, peers = Pending(limits.pending), Peers()
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:               # e.g. out of file descriptors: try again later
            time.sleep(0.1)
            continue
        pending.add(conn)
        threading.Thread(target=_serve, name="sarlite-serve", daemon=True,
                         args=(conn, answer, key, limits, kind, byes, peers, pending,
                               me)).start()


def _handshake(conn: socket.socket, key: bytes, limits: Limits, me: int) -> int | None:
    """Challenge a new connection; the peer rank it proves to be, or ``None``."""
    conn.settimeout(min(limits.handshake, limits.timeout))
    challenge = os.urandom(NONCE)
    conn.sendall(challenge)
    hello = recv_exact(conn, HELLO)
    magic, peer = PAIR.unpack(hello[:PAIR.size])
    nonce, proof = hello[PAIR.size:PAIR.size + NONCE], hello[PAIR.size + NONCE:]
    if magic != MAGIC or not 0 <= peer < limits.world_size or peer == me:
        return None
    expected = hello_tag(key, peer, me, challenge, nonce, "request")
    if not hmac.compare_digest(proof, expected):
        return None
    conn.sendall(hello_tag(key, peer, me, challenge, nonce, "answer"))
    return peer


def _serve(conn: socket.socket, answer: Answer, key: bytes, limits: Limits, kind: str,
           byes: Byes, peers: Peers, pending: Pending, me: int) -> None:
    """A serving thread: authenticate one connection, then answer its requests until it
    closes, breaks a limit or stays idle too long. Nothing a peer sends ends the thread
    with an exception."""
    peer = None
    with conn:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                peer = _handshake(conn, key, limits, me)
            finally:
                pending.done(conn)
            if peer is None:
                return                       # not one of the run's ranks
            peers.admit(peer, conn)
            _requests(conn, answer, limits, kind, byes, peer, me)
        except OSError:
            return                           # the requester died, gave up or idled
        except Exception:  # a bug here must not take the rank's service down silently
            print(f"sarlite: rank {me}'s one-sided service dropped a connection of rank "
                  f"{peer}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        finally:
            if peer is not None:
                peers.drop(peer, conn)


def _requests(conn: socket.socket, answer: Answer, limits: Limits, kind: str, byes: Byes,
              peer: int, me: int) -> None:
    """Answer the requests of authenticated ``peer`` until it closes the connection, sends
    one beyond the limits (answered :data:`REFUSED`, then closed) or is idle for longer
    than ``limits.timeout`` (a requester reconnects)."""
    idle = limits.timeout
    while True:
        conn.settimeout(idle)
        head = recv_exact(conn, PAIR.size, eof_ok=True)
        if head is None:
            return                           # the requester closed the connection
        conn.settimeout(limits.timeout)
        code, count = PAIR.unpack(head)
        if code == BYE:
            byes.add(peer)
            conn.sendall(PAIR.pack(OK, 0))
            idle = None                      # a leaving peer holds it until it exits
            continue
        if not 0 <= count <= limits.max_ids:
            conn.sendall(PAIR.pack(REFUSED, 0))
            return                           # the ids that follow cannot be skipped
        with busy:
            _answer_one(conn, answer, limits, peer, code, count, kind, me)


def _answer_one(conn: socket.socket, answer: Answer, limits: Limits, peer: int, code: int,
                count: int, kind: str, me: int) -> None:
    ids = recv_tensor(conn, 8 * count).view(torch.int64)
    try:
        status, body = answer(code, ids)
    except Exception:  # the requester must hear of it, and the thread must go on
        print(f"sarlite: rank {me} could not answer a one-sided request of rank "
              f"{peer}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        status, body = ANSWER_RAISED, None
    nbytes = body.numel() if status == OK and body is not None else 0
    if nbytes > limits.max_answer_bytes:
        status, nbytes = REFUSED, 0
    with _served:
        traffic.record(kind, nbytes + PAIR.size, ids.numel() * 8 + PAIR.size)
    conn.sendall(PAIR.pack(status, nbytes))
    if nbytes:
        send_tensor(conn, body)
