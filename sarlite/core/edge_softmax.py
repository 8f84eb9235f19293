"""edge_softmax for distributed graphs, and its explicit installation into dgl.nn.

DGL's attention layers (``GATConv``, ``GATv2Conv``, ``DotGatConv``, ...) call
``dgl.nn.functional.edge_softmax`` through a name imported into each layer's module; that
function needs a real ``DGLGraph``. :func:`edge_softmax` accepts both: for a distributed
graph it normalises over each owned node's in-edges (all owned, so no communication), for
anything else it calls DGL's function unchanged.

:func:`install_edge_softmax` rebinds that name in the ``dgl.nn.pytorch`` modules to
:func:`edge_softmax`; :func:`uninstall_edge_softmax` restores DGL's. Since the dispatcher
gives DGL graphs DGL's own result, installing it changes nothing for ordinary graphs.
:func:`sarlite.construct_full_graph` installs it (once, logged at INFO level).
"""
from __future__ import annotations

import importlib
import logging
import pkgutil

from dgl.base import ALL
from dgl.ops import edge_softmax as dgl_edge_softmax

log = logging.getLogger("sarlite.core")
_patched: dict[str, object] = {}


def edge_softmax(graph, logits, eids=ALL, norm_by: str = "dst"):
    """Softmax of per-edge ``logits`` ``(E, *)`` over the in-edges of each node.

    Same signature and result as ``dgl.nn.functional.edge_softmax``; for a
    :class:`GraphShardManager` or :class:`DistributedBlock` only the defaults
    (all edges, ``norm_by="dst"``) are supported.
    """
    from .graph_view import DistributedGraph
    if not isinstance(graph, DistributedGraph):
        return dgl_edge_softmax(graph, logits, eids=eids, norm_by=norm_by)
    if eids is not ALL or norm_by != "dst":
        raise NotImplementedError("edge_softmax on a distributed graph supports only "
                                  "eids=ALL and norm_by='dst'")
    return graph.edge_softmax(logits)


def _conv_modules():
    import dgl.nn.pytorch as nn_pkg
    for info in pkgutil.walk_packages(nn_pkg.__path__, nn_pkg.__name__ + "."):
        try:
            yield importlib.import_module(info.name)
        except ImportError:        # optional layers whose dependencies are absent
            continue


def install_edge_softmax() -> list[str]:
    """Point every ``dgl.nn.pytorch`` module's ``edge_softmax`` at sarlite's dispatcher.

    Idempotent; returns the names of the modules patched. Undo with
    :func:`uninstall_edge_softmax`.
    """
    for module in _conv_modules():
        if getattr(module, "edge_softmax", None) is dgl_edge_softmax:
            _patched[module.__name__] = module.edge_softmax
            module.edge_softmax = edge_softmax
    if _patched:
        log.info("sarlite: edge_softmax installed in %d dgl.nn modules", len(_patched))
    return sorted(_patched)


def uninstall_edge_softmax() -> None:
    """Restore DGL's ``edge_softmax`` wherever :func:`install_edge_softmax` replaced it."""
    for name, original in _patched.items():
        importlib.import_module(name).edge_softmax = original
    _patched.clear()
