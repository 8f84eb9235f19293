"""Lets a plain ``import dgl`` (DGL 2.1.0 from PyPI) work under every torch sarlite supports.

Installed with sarlite and run at interpreter start-up by ``sarlite-dgl-hook.pth`` in
site-packages (the standard mechanism, as setuptools' ``distutils-precedence.pth``), so
that users' scripts and DGL's own examples, which import ``dgl`` before sarlite, need no
change. It imports nothing heavy at start-up: it only puts a finder at the front of
``sys.meta_path`` that waits for ``dgl.graphbolt`` to be imported.

Why: ``import dgl`` imports its ``graphbolt`` subpackage, which needs a C++ library built
for each torch release from 2.0.0 to 2.2.1 and ``torchdata.datapipes`` (gone from torchdata
0.10). Under any newer torch that import fails, and so does ``import dgl``. sarlite uses
no part of graphbolt (nor do ``dgl.nn``, ``dgl.function`` or DGL's CPU kernels).

What it does: when ``dgl.graphbolt`` is imported, the real package is imported first.
Only if that fails with ``ImportError`` or ``OSError`` is ``dgl.graphbolt`` replaced by an
empty package whose every name is a placeholder class: ``isinstance`` checks against it
are false, and calling one raises ``ImportError`` with the original reason. Where DGL
loads as it is (torch 2.2.1 with torchdata 0.7.1), nothing is changed.

Switch: ``SARLITE_DGL_HOOK=0`` (or ``off``, ``false``, ``no``) turns it off; ``import dgl``
then fails as DGL itself fails. ``reason()`` says whether the hook stood in, and why.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

ENV = "SARLITE_DGL_HOOK"
TARGET = "dgl.graphbolt"
_OFF = ("0", "off", "false", "no")
_failure: list[str] = []          # why the real graphbolt did not load, once it was tried


def enabled() -> bool:
    """Whether ``SARLITE_DGL_HOOK`` leaves the hook on (the default)."""
    return os.environ.get(ENV, "1").strip().lower() not in _OFF


def reason() -> str | None:
    """Why ``dgl.graphbolt`` is a placeholder in this process, or ``None`` if it is not."""
    return _failure[0] if _failure else None


def _placeholder(package: str, message: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing_class(f"{package}.{name}", message)
    return __getattr__


def _missing_class(qualname: str, message: str) -> type:
    def refuse(*args, **kwargs):
        raise ImportError(f"{qualname} is not available: {message}")
    return type(qualname.rsplit(".", 1)[-1], (), {
        "__new__": refuse, "__module__": qualname.rsplit(".", 1)[0],
        "__doc__": f"Placeholder: {message}"})


def _make_empty(module: types.ModuleType, message: str) -> None:
    """Turn a (possibly half-initialised) package into the empty placeholder package."""
    keep = {"__name__", "__spec__", "__loader__", "__package__"}
    for key in [k for k in vars(module) if k not in keep]:
        delattr(module, key)
    module.__path__ = []
    module.__file__ = None
    module.__doc__ = f"Placeholder: {message}"
    module.__getattr__ = _placeholder(module.__name__, message)


class _FallbackLoader(importlib.abc.Loader):
    """Runs the real ``dgl.graphbolt``; turns it into a placeholder if that fails."""

    def __init__(self, real: importlib.abc.Loader):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        try:
            self.real.exec_module(module)
        except (ImportError, OSError) as err:
            import torch            # dgl imported it before graphbolt
            message = (f"DGL's graphbolt does not load under torch {torch.__version__} "
                       f"({type(err).__name__}: {err}); sarlite's start-up hook let the "
                       f"rest of DGL load without it ({ENV}=0 turns the hook off)")
            _failure[:] = [message]
            for name in [n for n in sys.modules if n.startswith(TARGET + ".")]:
                del sys.modules[name]
            _make_empty(module, message)


class _EmptySubmodule(importlib.abc.Loader):
    """Any ``dgl.graphbolt.X`` once graphbolt is a placeholder."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        _make_empty(module, _failure[0])


class GraphboltFinder(importlib.abc.MetaPathFinder):
    """Finds ``dgl.graphbolt`` through the other finders and wraps its loader."""

    def find_spec(self, name, path, target=None):
        if name == TARGET:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _FallbackLoader(spec.loader)
            return spec
        if _failure and name.startswith(TARGET + "."):
            return importlib.machinery.ModuleSpec(name, _EmptySubmodule(), is_package=True)
        return None


def install() -> bool:
    """Put the finder first on ``sys.meta_path``, once; whether it is installed."""
    if not enabled():
        return False
    if not any(isinstance(f, GraphboltFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, GraphboltFinder())
    return True


install()
