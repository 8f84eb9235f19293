"""Write graphs in OGB's and DGL's on-disk layouts: the loaders' test fixtures.

The files are what OGB's readers (``read_csv_graph_raw``, ``read_binary_graph_raw``,
``read_csv_heterograph_raw``, ``read_node_label_hetero``) and DGL's ``RedditDataset``
read: header-less ``csv.gz`` tables, ``data.npz`` / ``node-label.npz`` archives, scipy's
``save_npz`` COO. Nothing here downloads; the content is whatever the caller passes, so
sizes and values are the caller's (random, seeded, in the tests). The scale benchmark
(``benchmarks/products_scale.py``) writes its own, far larger, ogbn-products files.
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
                   float_fmt: str = "%.6g") -> None:
    """``ogbn-arxiv`` / ``ogbn-products`` layout: ``raw/*.csv.gz`` and ``split/<scheme>/``.

    ``edges`` is ``(E, 2)`` as stored (one direction); ``label`` ``(N,)`` integers.
    """
    raw = folder / "raw"
    _release(folder, version)
    write_csv(raw / "edge.csv.gz", edges)
    write_csv(raw / "node-feat.csv.gz", feat, float_fmt)
    write_csv(raw / "node-label.csv.gz", label)
    write_csv(raw / "num-node-list.csv.gz", np.array([len(feat)]))
    write_csv(raw / "num-edge-list.csv.gz", np.array([len(edges)]))
    _splits(folder / "split" / split_scheme, splits)


def write_ogbn_binary(folder: Path, edges: np.ndarray, feat: np.ndarray, label: np.ndarray,
                      splits: dict[str, np.ndarray], compressed: bool = False) -> None:
    """``ogbn-papers100M`` layout: ``raw/data.npz``, ``raw/node-label.npz``, ``split/time/``.

    ``label`` is float with NaN for unlabelled nodes, shape ``(N, 1)`` as OGB stores it.
    """
    raw = folder / "raw"
    _release(folder, 1)
    raw.mkdir(parents=True, exist_ok=True)
    save = np.savez_compressed if compressed else np.savez
    save(raw / "data.npz", edge_index=np.ascontiguousarray(edges.T),
         num_nodes_list=np.array([len(feat)]), num_edges_list=np.array([len(edges)]),
         node_feat=feat)
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
