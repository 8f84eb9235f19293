"""Run health over the rendezvous store, beside (never inside) the data collectives.

Two things go through the key-value store that every torchrun-style launch already has
(``MASTER_ADDR:MASTER_PORT``), on connections of their own:

* **The run's first failure.** A rank that fails records one message with
  :func:`report_failure`; only the first record is kept, so exactly one rank prints it
  (:func:`report_failure`). Every other rank's :class:`Monitor` sees the record within
  one heartbeat interval and leaves quietly with the same exit status, also when it is
  blocked in a collective with the rank that failed.
* **Heartbeats.** A background thread of every rank bumps its own counter every
  ``interval`` seconds. When this rank has been waiting in a collective for longer than
  ``deadline`` seconds and a peer's counter has not moved for as long, the peer is frozen
  (stopped with SIGSTOP, hung holding Python's lock, or on an unreachable host): the
  monitor records a failure naming it and ends this process, long before the
  collectives' own timeout. A rank inside :func:`busy` (long set-up work that may hold
  Python's lock, such as partitioning) is not judged.

Keys live under ``sarlite/<attempt>/`` in the store, so torchrun restarts do not mix.
The store's host is the launcher (``sarlite train``, torchrun with static rendezvous) or
rank 0 (other launches): a failing rank therefore waits, briefly, for its peers to leave
before it exits itself (:func:`leave`).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

DEFAULT_DEADLINE = float(os.environ.get("SARLITE_HEARTBEAT_TIMEOUT", "60"))


@dataclass(frozen=True)
class Failure:
    """The run's first failure: the rank that recorded it, its exit status, its text."""

    rank: int
    code: int
    message: str

    def encode(self) -> str:
        return f"{self.rank}|{self.code}|{self.message}"

    @staticmethod
    def decode(raw: bytes) -> "Failure":
        rank, code, message = raw.decode(errors="replace").split("|", 2)
        return Failure(int(rank), int(code), message)


def exit_now(code: int) -> None:
    """Leave the process at once: flush what was printed, run no destructors and no
    interpreter finalization. With torch 2.2's gloo, both can fail: the process group's
    destructor can deadlock, and a gloo thread that still frees the last collective's
    tensor when Python finalizes is killed inside C++ code, which aborts the process
    (see :func:`sarlite.comm.context.settle`)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class Monitor:
    """One rank's view of the run's health; see the module docstring.

    Created by :func:`start` (``sarlite.init``); every method may be called from the main
    thread while the heartbeat thread runs.
    """

    def __init__(self, host: str, port: int, rank: int, world_size: int, deadline: float,
                 attempt: str = "0"):
        self.rank, self.world_size, self.deadline = rank, world_size, deadline
        self.interval = min(1.0, max(0.2, deadline / 10))
        self.where = f"{host}:{port}"
        self._prefix = f"sarlite/{attempt}/"
        timeout = timedelta(seconds=max(deadline, 1.0))
        self._main = dist.TCPStore(host, port, None, False, timeout=timeout)
        self._beat = dist.TCPStore(host, port, None, False, timeout=timeout)
        self._waiting: tuple[str, float] | None = None      # (collective, since)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sarlite-heartbeat",
                                        daemon=True)
        self._main.add(self._key(f"busy/{rank}"), 0)
        self._thread.start()

    def _key(self, name: str) -> str:
        return self._prefix + name

    # -- failures ------------------------------------------------------------------------

    def record_failure(self, failure: Failure) -> Failure:
        """Record ``failure`` unless one is recorded already; return the recorded one."""
        return _record(self._main, self._prefix, failure)

    def failure(self, store=None) -> Failure | None:
        """The recorded failure, if any (does not block, but for the moment between the
        first recorder's count and its message)."""
        return _recorded(store or self._main, self._prefix)

    def leave(self, wait_for_peers: float) -> None:
        """Mark this rank as gone; then wait up to ``wait_for_peers`` seconds for the other
        ranks to be gone too (a store hosted by this process must outlive their reads)."""
        self._stop.set()
        self._main.add(self._key("left"), 1)
        end = time.monotonic() + wait_for_peers
        while time.monotonic() < end and self._main.add(self._key("left"), 0) < \
                self.world_size:
            time.sleep(0.05)

    # -- heartbeats ----------------------------------------------------------------------

    @contextmanager
    def waiting(self, kind: str):
        """Mark the main thread as blocked in collective ``kind`` while the body runs."""
        outer = self._waiting
        if outer is None:
            self._waiting = (kind, time.monotonic())
        try:
            yield
        finally:
            if outer is None:
                self._waiting = None

    @contextmanager
    def busy(self, reason: str):
        """Exempt this rank from heartbeat checks while the body runs (long work that may
        hold Python's lock, e.g. METIS)."""
        self._main.add(self._key(f"busy/{self.rank}"), 1)
        try:
            yield
        finally:
            self._main.add(self._key(f"busy/{self.rank}"), -1)

    def stop(self) -> None:
        """Stop the heartbeat thread (it no longer judges peers, or ends this process)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.interval + 1)

    def _run(self) -> None:
        last_change = {peer: time.monotonic() for peer in range(self.world_size)}
        seen = dict.fromkeys(range(self.world_size), -1)
        while not self._stop.wait(self.interval):
            try:
                self._tick(seen, last_change)
            except (RuntimeError, ValueError) as err:       # the store went away or froze
                waiting = self._waiting
                if waiting is not None and time.monotonic() - waiting[1] > self.deadline:
                    print(f"sarlite: error (rank {self.rank}): the rendezvous store at "
                          f"{self.where} stopped answering ({err}) while this rank waited "
                          f"in collective {waiting[0]!r}: the launcher or rank 0 that "
                          f"hosts it died or froze", file=sys.stderr, flush=True)
                    exit_now(3)

    def _tick(self, seen: dict, last_change: dict) -> None:
        store = self._beat
        store.add(self._key(f"beat/{self.rank}"), 1)
        recorded = self.failure(store)
        if recorded is not None and recorded.rank != self.rank and not self._stop.is_set():
            store.add(self._key("left"), 1)
            exit_now(recorded.code)            # the failing rank has said what happened
        now = time.monotonic()
        for peer in range(self.world_size):
            count = store.add(self._key(f"beat/{peer}"), 0)
            if count != seen[peer] or store.add(self._key(f"busy/{peer}"), 0) > 0:
                seen[peer], last_change[peer] = count, now
        waiting = self._waiting
        if waiting is None or now - waiting[1] <= self.deadline:
            return
        frozen = [p for p in range(self.world_size)
                  if p != self.rank and now - last_change[p] > self.deadline]
        if frozen and not self._stop.is_set():
            self._frozen(frozen, waiting, now - min(last_change[p] for p in frozen))

    def _frozen(self, peers: list[int], waiting: tuple[str, float], silent: float) -> None:
        names = ", ".join(map(str, peers))
        message = (f"rank{'s' if len(peers) > 1 else ''} {names} sent no heartbeat for "
                   f"{silent:.0f} s while rank {self.rank} waited in collective "
                   f"{waiting[0]!r}: stopped (SIGSTOP), hung holding Python's lock, or on "
                   f"an unreachable host; stopping the run (SARLITE_HEARTBEAT_TIMEOUT="
                   f"{self.deadline:g} s, 0 turns this check off)")
        failure = _record(self._beat, self._prefix, Failure(self.rank, 3, message))
        if failure.rank == self.rank:
            print(f"sarlite: error (rank {self.rank}): {message}", file=sys.stderr,
                  flush=True)
        self._beat.add(self._key("left"), 1)
        exit_now(failure.code)


# Only add, set and get touch the store: torch 2.2's Store.compare_set builds its Python
# result without holding the GIL, which corrupts memory when another thread runs Python
# (measured: a segfault within 25 s of a thread calling it in a loop).

def _record(store, prefix: str, failure: Failure) -> Failure:
    """Record ``failure`` unless one is recorded; the recorded one. The first to bump the
    failure count writes the message."""
    if store.add(prefix + "failures", 1) == 1:
        store.set(prefix + "failure", failure.encode())
        return failure
    return Failure.decode(store.get(prefix + "failure"))


def _recorded(store, prefix: str) -> Failure | None:
    if store.add(prefix + "failures", 0) == 0:
        return None
    return Failure.decode(store.get(prefix + "failure"))


def record_at(host: str, port: int, failure: Failure, attempt: str = "0") -> bool:
    """Record ``failure`` in the store at ``host:port`` (for a launcher, which has no
    monitor); ``True`` when it is the run's first or the store cannot be reached."""
    try:
        store = dist.TCPStore(host, port, None, False, timeout=timedelta(seconds=5))
        return _record(store, f"sarlite/{attempt}/", failure) == failure
    except (RuntimeError, ValueError):
        return True


_monitor: Monitor | None = None


def start(host: str, port: int, rank: int, world_size: int,
          deadline: float = DEFAULT_DEADLINE) -> None:
    """Start this process's :class:`Monitor` (``sarlite.init`` calls it; ``deadline`` 0
    or a world of one rank starts none). Local; not a collective."""
    global _monitor
    stop()
    if world_size > 1 and deadline > 0:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        _monitor = Monitor(host, port, rank, world_size, deadline, attempt)
        # a daemon thread caught inside a store call when Python finalizes is killed
        # there, and takes the process down with it: stop it first (once per process)
        atexit.unregister(stop)
        atexit.register(stop)


def stop() -> None:
    """Stop this process's monitor, if any (``sarlite.finalize`` calls it). Local."""
    global _monitor
    if _monitor is not None:
        _monitor.stop()
        _monitor = None


def waiting(kind: str):
    """Context manager marking a blocking collective (used by :func:`guarded`)."""
    return _monitor.waiting(kind) if _monitor is not None else _null()


def busy(reason: str):
    """Context manager exempting this rank from heartbeat checks during long local work
    that may hold Python's lock (partitioning, loading a large dataset). Local."""
    return _monitor.busy(reason) if _monitor is not None else _null()


@contextmanager
def _null():
    yield


def report_failure(message: str, code: int, rank: int) -> bool:
    """Record ``message`` as this rank's failure; ``True`` when it is the run's first (the
    caller then prints it) or when no monitor or store can tell. Local; does not block
    beyond one store round trip."""
    if _monitor is None:
        return True
    try:
        return _monitor.record_failure(Failure(rank, code, message)).rank == rank
    except (RuntimeError, ValueError):
        return True


def failure_elsewhere(rank: int, wait: float) -> Failure | None:
    """A failure recorded by another rank, waiting up to ``wait`` seconds for one to
    appear (a collective usually fails a moment before the failing rank's record
    reaches this rank). Local."""
    if _monitor is None:
        return None
    end = time.monotonic() + wait
    while True:
        try:
            found = _monitor.failure()
        except (RuntimeError, ValueError):
            return None
        if found is not None and found.rank != rank:
            return found
        if time.monotonic() >= end:
            return None
        time.sleep(0.05)


def leave(first: bool) -> None:
    """Mark this rank as gone and stop its monitor; the rank that reported the run's
    first failure waits up to 10 s for the others to see it. Local."""
    global _monitor
    if _monitor is None:
        return
    try:
        _monitor.leave(wait_for_peers=10.0 if first else 0.0)
    except (RuntimeError, ValueError):
        pass
    _monitor = None
