"""The owner's side of one-sided requests (:mod:`sarlite.comm.service`): the wire format,
and the threads that accept connections and answer requests.

Every thread here is a daemon that blocks only in socket calls (plain C), so it is ended
harmlessly if Python finalizes while it waits. The part of an answer that runs the
caller's ``answer`` function (torch code) is counted in :data:`busy`, which the exit hook
waits on.
"""
from __future__ import annotations

import socket
import struct
import sys
import threading
import time
import traceback
from typing import Callable

import torch

from . import traffic

OK = 0
ANSWER_RAISED = -1          # status: the owner's answer function raised
MAGIC = 0x5341524C4954      # "SARLIT": the hello of a requester
BYE = -(2 ** 62)            # request code: the requester is leaving (reserved)
PAIR = struct.Struct("<qq")

Answer = Callable[[int, torch.Tensor], "tuple[int, torch.Tensor | None]"]


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


def accept_forever(listener: socket.socket, answer: Answer, timeout: float, kind: str,
                   byes: Byes, me: int) -> None:
    """The accepting thread of rank ``me``: one serving thread per connection, for ever.
    ``timeout`` (seconds) bounds each step of an answer; ``kind`` is the traffic counter of
    what is served; ``byes`` collects the peers that said they are leaving."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:               # e.g. out of file descriptors: try again later
            time.sleep(0.1)
            continue
        threading.Thread(target=_serve, args=(conn, answer, timeout, kind, byes, me),
                         name="sarlite-serve", daemon=True).start()


def _serve(conn: socket.socket, answer: Answer, timeout: float, kind: str, byes: Byes,
           me: int) -> None:
    """A serving thread: answer the requests of one connection until it closes."""
    with conn:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(timeout)
            magic, peer = PAIR.unpack(recv_exact(conn, PAIR.size))
            if magic != MAGIC:
                return                       # not one of ours
            while True:
                conn.settimeout(None)        # idle requesters may stay silent for ever
                head = recv_exact(conn, PAIR.size, eof_ok=True)
                if head is None:
                    return                   # the requester closed the connection
                conn.settimeout(timeout)
                code, count = PAIR.unpack(head)
                if code == BYE:
                    byes.add(peer)
                    conn.sendall(PAIR.pack(OK, 0))
                    continue
                with busy:
                    _answer_one(conn, answer, peer, code, count, kind, me)
        except OSError:
            return                           # the requester died or gave up


def _answer_one(conn: socket.socket, answer: Answer, peer: int, code: int, count: int,
                kind: str, me: int) -> None:
    ids = recv_tensor(conn, 8 * count).view(torch.int64)
    try:
        status, body = answer(code, ids)
    except Exception:  # the requester must hear of it, and the thread must go on
        print(f"sarlite: rank {me} could not answer a one-sided request of rank "
              f"{peer}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        status, body = ANSWER_RAISED, None
    nbytes = body.numel() if status == OK and body is not None else 0
    with _served:
        traffic.record(kind, nbytes + PAIR.size, ids.numel() * 8 + PAIR.size)
    conn.sendall(PAIR.pack(status, nbytes))
    if nbytes:
        send_tensor(conn, body)
