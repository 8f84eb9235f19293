"""Where a worker's rank and rendezvous come from, and which network interface reaches it.

A worker may be started by ``torchrun``, by ``mpirun`` (Open MPI, or an MPICH/Intel MPI
launcher through PMI) or by Slurm's ``srun``. :func:`read_launch_env` reads whichever of
their environments is present, in that order, into one :class:`LaunchEnv`;
:func:`route_interface` names the local interface the kernel routes to rank 0's host, which
is what gloo must be told (``GLOO_SOCKET_IFNAME``) on hosts with several interfaces.

Both are plain functions of their arguments and of the machine: no process group, no
collective, no environment writes.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Mapping

import psutil

DEFAULT_PORT = 29500

# (source, rank variable, world size variable, local rank variables in order of preference)
_LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", ("LOCAL_RANK",)),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     ("OMPI_COMM_WORLD_LOCAL_RANK",)),
    ("PMI", "PMI_RANK", "PMI_SIZE", ("MPI_LOCALRANKID", "PMI_LOCAL_RANK")),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS", ("SLURM_LOCALID",)),
)
_HOW = "launch with torchrun, mpirun or srun, or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"


@dataclass(frozen=True)
class LaunchEnv:
    """One worker's place in the job, as its launcher described it.

    ``source`` names the launcher whose variables were read: ``"torchrun"``,
    ``"Open MPI"``, ``"PMI"`` or ``"Slurm"``.
    """

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: str


def _integer(environ: Mapping[str, str], name: str, source: str) -> int:
    value = environ[name]
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"{name}={value!r} (set by {source}) is not an integer") from None


def _master(environ: Mapping[str, str], source: str, rank_var: str,
            world_size: int) -> tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT (default 29500); a one-rank job may omit the address."""
    addr = environ.get("MASTER_ADDR", "").strip()
    if not addr:
        if world_size > 1:
            raise RuntimeError(
                f"launched by {source} ({rank_var}={environ[rank_var]}) but MASTER_ADDR is "
                f"not set: export MASTER_ADDR=<host of rank 0> (and MASTER_PORT, default "
                f"{DEFAULT_PORT})")
        addr = "127.0.0.1"
    if "MASTER_PORT" not in environ:
        return addr, DEFAULT_PORT
    port = _integer(environ, "MASTER_PORT", source)
    if not 1 <= port <= 65535:
        raise ValueError(f"MASTER_PORT={environ['MASTER_PORT']!r} is not a port (1..65535)")
    return addr, port


def _from(environ: Mapping[str, str], source: str, rank_var: str, size_var: str,
          local_vars: tuple[str, ...]) -> LaunchEnv:
    rank = _integer(environ, rank_var, source)
    world_size = _integer(environ, size_var, source)
    if world_size < 1:
        raise ValueError(f"{size_var}={environ[size_var]!r} (set by {source}) must be at "
                         f"least 1")
    if not 0 <= rank < world_size:
        raise ValueError(f"{rank_var}={environ[rank_var]!r} (set by {source}) is out of "
                         f"range: {size_var}={world_size} allows 0..{world_size - 1}")
    local_var = next((name for name in local_vars if name in environ), None)
    local_rank = 0 if local_var is None else _integer(environ, local_var, source)
    if not 0 <= local_rank < world_size:
        raise ValueError(f"{local_var}={environ[local_var]!r} (set by {source}) is out of "
                         f"range 0..{world_size - 1}")
    addr, port = _master(environ, source, rank_var, world_size)
    return LaunchEnv(rank, world_size, local_rank, addr, port, source)


def launcher_present(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` holds any launcher's rank variable (``RANK``,
    ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``SLURM_PROCID``). Not a collective."""
    return any(rank_var in environ for _, rank_var, _, _ in _LAUNCHERS)


def read_launch_env(environ: Mapping[str, str]) -> LaunchEnv:
    """This worker's rank, world size, local rank and rendezvous address from ``environ``.

    Looks, in this order, for torchrun's ``RANK``/``WORLD_SIZE`` (``LOCAL_RANK``, default
    0), Open MPI's ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``/
    ``OMPI_COMM_WORLD_LOCAL_RANK``, PMI's ``PMI_RANK``/``PMI_SIZE`` (local rank from
    ``MPI_LOCALRANKID`` or ``PMI_LOCAL_RANK``, default 0) and Slurm's ``SLURM_PROCID``/
    ``SLURM_NTASKS``/``SLURM_LOCALID``; the first launcher whose rank and size variables
    are both set wins. The rendezvous is ``MASTER_ADDR`` (required unless the world has one
    rank, then ``127.0.0.1``) and ``MASTER_PORT`` (default 29500), whichever launcher it is.

    A pure function of ``environ`` (pass ``os.environ``); not a collective.

    Raises
    ------
    RuntimeError
        No launcher's variables are set (the message lists what was looked for), or
        ``MASTER_ADDR`` is missing in a world of several ranks (the message says how to
        set it).
    ValueError
        A variable is not an integer, the rank or local rank is outside
        ``0..world_size - 1``, the world size is below 1, or the port is outside
        1..65535; the message names the variable and its value.
    """
    for source, rank_var, size_var, local_vars in _LAUNCHERS:
        if rank_var in environ and size_var in environ:
            return _from(environ, source, rank_var, size_var, local_vars)
    partial = [f"{have} is set but {lack} is not"
               for _, rank_var, size_var, _ in _LAUNCHERS
               for have, lack in ((rank_var, size_var), (size_var, rank_var))
               if have in environ and lack not in environ]
    looked = ", ".join(f"{rank_var}/{size_var}" for _, rank_var, size_var, _ in _LAUNCHERS)
    raise RuntimeError(f"sarlite: no launcher environment found (looked for {looked}"
                       f"{'; ' + '; '.join(partial) if partial else ''}): {_HOW}")


def _addresses(host: str) -> list[tuple[int, tuple]]:
    """``(family, sockaddr)`` of ``host``, IPv4 first; empty when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return []
    found = [(family, sockaddr) for family, _, _, _, sockaddr in infos
             if family in (socket.AF_INET, socket.AF_INET6)]
    return sorted(found, key=lambda item: item[0] != socket.AF_INET)


def _plain_ip(text: str):
    return ipaddress.ip_address(text.split("%", 1)[0])


def _local_ip(family: int, sockaddr: tuple) -> str | None:
    """The local address the kernel picks to reach ``sockaddr`` (a UDP connect sends
    nothing), or ``None`` when there is no route."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((sockaddr[0], 9, *sockaddr[2:]))
            return sock.getsockname()[0]
    except OSError:
        return None


def _interface_holding(ip: str, family: int) -> str | None:
    wanted = _plain_ip(ip)
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family == family and _plain_ip(addr.address) == wanted:
                return name
    return None


def route_interface(master_addr: str) -> str | None:
    """Name of the local network interface whose address reaches ``master_addr``.

    ``master_addr`` is a host name or an IPv4 (or IPv6, best effort) address; the kernel's
    routing table decides (a UDP socket is connected, which sends nothing, and the local
    address it was given is looked up among the interfaces). Not a collective; no traffic.

    Returns
    -------
    str or None
        E.g. ``"eth0"``; ``None`` when ``master_addr`` is a loopback or unspecified
        address (gloo's default interface works then), does not resolve, or no interface
        holds the routed address.
    """
    for family, sockaddr in _addresses(master_addr):
        ip = _plain_ip(sockaddr[0])
        if ip.is_loopback or ip.is_unspecified:
            return None
        local = _local_ip(family, sockaddr)
        name = _interface_holding(local, family) if local is not None else None
        if name is not None:
            return name
    return None


def loopback_interface(host: str) -> str | None:
    """Name of the local interface that holds ``host``'s address when ``host`` is a
    loopback address (``"lo"`` on Linux for ``127.0.0.1``), else ``None``. A one-host
    run tells gloo to use it, so that gloo's sockets listen on loopback only. Not a
    collective; no traffic."""
    for family, sockaddr in _addresses(host):
        if _plain_ip(sockaddr[0]).is_loopback:
            return _interface_holding(sockaddr[0], family)
    return None


def reachable_address(master_addr: str | None, interface: str | None = None) -> str:
    """A local address by which the other hosts of the job reach this one.

    The first address (IPv4 first) of ``interface`` when it is given (the value of
    ``GLOO_SOCKET_IFNAME``; the first name of a comma-separated list); else the local
    address the kernel routes ``master_addr`` from (``127.0.0.1`` for a loopback
    ``master_addr``); else the address of this host's name; else ``127.0.0.1``. Not a
    collective; no traffic.
    """
    if interface:
        addrs = psutil.net_if_addrs().get(interface.split(",")[0].strip(), [])
        for addr in sorted(addrs, key=lambda a: a.family != socket.AF_INET):
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                return addr.address.split("%", 1)[0]
    for family, sockaddr in _addresses(master_addr) if master_addr else []:
        local = _local_ip(family, sockaddr)
        if local is not None:
            return local.split("%", 1)[0]
    for _, sockaddr in _addresses(socket.gethostname()):
        return sockaddr[0]
    return "127.0.0.1"
