"""IntelLabs SAR's ``sar.comm``: set-up, rank queries and collectives, on ``sarlite.comm``.

Every function here that communicates is a **collective**: all ranks call it, in the same
order, also with nothing to send (sarlite has no servers). Each is bounded by the process
group's timeout (``SARLITE_TIMEOUT``, 600 s, read by :func:`sarlite.init`;
:func:`sarlite.comm.settings`) and fails with
:class:`sarlite.comm.CollectiveError` instead of hanging when a peer is gone.
"""
from __future__ import annotations

import logging
import os
import time

import psutil
import torch
import torch.distributed as dist

from .. import comm as _comm
from .config import Config

logger = logging.getLogger("sarlite.sar")

BACKENDS = ("ccl", "nccl", "mpi", "gloo")
_SUPPORTED = ("gloo", "nccl")
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class _CommData:
    """What :func:`initialize_comms` was told (SAR's ``sar.comm._CommData``)."""

    initialized = False
    master_ip = "127.0.0.1"
    master_port = 12345
    backend = "gloo"
    comm_device = torch.device("cpu")


# -- finding rank 0 ----------------------------------------------------------------------
def get_socket() -> tuple[str, str]:
    """``(interface name, IPv4 address)`` this host advertises: the interface named by
    ``SAR_SOCKET_NAME`` when set, else the first non-loopback interface with an IPv4
    address, else the loopback. Local; no communication.

    Raises ``ValueError`` when ``SAR_SOCKET_NAME`` names no interface with an IPv4 address.
    """
    wanted = os.environ.get("SAR_SOCKET_NAME")
    candidates = []
    for name, addresses in psutil.net_if_addrs().items():
        for address in addresses:
            if address.family.name == "AF_INET":
                candidates.append((name, address.address))
    if wanted is not None:
        chosen = [c for c in candidates if c[0] == wanted]
        if not chosen:
            raise ValueError(f"SAR_SOCKET_NAME={wanted!r}: no interface of that name with an "
                             f"IPv4 address (have {sorted({c[0] for c in candidates})})")
        return chosen[0]
    outside = [c for c in candidates if not c[1].startswith("127.")]
    return (outside or [("lo", "127.0.0.1")])[0]


def nfs_ip_init(_rank: int, ip_file: str) -> str:
    """The address of rank 0, as SAR's ``nfs_ip_init`` returns it.

    When ``MASTER_ADDR`` is set (torchrun, ``sarlite train``, or exported by hand for
    single-host runs) it is returned and ``ip_file`` is not touched: no shared filesystem
    is needed. Otherwise SAR's protocol: rank 0 writes its own address (see
    :func:`get_socket`) to ``ip_file`` (atomically) and returns it; every other rank waits
    for the file (up to the timeout of :func:`sarlite.comm.settings`, ``SARLITE_TIMEOUT``
    seconds) and returns what it holds. Delete a stale ``ip_file`` between runs: a rank
    may read it before rank 0 rewrites it. Not a collective.

    Raises
    ------
    TimeoutError
        ``ip_file`` did not appear (with an address) in time.
    """
    address = os.environ.get("MASTER_ADDR", "").strip()
    if address:
        return address
    if _rank == 0:
        address = get_socket()[1]
        partial = f"{ip_file}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(address)
        os.replace(partial, ip_file)
        logger.info("wrote address %s to %s", address, ip_file)
        return address
    deadline = time.monotonic() + _comm.settings().timeout.total_seconds()
    while time.monotonic() < deadline:
        if os.path.isfile(ip_file):
            with open(ip_file, encoding="utf-8") as handle:
                address = handle.readline().strip()
            if address:
                logger.info("read address %s from %s", address, ip_file)
                return address
        time.sleep(0.2)
    raise TimeoutError(f"rank {_rank}: {ip_file} did not appear with rank 0's address; "
                       f"start rank 0, or export MASTER_ADDR on every rank")


def initialize_comms(_rank: int, _world_size: int, master_ip_address: str, backend: str,
                     _comm_device: torch.device | None = None,
                     master_port_number: int = 12345) -> None:
    """Join the process group of ``_world_size`` workers as rank ``_rank`` (SAR's call).

    The rendezvous is ``master_ip_address:master_port_number``, unless a launcher
    (torchrun, ``sarlite train``) already set ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
    and ``MASTER_PORT``: then its rendezvous is used and ``_rank``/``_world_size`` must
    agree with it. An existing process group is reused (it must have this rank and size).
    gloo is told the interface that routes to rank 0; collectives time out after
    ``SARLITE_TIMEOUT`` seconds. Collective: every rank calls it once.

    ``backend`` is ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors); SAR's CPU
    backends ``"ccl"`` (oneCCL) and ``"mpi"`` run on gloo, with a warning (see
    :func:`effective_backend`). ``_comm_device`` defaults to CUDA for nccl and the CPU
    otherwise.

    Raises
    ------
    ValueError
        An unknown backend, or a rank/size that disagrees with the launcher's variables
        or the existing process group.
    CollectiveError
        The ranks did not all join in time.
    """
    backend = effective_backend(backend)
    if _comm_device is None:
        _comm_device = torch.device("cuda" if backend == "nccl" else "cpu")
    if not dist.is_initialized():
        _describe_job(_rank, _world_size, master_ip_address, master_port_number, backend)
    _comm.init(backend=backend, device=_comm_device)      # a group the script made: kept
    if (dist.get_rank(), dist.get_world_size()) != (_rank, _world_size):
        raise ValueError(f"initialize_comms({_rank}, {_world_size}, ...) but this process is "
                         f"rank {dist.get_rank()} of {dist.get_world_size()}")
    _CommData.master_ip = os.environ.get("MASTER_ADDR", master_ip_address)
    _CommData.master_port = int(os.environ.get("MASTER_PORT", master_port_number))
    _CommData.backend = dist.get_backend()
    _CommData.comm_device = torch.device(_comm_device)
    _CommData.initialized = True
    logger.info("rank %d of %d joined (%s)", _rank, _world_size, _CommData.backend)


def effective_backend(backend: str) -> str:
    """The torch.distributed backend sarlite runs for SAR's ``backend`` name.

    ``"gloo"`` and ``"nccl"`` as given; ``"ccl"`` and ``"mpi"`` (CPU collectives in SAR,
    through oneCCL or an MPI build of torch, which sarlite does not use) become ``"gloo"``,
    with a logged warning: the results are the same, the speed may differ.

    Raises ``ValueError`` for any other name.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend not in _SUPPORTED:
        logger.warning("backend %r: sarlite runs CPU collectives on gloo instead", backend)
        return "gloo"
    return backend


def _describe_job(rank_: int, size: int, address: str, port: int, backend: str) -> None:
    """Put the job into the environment :func:`sarlite.init` reads, unless a launcher did."""
    env = os.environ
    if all(name in env for name in _LAUNCHER_VARS):
        given = (int(env["RANK"]), int(env["WORLD_SIZE"]))
        if given != (rank_, size):
            raise ValueError(f"initialize_comms({rank_}, {size}, ...) but the launcher set "
                             f"RANK={env['RANK']} WORLD_SIZE={env['WORLD_SIZE']}: pass those "
                             f"(e.g. --rank $RANK) or launch without torchrun")
        logger.info("using the launcher's rendezvous %s:%s, not %s:%s",
                    env["MASTER_ADDR"], env["MASTER_PORT"], address, port)
        return
    env.update(RANK=str(rank_), WORLD_SIZE=str(size), MASTER_ADDR=str(address),
               MASTER_PORT=str(port))
    if backend == "nccl" and "LOCAL_RANK" not in env:
        env["LOCAL_RANK"] = str(rank_ % max(1, torch.cuda.device_count()))


# -- queries -------------------------------------------------------------------------------
def is_initialized() -> bool:
    """Whether a process group exists (from :func:`initialize_comms` or ``sarlite.init``)."""
    return dist.is_initialized()


def _require() -> None:
    if not dist.is_initialized():
        raise RuntimeError("no process group: call sar.initialize_comms(...) first")


def rank() -> int:
    """This worker's rank. Raises ``RuntimeError`` before :func:`initialize_comms`."""
    _require()
    return dist.get_rank()


def world_size() -> int:
    """The number of workers. Raises ``RuntimeError`` before :func:`initialize_comms`."""
    _require()
    return dist.get_world_size()


def master_ip() -> str:
    _require()
    return _CommData.master_ip if _CommData.initialized else os.environ.get("MASTER_ADDR", "")


def master_port() -> int:
    _require()
    return _CommData.master_port if _CommData.initialized else \
        int(os.environ.get("MASTER_PORT", 0))


def backend() -> str:
    _require()
    return dist.get_backend()


def comm_device() -> torch.device:
    """The device collective buffers live on (CUDA for nccl, else the CPU)."""
    _require()
    return _CommData.comm_device if _CommData.initialized else _comm.comm_device()


# -- collectives ---------------------------------------------------------------------------
def _op_name(op) -> str:
    if isinstance(op, str) and op.lower() in ("sum", "max", "min"):
        return op.lower()
    for name, value in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX),
                        ("min", dist.ReduceOp.MIN)):
        if not isinstance(op, str) and op == value:
            return name
    raise ValueError(f"all_reduce: op must be dist.ReduceOp.SUM, MAX or MIN, got {op!r}")


def all_reduce(red_tensor: torch.Tensor, op=dist.ReduceOp.SUM,
               move_to_comm_device: bool = False) -> None:
    """Reduce ``red_tensor`` over all ranks **in place** (SAR's signature).

    ``op`` is ``dist.ReduceOp.SUM``, ``MAX`` or ``MIN``. The tensor may live on any device
    (``move_to_comm_device`` is accepted and not needed). Collective, blocking.

    Raises ``ValueError`` for another op; ``CollectiveError`` when the reduction fails.
    """
    result = _comm.all_reduce(red_tensor, _op_name(op), kind="sar.all_reduce")
    with torch.no_grad():
        red_tensor.copy_(result)


def _max_rows() -> int | None:
    return Config.max_collective_size or None


def exchange_tensors(tensors: list[torch.Tensor],
                     recv_sizes: list[int] | None = None) -> list[torch.Tensor]:
    """Send ``tensors[k]`` to rank ``k``; return the tensors received from each rank.

    Every tensor has the same trailing shape and dtype on every rank; sizes are exchanged
    first (``recv_sizes``, SAR's shortcut, is checked against them). Moves at most
    ``Config.max_collective_size`` rows per peer in one collective call. Collective.
    """
    received = _comm.all_to_all_rows(list(tensors), kind="sar.exchange_tensors",
                                      max_rows=_max_rows())
    if recv_sizes is not None and [r.shape[0] for r in received] != list(recv_sizes):
        raise ValueError(f"exchange_tensors: expected {list(recv_sizes)} rows from the "
                         f"ranks, got {[r.shape[0] for r in received]}")
    return received


def all_to_all(recv_tensors: list[torch.Tensor], send_tensors: list[torch.Tensor],
               move_to_comm_device: bool = False) -> None:
    """Send ``send_tensors[k]`` to rank ``k`` and fill ``recv_tensors[k]`` (its shape must
    be what rank ``k`` sends) with what rank ``k`` sent. Collective."""
    received = exchange_tensors(send_tensors)
    for k, (target, got) in enumerate(zip(recv_tensors, received)):
        if target.shape != got.shape:
            raise ValueError(f"all_to_all: rank {k} sent shape {tuple(got.shape)} but the "
                             f"receive tensor has shape {tuple(target.shape)}")
        target.copy_(got)


def exchange_single_tensor(recv_idx: int, send_idx: int, recv_tensor: torch.Tensor,
                           send_tensor: torch.Tensor) -> None:
    """Send ``send_tensor`` to rank ``send_idx`` and fill ``recv_tensor`` with what rank
    ``recv_idx`` sends (one round of a ring). Collective."""
    rows = _comm.ring_exchange(send_tensor, send_idx, recv_tensor.shape[0], recv_idx,
                               kind="sar.exchange_single_tensor", async_op=False).wait()
    recv_tensor.copy_(rows.reshape(recv_tensor.shape))


def sync_params(model: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers into ``model`` on every rank. Collective."""
    _comm.sync_params(model)


def gather_grads(model: torch.nn.Module) -> None:
    """Replace every parameter gradient by its sum over the ranks (call before
    ``optimizer.step()``). Collective."""
    _comm.all_reduce_gradients(model)


__all__ = ["all_reduce", "all_to_all", "backend", "comm_device", "effective_backend",
           "exchange_single_tensor", "exchange_tensors", "gather_grads", "get_socket", "initialize_comms",
           "is_initialized", "master_ip", "master_port", "nfs_ip_init", "rank",
           "sync_params", "world_size"]
