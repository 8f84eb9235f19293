"""What a message or edge function reads, and which parameters it uses.

DGL builtins name their inputs (``copy_u("h", "m")`` reads the source field ``h``); Python
functions (UDFs) may read any field, so all fields of each kind are provided to them.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from dgl.function.base import BuiltinFunction
from dgl.function.message import BinaryMessageFunction, CopyMessageFunction
from dgl.function.reducer import SimpleReduceFunction

SRC, DST, EDGE = 0, 1, 2        # DGL's target codes: u, v, e
FOLDABLE_REDUCERS = ("sum", "mean", "max", "min")


def message_inputs(func, src_keys: Iterable[str], dst_keys: Iterable[str],
                   edge_keys: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """Names of the source, destination and edge fields ``func`` reads."""
    if isinstance(func, CopyMessageFunction):
        pairs = [(func.target, func.in_field)]
    elif isinstance(func, BinaryMessageFunction):
        pairs = [(func.lhs, func.lhs_field), (func.rhs, func.rhs_field)]
    else:
        return list(src_keys), list(dst_keys), list(edge_keys)
    fields: tuple[list[str], list[str], list[str]] = ([], [], [])
    for target, name in pairs:
        if name not in fields[target]:
            fields[target].append(name)
    return fields


def is_udf(func) -> bool:
    """True for a Python message/edge function (it may capture tensors), False for a
    DGL builtin (it reads named graph fields only)."""
    return not isinstance(func, BuiltinFunction)


# Layers exact on one worker only: they normalise by torch.ones(N) / N over the whole graph.
_SINGLE_WORKER_LAYERS = ("PNAConvTower", "DGNConvTower")


def check_layer(func, num_workers: int) -> None:
    """Refuse message/reduce functions of layers sarlite cannot run exactly.

    Raises
    ------
    NotImplementedError
        Naming the layer and the reason.
    """
    owner = type(getattr(func, "__self__", None)).__name__
    if owner in _SINGLE_WORKER_LAYERS and num_workers > 1:
        layer = owner.removesuffix("Tower")
        raise NotImplementedError(
            f"{layer} is not supported on more than one worker: it scales node outputs by "
            f"torch.ones(N, 1) / N with N the whole graph's node count, which has no rows "
            f"for a partition. Run it on one worker or on a DGLGraph.")


def check_all_edges(edges) -> None:
    """Refuse ``apply_edges`` on a subset of edges (only ``"__ALL__"`` is supported).

    A subset is chosen per worker from its own edges, so workers would make different
    numbers of collective calls (``GatedGraphConv`` with several edge types skips types a
    worker has no edges of). Compute on all edges and select with ``torch.where`` instead.
    """
    if not isinstance(edges, str) or edges != "__ALL__":
        raise NotImplementedError(
            "apply_edges on a subset of edges is not supported on a distributed graph: "
            "each worker would choose its own subset and the workers' collective calls would "
            "no longer match (this is what GatedGraphConv with n_etypes > 1 does). Compute "
            "on all edges and keep a subset with torch.where(mask, new, old), or give "
            "GatedGraphConv n_etypes=1.")


def is_copy_src(func) -> bool:
    """True for ``copy_u``: its source gradient is the transposed aggregation."""
    return isinstance(func, CopyMessageFunction) and func.target == SRC


def is_src_plus_dst(func) -> bool:
    """True for ``u_add_v`` (GATConv's attention logits): both its gradients are sums of
    the edge gradient, so they need the inputs' shapes only, not their values."""
    return isinstance(func, BinaryMessageFunction) and func.name == "u_add_v"


def is_src_times_edge(func) -> bool:
    """True for ``u_mul_e`` (GATConv's and weighted GraphConv's message): with ``sum`` its
    gradients are a transposed aggregation and a per-edge product, read off the output
    gradient without the aggregate itself."""
    return isinstance(func, BinaryMessageFunction) and func.name == "u_mul_e"


def src_times_edge_sum(message_func, reduce_func) -> tuple[str, str] | None:
    """``(source field, edge field)`` of ``u_mul_e`` whose messages builtin ``sum``
    reduces (GATConv's aggregation, weighted GraphConv's), else ``None``."""
    if not is_src_times_edge(message_func) or not isinstance(
            reduce_func, SimpleReduceFunction) or reduce_func.name != "sum" \
            or reduce_func.msg_field != message_func.out_field:
        return None
    return message_func.lhs_field, message_func.rhs_field


def reducer_name(reduce_func) -> str:
    """``"sum"``, ``"mean"``, ``"max"`` or ``"min"``; anything else cannot be folded.

    Raises
    ------
    NotImplementedError
        For other builtin reducers and for Python (UDF) reducers.
    """
    name = getattr(reduce_func, "name", None) if isinstance(
        reduce_func, SimpleReduceFunction) else None
    if name not in FOLDABLE_REDUCERS:
        label = name or getattr(reduce_func, "__name__", type(reduce_func).__name__)
        raise NotImplementedError(
            f"reducer {label!r} cannot be folded shard by shard: GraphShardManager supports "
            f"{FOLDABLE_REDUCERS}. Use one-shot mode (g.get_full_partition_graph() or "
            f"mode='one-shot'), which accepts any DGL reducer.")
    return name


def message_has_parameters(param_fn: Callable[[object], Iterable[torch.Tensor]]):
    """Declare the learnable parameters a message function uses (optional hint).

    sarlite finds the tensors a Python message function uses by itself (see
    :mod:`sarlite.core.capture`), so this is no longer needed; it is kept for scripts
    written for IntelLabs SAR. Declared parameters are added to those found. ``param_fn``
    receives the object the decorated method is bound to and returns its parameters.

    Example
    -------
    >>> class EdgeGate(nn.Module):
    ...     def __init__(self, dim):
    ...         super().__init__()
    ...         self.gate = nn.Linear(dim, 1)
    ...     @sarlite.message_has_parameters(lambda self: tuple(self.gate.parameters()))
    ...     def message(self, edges):
    ...         return {"m": edges.src["h"] * torch.sigmoid(self.gate(edges.src["h"]))}
    ...     def forward(self, g, h):
    ...         with g.local_scope():
    ...             g.srcdata["h"] = h
    ...             g.update_all(self.message, dgl.function.sum("m", "h"))
    ...             return g.dstdata["h"]
    """
    def decorate(func):
        func.sarlite_param_fn = param_fn
        return func
    return decorate


def declared_parameters(func) -> list[torch.Tensor]:
    """Parameters declared with :func:`message_has_parameters` (empty if none)."""
    target = getattr(func, "__func__", func)
    param_fn = getattr(target, "sarlite_param_fn", None)
    if param_fn is None:
        return []
    owner = getattr(func, "__self__", None)
    return [p for p in param_fn(owner) if p.requires_grad]
