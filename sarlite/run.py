"""One worker of an unmodified DGL distributed script: ``python -m sarlite.run script.py ARGS``.

Start it under any launcher that sets torchrun's variables::

    torchrun --nproc_per_node 2 -m sarlite.run train_dist.py --graph_name cora ...
    sarlite run --nproc 2 train_dist.py --graph_name cora ...   # the same, sarlite launches

or alone (``python -m sarlite.run train_dist.py ...``: one process, DGL's standalone
mode). The script runs as ``__main__`` after :func:`sarlite.dropin.redirect_dgl`, so its
``dgl.distributed`` (and ``dgl.dataloading``'s distributed loaders) are sarlite's in
every import form, in the script and in the modules it imports; the rest of ``dgl`` is
the real DGL.

The script's own exceptions end the worker as they would under ``python``. An error in
how the script uses the facade (a name sarlite does not provide, a mix of DGL's and
sarlite's distributed objects) is printed as one line, by rank 0 only, and every rank
exits with status 2. Bad input that sarlite's code refuses (``ValueError``, ``OSError``,
``NotImplementedError`` raised inside sarlite: a missing partition, a partition count
other than the workers') is one line too, printed by the first rank that failed
(:mod:`sarlite.runtime.health`), status 2.
"""
from __future__ import annotations

import atexit
import os
import sys
import traceback

from .distributed.mixing import MixedDGLError
from .distributed.unsupported import UnsupportedError
from .dropin import check_target, redirect_dgl, run_script

USAGE = """usage: python -m sarlite.run SCRIPT [ARGS...]
       python -m sarlite.run -m MODULE [ARGS...]

Run an unmodified DGL distributed training script as one sarlite worker: in this
process, dgl.distributed (every import form) is sarlite.distributed and
dgl.dataloading's distributed loaders are sarlite's; the rest of dgl is DGL's own.
Start N workers with 'torchrun --nproc_per_node N -m sarlite.run SCRIPT ...' or
'sarlite run --nproc N SCRIPT ...'; without a launcher the script runs alone
(DGL's standalone mode: the partitioning must have one part)."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    problem = check_target(argv)
    if problem:
        print(f"sarlite run: error: {problem}", file=sys.stderr, flush=True)
        return 2
    redirect_dgl()
    try:
        _keep_until_exit(run_script(argv))
    except (MixedDGLError, UnsupportedError) as err:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"sarlite run: error: {err}", file=sys.stderr, flush=True)
        return 2
    except (ValueError, OSError, NotImplementedError) as err:
        if not _raised_in_sarlite(err):
            raise
        _fail_once(str(err))
    return 0


def _keep_until_exit(script_globals: dict) -> None:
    """Hold the script's globals until the interpreter exits, as ``python`` holds a
    script's: its ``DistTensor``s (deleted when freed) then outlive the exit hook in which
    this rank waits for the others' one-sided reads. The exit hooks run last-registered
    first; the reference held by this one is dropped only after all of them have run."""
    atexit.register(lambda held=script_globals: None)


def _raised_in_sarlite(err: BaseException) -> bool:
    """Whether ``err`` was raised by sarlite's own code (not the script's)."""
    frames = traceback.extract_tb(err.__traceback__)
    package = os.path.dirname(os.path.abspath(__file__))
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(package + os.sep)


def _launcher_key(runkey) -> bytes | None:
    """The run key a launcher handed this worker (``SARLITE_RUN_KEY``), if any."""
    text = os.environ.get("SARLITE_RUN_KEY")
    try:
        return runkey.current() or (runkey.parse_key(text) if text else None)
    except ValueError:
        return None


def _fail_once(message: str) -> None:
    """Print ``message`` once for the whole run (the first rank to fail), exit 2."""
    from .comm import rank
    from .runtime import health, runkey
    me = rank()
    if health.monitoring():
        first = health.report_failure(message, 2, me)
    else:                 # the script made its own group: the launcher's store decides
        first = health.record_at(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                 int(os.environ.get("MASTER_PORT", "0") or 0),
                                 health.Failure(me, 2, message), _launcher_key(runkey),
                                 int(os.environ.get("WORLD_SIZE", "1")))
    if first:
        print(f"sarlite run: error (rank {me}): {message}", file=sys.stderr, flush=True)
    health.leave(first)
    health.exit_now(2)


if __name__ == "__main__":
    sys.exit(main())
