"""Packed edge keys: in-place clean-up and METIS' symmetric adjacency, chunk by chunk."""
import numpy as np
import pytest

from sarlite.partition.edgekeys import sample, sort_unique, symmetric_csr


def _edges(seed=0, n=30, m=400):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    src[:10] = dst[:10]                                  # self-loops
    return np.concatenate([src, dst[:50]]), np.concatenate([dst, src[:50]]), n


def _reference_csr(src, dst, n):
    """Row r: larger neighbours ascending, then smaller ones ascending; no loops/dups."""
    pairs = {(min(u, v), max(u, v)) for u, v in zip(src.tolist(), dst.tolist()) if u != v}
    rows = [sorted(v for u, v in pairs if u == r) + sorted(u for u, v in pairs if v == r)
            for r in range(n)]
    xadj = np.cumsum([0] + [len(r) for r in rows])
    return xadj, np.array([c for r in rows for c in r], dtype=np.int64)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 22])
def test_sort_unique_leaves_the_distinct_non_loop_keys_in_front(chunk):
    src, dst, n = _edges()
    keys = src * n + dst
    count = sort_unique(keys, n, chunk)
    expected = np.unique(src[src != dst] * n + dst[src != dst])
    assert np.array_equal(keys[:count], expected)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 22])
def test_symmetric_csr_is_the_undirected_simple_graph_for_any_chunk_size(chunk):
    src, dst, n = _edges(seed=1)
    xadj, adjncy = symmetric_csr(src, dst, n, chunk)
    ref_xadj, ref_adjncy = _reference_csr(src, dst, n)
    assert np.array_equal(xadj, ref_xadj) and np.array_equal(adjncy, ref_adjncy)


def test_symmetric_csr_of_no_edges_is_empty_rows():
    xadj, adjncy = symmetric_csr(np.empty(0, np.int64), np.empty(0, np.int64), 5)
    assert xadj.tolist() == [0] * 6 and len(adjncy) == 0


def test_sample_keeps_about_the_fraction_asked():
    keys = np.arange(100_000, dtype=np.int64) * 7
    count = sample(keys, 0.25, seed=0)
    assert 0.24 < count / 100_000 < 0.26


@pytest.mark.parametrize("chunk", [3, 1 << 22])
def test_sample_depends_only_on_the_keys_and_the_seed(chunk):
    keys = np.arange(1000, dtype=np.int64) * 13
    whole, shuffled = keys.copy(), np.random.default_rng(0).permutation(keys)
    kept = set(whole[:sample(whole, 0.5, seed=3, chunk=chunk)].tolist())
    assert kept == set(shuffled[:sample(shuffled, 0.5, seed=3, chunk=chunk)].tolist())
    assert kept != set(keys[:sample(keys.copy(), 0.5, seed=4)].tolist())


def test_symmetric_csr_with_max_pairs_keeps_a_symmetric_sample():
    src, dst, n = _edges(seed=2, n=200, m=4000)
    xadj, adjncy = symmetric_csr(src, dst, n, max_pairs=500)
    rows = np.repeat(np.arange(n), np.diff(xadj))
    pairs = set(zip(rows.tolist(), adjncy.tolist()))
    assert all((v, u) in pairs for u, v in pairs)
    assert 400 < len(pairs) / 2 < 600
