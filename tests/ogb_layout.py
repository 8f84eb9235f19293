"""Write graphs in OGB's and DGL's on-disk layouts: the loaders' test fixtures.

The files are what OGB's readers (``read_csv_graph_raw``, ``read_binary_graph_raw``,
``read_csv_heterograph_raw``, ``read_node_label_hetero``) and DGL's ``RedditDataset``
read: header-less ``csv.gz`` tables, ``data.npz`` / ``node-label.npz`` archives, scipy's
``save_npz`` COO. Nothing here downloads; the content is whatever the caller passes, so
sizes and values are the caller's (random, seeded, in the tests). The scale benchmark
(``benchmarks/products_scale.py``) writes its own, far larger, ogbn-products files.

:func:`write_fixtures` writes the loaders' test fixtures: every layout, from seeded data
(:func:`fixture_node_data` and the other ``fixture_*`` builders). They are what
``tests/test_ogb_reddit_loaders.py`` reads and what ``tests/reference/record_ogb.py`` read
once with OGB's own reader into ``tests/reference/ogb_reader.json``: change a builder and
that record must be made again.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

SPLITS = ("train", "valid", "test")
_ROWS = 1 << 20


def write_csv(path: Path, array: np.ndarray, fmt: str = "%d", level: int = 1) -> None:
    """A header-less ``csv.gz`` of a 1-D or 2-D array, a million rows at a time."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    array = array.reshape(len(array), -1)
    with gzip.open(path, "wt", compresslevel=level, newline="") as out:
        for lo in range(0, len(array), _ROWS):
            pd.DataFrame(array[lo:lo + _ROWS]).to_csv(
                out, header=False, index=False, float_format=None if fmt == "%d" else fmt,
                lineterminator="\n")


def _release(folder: Path, version: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"RELEASE_v{version}.txt").write_text(f"# Release note for version {version}\n")


def _splits(split_dir: Path, splits: dict[str, np.ndarray]) -> None:
    for part in SPLITS:
        write_csv(split_dir / f"{part}.csv.gz", np.asarray(splits[part], dtype=np.int64))


def write_ogbn_csv(folder: Path, edges: np.ndarray, feat: np.ndarray, label: np.ndarray,
                   splits: dict[str, np.ndarray], split_scheme: str, version: int = 1,
                   float_fmt: str = "%.6g", year: np.ndarray | None = None) -> None:
    """``ogbn-arxiv`` / ``ogbn-products`` layout: ``raw/*.csv.gz`` and ``split/<scheme>/``.

    ``edges`` is ``(E, 2)`` as stored (one direction); ``label`` ``(N,)`` integers;
    ``year`` ``(N,)``, when given, goes to ``raw/node_year.csv.gz`` (ogbn-arxiv has it,
    and OGB's ``NodePropPredDataset`` reads it).
    """
    raw = folder / "raw"
    _release(folder, version)
    write_csv(raw / "edge.csv.gz", edges)
    write_csv(raw / "node-feat.csv.gz", feat, float_fmt)
    write_csv(raw / "node-label.csv.gz", label)
    write_csv(raw / "num-node-list.csv.gz", np.array([len(feat)]))
    write_csv(raw / "num-edge-list.csv.gz", np.array([len(edges)]))
    if year is not None:
        write_csv(raw / "node_year.csv.gz", year)
    _splits(folder / "split" / split_scheme, splits)


def write_ogbn_binary(folder: Path, edges: np.ndarray, feat: np.ndarray, label: np.ndarray,
                      splits: dict[str, np.ndarray], compressed: bool = False,
                      year: np.ndarray | None = None) -> None:
    """``ogbn-papers100M`` layout: ``raw/data.npz``, ``raw/node-label.npz``, ``split/time/``.

    ``label`` is float with NaN for unlabelled nodes, shape ``(N, 1)`` as OGB stores it;
    ``year`` ``(N,)``, when given, is ``data.npz``'s ``node_year`` ``(N, 1)``.
    """
    raw = folder / "raw"
    _release(folder, 1)
    raw.mkdir(parents=True, exist_ok=True)
    save = np.savez_compressed if compressed else np.savez
    extra = {} if year is None else {"node_year": np.asarray(year).reshape(-1, 1)}
    save(raw / "data.npz", edge_index=np.ascontiguousarray(edges.T),
         num_nodes_list=np.array([len(feat)]), num_edges_list=np.array([len(edges)]),
         node_feat=feat, **extra)
    save(raw / "node-label.npz", node_label=label.reshape(-1, 1))
    _splits(folder / "split" / "time", splits)


def write_ogbn_mag(folder: Path, num_nodes: dict[str, int],
                   edges: dict[tuple[str, str, str], np.ndarray], feat: np.ndarray,
                   year: np.ndarray, label: np.ndarray, splits: dict[str, np.ndarray]) -> None:
    """``ogbn-mag`` layout (release 2): per-relation folders, features and labels on papers."""
    import pandas as pd

    raw = folder / "raw"
    _release(folder, 2)
    raw.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({k: [v] for k, v in num_nodes.items()}).to_csv(
        raw / "num-node-dict.csv.gz", index=False)
    pd.DataFrame(list(edges)).to_csv(raw / "triplet-type-list.csv.gz", header=False,
                                     index=False)
    for triplet, pairs in edges.items():
        sub = raw / "relations" / "___".join(triplet)
        write_csv(sub / "edge.csv.gz", pairs)
        write_csv(sub / "num-edge-list.csv.gz", np.array([len(pairs)]))
        write_csv(sub / "edge_reltype.csv.gz", np.zeros(len(pairs), dtype=np.int64))
    write_csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", feat, "%.6g")
    write_csv(raw / "node-feat" / "paper" / "node_year.csv.gz", year)
    has = {t: [t == "paper"] for t in num_nodes}
    pd.DataFrame(has).to_csv(raw / "nodetype-has-label.csv.gz", index=False)
    write_csv(raw / "node-label" / "paper" / "node-label.csv.gz", label)
    split_dir = folder / "split" / "time"
    split_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(has).to_csv(split_dir / "nodetype-has-split.csv.gz", index=False)
    _splits(split_dir / "paper", splits)


def write_reddit(folder: Path, feat: np.ndarray, label: np.ndarray, node_types: np.ndarray,
                 src: np.ndarray, dst: np.ndarray) -> None:
    """DGL's Reddit files: ``reddit_data.npz`` and ``reddit_graph.npz`` (scipy COO)."""
    import scipy.sparse as sp

    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "reddit_data.npz", feature=feat, label=label, node_types=node_types)
    n = len(label)
    sp.save_npz(folder / "reddit_graph.npz",
                sp.coo_matrix((np.ones(len(src), dtype=np.float32), (src, dst)), shape=(n, n)))


def random_node_data(num_nodes: int, feat_dim: int, num_classes: int,
                     fractions: tuple[float, float, float] = (0.6, 0.2, 0.2), seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Seeded features ``(N, F)`` float32, labels ``(N,)`` and disjoint split ids."""
    rng = np.random.default_rng(seed)
    feat = rng.standard_normal((num_nodes, feat_dim), dtype=np.float32)
    label = rng.integers(0, num_classes, num_nodes)
    order = rng.permutation(num_nodes)
    cuts = np.cumsum([int(f * num_nodes) for f in fractions])
    splits = {"train": np.sort(order[:cuts[0]]), "valid": np.sort(order[cuts[0]:cuts[1]]),
              "test": np.sort(order[cuts[1]:cuts[2]])}
    return feat, label, splits


# ------------------------------------------------------------------ the loaders' fixtures

N, F, C, E = 60, 6, 5, 400          # nodes, feature width, classes, stored edges
MAG_NODES = {"author": 30, "field_of_study": 7, "institution": 4, "paper": N}
MAG_RELATIONS = [("author", "affiliated_with", "institution"),
                 ("author", "writes", "paper"), ("paper", "cites", "paper"),
                 ("paper", "has_topic", "field_of_study")]


def fixture_node_data(seed: int = 1) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    return random_node_data(N, F, C, seed=seed)


def fixture_stored_edges(seed: int = 2) -> np.ndarray:
    """Directed edges with duplicates, reverse pairs and self-loops, as raw files have."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, N, (E, 2))
    edges[:5, 1] = edges[:5, 0]                                   # self-loops
    return np.concatenate([edges, edges[:20], edges[20:30, ::-1]])  # duplicates, reverses


def fixture_papers_labels(label: np.ndarray) -> np.ndarray:
    """``label`` as float32 with every fourth node unlabelled (NaN), as in papers100M."""
    values = label.astype(np.float32)
    values[::4] = np.nan
    return values


def fixture_node_types() -> np.ndarray:
    """Reddit's ``node_types``: 1, 2 or 3 (train, validation, test)."""
    return np.random.default_rng(3).integers(1, 4, N)


def fixture_year() -> np.ndarray:
    return np.arange(N) % 10 + 2010


def fixture_mag_edges() -> dict[tuple[str, str, str], np.ndarray]:
    rng = np.random.default_rng(4)
    return {(s, r, d): np.stack([rng.integers(0, MAG_NODES[s], 40),
                                 rng.integers(0, MAG_NODES[d], 40)], 1)
            for s, r, d in MAG_RELATIONS}


def write_fixtures(out: Path) -> Path:
    """Every layout under ``out``: ``ogbn_arxiv``, ``ogbn_products``, ``ogbn_papers100M``,
    ``ogbn_mag`` and ``reddit``, the same (seeded) content each time."""
    feat, label, splits = fixture_node_data()
    edges = fixture_stored_edges()
    write_ogbn_csv(out / "ogbn_arxiv", edges, feat, label, splits, "time",
                   year=fixture_year())
    write_ogbn_csv(out / "ogbn_products", edges, feat, label, splits, "sales_ranking")
    write_ogbn_binary(out / "ogbn_papers100M", edges, feat, fixture_papers_labels(label),
                      splits, year=fixture_year())
    write_reddit(out / "reddit", feat, label, fixture_node_types(), edges[:, 0], edges[:, 1])
    write_ogbn_mag(out / "ogbn_mag", MAG_NODES, fixture_mag_edges(), feat, fixture_year(),
                   label, splits)
    return out
