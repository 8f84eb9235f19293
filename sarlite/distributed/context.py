"""``initialize``: DGL's set-up call, which in sarlite checks the launcher and waits.

DGL scripts call ``dgl.distributed.initialize(ip_config)`` first and often
``torch.distributed.init_process_group(...)`` right after it. So that both orders work,
:func:`initialize` validates the launcher's environment and remembers sarlite's options but
creates no process group; :func:`ensure_process_group`, called by the facade's first
collective entry point (the :class:`~sarlite.distributed.DistGraph` constructor,
``node_split``/``edge_split``), then reuses the group the script made or joins one with
:func:`sarlite.init`. Without any launcher variables the process runs alone (world size 1,
no process group), as DGL's standalone mode.
"""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from ..comm import init
from ..runtime import allocator
from ..runtime.launchenv import launcher_present, read_launch_env
from .mixing import check_script_imports

MAX_QUEUE_SIZE = 20 * 1024 * 1024 * 1024   # DGL's default client queue size (ignored)

_options: dict = {}


def initialize(ip_config: str | None = None, max_queue_size: int = MAX_QUEUE_SIZE,
               net_type: str | None = None, num_worker_threads: int = 1,
               use_graphbolt: bool = False, *, backend: str | None = None,
               timeout: timedelta | float | None = None,
               device: str | torch.device | None = None) -> tuple[int, int]:
    """Prepare sarlite's distributed module, as ``dgl.distributed.initialize``.

    Every rank calls it once, before any other sarlite distributed call, exactly where a
    DGL script calls ``dgl.distributed.initialize``. It is **not** a collective: it checks
    the launcher's environment (torchrun, mpirun or srun; see :func:`sarlite.init`) and
    remembers ``backend``, ``timeout`` and ``device``, but does not create the process
    group. The script may then call ``torch.distributed.init_process_group`` itself (as
    DGL's examples do); otherwise the first collective of the facade (constructing
    :class:`~sarlite.distributed.DistGraph`, or ``node_split``) joins the group with
    :func:`sarlite.init` and these options. Calling it again replaces the options.

    Parameters
    ----------
    ip_config:
        Ignored: there are no servers; the launcher's environment describes the workers.
    max_queue_size:
        Ignored (the size of DGL's RPC client queue).
    net_type:
        Ignored (DGL's deprecated RPC network type).
    num_worker_threads:
        Ignored (OMP threads of DGL's sampler processes; sarlite samples in the trainer).
    use_graphbolt:
        Ignored: it picks DGL's GraphBolt sampling kernels; sarlite samples with
        ``dgl.sampling`` on each trainer's partition.
    backend, timeout, device:
        Keyword-only (sarlite): passed to :func:`sarlite.init` when the facade joins the
        process group (not used when the script made the group itself).

    Returns
    -------
    (int, int)
        ``(rank, world_size)`` from the process group if one exists, else from the
        launcher's variables; ``(0, 1)`` without a launcher (standalone). (DGL returns
        ``None``.)

    Raises
    ------
    MixedDGLError
        The script, or a module beside it, binds DGL's own ``dgl.distributed`` objects
        (see ``sarlite.distributed.mixing``); the message names the line to change.
    RuntimeError
        A launcher's rank variable is set but its world size is not, or ``MASTER_ADDR``
        is missing in a world of several ranks.
    ValueError
        A launcher variable is malformed.
    """
    check_script_imports()
    _options.clear()
    _options.update(backend=backend, timeout=timeout, device=device)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if not launcher_present(os.environ):
        return 0, 1
    env = read_launch_env(os.environ)
    return env.rank, env.world_size


def ensure_process_group() -> tuple[int, int]:
    """Join the process group unless one exists; ``(rank, world_size)``.

    Reuses a group the script (or :func:`sarlite.init`) made, with the exit hook
    :func:`sarlite.init` adds (:func:`sarlite.comm.context.settle`); otherwise, under a launcher,
    calls :func:`sarlite.init` with the options given to :func:`initialize` (a collective:
    every rank gets here, through the same facade call) and the allocator setting for
    mini-batch training, ``mmap_threshold="retain"`` (``SARLITE_MMAP_THRESHOLD``
    overrides it); without a launcher it does nothing and returns ``(0, 1)``.

    Raises
    ------
    MixedDGLError
        As :func:`initialize`.
    RuntimeError, ValueError, CollectiveError
        As :func:`sarlite.init`.
    """
    check_script_imports()
    if dist.is_initialized():
        return init()        # the script's group, settled at exit as sarlite's own
    if not launcher_present(os.environ):
        return 0, 1
    # DGL's distributed scripts train on samples: keep freed batch buffers for the next
    # step (sarlite.runtime.allocator), unless SARLITE_MMAP_THRESHOLD says otherwise
    return init(**_options, mmap_threshold=allocator.mini_batch_setting(os.environ))


def exit_client() -> None:
    """Nothing to do, as ``dgl.distributed.exit_client`` has with no servers: sarlite's
    trainers hold no connections besides the process group, which stays (call
    :func:`sarlite.finalize` to leave it). Not a collective."""
