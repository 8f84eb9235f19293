"""``dgl`` as a DGL distributed training script sees it, with sarlite underneath.

DGL's distributed examples write ``import dgl`` and then ``dgl.distributed.initialize``,
``dgl.distributed.DistGraph``, ``dgl.dataloading.DistNodeDataLoader``,
``dgl.dataloading.NeighborSampler``, ``dgl.NID``... Replacing that one line with::

    import sarlite.dgl as dgl

keeps every other line: this module forwards every attribute to the real ``dgl`` package
(``dgl.NID``, ``dgl.to_block``, ``dgl.nn``, ``dgl.function``, ``dgl.__version__``...)
except

* ``dgl.distributed`` -> :mod:`sarlite.distributed`;
* ``dgl.dataloading`` -> a module that forwards to ``dgl.dataloading`` except
  ``DistNodeDataLoader``, ``DistEdgeDataLoader``, ``DistDataLoader`` and ``DistGraph``,
  which are sarlite's.

The real ``dgl`` is never modified. Lines such as ``import dgl.function as fn`` or
``import dgl.nn.pytorch as dglnn`` keep working, since they bind other names; a bare
``import dgl.function`` (without ``as``) would rebind ``dgl`` to the real package, so
keep the ``as`` form or put ``import sarlite.dgl as dgl`` after it.
``from sarlite.dgl.dataloading import DistNodeDataLoader`` and
``from sarlite.dgl.distributed import DistGraph`` also work.
"""
import sys as _sys
import types as _types

import dgl as _dgl
import dgl.dataloading as _dgl_dataloading

from . import distributed

_OURS = ("DistDataLoader", "DistEdgeDataLoader", "DistNodeDataLoader", "DistGraph")


class _Dataloading(_types.ModuleType):
    """``dgl.dataloading`` with sarlite's distributed loaders."""

    def __getattr__(self, name: str):
        return getattr(_dgl_dataloading, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(_dgl_dataloading)) | set(vars(self)))


dataloading = _Dataloading(
    f"{__name__}.dataloading",
    "``dgl.dataloading`` whose distributed loaders and DistGraph are sarlite's "
    "(everything else is DGL's own).")
for _name in _OURS:
    setattr(dataloading, _name, getattr(distributed, _name))
del _name

_sys.modules.setdefault(dataloading.__name__, dataloading)
_sys.modules.setdefault(f"{__name__}.distributed", distributed)


def __getattr__(name: str):
    return getattr(_dgl, name)


def __dir__() -> list[str]:
    return sorted(set(dir(_dgl)) | {"dataloading", "distributed"})
