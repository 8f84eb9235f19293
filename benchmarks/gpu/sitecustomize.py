"""Lets ``import dgl`` (2.1.0, from PyPI) work under a torch it ships no libraries for.

Only for a GPU machine whose own torch is newer than DGL 2.1.0's (see
``benchmarks/GPU.md``): put this folder on ``PYTHONPATH`` there and Python runs it at
start-up. DGL's ``graphbolt`` subpackage loads a C++ library built for each torch version
(2.0.0-2.2.1) when ``dgl`` is imported, and fails for any other. sarlite uses no part of
graphbolt, so under another torch this makes ``dgl.graphbolt`` an empty package; the rest
of DGL (its Python layers, ``dgl.function``, its CPU kernels) loads as usual. With a torch
DGL ships the library for, nothing is changed.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types


def _graphbolt_library_missing() -> bool:
    import torch
    spec = importlib.util.find_spec("dgl")
    if spec is None or spec.origin is None:
        return False
    version = torch.__version__.split("+", maxsplit=1)[0]
    path = os.path.join(os.path.dirname(spec.origin), "graphbolt",
                        f"libgraphbolt_pytorch_{version}.so")
    return not os.path.exists(path)


class _EmptyGraphbolt(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``dgl.graphbolt`` (and its submodules) as empty packages."""

    def find_spec(self, name, path, target=None):
        if name == "dgl.graphbolt" or name.startswith("dgl.graphbolt."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _placeholder       # names DGL's other modules import
        return module

    def exec_module(self, module):
        pass


def _placeholder(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {"__doc__": "graphbolt is not loaded (benchmarks/GPU.md)"})


def install() -> bool:
    """Stub ``dgl.graphbolt`` when its library for this torch is missing; whether it did."""
    if not _graphbolt_library_missing():
        return False
    sys.meta_path.insert(0, _EmptyGraphbolt())
    return True


install()
