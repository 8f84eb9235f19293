"""One-sided requests: one rank asks a peer for bytes, and a thread of the peer answers.

Everything in :mod:`sarlite.comm` is a collective. DGL's distributed reads are
one-sided (a server answers them while the trainer that owns the rows does something
else), and DGL scripts rely on that: ``if g.rank() == 0: pred[ids]`` while the other
ranks wait in ``torch.distributed.barrier()``. A :class:`RequestService` gives that without
servers:

* **Creating one is a collective.** Every rank opens a listening TCP socket on the address
  the other hosts reach it by (:func:`~sarlite.runtime.launchenv.reachable_address`), the
  ranks exchange their addresses with one ``all_gather_object``, and every rank starts a
  daemon thread that accepts connections; each connection gets a daemon thread that
  answers its requests with the ``answer`` function the creator gave.
* **Asking is not.** :meth:`RequestService.ask` is called by one rank alone, at any time
  and from any thread; the owners' main threads take no part (they may be inside a
  collective, or computing). A rank can ask and answer at the same time.

Wire protocol, on one connection per (requester, owner), opened at the first request and
kept: a mutual proof that both ends hold the run's key, then any number of requests, each
answered before the next is sent. All numbers are little-endian int64; a tag is the
32-character hex HMAC of :func:`~sarlite.kv.serving.hello_tag`.

=========  ===================  ===============================================
challenge  owner -> requester   16 random bytes
hello      requester -> owner   ``(MAGIC, requester rank)``, 16 random bytes, tag
proof      owner -> requester   tag (over both random strings and both ranks)
request    requester -> owner   ``(code, n)``, then ``n`` int64 ids
answer     owner -> requester   ``(status, nbytes)``, then ``nbytes`` bytes
leaving    requester -> owner   ``(BYE, 0)``, answered ``(0, 0)``
=========  ===================  ===============================================

**Security.** The key (:mod:`sarlite.runtime.runkey`) never crosses these sockets; a
connection that cannot prove it holds it within 10 s is closed, so a process outside the
run can neither read rows nor say that a rank is leaving (a leaving is taken from the
authenticated peer only). The traffic is not encrypted: run several hosts on a network
you trust. Limits (:class:`~sarlite.kv.serving.Limits`): ``n`` at most
:data:`~sarlite.kv.serving.MAX_IDS` ids, answers at most
:data:`~sarlite.kv.serving.MAX_ANSWER_BYTES` bytes (a larger request or answer is
answered :data:`~sarlite.kv.serving.REFUSED`; :meth:`RequestService.ask` callers split
large reads), at most twice the world size (8 at least) of connections proving
themselves at once (a newer one evicts the oldest, whose requester, if it is a rank,
tries again), one connection per peer, and an idle connection is closed after the
service's timeout (the requester reconnects).

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

"""
from __future__ import annotations

import atexit
import hmac
import os
import select
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Mapping

import torch

from ..comm import (CollectiveError, all_gather_object, rank, run_key, settings, traffic,
                    world_size)
from ..runtime import health
from ..runtime.launchenv import reachable_address
from .serving import (ANSWER_RAISED, BYE, MAGIC, MAX_ANSWER_BYTES, MAX_IDS, NONCE, OK, PAIR,
                      REFUSED, TAG, Answer, Byes, Limits, accept_forever, busy, hello_tag,
                      recv_exact, recv_tensor, send_tensor)

__all__ = ["ANSWER_RAISED", "MAX_ANSWER_BYTES", "MAX_IDS", "OK", "REFUSED", "Answer",
           "RequestService"]

_EXIT_GRACE = 2.0           # seconds the exit hook waits for answers in progress
_CONNECT_TRIES = 5          # a connection evicted while proving itself is tried again
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
        Bounds every wait of :meth:`ask` (and of an answer in progress); default the
        process group's, as :func:`sarlite.init` recorded it (``SARLITE_TIMEOUT``
        seconds, 600; :func:`sarlite.comm.settings`).

    Creating it is a **collective**: every rank calls it (one ``all_gather_object`` of the
    addresses, bounded by the process group's timeout; before it, one agreement on the
    run's key when :func:`sarlite.init` did not make one). With one rank it opens nothing,
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
        self._timeout = timeout if timeout is not None else settings().timeout
        self._rank, self._size = rank(), world_size()     # also valid after finalize
        self._lock = threading.Lock()
        self._connections: dict[int, socket.socket] = {}
        self._addresses: list = []
        self._byes = Byes()
        if self._size == 1:
            return
        self._key = run_key()
        host = reachable_address(os.environ.get("MASTER_ADDR"),
                                 os.environ.get("GLOO_SOCKET_IFNAME"))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, 0), family=family,
                                        backlog=max(16, self._size))
        self._addresses = all_gather_object((host, listener.getsockname()[1]),
                                            f"{what}: exchanging addresses")
        _register(self)
        threading.Thread(target=accept_forever, name="sarlite-accept", daemon=True,
                         args=(listener, answer, self._key,
                               Limits(self._size, self._seconds), f"{kind}/served",
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
            A key is this rank or not a rank, or a request has more than
            :data:`~sarlite.kv.serving.MAX_IDS` ids.
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
        errors, answers, sent, received, fresh = {}, {}, 0, 0, set()
        requests = {peer: (code, ids.to(torch.int64).contiguous())
                    for peer, (code, ids) in requests.items()}
        for peer, (_, ids) in requests.items():     # before anything is sent
            if ids.numel() > MAX_IDS:
                raise ValueError(f"{what}: {ids.numel()} ids for rank {peer}; one request "
                                 f"carries at most {MAX_IDS} (split the read)")
        for peer, (code, ids) in requests.items():
            try:
                fresh.update(self._send(peer, PAIR.pack(code, ids.numel()), ids))
                sent += PAIR.size + 8 * ids.numel()
            except OSError as err:
                errors[peer] = self._failed(peer, "sending the request", err)
        for peer, (code, ids) in requests.items():
            if peer in errors:
                continue
            try:
                status, body = self._receive(peer, fresh, PAIR.pack(code, ids.numel()), ids)
                answers[peer] = (status, body)
                received += PAIR.size + body.numel()
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

    def _send(self, peer: int, head: bytes, ids: torch.Tensor | None = None) -> set[int]:
        """Send a request to ``peer``; ``{peer}`` when it went on a new connection. A kept
        connection the owner closed meanwhile (it was idle) is replaced once."""
        fresh = peer not in self._connections
        try:
            conn = self._connection(peer)
            conn.sendall(head)
            if ids is not None:
                send_tensor(conn, ids)
        except OSError:
            if fresh:
                raise
            self._drop(peer)
            return self._send(peer, head, ids)
        return {peer} if fresh else set()

    def _receive(self, peer: int, fresh: set[int], head: bytes,
                 ids: torch.Tensor | None = None) -> tuple[int, torch.Tensor]:
        """The answer of ``peer``; when a kept connection ends before its first byte (the
        owner closed it as idle before the request arrived), the request is sent again
        on a new connection, once (requests only read, so a repeat is harmless)."""
        conn, kept = self._connections[peer], peer not in fresh
        try:
            first = recv_exact(conn, PAIR.size, eof_ok=kept)
        except ConnectionResetError:
            if not kept:
                raise
            first = None
        if first is None:
            self._drop(peer)
            fresh.update(self._send(peer, head, ids))
            return self._receive(peer, fresh, head, ids)
        status, nbytes = PAIR.unpack(first)
        if not 0 <= nbytes <= MAX_ANSWER_BYTES:
            raise ConnectionError(f"the answer announced {nbytes} bytes (at most "
                                  f"{MAX_ANSWER_BYTES})")
        return status, recv_tensor(conn, nbytes)

    def _connection(self, peer: int) -> socket.socket:
        """The open connection to ``peer``'s service, connecting (and proving that both
        ends hold the run's key) first if needed."""
        conn = self._connections.get(peer)
        for attempt in range(_CONNECT_TRIES):
            if conn is not None:
                break
            conn = socket.create_connection(self._addresses[peer], timeout=self._seconds)
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._prove(conn, peer)
            except ConnectionError:    # evicted while proving (the owner is flooded)
                conn.close()
                if attempt + 1 == _CONNECT_TRIES:
                    raise
                conn = None
                time.sleep(0.05 * (attempt + 1))
            except OSError:
                conn.close()
                raise
        self._connections[peer] = conn
        return conn

    def _prove(self, conn: socket.socket, peer: int) -> None:
        """The requester's half of the handshake (see the module docstring)."""
        challenge = recv_exact(conn, NONCE)
        nonce = os.urandom(NONCE)
        conn.sendall(PAIR.pack(MAGIC, self._rank) + nonce +
                     hello_tag(self._key, self._rank, peer, challenge, nonce, "request"))
        proof = recv_exact(conn, TAG)
        if not hmac.compare_digest(proof, hello_tag(self._key, self._rank, peer, challenge,
                                                    nonce, "answer")):
            raise PermissionError(
                f"the process at that address did not prove it is rank {peer} of this run "
                f"(it holds another run's key, or is not sarlite's)")

    def _drop(self, peer: int) -> None:
        conn = self._connections.pop(peer, None)
        if conn is not None:
            conn.close()

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
                    fresh = self._send(peer, PAIR.pack(BYE, 0))
                    self._receive(peer, fresh, PAIR.pack(BYE, 0))
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
        self._drop(peer)
        host, port = self._addresses[peer]
        cause = (f"no answer within {self._timeout}" if isinstance(err, socket.timeout)
                 else f"{type(err).__name__}: {err}")
        return f"{step} at {host}:{port}: {cause}"
