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

**Authenticated records.** torch's store has no authentication: any process that reaches
its port may read and write keys. Every record sarlite reads back from it therefore
carries a tag made with the run's key (:mod:`sarlite.runtime.runkey`), and a record whose
tag is wrong is ignored:

* a failure record is ``rank|code|message|tag``, appended to one log key; it counts only
  when its tag is right, its rank is a rank of the run and its status is nonzero, and
  the first such record of the log is the run's failure;
* a heartbeat is ``seq|busy|tag`` under the rank's own key; it counts as a sign of life
  only when its tag is right and ``seq`` is higher than the last one seen (a replayed
  old record is no progress).

What authentication cannot stop: a process that reaches the store can delete or
overwrite its keys, or flood it, so it can delay the detection of a failure (up to the
collectives' own timeout) though it can no longer stop a run or hide a frozen rank.
``sarlite train`` on one host therefore binds the store to the loopback interface.
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

from . import runkey


@dataclass(frozen=True)
class Failure:
    """The run's first failure: the rank that recorded it, its exit status, its text."""

    rank: int
    code: int
    message: str

    def encode(self, key: bytes, prefix: str) -> str:
        """One line of the failure log, tagged with ``key`` (``prefix`` names the run's
        attempt, so a record of an earlier attempt does not count in this one)."""
        text = self.message.encode().hex()
        tag = runkey.tag(key, prefix, "failure", self.rank, self.code, text)
        return f"{self.rank}|{self.code}|{text}|{tag}"

    @staticmethod
    def decode(line: str, key: bytes, prefix: str, world_size: int) -> "Failure | None":
        """The failure in ``line`` when its tag is right, its rank is one of the run's
        and its status nonzero; else ``None`` (a forged, damaged or foreign record)."""
        fields = line.split("|")
        if len(fields) != 4 or not runkey.valid(key, fields[3], prefix, "failure",
                                                *fields[:3]):
            return None
        try:
            rank, code, message = int(fields[0]), int(fields[1]), bytes.fromhex(fields[2])
        except ValueError:
            return None
        if not 0 <= rank < world_size or code == 0:
            return None
        return Failure(rank, code, message.decode(errors="replace"))


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
    thread while the heartbeat thread runs. ``key`` is the run's key
    (:mod:`sarlite.runtime.runkey`), which tags this rank's records and checks its peers'.
    """

    def __init__(self, host: str, port: int, rank: int, world_size: int, deadline: float,
                 key: bytes, attempt: str = "0"):
        self.rank, self.world_size, self.deadline = rank, world_size, deadline
        self.interval = min(1.0, max(0.2, deadline / 10))
        self.where = f"{host}:{port}"
        self._prefix, self._key_bytes = f"sarlite/{attempt}/", key
        timeout = timedelta(seconds=max(deadline, 1.0))
        self._main = dist.TCPStore(host, port, None, False, timeout=timeout)
        self._beat = dist.TCPStore(host, port, None, False, timeout=timeout)
        self._waiting: tuple[str, float] | None = None      # (collective, since)
        self._state = threading.Lock()
        self._seq, self._busy = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sarlite-heartbeat",
                                        daemon=True)
        for peer in range(world_size):       # every key a reader gets exists (appending
            self._main.append(self._key(f"beat/{peer}"), "")     # nothing keeps a value)
        self._main.append(self._key("failures"), "")
        self._publish(self._main, 0)
        self._thread.start()

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _publish(self, store, change: int) -> None:
        """Write this rank's heartbeat record: the next sequence number and the busy
        depth (changed by ``change``), tagged."""
        with self._state:
            self._seq += 1
            self._busy += change
            seq, busy = self._seq, self._busy
            store.set(self._key(f"beat/{self.rank}"), f"{seq}|{busy}|" + runkey.tag(
                self._key_bytes, self._prefix, "beat", self.rank, seq, busy))

    def _heartbeat(self, store, peer: int) -> tuple[int, int] | None:
        """``(seq, busy)`` of ``peer``'s heartbeat record, ``None`` if it is missing or
        its tag is wrong."""
        fields = store.get(self._key(f"beat/{peer}")).decode(errors="replace").split("|")
        if len(fields) != 3 or not runkey.valid(self._key_bytes, fields[2], self._prefix,
                                                "beat", peer, *fields[:2]):
            return None
        return int(fields[0]), int(fields[1])

    # -- failures ------------------------------------------------------------------------

    def record_failure(self, failure: Failure) -> Failure:
        """Record ``failure``; return the run's failure (the first one recorded)."""
        return _record(self._main, self._prefix, failure, self._key_bytes, self.world_size)

    def failure(self, store=None) -> Failure | None:
        """The run's recorded failure, if any (does not block)."""
        return _recorded(store or self._main, self._prefix, self._key_bytes,
                         self.world_size)

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
        self._publish(self._main, 1)
        try:
            yield
        finally:
            self._publish(self._main, -1)

    def stop(self) -> None:
        """Stop the heartbeat thread (it no longer judges peers, or ends this process)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.interval + 1)

    def _run(self) -> None:
        last_change = {peer: time.monotonic() for peer in range(self.world_size)}
        seen = {peer: (0, 0) for peer in range(self.world_size)}   # (seq, busy)
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
        self._publish(store, 0)
        recorded = self.failure(store)
        if recorded is not None and recorded.rank != self.rank and not self._stop.is_set():
            store.add(self._key("left"), 1)
            exit_now(recorded.code)            # the failing rank has said what happened
        now = time.monotonic()
        for peer in range(self.world_size):
            record = self._heartbeat(store, peer)
            if record is not None and record[0] > seen[peer][0]:
                seen[peer] = record             # a newer record: the peer is alive
                last_change[peer] = now
            elif seen[peer][1] > 0:             # busy at its last record
                last_change[peer] = now
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
        failure = _record(self._beat, self._prefix, Failure(self.rank, 3, message),
                          self._key_bytes, self.world_size)
        if failure.rank == self.rank:
            print(f"sarlite: error (rank {self.rank}): {message}", file=sys.stderr,
                  flush=True)
        self._beat.add(self._key("left"), 1)
        exit_now(failure.code)


# Only add, set, get and append touch the store: torch 2.2's Store.compare_set builds its
# Python result without holding the GIL, which corrupts memory when another thread runs
# Python (measured: a segfault within 25 s of a thread calling it in a loop).

def _record(store, prefix: str, failure: Failure, key: bytes, world_size: int) -> Failure:
    """Append ``failure`` to the failure log; the run's failure (the log's first valid
    record, which is ``failure`` itself when it is the first). The count is bumped after
    the append, so a reader that sees it nonzero finds a record."""
    store.append(prefix + "failures", "\n" + failure.encode(key, prefix) + "\n")
    store.add(prefix + "failure_count", 1)
    return _recorded(store, prefix, key, world_size) or failure


def _recorded(store, prefix: str, key: bytes, world_size: int) -> Failure | None:
    """The first valid record of the failure log, or ``None``."""
    if store.add(prefix + "failure_count", 0) == 0:
        return None
    log = store.get(prefix + "failures").decode(errors="replace")
    for line in log.split("\n"):
        found = Failure.decode(line, key, prefix, world_size) if line else None
        if found is not None:
            return found
    return None


def record_at(host: str, port: int, failure: Failure, key: bytes | None,
              world_size: int, attempt: str = "0") -> bool:
    """Record ``failure`` in the store at ``host:port`` (for a launcher, which has no
    monitor); ``True`` when it is the run's first or cannot be recorded (no ``key``, or
    the store cannot be reached): the caller then prints it."""
    if key is None:
        return True
    try:
        store = dist.TCPStore(host, port, None, False, timeout=timedelta(seconds=5))
        return _record(store, f"sarlite/{attempt}/", failure, key, world_size) == failure
    except (RuntimeError, ValueError):
        return True


_monitor: Monitor | None = None


def start(host: str, port: int, rank: int, world_size: int, key: bytes, deadline: float,
          attempt: str = "0") -> None:
    """Start this process's :class:`Monitor` with the run's ``key`` (``sarlite.init``
    calls it, with ``deadline`` from ``SARLITE_HEARTBEAT_TIMEOUT`` and ``attempt`` from
    torchrun's ``TORCHELASTIC_RESTART_COUNT``; ``deadline`` 0 or a world of one rank
    starts none). Local; not a collective."""
    global _monitor
    stop()
    if world_size > 1 and deadline > 0:
        _monitor = Monitor(host, port, rank, world_size, deadline, key, attempt)
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


def monitoring() -> bool:
    """Whether this process runs a health monitor (it joined through
    :func:`sarlite.init`). Local."""
    return _monitor is not None


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
