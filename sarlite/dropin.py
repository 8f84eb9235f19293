"""Run a DGL distributed training script unmodified: its ``dgl.distributed`` is sarlite's.

``python -m sarlite.run script.py ARGS`` (one worker, what ``torchrun ... -m sarlite.run``
and ``sarlite run`` start) calls :func:`redirect_dgl` and then runs the script as
``__main__``. From then on, in that process only, every way a script or the modules it
imports reach DGL's distributed names gives sarlite's:

=====================================================  =====================================
``import dgl`` then ``dgl.distributed.X``              :mod:`sarlite.distributed`'s ``X``
``import dgl.distributed [as dist]``                   :mod:`sarlite.distributed`
``from dgl.distributed import X``                      :mod:`sarlite.distributed`'s ``X``
``from dgl import distributed``                        :mod:`sarlite.distributed`
``dgl.distributed.optim.SparseAdam``,                  :mod:`sarlite.distributed.optim`,
``from dgl.distributed.nn import DistEmbedding``       :mod:`sarlite.distributed.nn`
``dgl.dataloading.DistNodeDataLoader`` (and            sarlite's loaders (the rest of
``DistEdgeDataLoader``, ``DistDataLoader``)            ``dgl.dataloading`` is DGL's)
=====================================================  =====================================

Everything else (``dgl.nn``, ``dgl.function``, ``dgl.DGLGraph``, ``dgl.NID``,
``dgl.dataloading.NeighborSampler``...) is the real DGL, and the real package is not
modified: ``sys.modules["dgl"]`` becomes :mod:`sarlite.dgl`, the module that forwards
every other attribute to it. This is a process-wide hook, so it exists only where it is
asked for: a process that was not started through ``sarlite.run`` is untouched (there, a
script changes its import line to ``import sarlite.dgl as dgl``).
"""
from __future__ import annotations

import importlib
import os
import runpy
import sys

#: the modules a redirected process sees in place of DGL's (name -> sarlite's module)
REDIRECTS = {
    "dgl": "sarlite.dgl",
    "dgl.distributed": "sarlite.distributed",
    "dgl.distributed.nn": "sarlite.distributed.nn",
    "dgl.distributed.nn.pytorch": "sarlite.distributed.nn",
    "dgl.distributed.optim": "sarlite.distributed.optim",
    "dgl.distributed.optim.pytorch": "sarlite.distributed.optim",
    "dgl.dataloading": "sarlite.dgl.dataloading",
}


def redirect_dgl() -> None:
    """Make ``dgl.distributed`` (in every import form) sarlite's in this process.

    Imports the real DGL first (so DGL's own modules keep their own references), then
    points the :data:`REDIRECTS` entries of ``sys.modules`` at sarlite's modules. Not a
    collective; idempotent. Only :mod:`sarlite.run` calls it.
    """
    import dgl                                       # noqa: F401  (the real package)
    import dgl.dataloading                           # noqa: F401
    import dgl.distributed                           # noqa: F401
    import sarlite.dgl                               # noqa: F401  (builds its modules)
    for name, target in REDIRECTS.items():
        sys.modules[name] = importlib.import_module(target)


def is_redirected() -> bool:
    """Whether this process runs under :func:`redirect_dgl`."""
    return sys.modules.get("dgl") is sys.modules.get("sarlite.dgl", object())


def check_target(argv: list[str]) -> str | None:
    """What is wrong with ``argv`` as ``script.py ARGS`` or ``-m module ARGS``, or
    ``None``."""
    if not argv:
        return "expected a script to run: script.py [ARGS...] or -m module [ARGS...]"
    if argv[0] == "-m":
        return None if len(argv) > 1 else "-m needs a module name"
    if not os.path.isfile(argv[0]):
        return f"no script {argv[0]!r} (expected the path of a Python file)"
    return None


def run_script(argv: list[str]) -> dict:
    """Run ``argv`` (``script.py ARGS`` or ``-m module ARGS``, checked by
    :func:`check_target`) as ``__main__`` in this process, as ``python`` would:
    ``sys.argv`` is the script and its arguments, and the script's directory (for
    ``-m``, the working directory) comes first on ``sys.path``.

    Returns the script's global variables. Under ``python`` they live until the
    interpreter exits, after the exit hooks; the caller keeps them as long (see
    ``sarlite.run``), so that a rank that finished its script first still answers the
    others' one-sided reads of its tensors."""
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, os.getcwd())
        return runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    return runpy.run_path(argv[0], run_name="__main__")
