"""A block that runs DGL's message passing calls on :mod:`sarlite.core.kernels`.

:class:`TorchBlock` answers the part of ``dgl.DGLGraph``'s block interface that the
engine's per-shard computation uses (``srcdata``/``dstdata``/``edata``, ``local_scope``,
``update_all``, ``apply_edges``, node, edge and degree counts) from index tensors, on any
device, without DGL's kernels. Message and reduce functions are DGL's builtins
(``dgl.function``), read by their attributes, or Python message functions that take an
:class:`EdgeBatch`. It is checked against DGL's blocks (``tests/test_torch_block.py``) and
is not yet used by the engine.

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

from .kernels import EdgeIndex, reduce_edges, sddmm

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
        """``(src, dst, eid)`` of the edges."""
        index = self._index
        return index.src, index.dst, torch.arange(index.num_edges, device=index.src.device)

    def batch_size(self) -> int:
        return self._index.num_edges


class TorchBlock:
    """A block over ``index`` (sources and destinations are separate node sets) whose
    message passing runs on torch kernels. Node and edge data are plain dicts of tensors
    with one row per source node, destination node or edge.

    Raises (from its methods)
    -------------------------
    NotImplementedError
        A Python (UDF) reduce function, or a builtin this block does not know.
    KeyError
        A function reads a field the block does not have.
    """

    is_block = True

    def __init__(self, index: EdgeIndex):
        self.index = index
        self._frames: tuple[dict, dict, dict] = ({}, {}, {})

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

    def update_all(self, message_func, reduce_func) -> None:
        """Messages on every edge reduced into ``dstdata[reduce_func.out_field]``, as DGL's
        ``update_all`` with a builtin reducer (``sum``, ``mean``, ``max``, ``min``)."""
        name = getattr(reduce_func, "name", None)
        if not hasattr(reduce_func, "msg_field") or name is None:
            raise NotImplementedError(
                f"TorchBlock reduces with DGL's builtin reducers (fn.sum, fn.mean, fn.max, "
                f"fn.min), got {getattr(reduce_func, '__name__', type(reduce_func).__name__)}")
        messages = self._edge_values(message_func)
        if reduce_func.msg_field not in messages:
            raise KeyError(f"the reducer reads message {reduce_func.msg_field!r}, the message "
                           f"function gives {sorted(messages)}")
        self.dstdata[reduce_func.out_field] = reduce_edges(
            self.index, messages[reduce_func.msg_field], name)

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


def _call_udf(func: Callable, edges: EdgeBatch) -> dict:
    out = func(edges)
    if not isinstance(out, dict):
        raise TypeError(f"a message or edge function must return a dict of tensors, got "
                        f"{type(out).__name__}")
    return out
