"""One clear error for a script that mixes DGL's own ``dgl.distributed`` with sarlite's.

A script switched by its import line (``import sarlite.dgl as dgl``) can still reach the
real DGL's distributed objects: ``from dgl.distributed import DistEmbedding``, a later
``import dgl.distributed`` that rebinds ``dgl``, or a helper module with its own
``import dgl``. DGL's objects then fail far from the cause, with DGL's messages
("Distributed module is not initialized", "The standalone mode can only work with the
graph data with one partition"). :func:`check_script_imports`, called by the facade's
set-up entry points, finds such a binding in the script and the modules beside it and
raises :class:`MixedDGLError` naming the file, the line and the change.
"""
from __future__ import annotations

import ast
import os
import sys
import sysconfig
import types

import dgl as _real_dgl

_REAL_DIST = _real_dgl.distributed
_REAL_LOADING = _real_dgl.dataloading
#: DGL names that create no distributed state: fine to take from the real DGL
HARMLESS = frozenset({"partition_graph", "load_partition", "load_partition_book",
                      "load_partition_feats", "dgl_partition_to_graphbolt",
                      "DEFAULT_NTYPE", "DEFAULT_ETYPE"})
_LOADERS = frozenset({"DistNodeDataLoader", "DistEdgeDataLoader", "DistDataLoader",
                      "DistGraph"})
_LIBRARY_DIRS = tuple(os.path.realpath(sysconfig.get_paths()[key])
                      for key in ("stdlib", "purelib", "platlib"))


class MixedDGLError(ImportError):
    """A script binds DGL's own distributed objects beside sarlite's (the message names
    the line to change)."""


def check_script_imports() -> None:
    """Raise :class:`MixedDGLError` when the running script, or a module in its
    directory, binds DGL's own ``dgl.distributed`` (or DGL's distributed loaders) for
    anything but partitioning. Not a collective; reads the modules' source files.

    The script is ``sys.modules["__main__"]``; a process without a script file (an
    interpreter, ``python -c``) or whose ``__main__`` is an installed tool (pytest) is
    not checked.
    """
    for module in _script_modules():
        problem = _first_problem(module)
        if problem is not None:
            raise MixedDGLError(problem)


def _script_modules() -> list[types.ModuleType]:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return []
    folder = os.path.dirname(os.path.realpath(path))
    if folder.startswith(_LIBRARY_DIRS):
        return []
    beside = [m for m in list(sys.modules.values())
              if m is not main and isinstance(getattr(m, "__file__", None), str)
              and os.path.dirname(os.path.realpath(m.__file__)) == folder]
    return [main, *beside]


def _is_real_dist_object(value) -> bool:
    if isinstance(value, types.ModuleType):      # sarlite's modules keep sarlite's names
        return value.__name__.startswith("dgl.distributed")
    module = getattr(value, "__module__", None) or ""
    return module.startswith("dgl.distributed") or \
        (module.startswith("dgl.dataloading") and getattr(value, "__name__", "") in _LOADERS)


def _first_problem(module: types.ModuleType) -> str | None:
    suspects = {name: value for name, value in vars(module).items()
                if value is _real_dgl or value is _REAL_DIST or value is _REAL_LOADING
                or (not name.startswith("__") and _is_real_dist_object(value))}
    if not suspects:
        return None
    try:
        with open(module.__file__, encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return None
    lines = source.splitlines()
    for name, value in suspects.items():
        use = _distributed_use(tree, name, value)
        if use is None:
            continue
        binding = _binding(tree, name)
        if binding is None:
            continue
        return _message(module.__file__, lines, binding, name, value, use)
    return None


def _chain(node: ast.AST) -> list[str]:
    """``a.b.c`` -> ``["a", "b", "c"]``; ``[]`` for anything else."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return []
    return [node.id, *reversed(names)]


def _distributed_use(tree: ast.AST, name: str, value) -> tuple[int, str] | None:
    """The first ``(line, dotted use)`` of ``name`` that reaches DGL's distributed state."""
    if value is not _real_dgl and value is not _REAL_DIST and value is not _REAL_LOADING:
        return None if name in HARMLESS or getattr(value, "__name__", "") in HARMLESS \
            else (0, name)
    uses = []
    for node in ast.walk(tree):
        chain = _chain(node) if isinstance(node, ast.Attribute) else []
        if not chain or chain[0] != name:
            continue
        rest = chain[1:]
        if value is _real_dgl:
            reaching = (len(rest) >= 2 and rest[0] == "distributed"
                        and rest[1] not in HARMLESS) or \
                       (len(rest) >= 2 and rest[0] == "dataloading" and rest[1] in _LOADERS)
        elif value is _REAL_DIST:
            reaching = bool(rest) and rest[0] not in HARMLESS
        else:
            reaching = bool(rest) and rest[0] in _LOADERS
        if reaching:
            uses.append((node.lineno, ".".join(chain[:3])))
    return min(uses) if uses else None


def _binding(tree: ast.AST, name: str) -> ast.stmt | None:
    """The last import statement that binds ``name`` at the module's top level."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.Import):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                found = node
        elif isinstance(node, ast.ImportFrom):
            if any((a.asname or a.name) == name for a in node.names):
                found = node
    return found


def _fix(node: ast.stmt, name: str, value) -> str:
    if isinstance(node, ast.ImportFrom):
        module = (node.module or "").replace("dgl.distributed", "sarlite.distributed", 1)
        if module == "dgl":
            module = "sarlite.dgl"
        elif module.startswith("dgl.dataloading"):
            module = "sarlite.dgl.dataloading"
        return f"from {module} import {name}"
    if value is _real_dgl:
        return "import sarlite.dgl as dgl" if name == "dgl" else f"import sarlite.dgl as {name}"
    return f"import sarlite.distributed as {name}"


def _message(path: str, lines: list[str], binding: ast.stmt, name: str, value,
             use: tuple[int, str]) -> str:
    where = f"{os.path.basename(path)}:{binding.lineno}"
    text = lines[binding.lineno - 1].strip()
    what = ("DGL's own package, whose dgl.distributed is not sarlite's"
            if value is _real_dgl else "DGL's own distributed objects, not sarlite's")
    used = f" (used at line {use[0]}: {use[1]})" if use[0] else ""
    return (f"{where}: '{text}' binds {name!r} to {what}{used}; DGL's objects cannot work "
            f"beside sarlite's. Change that line to '{_fix(binding, name, value)}', or leave "
            f"the script as DGL wrote it and start it with 'sarlite run --nproc N "
            f"{os.path.basename(sys.modules['__main__'].__file__)} ...' (or 'torchrun "
            f"--nproc_per_node N -m sarlite.run ...'), which needs no edit.")
