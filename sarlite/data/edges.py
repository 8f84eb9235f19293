"""Edge-list clean-up shared by the generators and the loaders, with bounded memory.

An edge ``(u, v)`` of a graph with ``N`` nodes is packed into one int64 key ``u * N + v``.
Readers write keys straight into one preallocated array (:class:`EdgeKeys`), so a graph
of ``E`` stored edges never exists as separate ``src``/``dst`` lists while it is cleaned;
:func:`graph_from_keys` then sorts that array in place, drops self-loops and duplicates by
compacting it in place (:func:`sarlite.partition.edgekeys.sort_unique`), and decodes it
into ``src``/``dst``. Peak extra memory is one more
array of the kept edges plus fixed-size chunks: the edge list is held at most twice.
"""
from __future__ import annotations

import dgl
import numpy as np
import torch

from ..partition.edgekeys import CHUNK, sort_unique
from .reading import check


class EdgeKeys:
    """A preallocated key array, filled chunk by chunk in file order.

    ``symmetric=True`` reserves room for the reverse of every edge as well. ``add`` takes
    one chunk of ``src``/``dst`` ids; ``graph()`` cleans and builds the graph once all
    ``num_edges`` stored edges were added.
    """

    def __init__(self, num_edges: int, num_nodes: int, symmetric: bool):
        self.num_nodes = int(num_nodes)
        self.num_edges = int(num_edges)
        self.symmetric = symmetric
        self.keys = np.empty(self.num_edges * (2 if symmetric else 1), dtype=np.int64)
        self.filled = 0

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Append one chunk of edges.

        Raises :class:`~sarlite.data.reading.FormatError` (one error naming the file when
        read inside :func:`~sarlite.data.reading.reading`) for a node id outside
        ``[0, num_nodes)`` or an edge past ``num_edges``.
        """
        count = len(src)
        check(count == 0 or (min(src.min(), dst.min()) >= 0
                             and max(src.max(), dst.max()) < self.num_nodes),
              f"node ids must lie in [0, {self.num_nodes})")
        check(self.filled + count <= self.num_edges,
              f"more than the {self.num_edges} edges announced")
        n = np.int64(self.num_nodes)
        lo, hi = self.filled, self.filled + count
        _pack(src, dst, n, self.keys[lo:hi])
        if self.symmetric:
            _pack(dst, src, n, self.keys[self.num_edges + lo:self.num_edges + hi])
        self.filled = hi

    def extend(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Append whole id arrays (memory maps included), ``CHUNK`` edges at a time."""
        for lo in range(0, len(src), CHUNK):
            self.add(np.asarray(src[lo:lo + CHUNK], dtype=np.int64),
                     np.asarray(dst[lo:lo + CHUNK], dtype=np.int64))

    def graph(self) -> dgl.DGLGraph:
        """The simple graph of the added edges (see :func:`graph_from_keys`)."""
        if self.filled != self.num_edges:
            raise ValueError(f"{self.filled} edges were read but {self.num_edges} were "
                             f"announced")
        keys, self.keys = self.keys, None
        return graph_from_keys(keys, self.num_nodes)


def _pack(src: np.ndarray, dst: np.ndarray, n: np.int64, out: np.ndarray) -> None:
    np.multiply(src, n, out=out, casting="unsafe")
    out += dst


def graph_from_keys(keys: np.ndarray, num_nodes: int, chunk: int = CHUNK) -> dgl.DGLGraph:
    """Sort ``keys`` in place, drop self-loops and duplicates, and build the graph.

    ``keys`` is consumed (overwritten). Edges come out sorted by ``(src, dst)``, so the
    result does not depend on the order edges were read or drawn in. ``chunk`` bounds the
    temporaries of each pass (elements).
    """
    n = np.int64(num_nodes)
    count = sort_unique(keys, num_nodes, chunk)
    src = np.empty(count, dtype=np.int64)
    dst = keys[:count]
    for lo in range(0, count, chunk):
        part = slice(lo, min(lo + chunk, count))
        np.floor_divide(dst[part], n, out=src[part])
        dst[part] -= src[part] * n
    return dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=int(n))


def simple_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                 symmetric: bool) -> dgl.DGLGraph:
    """Drop self-loops and duplicate edges (optionally adding reverses) and build a graph.

    Edges come out sorted by (src, dst), so the result does not depend on draw order.
    """
    keys = EdgeKeys(len(src), num_nodes, symmetric)
    keys.extend(src, dst)
    return keys.graph()
