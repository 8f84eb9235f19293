"""A block that runs DGL's message passing calls on :mod:`sarlite.core.kernels`.

:class:`TorchBlock` answers the part of ``dgl.DGLGraph``'s block interface that the
engine's per-shard computation uses (``srcdata``/``dstdata``/``edata``, ``local_scope``,
``update_all``, ``apply_edges``, node, edge and degree counts) from index tensors, on any
device, without DGL's kernels. Message and reduce functions are DGL's builtins
(``dgl.function``), read by their attributes, or Python message functions that take an
:class:`EdgeBatch`, and Python reducers of a :class:`NodeBatch`. It is checked against DGL's
blocks (``tests/test_torch_block.py``); the engine builds its shards and one-shot blocks
as ``TorchBlock`` with ``kernels="torch"`` (see :mod:`sarlite.core.local_blocks`).

Example
-------
>>> import dgl.function as fn
>>> block = TorchBlock(EdgeIndex(torch.tensor([0, 1]), torch.tensor([0, 0]), 2, 1))
>>> with block.local_scope():
...     block.srcdata["h"] = torch.tensor([[1.0], [2.0]])
...     block.update_all(fn.copy_u("h", "m"), fn.mean("m", "h"))
...     block.dstdata["h"]
tensor([[1.5000]])
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from .kernels import Adjacency, EdgeIndex, reduce_edges, sddmm, spmm

_TARGETS = ("u", "v", "e")      # DGL's target codes 0, 1, 2


class _EdgeRows(Mapping):
    """Node fields seen per edge: a field's rows are gathered when the function reads it,
    once."""

    def __init__(self, frame: dict, ids: torch.Tensor):
        self._frame, self._ids, self._read = frame, ids, {}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._read:
            self._read[name] = self._frame[name].index_select(0, self._ids)
        return self._read[name]

    def __iter__(self):
        return iter(self._frame)

    def __len__(self) -> int:
        return len(self._frame)


class EdgeBatch:
    """What a Python message or edge function receives, as DGL's ``EdgeBatch``: ``src``,
    ``dst`` and ``data`` map field names to one row per edge (of its source, of its
    destination, of the edge), in edge-id order. Node rows are gathered only for the
    fields the function reads."""

    def __init__(self, block: "TorchBlock"):
        index = block.index
        self._index = index
        self.src = _EdgeRows(block.srcdata, index.src.long())
        self.dst = _EdgeRows(block.dstdata, index.dst.long())
        self.data = dict(block.edata)

    def edges(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(src, dst, eid)`` of the edges, int64 (the index may hold them narrower)."""
        index = self._index
        return index.src.long(), index.dst.long(), torch.arange(index.num_edges,
                                                                device=index.src.device)

    def batch_size(self) -> int:
        return self._index.num_edges

    def __len__(self) -> int:
        return self.batch_size()


class TorchBlock:
    """A block over ``index`` (sources and destinations are separate node sets) whose
    message passing runs on torch kernels. Node and edge data are plain dicts of tensors
    with one row per source node, destination node or edge.

    Raises (from its methods)
    -------------------------
    NotImplementedError
        A builtin this block does not know.
    KeyError
        A function reads a field the block does not have.
    """

    is_block = True

    def __init__(self, index: EdgeIndex):
        self.index = index
        self._frames: tuple[dict, dict, dict] = ({}, {}, {})
        self._adjacency = None

    @property
    def adjacency(self) -> Adjacency:
        """The edges as sparse rows both ways (for sums without per-edge messages), built
        at the first use."""
        if self._adjacency is None:
            self._adjacency = Adjacency.of(self.index)
        return self._adjacency

    # -- structure ------------------------------------------------------------------------
    def num_src_nodes(self) -> int:
        return self.index.num_src

    def num_dst_nodes(self) -> int:
        return self.index.num_dst

    def num_edges(self) -> int:
        return self.index.num_edges

    def in_degrees(self) -> torch.Tensor:
        return self.index.in_degrees()

    def out_degrees(self) -> torch.Tensor:
        return self.index.out_degrees()

    @property
    def device(self) -> torch.device:
        return self.index.src.device

    # -- data -----------------------------------------------------------------------------
    @property
    def srcdata(self) -> dict:
        return self._frames[0]

    @property
    def dstdata(self) -> dict:
        return self._frames[1]

    @property
    def edata(self) -> dict:
        return self._frames[2]

    @contextmanager
    def local_scope(self) -> Iterator[None]:
        """Within it, data written to the block is dropped on exit (as DGL's)."""
        saved = self._frames
        self._frames = tuple(dict(frame) for frame in saved)
        try:
            yield
        finally:
            self._frames = saved

    # -- message passing ------------------------------------------------------------------
    def apply_edges(self, func) -> None:
        """Per-edge values into ``edata``: a builtin (``fn.u_add_v("a", "b", "s")``...) or
        a Python function of an :class:`EdgeBatch` returning ``{name: (E, *) tensor}``."""
        self.edata.update(self._edge_values(func))

    def update_all(self, message_func, reduce_func, apply_node_func=None) -> None:
        """Messages on every edge reduced at the destinations, as DGL's ``update_all``.

        ``reduce_func`` is a builtin (``fn.sum``, ``fn.mean``, ``fn.max``, ``fn.min``: the
        result lands in ``dstdata[reduce_func.out_field]``) or a Python function of a
        :class:`NodeBatch` whose ``mailbox`` holds each node's messages in edge-id order,
        called once per in-degree (DGL's degree bucketing); destinations without in-edges
        get zeros. ``apply_node_func`` then runs on every destination node."""
        self.dstdata.update(self._reduced(message_func, reduce_func))
        if apply_node_func is not None:
            nodes = torch.arange(self.index.num_dst, device=self.device)
            self.dstdata.update(_call_udf(apply_node_func, NodeBatch(
                nodes, dict(self.dstdata), {})))

    def _reduced(self, message_func, reduce_func) -> dict:
        """``{name: (num_dst, *F)}``: what the reducer writes."""
        fused = self._fused_sum(message_func, reduce_func)
        if fused is not None:
            return {reduce_func.out_field: fused}
        messages = self._edge_values(message_func)
        if callable(reduce_func) and not hasattr(reduce_func, "msg_field"):
            return _reduce_udf(self, messages, reduce_func)
        if reduce_func.msg_field not in messages:
            raise KeyError(f"the reducer reads message {reduce_func.msg_field!r}, the "
                           f"message function gives {sorted(messages)}")
        return {reduce_func.out_field: reduce_edges(
            self.index, messages[reduce_func.msg_field], reduce_func.name)}

    def _fused_sum(self, message_func, reduce_func) -> torch.Tensor | None:
        """``copy_u`` or ``u_mul_e``/``e_mul_u`` with ``sum``/``mean`` as sparse products
        (no per-edge message is held; see :func:`~sarlite.core.kernels.spmm`); ``None``
        for any other pair."""
        name = getattr(reduce_func, "name", None)
        if name not in ("sum", "mean") or getattr(reduce_func, "msg_field", None) != \
                getattr(message_func, "out_field", None):
            return None
        if hasattr(message_func, "in_field") and not hasattr(message_func, "binary_op"):
            if message_func.target != 0:
                return None
            return spmm(self.index, "copy_lhs", name,
                        self._field(0, message_func.in_field), None, self.adjacency)
        if getattr(message_func, "binary_op", None) != "mul" or \
                {message_func.lhs, message_func.rhs} != {0, 2}:
            return None
        fields = {message_func.lhs: message_func.lhs_field,
                  message_func.rhs: message_func.rhs_field}
        return spmm(self.index, "mul", name, self._field(0, fields[0]),
                    self._field(2, fields[2]), self.adjacency)

    def _edge_values(self, func) -> dict:
        if hasattr(func, "binary_op"):
            out = sddmm(self.index, func.binary_op, self._field(func.lhs, func.lhs_field),
                        self._field(func.rhs, func.rhs_field), _TARGETS[func.lhs],
                        _TARGETS[func.rhs])
            return {func.out_field: out}
        if hasattr(func, "in_field"):
            return {func.out_field: sddmm(self.index, "copy_lhs",
                                          self._field(func.target, func.in_field), None,
                                          _TARGETS[func.target])}
        if callable(func):
            return _call_udf(func, EdgeBatch(self))
        raise NotImplementedError(f"TorchBlock: unknown message function {func!r}")

    def _field(self, target: int, name: str) -> torch.Tensor:
        frame = self._frames[target]
        if name not in frame:
            raise KeyError(f"no {('source', 'destination', 'edge')[target]} field {name!r} "
                           f"(there are {sorted(frame)})")
        return frame[name]


class NodeBatch:
    """What a Python reduce or apply-node function receives, as DGL's ``NodeBatch``:
    ``data`` (the nodes' fields), ``mailbox`` (``{name: (nodes, in-degree, *F)}``, each
    node's messages in edge-id order) and ``nodes()``."""

    def __init__(self, nodes: torch.Tensor, data: dict, mailbox: dict):
        self._nodes, self.data, self.mailbox = nodes, data, mailbox

    def nodes(self) -> torch.Tensor:
        return self._nodes

    def batch_size(self) -> int:
        return int(self._nodes.shape[0])

    def __len__(self) -> int:
        return self.batch_size()


def _reduce_udf(block: TorchBlock, messages: dict, reduce_func: Callable) -> dict:
    """A Python reducer over every destination with in-edges, one call per in-degree
    (ascending); the results are placed at their nodes, zeros elsewhere."""
    dst = block.index.dst.long()
    order = torch.sort(dst, stable=True).indices         # by node, edge ids ascending
    degrees = block.index.in_degrees()
    starts = torch.cumsum(degrees, 0) - degrees
    out: dict = {}
    for degree in torch.unique(degrees[degrees > 0]).tolist():
        nodes = torch.nonzero(degrees == degree).squeeze(1)
        slots = (starts[nodes].unsqueeze(1) + torch.arange(degree, device=dst.device)).reshape(-1)
        eids = order[slots]
        mailbox = {k: v.index_select(0, eids).reshape((nodes.numel(), degree) + v.shape[1:])
                   for k, v in messages.items()}
        data = {k: v.index_select(0, nodes) for k, v in block.dstdata.items()}
        for name, value in _call_udf(reduce_func, NodeBatch(nodes, data, mailbox)).items():
            if name not in out:
                out[name] = value.new_zeros((block.index.num_dst,) + value.shape[1:])
            out[name] = out[name].index_copy(0, nodes, value)
    return out


def _call_udf(func: Callable, batch) -> dict:
    out = func(batch)
    if not isinstance(out, dict):
        raise TypeError(f"a message or edge function must return a dict of tensors, got "
                        f"{type(out).__name__}")
    return out
