"""Entry point of every torchrun worker: ``python -m sarlite.train --config X.yaml``.

A failure on any rank reaches the user once: the rank that fails first prints one line
(``sarlite train: error (rank R): ...``), the others leave quietly with the same exit
status (see :mod:`sarlite.runtime.health`). Status 2: an error the user can fix (config,
data, files, non-finite values); 1: a bug (its traceback is printed); 3: a frozen peer.
A worker dies with its parent (the launcher), also when the parent is killed with -9.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch.distributed as dist

from .. import comm
from ..comm import CollectiveError, finalize
from ..runtime import health
from ..launch import kill_me_with_parent
from .config import ConfigError, fields_help, load_config

USER_ERRORS = (ConfigError, ValueError, OSError, NotImplementedError)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sarlite.train",
        description="Full-graph GNN training on torchrun workers, one partition each. "
                    "Launch with: torchrun --nproc_per_node=N -m sarlite.train --config X",
        epilog=fields_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None,
                   help="a packaged config's name (demo, ...; sarlite train "
                        "--list-configs) or a YAML file's path (sections dataset, partition, "
                        "model, engine, optim, train); defaults for everything not given")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="SECTION.KEY=VALUE",
                   help="override config fields, e.g. --set model.hidden=128 train.epochs=50")
    return p


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (torchrun, ``sarlite train``)
    dies, however it dies. torchrun starts workers in sessions of their own, so a signal
    to the launcher's process group does not reach them otherwise. A worker whose parent
    died while it was still importing (before this call) has been handed to init; it
    exits at once."""
    parent = os.getppid()
    if not kill_me_with_parent():                # not Linux: nothing to ask
        return
    if os.getppid() != parent or _orphaned(parent):
        os._exit(1)


def _orphaned(parent: int) -> bool:
    """Whether ``parent`` is init standing in for a launcher that died (and not a
    launcher that is itself process 1, as in a container)."""
    if parent != 1:
        return False
    try:
        with open("/proc/1/cmdline", "rb") as f:
            init = f.read().replace(b"\0", b" ")
    except OSError:
        return False
    return not any(name in init for name in (b"torch.distributed.run", b"torchrun",
                                             b"sarlite"))


def _torchrun_error_file(message: str) -> None:
    """Leave ``message`` where torchrun's error summary looks for it (its
    ``TORCHELASTIC_ERROR_FILE``), so it names this rank and cause as the root cause."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {"message": {"message": message, "extraInfo": {
        "py_callstack": message, "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(record, f)
    except OSError:
        pass


def _fail(rank: int, code: int, message: str, detail: str = "") -> None:
    """Report this rank's failure once for the whole run, then end the process."""
    first = health.report_failure(message, code, rank)
    if first:
        print(f"{detail}sarlite train: error (rank {rank}): {message}", file=sys.stderr,
              flush=True)
        _torchrun_error_file(f"rank {rank}: {message}")
    health.leave(first)
    health.exit_now(code)          # no teardown: peers may be gone already


def _secondary(rank: int, err: CollectiveError) -> None:
    """A collective failed because another rank failed or died: stay quiet if that rank
    reported its failure, else report this one."""
    other = health.failure_elsewhere(rank, wait=3.0)
    if other is not None:
        health.leave(False)
        health.exit_now(other.code)
    _fail(rank, 2, str(err))


def _rank() -> int:
    return comm.rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    die_with_parent()
    from .loop import run
    try:
        run(load_config(args.config, args.set))
    except CollectiveError as err:
        _secondary(_rank(), err)
    except USER_ERRORS as err:
        _fail(_rank(), 2, str(err))
    except Exception as err:  # a bug: its traceback goes with the one line
        _fail(_rank(), 1, f"unexpected {type(err).__name__}: {err}",
              detail=traceback.format_exc())
    finalize()
    health.exit_now(0)       # not through Python's finalization: see exit_now
    return 0


if __name__ == "__main__":
    sys.exit(main())
