"""Entry point of every torchrun worker: ``python -m sarlite.train --config X.yaml``.

Errors the user can fix are printed once, by rank 0, and every rank exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..comm import CollectiveError, finalize
from .config import ConfigError, fields_help, load_config


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sarlite.train",
        description="Full-graph GNN training on torchrun workers, one partition each. "
                    "Launch with: torchrun --nproc_per_node=N -m sarlite.train --config X",
        epilog=fields_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None,
                   help="YAML config (sections dataset, partition, model, engine, optim, "
                        "train); defaults for everything not given")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="SECTION.KEY=VALUE",
                   help="override config fields, e.g. --set model.hidden=128 train.epochs=50")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    from .loop import run
    try:
        run(load_config(args.config, args.set))
    except (ConfigError, CollectiveError, ValueError, FileNotFoundError,
            NotImplementedError) as err:
        if rank == 0 or isinstance(err, CollectiveError):
            print(f"sarlite train: error (rank {rank}): {err}", file=sys.stderr, flush=True)
        return 2                 # exit without teardown: peers may be gone already
    finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
