"""Reddit (Hamilton et al., 2017) in DGL's on-disk layout, read without DGL's dataset class.

DGL's ``RedditDataset`` downloads into ``<raw_dir>/reddit_<8 hex digits>/``::

    reddit_data.npz     feature [N, 602] float, label [N] int, node_types [N]
                        (1 = train, 2 = validation, 3 = test)
    reddit_graph.npz    the adjacency as a scipy COO matrix (scipy.sparse.save_npz:
                        row, col, data, shape, format)

``data_dir`` may be the folder holding the two files, or a parent holding ``reddit/`` or
one ``reddit_<8 hex digits>/``. Node order is the files' own: DGL's class renumbers nodes
(reverse Cuthill-McKee) after reading; this reader does not, so node ``i`` here is row
``i`` of ``reddit_data.npz``.
"""
from __future__ import annotations

import re
from pathlib import Path

import dgl
import numpy as np

from .edges import EdgeKeys
from .reading import check, finish, mask, npz_array, reading

LAYOUT = ("reddit_data.npz (feature, label, node_types 1/2/3 = train/val/test) and "
          "reddit_graph.npz (scipy COO: row, col, data, shape, format) in one folder: "
          "DATA_DIR, DATA_DIR/reddit/ or DGL's DATA_DIR/reddit_<8 hex digits>/")
_FILES = ("reddit_data.npz", "reddit_graph.npz")


def reddit_dir(root: Path) -> Path:
    """The folder holding Reddit's two files: ``root``, ``root/reddit`` or DGL's cache."""
    candidates = [root, root / "reddit"] + sorted(
        p for p in root.glob("reddit_*") if re.fullmatch(r"reddit_[0-9a-f]{8}", p.name))
    holding = [p for p in candidates if any((p / f).is_file() for f in _FILES)]
    if len(holding) > 1 and root not in holding:
        raise ValueError(f"reddit: several folders hold Reddit's files: "
                         f"{', '.join(str(p) for p in holding)}; name one as the data "
                         f"directory")
    if not holding:
        raise FileNotFoundError(f"reddit: {_FILES[0]} not found in {root}, {root}/reddit/ "
                                f"or a DGL cache folder {root}/reddit_<8 hex digits>/ "
                                f"(expected layout: {LAYOUT})")
    return holding[0]


def load_reddit(root: Path) -> dgl.DGLGraph:
    """Reddit as a homogeneous graph in the files' node order.

    The stored adjacency holds both directions of each edge; self-loops and duplicates are
    dropped and edges are sorted by ``(src, dst)``; reverses are added where missing.
    """
    folder = reddit_dir(root)
    path = folder / "reddit_data.npz"
    feat, label, types = (npz_array(path, k, LAYOUT) for k in ("feature", "label",
                                                                "node_types"))
    with reading(path, LAYOUT):
        num_nodes = len(label)
        check(label.ndim == 1 and types.shape == label.shape and feat.ndim == 2
              and len(feat) == num_nodes, f"feature {feat.shape}, label {label.shape} and "
                                          f"node_types {types.shape} disagree")
        check(np.isin(types, (1, 2, 3)).all(), "node_types must be 1, 2 or 3 "
                                               "(train, validation, test)")
        check(label.min(initial=0) >= 0, "labels must be non-negative")
    path = folder / "reddit_graph.npz"
    fmt, shape = (npz_array(path, k, LAYOUT) for k in ("format", "shape"))
    row, col = (npz_array(path, k, LAYOUT) for k in ("row", "col"))
    with reading(path, LAYOUT):
        kind = fmt[()].decode() if isinstance(fmt[()], bytes) else str(fmt[()])
        check(kind == "coo", f"expected a COO matrix, found format {kind!r}")
        check(tuple(int(x) for x in shape) == (num_nodes, num_nodes),
              f"shape {tuple(shape)} does not match the {num_nodes} nodes of "
              f"reddit_data.npz")
        check(row.shape == col.shape and row.ndim == 1, "row and col must be equal-length "
                                                        "vectors")
        keys = EdgeKeys(len(row), num_nodes, symmetric=True)
        keys.extend(row, col)
    del row, col
    g = keys.graph()
    types = np.asarray(types)
    masks = tuple(mask(num_nodes, np.flatnonzero(types == t)) for t in (1, 2, 3))
    return finish(g, feat, label, masks)
