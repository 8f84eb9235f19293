"""DGL's graph functions on distributed graphs, and their explicit installation.

``dgl.nn`` layers and user models call functions that need a real ``DGLGraph``:
``edge_softmax`` (every attention layer), the ``dgl.ops`` message-passing kernels
(``u_mul_e_sum``, ``copy_u_sum``, ``gspmm``, ``gsddmm``, ...) and ``dgl.broadcast_nodes``
(``ChebConv``), ``dgl.reverse`` (``EdgeWeightNorm('both')``) and the readouts
(``sum_nodes``, ``mean_nodes``, ``softmax_nodes``, ...: the pooling layers). Each function
here takes the same arguments; given a sarlite graph
(:class:`GraphShardManager` or :class:`DistributedBlock`) it computes DGL's result through
the graph's own ``update_all``/``apply_edges`` (so all three modes and the exactness rules
hold), and given anything else it calls DGL's function unchanged.

:func:`install_dgl_dispatch` rebinds those names wherever DGL's modules hold them (layers
import them by name), and :func:`uninstall_dgl_dispatch` restores DGL's; nothing is
installed unless you call it. For DGL graphs the installed functions give DGL's own
result, so installing changes nothing for ordinary graphs::

    sarlite.install_dgl_dispatch()      # once, before running attention layers
    ...
    sarlite.uninstall_dgl_dispatch()    # optional
"""
from __future__ import annotations

import functools
import importlib
import logging
import pkgutil
import sys

import dgl
import dgl.function as fn
import dgl.ops
import torch
from dgl.base import ALL

from ..comm import all_reduce, all_reduce_autograd

log = logging.getLogger("sarlite.core")
_TARGETS = {"u": "srcdata", "v": "dstdata", "e": "edata"}
_installed: list[tuple[object, str, object]] = []
_DGL_EDGE_SOFTMAX = dgl.ops.edge_softmax


def _is_distributed(graph) -> bool:
    from .graph_view import ShardedGraphBase
    return isinstance(graph, ShardedGraphBase)


# -- distributed implementations ---------------------------------------------------------
def edge_softmax(graph, logits, eids=ALL, norm_by: str = "dst"):
    """Softmax of per-edge ``logits`` ``(E, *)`` over the in-edges of each node.

    Same signature and result as ``dgl.nn.functional.edge_softmax``; on a sarlite graph
    only the defaults (all edges, ``norm_by="dst"``) are supported, and no communication is
    needed (every in-edge of an owned node is owned).
    """
    if not _is_distributed(graph):
        return _DGL_EDGE_SOFTMAX(graph, logits, eids=eids, norm_by=norm_by)
    if eids is not ALL or norm_by != "dst":
        raise NotImplementedError("edge_softmax on a distributed graph supports only "
                                  "eids=ALL and norm_by='dst' (a source's out-edges live on "
                                  "other workers)")
    return graph.edge_softmax(logits)


def gspmm(graph, op: str, reduce_op: str, lhs_data, rhs_data):
    """``dgl.ops.gspmm`` on a sarlite graph: messages from source rows (``lhs_data``) and
    edge rows (``rhs_data``) combined by ``op``, reduced at destinations by ``reduce_op``.
    As in DGL, ``max``/``min`` leave ``-inf``/``inf`` at nodes without in-edges."""
    with graph.local_scope():
        if op == "copy_lhs":
            graph.srcdata["_l"] = lhs_data
            message = fn.copy_u("_l", "_m")
        elif op == "copy_rhs":
            graph.edata["_r"] = rhs_data
            message = fn.copy_e("_r", "_m")
        else:
            graph.srcdata["_l"], graph.edata["_r"] = lhs_data, rhs_data
            message = getattr(fn, f"u_{op}_e")("_l", "_r", "_m")
        graph.update_all(message, getattr(fn, reduce_op)("_m", "_o"))
        out = graph.dstdata["_o"]
    if reduce_op in ("max", "min"):      # dgl.ops keeps -inf/inf where update_all gives 0
        empty = (graph.in_degrees() == 0).reshape((-1,) + (1,) * (out.dim() - 1))
        out = torch.where(empty, float("-inf") if reduce_op == "max" else float("inf"), out)
    return out


def gsddmm(graph, op: str, lhs_data, rhs_data, lhs_target: str = "u",
           rhs_target: str = "v"):
    """``dgl.ops.gsddmm`` on a sarlite graph: per-edge ``op`` of two node/edge fields."""
    with graph.local_scope():
        if op in ("copy_lhs", "copy_rhs"):
            target, data = (lhs_target, lhs_data) if op == "copy_lhs" else \
                (rhs_target, rhs_data)
            getattr(graph, _TARGETS[target])["_c"] = data
            graph.apply_edges(getattr(fn, f"copy_{target}")("_c", "_o")
                              if target != "v" else _copy_dst)
        else:
            getattr(graph, _TARGETS[lhs_target])["_l"] = lhs_data
            getattr(graph, _TARGETS[rhs_target])["_r"] = rhs_data
            graph.apply_edges(getattr(fn, f"{lhs_target}_{op}_{rhs_target}")("_l", "_r",
                                                                             "_o"))
        return graph.edata["_o"]


def _copy_dst(edges):
    return {"_o": edges.dst["_c"]}


def broadcast_nodes(graph, graph_feat, *, ntype=None):
    """``dgl.broadcast_nodes`` on a sarlite graph: the one graph's row on every owned node."""
    return _repeated(graph_feat, graph.num_dst_nodes())


def _repeated(graph_feat, rows: int):
    if graph_feat.shape[0] != 1:
        raise ValueError(f"a sarlite graph is one graph: graph_feat needs 1 row, got "
                         f"{graph_feat.shape[0]}")
    return graph_feat.expand((rows,) + tuple(graph_feat.shape[1:]))


# -- readouts: one graph spread over the workers ------------------------------------------
def readout_nodes(graph, feat, weight=None, *, op="sum", ntype=None):
    """``dgl.readout_nodes`` over the whole distributed graph: ``(1, *)`` on every worker.

    ``sum`` and ``mean`` add the workers' partial sums (differentiably); ``max``/``min``
    are refused (a tie across workers would send the gradient elsewhere than DGL does).
    Collective.
    """
    return _readout(graph, graph.ndata[feat], graph.ndata[weight] if weight else None, op,
                    graph.batch_num_nodes()[0])


def readout_edges(graph, feat, weight=None, *, op="sum", etype=None):
    """``dgl.readout_edges`` over every edge of the distributed graph (see
    :func:`readout_nodes`). Collective."""
    return _readout(graph, graph.edata[feat], graph.edata[weight] if weight else None, op,
                    graph.batch_num_edges()[0])


def _readout(graph, values, weight, op: str, count):
    if op not in ("sum", "mean"):
        raise NotImplementedError(
            f"readout with op={op!r} (MaxPooling, max_nodes, ...) is not supported on a "
            f"distributed graph: use 'sum' or 'mean'")
    if weight is not None:
        values = values * weight
    total = all_reduce_autograd(values.sum(0, keepdim=True), "readout")
    return total / count.to(total.dtype) if op == "mean" else total


def softmax_nodes(graph, feat, *, ntype=None):
    """``dgl.softmax_nodes`` over all nodes of the distributed graph. Collective."""
    values = graph.ndata[feat]
    top = all_reduce(values.detach().amax(0, keepdim=True) if values.shape[0] else
                     torch.full((1,) + values.shape[1:], float("-inf"), dtype=values.dtype,
                                device=values.device), "max", kind="readout")
    exp = torch.exp(values - top)
    return exp / all_reduce_autograd(exp.sum(0, keepdim=True), "readout")


def broadcast_edges(graph, graph_feat, *, etype=None):
    """``dgl.broadcast_edges`` on a sarlite graph: the graph's row on every owned edge."""
    return _repeated(graph_feat, graph.num_edges())


def _single_op(op: str):
    return lambda graph, feat, weight=None, **kwargs: (
        readout_nodes(graph, feat, weight, op=op))


def _single_edge_op(op: str):
    return lambda graph, feat, weight=None, **kwargs: (
        readout_edges(graph, feat, weight, op=op))


def reverse(graph, *args, **kwargs):
    """``dgl.reverse`` of a sarlite graph: a graph that aggregates at the sources (what
    ``EdgeWeightNorm('both')`` needs; see :mod:`sarlite.core.reverse`)."""
    return graph.reverse()


def _named_op(name: str):
    """The distributed form of a ``dgl.ops`` function named like ``u_mul_e_sum``."""
    parts = name.split("_")
    if parts[0] == "copy":                                  # copy_u_sum, copy_e, copy_v
        target = parts[1]
        if len(parts) == 3:
            op = "copy_lhs" if target == "u" else "copy_rhs"
            return lambda g, x: gspmm(g, op, parts[2], x if target == "u" else None,
                                      x if target == "e" else None)
        return lambda g, x: gsddmm(g, "copy_lhs", x, None, target, "v")
    lhs, op, rhs = parts[:3]
    if len(parts) == 4:                                     # u_mul_e_sum
        return lambda g, x, y: gspmm(g, op, parts[3], x, y)
    return lambda g, x, y: gsddmm(g, op, x, y, lhs, rhs)   # u_add_v


def _kernel_names() -> list[str]:
    """Names of the ``dgl.ops`` message and edge kernels (``u_mul_e_sum``, ``u_add_v``,
    ``copy_u_max``, ...)."""
    return [n for n in dir(dgl.ops) if n.count("_") in (1, 2, 3) and n.split("_")[0] in
            ("u", "v", "e", "copy") and callable(getattr(dgl.ops, n))]


# -- installation -------------------------------------------------------------------------
def _routed(original, distributed):
    @functools.wraps(original)
    def call(graph, *args, **kwargs):
        if _is_distributed(graph):
            return distributed(graph, *args, **kwargs)
        return original(graph, *args, **kwargs)
    call.sarlite_original = original
    return call


def _replacements() -> dict[int, object]:
    """``{id(DGL's function): routed function}`` for everything this module covers."""
    pairs = [(_DGL_EDGE_SOFTMAX, edge_softmax), (dgl.ops.gspmm, gspmm),
             (dgl.ops.gsddmm, gsddmm), (dgl.broadcast_nodes, broadcast_nodes),
             (dgl.reverse, reverse), (dgl.readout_nodes, readout_nodes),
             (dgl.readout_edges, readout_edges), (dgl.softmax_nodes, softmax_nodes),
             (dgl.broadcast_edges, broadcast_edges)]
    pairs += [(getattr(dgl, f"{op}_nodes"), _single_op(op)) for op in
              ("sum", "mean", "max") if hasattr(dgl, f"{op}_nodes")]
    pairs += [(getattr(dgl, f"{op}_edges"), _single_edge_op(op)) for op in
              ("sum", "mean", "max") if hasattr(dgl, f"{op}_edges")]
    pairs += [(getattr(dgl.ops, n), _named_op(n)) for n in _kernel_names()]
    return {id(orig): _routed(orig, dist) for orig, dist in pairs}


def _modules():
    """Every loaded module except sarlite's own, after importing all ``dgl.nn`` layers."""
    import dgl.nn.pytorch as nn_pkg
    for info in pkgutil.walk_packages(nn_pkg.__path__, nn_pkg.__name__ + "."):
        try:
            importlib.import_module(info.name)
        except ImportError:        # optional layers whose dependencies are absent
            continue
    return [m for name, m in list(sys.modules.items())
            if m is not None and name != "sarlite" and not name.startswith("sarlite.")]


def install_dgl_dispatch() -> list[str]:
    """Route DGL's ``edge_softmax``, ``dgl.ops`` kernels and ``broadcast_nodes`` to sarlite
    graphs, wherever a loaded module holds them by name: DGL's own modules (``dgl``,
    ``dgl.ops``, ``dgl.nn.functional``, every ``dgl.nn.pytorch`` layer) and user modules
    that imported them (``from dgl.nn.functional import edge_softmax``). DGL graphs still
    get DGL's functions. Modules imported later see DGL's rebound names.

    Idempotent; not a collective. Returns the ``module.name`` entries rebound. Undo with
    :func:`uninstall_dgl_dispatch`.
    """
    if _installed:
        return sorted(f"{m.__name__}.{n}" for m, n, _ in _installed)
    replacements = _replacements()
    for module in _modules():
        for name, value in list(getattr(module, "__dict__", {}).items()):
            routed = replacements.get(id(value))
            if routed is not None and callable(value):
                _installed.append((module, name, value))
                setattr(module, name, routed)
    log.info("sarlite: DGL dispatch installed at %d names", len(_installed))
    return sorted(f"{m.__name__}.{n}" for m, n, _ in _installed)


def uninstall_dgl_dispatch() -> None:
    """Restore every name :func:`install_dgl_dispatch` rebound. Idempotent."""
    while _installed:
        module, name, original = _installed.pop()
        setattr(module, name, original)


def dgl_dispatch_installed() -> bool:
    """Whether :func:`install_dgl_dispatch` is in effect."""
    return bool(_installed)

