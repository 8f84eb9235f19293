"""One-sided requests: one rank asks a peer for bytes, and a thread of the peer answers.

Everything else in :mod:`sarlite.comm` is a collective. DGL's distributed reads are
one-sided (a server answers them while the trainer that owns the rows does something
else), and DGL scripts rely on that: ``if g.rank() == 0: pred[ids]`` while the other
ranks wait in ``torch.distributed.barrier()``. A :class:`RequestService` gives that without
servers:

* **Creating one is a collective.** Every rank opens a listening TCP socket on the address
  the other hosts reach it by (:func:`~sarlite.comm.launchenv.reachable_address`), the
  ranks exchange their addresses with one ``all_gather_object``, and every rank starts a
  daemon thread that accepts connections; each connection gets a daemon thread that
  answers its requests with the ``answer`` function the creator gave.
* **Asking is not.** :meth:`RequestService.ask` is called by one rank alone, at any time
  and from any thread; the owners' main threads take no part (they may be inside a
  collective, or computing). A rank can ask and answer at the same time.

Wire protocol, on one connection per (requester, owner), opened at the first request and
kept: a hello ``(MAGIC, requester rank)``, then any number of requests, each answered
before the next is sent. All numbers are little-endian int64.

=========  ===================  ===============================================
request    requester -> owner   ``(code, n)``, then ``n`` int64 ids
answer     owner -> requester   ``(status, nbytes)``, then ``nbytes`` bytes
leaving    requester -> owner   ``(BYE, 0)``, answered ``(0, 0)``
=========  ===================  ===============================================

**Why sockets and not the process group's point-to-point calls.** Measured with torch
2.2's gloo: a serving thread blocked in ``recv_anysource`` sometimes never matched a
request under concurrent requests (3 hangs in 5 runs of a 3-rank stress test), and a
thread blocked in a receive from one peer wakes when that peer's process exits. When
that happens while this rank's interpreter finalizes, the thread returns into torch's C++
bindings, where Python ends it by unwinding through ``noexcept`` frames, which aborts the
process ("terminate called without an active exception"). A Python thread blocked in a
socket call is in plain C: at interpreter exit it is ended harmlessly, whatever its peers
do.

**Waits.** Every wait of a requester is bounded by the service's ``timeout`` (connect,
send, and each receive); an owner that died fails at once (refused or reset connection).
A failed connection is closed, so a late answer can never be taken for another one; the
next request to that owner connects again.

**Exit.** A rank must go on answering while its peers may still read its rows, so at exit
(an ``atexit`` hook, :meth:`RequestService.leave`) every rank tells each peer it is leaving
and waits until every peer has said the same or is gone (its process ended), as DGL's
``exit_client`` waits for the other trainers. The wait is bounded by the service's
timeout, and skipped when the process ends with an uncaught exception (the others must
not wait for a rank that failed). The hook then waits (up to 2 s) until no serving thread
is between a request and its answer (that part runs torch code, which must not be cut off
while Python finalizes). The service needs no other teardown and has none: its threads and
sockets end with the process.

The sockets are not authenticated (neither are gloo's): anyone who can reach a rank's
port can read the rows it serves.
"""
from __future__ import annotations

import atexit
import os
import select
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Mapping

import torch

from . import health, traffic
from .collectives import all_gather_object
from .context import DEFAULT_TIMEOUT, rank, world_size
from .errors import CollectiveError
from .launchenv import reachable_address
from .serving import (ANSWER_RAISED, BYE, MAGIC, OK, PAIR, Answer, Byes, accept_forever,
                      busy, recv_exact, recv_tensor, send_tensor)

__all__ = ["ANSWER_RAISED", "OK", "Answer", "RequestService"]

_EXIT_GRACE = 2.0           # seconds the exit hook waits for answers in progress
_services: list["RequestService"] = []   # every service of the process, kept for exit
_hook = threading.Lock()


def _register(service: "RequestService") -> None:
    with _hook:
        if not _services:
            atexit.register(_at_exit)
        _services.append(service)


def _at_exit() -> None:
    """Leave every service (waiting for the peers, unless an uncaught exception ends the
    process), then let answers in progress finish."""
    wait = getattr(sys, "last_value", None) is None
    for service in list(_services):
        late = service.leave(wait)
        if late:
            print(f"sarlite: rank {service.rank} leaves although ranks {late} did not "
                  f"finish within {service.timeout} (their one-sided reads of this rank "
                  f"will fail)", file=sys.stderr, flush=True)
    busy.wait_idle(_EXIT_GRACE)


class RequestService:
    """A service answering one-sided requests on every rank; see the module docstring.

    Parameters
    ----------
    answer:
        ``answer(code, ids) -> (status, body)``, called in a serving thread of this rank
        for every request another rank sends here: ``code`` is the requester's int (e.g. a
        tensor's name code), ``ids`` an ``(n,)`` int64 tensor. It returns ``status`` (0 =
        OK; other values are the caller's own, passed to the requester; -1 is reserved
        for "``answer`` raised", whose traceback this rank prints) and, for status 0,
        ``body``: a 1-D uint8 CPU tensor (or ``None`` for no bytes). It runs beside the
        main thread, so what it reads must be safe to read then. It must not hold
        references that should die with their owner (pass a weak reference).
    what:
        Names the service in errors.
    kind:
        The traffic counter (:mod:`sarlite.comm.traffic`) of the requests this rank
        sends; what its threads serve is counted under ``f"{kind}/served"``.
    timeout:
        Bounds every wait of :meth:`ask` (and of an answer in progress); default
        ``SARLITE_TIMEOUT`` seconds (600).

    Creating it is a **collective**: every rank calls it (one ``all_gather_object`` of the
    addresses, bounded by the process group's timeout). With one rank it opens nothing,
    and :meth:`ask` must not be called. The service lives as long as the process; at exit
    every rank waits for its peers (see the module docstring and :meth:`leave`).

    Raises
    ------
    CollectiveError
        A rank did not join the address exchange in time.
    OSError
        No listening socket could be opened.
    """

    def __init__(self, answer: Answer, what: str, kind: str = "one_sided",
                 timeout: timedelta | None = None):
        self._what, self._kind = what, kind
        self._timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self._rank, self._size = rank(), world_size()     # also valid after finalize
        self._lock = threading.Lock()
        self._connections: dict[int, socket.socket] = {}
        self._addresses: list = []
        self._byes = Byes()
        if self._size == 1:
            return
        host = reachable_address(os.environ.get("MASTER_ADDR"),
                                 os.environ.get("GLOO_SOCKET_IFNAME"))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, 0), family=family,
                                        backlog=max(16, self._size))
        self._addresses = all_gather_object((host, listener.getsockname()[1]),
                                            f"{what}: exchanging addresses")
        _register(self)
        threading.Thread(target=accept_forever, name="sarlite-accept", daemon=True,
                         args=(listener, answer, self._seconds, f"{kind}/served",
                               self._byes, self._rank)).start()

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    @property
    def rank(self) -> int:
        """This process's rank when the service was made."""
        return self._rank

    @property
    def _seconds(self) -> float:
        return self._timeout.total_seconds()

    def ask(self, requests: Mapping[int, tuple[int, torch.Tensor]],
            what: str) -> dict[int, tuple[int, torch.Tensor]]:
        """Send ``(code, ids)`` to each owner rank ``p`` of ``requests`` (never this rank)
        and return ``{p: (status, body)}``, ``body`` a 1-D uint8 tensor (empty unless
        status is 0).

        **Not a collective**: only this rank calls it; the owners' serving threads
        answer. It sends every request, then receives the answers in rank order, each
        wait bounded by the service's timeout. Several threads of one rank take turns.

        Raises
        ------
        CollectiveError
            An owner died or did not answer within the timeout (``what`` and the owner
            named); the other owners' answers are received first.
        ValueError
            A key is this rank or not a rank.
        """
        me, size = self._rank, self._size
        for peer in requests:
            if peer == me or not 0 <= peer < size:
                raise ValueError(f"{what}: cannot ask rank {peer} (this is rank {me} of "
                                 f"{size})")
        if not requests:
            return {}
        with self._lock, health.waiting(what):
            return self._exchange(dict(sorted(requests.items())), what)

    def _exchange(self, requests, what: str) -> dict[int, tuple[int, torch.Tensor]]:
        errors, answers, sent, received = {}, {}, 0, 0
        for peer, (code, ids) in requests.items():
            ids = ids.to(torch.int64).contiguous()
            try:
                conn = self._connection(peer)
                conn.sendall(PAIR.pack(code, ids.numel()))
                send_tensor(conn, ids)
                sent += PAIR.size + 8 * ids.numel()
            except OSError as err:
                errors[peer] = self._failed(peer, "sending the request", err)
        for peer in requests:
            if peer in errors:
                continue
            try:
                conn = self._connections[peer]
                status, nbytes = PAIR.unpack(recv_exact(conn, PAIR.size))
                answers[peer] = (status, recv_tensor(conn, nbytes))
                received += PAIR.size + nbytes
            except OSError as err:
                errors[peer] = self._failed(peer, "waiting for its answer", err)
        traffic.record(self._kind, sent, received)
        if errors:
            peer = min(errors)
            raise CollectiveError(
                f"{what}: rank {peer} did not answer a one-sided request from rank "
                f"{self._rank}: {errors[peer]}. That rank probably died or left (see its "
                f"output)")
        return answers

    def _connection(self, peer: int) -> socket.socket:
        """The open connection to ``peer``'s service, connecting first if needed."""
        conn = self._connections.get(peer)
        if conn is None:
            conn = socket.create_connection(self._addresses[peer], timeout=self._seconds)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(PAIR.pack(MAGIC, self._rank))
            self._connections[peer] = conn
        return conn

    def leave(self, wait: bool = True) -> list[int]:
        """Tell every peer that this rank is leaving; with ``wait``, then wait until every
        peer has said so too or is gone (its process ended). Returns the peers still
        missing when the service's timeout ran out (``[]`` normally).

        Called at exit for every service of the process (not a collective, but every
        rank's exit does it, so it acts as a barrier of the leaving ranks: a rank keeps
        answering until no peer can read from it any more). Requests after it are not
        expected. Blocking, for at most the service's timeout.
        """
        if self._size == 1:
            return []
        peers = [p for p in range(self._size) if p != self._rank]
        gone = set()
        with self._lock:
            for peer in peers:
                try:
                    conn = self._connection(peer)
                    conn.sendall(PAIR.pack(BYE, 0))
                    recv_exact(conn, PAIR.size)
                except OSError as err:
                    self._failed(peer, "leaving", err)
                    gone.add(peer)
            if not wait:
                return []
            end = time.monotonic() + self._seconds
            while True:
                missing = [p for p in self._byes.missing(peers) if p not in gone]
                remaining = end - time.monotonic()
                if not missing or remaining <= 0:
                    return missing
                # a peer's connection turns readable when its process ends
                watched = {self._connections[p]: p for p in missing if p in self._connections}
                readable, _, _ = select.select(list(watched), [], [], min(0.2, remaining))
                gone.update(watched[conn] for conn in readable)

    def _failed(self, peer: int, step: str, err: OSError) -> str:
        """Close the connection to ``peer`` (so that no late answer is misread) and word
        the failure."""
        conn = self._connections.pop(peer, None)
        if conn is not None:
            conn.close()
        host, port = self._addresses[peer]
        cause = (f"no answer within {self._timeout}" if isinstance(err, socket.timeout)
                 else f"{type(err).__name__}: {err}")
        return f"{step} at {host}:{port}: {cause}"
