"""Edge lists as packed int64 keys, cleaned in place with bounded extra memory.

An edge ``(u, v)`` of a graph with ``n`` nodes is the key ``u * n + v``; a self-loop is a
multiple of ``n + 1``. Sorting the keys orders edges by ``(u, v)``, and duplicates become
neighbours. :func:`sort_unique` sorts an array of keys and moves its distinct non-loop
keys to the front without a second array; :func:`symmetric_csr` builds METIS' undirected
adjacency from a directed edge list the same way. Every pass runs over fixed-size chunks,
so the temporaries stay ``O(chunk)`` whatever the edge count.
"""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("sarlite.partition")

CHUNK = 1 << 22          # elements per step of the chunked passes (32 MiB of int64)


def sort_unique(keys: np.ndarray, num_nodes: int, chunk: int = CHUNK) -> int:
    """Sort ``keys`` in place and move its distinct non-loop keys to the front.

    Returns their count ``m``: ``keys[:m]`` is the clean, ascending edge list.
    """
    n = np.int64(num_nodes)
    keys.sort()
    previous = None

    def keep(part: np.ndarray) -> np.ndarray:
        nonlocal previous
        out = part % (n + 1) != 0
        out[1:] &= part[1:] != part[:-1]
        if previous is not None:
            out[0] &= part[0] != previous
        previous = part[-1].copy()
        return out
    return _compact(keys, keep, chunk)


def sample(keys: np.ndarray, fraction: float, seed: int, chunk: int = CHUNK) -> int:
    """Keep each key with probability ``fraction``, moving the kept ones to the front.

    Whether a key is kept depends only on the key and ``seed`` (a 64-bit mixing hash), so
    the sample is the same whatever order or chunking the keys come in. Returns the count.
    """
    if fraction >= 1:
        return len(keys)
    threshold = np.uint64(int(max(fraction, 0.0) * 2**64))
    mix = np.uint64(0x9E3779B97F4A7C15)
    salt = np.uint64((int(seed) * 0xBF58476D1CE4E5B9) % 2**64)

    def keep(part: np.ndarray) -> np.ndarray:
        h = part.astype(np.uint64) * mix + salt
        h ^= h >> np.uint64(31)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(29)
        return h < threshold
    with np.errstate(over="ignore"):
        return _compact(keys, keep, chunk)


def _compact(keys: np.ndarray, keep, chunk: int) -> int:
    """Move the keys for which ``keep(chunk)`` is true to the front, in order; their count.

    The write cursor never passes the chunk being read, and each chunk is copied before it
    is written, so the pass is safe in place.
    """
    cursor = 0
    for lo in range(0, len(keys), chunk):
        part = keys[lo:lo + chunk]
        kept = part[keep(part)]
        keys[cursor:cursor + len(kept)] = kept
        cursor += len(kept)
    return cursor


def symmetric_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int, chunk: int = CHUNK,
                  max_pairs: int | None = None, seed: int = 0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """CSR (``xadj``, ``adjncy``, int64) of the undirected simple graph behind the edges.

    Each edge becomes the key of its ``(min, max)`` pair; the sorted distinct pairs are
    then placed in both directions. Row ``r`` lists its larger neighbours ascending, then
    its smaller ones ascending. Extra memory: the pair keys (one int64 per edge) and the
    result, never a second copy of the edge list. With ``max_pairs``, a graph with more
    undirected edges keeps a seeded uniform sample of about ``max_pairs`` of them
    (:func:`sample`).
    """
    n = np.int64(num_nodes)
    keys = np.empty(len(src), dtype=np.int64)
    for lo in range(0, len(src), chunk):
        s, d, out = src[lo:lo + chunk], dst[lo:lo + chunk], keys[lo:lo + chunk]
        np.minimum(s, d, out=out)
        out *= n
        out += np.maximum(s, d)
    count = sort_unique(keys, num_nodes, chunk)
    if max_pairs is not None and count > max_pairs:
        total, count = count, sample(keys[:count], max_pairs / count, seed, chunk)
        log.info("METIS reads a seeded uniform sample of %d of the %d undirected edges "
                 "(metis_max_edges=%d)", count, total, max_pairs)
    pairs = keys[:count]

    def halves():
        for lo in range(0, len(pairs), chunk):
            low = pairs[lo:lo + chunk] // n
            yield low, pairs[lo:lo + chunk] - low * n

    degree = np.zeros(num_nodes, dtype=np.int64)
    for low, high in halves():
        degree += np.bincount(low, minlength=num_nodes)
        degree += np.bincount(high, minlength=num_nodes)
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=xadj[1:])
    del degree
    adjncy = np.empty(2 * len(pairs), dtype=np.int64)
    cursor = xadj[:-1].copy()
    for larger in (True, False):         # rows first get their larger neighbours
        for low, high in halves():
            rows, cols = (low, high) if larger else (high, low)
            order = np.argsort(rows, kind="stable")
            rows, cols = rows[order], cols[order]
            adjncy[cursor[rows] + _rank_in_runs(rows)] = cols
            cursor += np.bincount(rows, minlength=num_nodes)
    return xadj, adjncy


def _rank_in_runs(values: np.ndarray) -> np.ndarray:
    """Position of each element within its run of equal values (``values`` sorted)."""
    index = np.arange(len(values))
    starts = np.ones(len(values), dtype=bool)
    starts[1:] = values[1:] != values[:-1]
    return index - np.maximum.accumulate(np.where(starts, index, 0))
