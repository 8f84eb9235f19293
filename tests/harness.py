"""Spawn gloo workers for multi-process tests.

``spawn(fn, world_size, *args)`` starts ``world_size`` processes on 127.0.0.1 with a free
port, ``OMP_NUM_THREADS=1`` and one torch thread. Each joins the process group through
``sarlite.init`` (unless ``init=False``: then only torchrun's environment is set) and
returns ``fn(rank, world_size, *args)``. Results come back pickled by value, in rank order.

Workers are forked from one server process per test session that has imported torch, DGL
and sarlite and done nothing else (multiprocessing's ``forkserver`` start method, with
those modules preloaded): a worker starts at once instead of spending about 5 s of CPU
on imports. Each worker takes the test's environment as it is at the call
(``os.environ``, applied before ``fn`` runs), as a freshly started worker would; only what
those three modules read while being imported comes from the session's environment. A
worker runs the ``atexit`` hooks when ``fn`` is done, as a process that exits does (a
forked one would skip them). Its output goes where the test's goes (pytest captures it).
Tests of what a fresh process does at start-up run the ``sarlite`` command or ``torchrun``
in a subprocess instead.

A worker that raises, a worker that dies, or a run past ``timeout`` seconds fails the test,
and every remaining worker is killed: a hang is a failure.
"""
from __future__ import annotations

import atexit
import os
import pickle
import queue as queue_mod
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch.multiprocessing as mp

COLLECTIVE_TIMEOUT = timedelta(seconds=60)
#: this environment's ``sarlite`` command, for tests that run it as a user does
SARLITE = Path(sys.executable).with_name("sarlite")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _entry(fn, rank: int, world_size: int, port: int, results, args, device,
           collective_timeout: timedelta, init: bool, environ: dict) -> None:
    os.environ.clear()
    os.environ.update(environ)              # the test's, as a fresh worker would have
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      OMP_NUM_THREADS="1", DGLBACKEND="pytorch")
    import torch
    torch.set_num_threads(1)
    import sarlite
    try:
        if init:
            sarlite.init(timeout=collective_timeout, device=device)
        value = fn(rank, world_size, *args)
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException as err:  # report everything, including SystemExit
        results.put((rank, "error", f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))
        raise SystemExit(1)
    finally:        # a forked process ends in os._exit, which skips them: as a worker's exit
        atexit._run_exitfuncs()


def outcome(call) -> tuple[str, str]:
    """``("ok", "")`` if ``call()`` returns, else the exception's type name and message."""
    try:
        call()
    except Exception as err:
        return type(err).__name__, str(err)
    return "ok", ""


class WorkerError(AssertionError):
    """A worker raised; ``errors`` maps rank to its traceback text."""

    def __init__(self, errors: dict[int, str]):
        self.errors = errors
        first = min(errors)
        super().__init__(f"worker {first} failed:\n{errors[first]}")


def _context():
    """The start method of :func:`spawn`'s workers (see the module's docstring)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "dgl", "sarlite"])
    return ctx


def spawn(fn, world_size: int, *args, timeout: float = 180.0,
          kill_on_error: bool = True, device: str | None = None,
          collective_timeout: timedelta = COLLECTIVE_TIMEOUT, init: bool = True) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` workers; results by rank.

    ``device="cuda"`` joins the group with NCCL (one GPU per rank) instead of gloo.
    ``collective_timeout`` bounds the group's rendezvous and every collective.
    With ``kill_on_error=False`` the other workers are left to notice a failure on their
    own (within ``timeout``), and :class:`WorkerError` then holds every rank's error.
    ``init=False`` leaves joining the process group to ``fn``.
    """
    ctx = _context()
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry,
                         args=(fn, r, world_size, port, results, args, device,
                               collective_timeout, init, dict(os.environ)), daemon=True)
             for r in range(world_size)]
    for proc in procs:
        proc.start()
    values, errors = {}, {}
    deadline = time.monotonic() + timeout
    try:
        while len(values) + len(errors) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"workers timed out after {timeout:.0f}s (hang); finished: "
                    f"{sorted(values)}, failed: {sorted(errors)}")
            try:
                rank, status, payload = results.get(timeout=min(remaining, 1.0))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs)
                        if p.exitcode not in (None, 0) and r not in errors]
                for r in dead:
                    errors[r] = f"worker {r} died with exit code {procs[r].exitcode}"
                if dead and kill_on_error:
                    break
                continue
            if status == "ok":
                values[rank] = pickle.loads(payload)
            else:
                errors[rank] = payload
                if kill_on_error:
                    break
        if errors:
            raise WorkerError(errors)
        return [values[r] for r in range(world_size)]
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for proc in procs:
            proc.join(timeout=10)


def record_rows_per_call(record: list) -> None:
    """Make this process's row exchanges append to ``record`` the most rows each call
    moves to or from one peer: ``torch.distributed.all_to_all_single`` calls made with
    split sizes and the ``isend``/``irecv`` of ring exchanges (gloo) are wrapped, and
    still made. For a worker to install in itself, to check bounds on exchanges."""
    import torch.distributed as dist
    all_to_all, isend, irecv = dist.all_to_all_single, dist.isend, dist.irecv

    def counted(output, input, output_split_sizes=None, input_split_sizes=None, **kw):
        if output_split_sizes is not None:
            record.append(max(list(output_split_sizes) + list(input_split_sizes)))
        return all_to_all(output, input, output_split_sizes, input_split_sizes, **kw)

    def counted_post(post):
        def call(tensor, *args, **kwargs):
            record.append(tensor.shape[0])
            return post(tensor, *args, **kwargs)
        return call
    dist.all_to_all_single, dist.isend, dist.irecv = (counted, counted_post(isend),
                                                      counted_post(irecv))


def train_errors(config, nproc: int = 1, timeout: float = 300) -> tuple[int, str, list[str]]:
    """Run ``sarlite train --config config --nproc nproc``: its exit status, its stderr,
    and the ``sarlite train: error`` lines of that stderr."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-m", "sarlite.cli", "train", "--nproc",
                             str(nproc), "--config", str(config)],
                            capture_output=True, text=True, timeout=timeout)
    errors = [line for line in result.stderr.splitlines() if "sarlite train: error" in line]
    return result.returncode, result.stderr, errors
