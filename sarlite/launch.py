"""The launcher of ``sarlite train`` and ``sarlite run``: start this host's workers, watch
them, stop them together.

What torchrun's static rendezvous does, for one run with no restarts, plus what a
training command owes its user:

* every worker gets torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``MASTER_ADDR``, ``MASTER_PORT``, ...); on host 0 the launcher itself hosts the
  rendezvous store, so the store outlives any worker and a failing rank's message
  reaches the others (:mod:`sarlite.runtime.health`);
* workers run in sessions of their own (a Ctrl-C in the terminal reaches only the
  launcher) and are killed by Linux when the launcher dies, even by ``kill -9``;
* workers inherit the launcher's standard input, output and error (no pipes): what they
  print reaches the user's terminal or file as it is, and ``isatty()`` in a worker is
  the user's (rank 0 then shows a progress bar in a terminal and plain lines elsewhere,
  :mod:`sarlite.train.progress`);
* SIGINT, SIGTERM and SIGHUP to the launcher stop every worker (SIGTERM, then SIGKILL
  after :data:`GRACE` seconds) and exit with ``128 + signal``;
* when a worker fails, the others get :data:`GRACE` seconds to leave on their own, then
  are stopped; the exit status is the first failed worker's; a worker killed by a
  signal is reported in one line (nobody else can say it);
* with several hosts, the launcher picks the interface that routes to the master
  address for gloo (``GLOO_SOCKET_IFNAME``) unless the user set one; on one host whose
  master address is a loopback one, gloo uses the loopback interface;
* the store listens on the master address only (the loopback interface for a one-host
  run), not on every interface as torch's own store does;
* the run's secret key (:mod:`sarlite.runtime.runkey`) is made here and handed to the
  workers in their environment, unless several hosts take part (rank 0 makes it then)
  or the user set ``SARLITE_RUN_KEY`` (passed on as it is): it authenticates the
  workers' health records, and the launcher's own report of a killed worker;
* workers start with torch's huge pages for large buffers (``THP_MEM_ALLOC_ENABLE=1``,
  :func:`sarlite.runtime.allocator.launch_environ`) unless the user set the variable.
"""
from __future__ import annotations

import ctypes
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

GRACE = 3.0                         # seconds workers get to leave on their own
_POLL = 0.1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class LaunchSpec:
    """Where this host's workers sit in the run.

    ``nproc`` workers on each of ``nnodes`` hosts; this host is ``node_rank``; rank 0's
    host is reachable at ``master_addr:master_port`` from every host.
    """

    nproc: int
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0                      # 0: a free port (one host only)

    def __post_init__(self):
        for name in ("nproc", "nnodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got "
                                 f"{getattr(self, name)}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank must be in [0, {self.nnodes}) for --nnodes "
                             f"{self.nnodes}, got {self.node_rank}")
        if self.nnodes > 1 and self.master_port == 0:
            raise ValueError("--master-port is needed with --nnodes > 1 (the same port on "
                             "every host)")
        if not 0 <= self.master_port < 65536:
            raise ValueError(f"--master-port must be a TCP port, got {self.master_port}")

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def run_key(spec: LaunchSpec, base: dict) -> bytes | None:
    """The run's key this launcher knows: the user's ``SARLITE_RUN_KEY``, else a new one
    on a one-host run, else ``None`` (rank 0 makes one; the launchers never learn it).

    Raises ValueError when the user's ``SARLITE_RUN_KEY`` is malformed."""
    from .runtime import runkey
    if runkey.KEY_ENV in base:
        return runkey.parse_key(base[runkey.KEY_ENV])
    return runkey.new_key() if spec.nnodes == 1 else None


def worker_env(spec: LaunchSpec, local_rank: int, port: int, base: dict,
               interface: str | None, key: bytes | None = None) -> dict:
    """The environment of local worker ``local_rank``: ``base`` plus torchrun's
    variables and the run's ``key`` (if this launcher knows it). Workers join the store
    the launcher of host 0 hosts."""
    from .runtime.allocator import launch_environ
    env = launch_environ(base)
    if key is not None:
        from .runtime.runkey import KEY_ENV
        env[KEY_ENV] = key.hex()
    env.update(RANK=str(spec.node_rank * spec.nproc + local_rank),
               WORLD_SIZE=str(spec.world_size), LOCAL_RANK=str(local_rank),
               LOCAL_WORLD_SIZE=str(spec.nproc), GROUP_RANK=str(spec.node_rank),
               MASTER_ADDR=spec.master_addr, MASTER_PORT=str(port),
               TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0",
               OMP_NUM_THREADS=base.get("OMP_NUM_THREADS", "1"),
               TORCH_CPP_LOG_LEVEL=base.get("TORCH_CPP_LOG_LEVEL", "ERROR"))
    if interface is not None and "GLOO_SOCKET_IFNAME" not in base:
        env["GLOO_SOCKET_IFNAME"] = interface
    return env


def _host_store(spec: LaunchSpec):
    """The rendezvous store, hosted here when this is host 0 (else ``None``), listening
    on the master address only."""
    if spec.node_rank != 0:
        return None
    from datetime import timedelta

    import torch.distributed as dist
    try:
        listener = socket.create_server((_store_address(spec), spec.master_port),
                                        family=_family(spec.master_addr), backlog=128)
        return dist.TCPStore(spec.master_addr, listener.getsockname()[1], None, True,
                             timeout=timedelta(seconds=60), wait_for_workers=False,
                             master_listen_fd=listener.detach())
    except (OSError, RuntimeError) as err:
        raise OSError(f"cannot listen on {spec.master_addr}:{spec.master_port} for the "
                      f"rendezvous store: {err}") from None


def _store_address(spec: LaunchSpec) -> str:
    """Where the store listens: the master address; with several hosts, every interface
    (as torch's own store) when that address is a loopback one here, as a host name that
    resolves to 127.0.1.1 locally but to the host's address elsewhere is."""
    if spec.nnodes > 1 and any(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback
                               for info in socket.getaddrinfo(spec.master_addr, None)):
        return ""
    return spec.master_addr


def _family(host: str) -> int:
    """The address family of ``host``'s first address (IPv4 first)."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    families = [info[0] for info in infos]
    return socket.AF_INET if socket.AF_INET in families or not families else families[0]


def kill_me_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies, however it dies
    (``PR_SET_PDEATHSIG``); ``False`` where that cannot be asked (not Linux)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)      # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False
    return True


def _die_with_launcher(parent: int):
    """``preexec_fn`` of each worker: SIGKILL when the launcher dies."""
    def arm() -> None:
        if kill_me_with_parent() and os.getppid() != parent:
            os._exit(1)
    return arm


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM (and SIGCONT, for stopped ones) to every live worker; SIGKILL to those
    still there after :data:`GRACE` seconds."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass
    end = time.monotonic() + GRACE
    while any(p.poll() is None for p in live) and time.monotonic() < end:
        time.sleep(_POLL)
    for p in live:
        if p.poll() is None:
            p.kill()
            p.wait()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class _Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise _Stopped(signum)


def _killed(spec: LaunchSpec, port: int, key: bytes | None, rank: int, pid: int,
            code: int, prog: str) -> None:
    """Report a worker killed by a signal as the run's failure (its peers then leave
    quietly; only with the run's ``key``); print it if it is the first."""
    from .runtime import health
    message = f"worker rank {rank} (pid {pid}) was killed by {_signal_name(code)}"
    if health.record_at(spec.master_addr, port, health.Failure(rank, 128 - code, message),
                        key, spec.world_size):
        print(f"{prog}: {message}", file=sys.stderr, flush=True)


def _watch(spec: LaunchSpec, port: int, key: bytes | None,
           procs: list[subprocess.Popen], prog: str) -> int:
    """Wait for the workers; the run's exit status."""
    first_rank = spec.node_rank * spec.nproc
    failed_at, status = None, 0
    while True:
        codes = [p.poll() for p in procs]
        for local, code in enumerate(codes):
            if code not in (None, 0) and status == 0:
                status, failed_at = (code if code > 0 else 128 - code), time.monotonic()
                if code < 0:
                    _killed(spec, port, key, first_rank + local, procs[local].pid, code,
                            prog)
        if all(c is not None for c in codes):
            return status
        if failed_at is not None and time.monotonic() - failed_at > GRACE:
            _stop(procs)
        time.sleep(_POLL)


def launch(spec: LaunchSpec, args: list[str], interface: str | None = None,
           module: str = "sarlite.train", env: dict | None = None) -> int:
    """Run ``python -m <module> *args`` (``sarlite.train`` or ``sarlite.run``) on this
    host's ``spec.nproc`` workers until they end; returns the exit status (0: every
    worker succeeded). ``env`` (default: this process's environment) is the workers'
    environment before torchrun's variables are added.

    Blocking. Call it from the main thread (it handles SIGINT, SIGTERM and SIGHUP).
    """
    prog = f"sarlite {module.rsplit('.', 1)[-1]}"
    base = dict(os.environ if env is None else env)
    key = run_key(spec, base)
    store = _host_store(spec)
    port = store.port if store is not None else spec.master_port
    if interface is None and spec.nnodes == 1:
        from .runtime.launchenv import loopback_interface
        interface = loopback_interface(spec.master_addr)
    procs: list[subprocess.Popen] = []
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in _STOP_SIGNALS}
    try:
        for local in range(spec.nproc):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env=worker_env(spec, local, port, dict(base), interface, key),
                start_new_session=True, preexec_fn=_die_with_launcher(os.getpid())))
        return _watch(spec, port, key, procs, prog)
    except _Stopped as stop:
        print(f"{prog}: stopped by {signal.Signals(stop.signum).name}; stopping the "
              f"workers", file=sys.stderr, flush=True)
        return 128 + stop.signum
    finally:
        for sig in _STOP_SIGNALS:             # no second signal while stopping
            signal.signal(sig, signal.SIG_IGN)
        _stop(procs)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        del store
