"""Loaders for the real graph datasets kept outside the project (see ``--data-dir``).

``load_dataset(name, data_dir)`` reads one dataset from a directory laid out as below
(only the folders of the datasets used need be there; :func:`layout` says where one is)::

    <data_dir>/planetoid/cora/ind.cora.{x,y,tx,ty,allx,ally,graph,test.index}
    <data_dir>/planetoid/citeseer/ind.citeseer.*
    <data_dir>/npz/cora_ml_ppnp.npz
    <data_dir>/heterophilous/<name>.npz          (tolokers, squirrel, chameleon_directed, ...)
    <data_dir>/musae/facebook/facebook_{edges,target}.csv, facebook.json
    <data_dir>/musae/DE/DE_{edges,target}.csv, DE.json          (name ``twitch_de``)
    <data_dir>/ogbn_arxiv/, ogbn_products/, ogbn_papers100M/     (OGB's layout, see
    <data_dir>/ogbn_mag/                                         sarlite.data.ogb)
    <data_dir>/reddit_data.npz, reddit_graph.npz (or reddit/, or DGL's reddit_<hash>/)

Every loader but ``ogbn-mag``'s returns a homogeneous ``dgl.DGLGraph`` with int64 ids.
Self-loops and duplicate edges are dropped and the edges are sorted by ``(src, dst)``;
undirected datasets carry both directions of each edge, the ``*_directed`` heterophilous
variants keep the stored directions only, and ``ogbn-arxiv`` / ``ogbn-papers100M`` get
reverse edges unless ``reverse_edges=False``. ``ndata`` holds (``N`` nodes, ``F``
features):

==============  =================  ============================================
key             shape / dtype      meaning
==============  =================  ============================================
``feat``        ``(N, F)`` f32     node features (dense)
``label``       ``(N,)`` int64     class of the node (0 for unlabelled nodes)
``train_mask``  ``(N,)`` bool      training nodes
``val_mask``    ``(N,)`` bool      validation nodes
``test_mask``   ``(N,)`` bool      test nodes
==============  =================  ============================================

``ogbn-mag`` is a ``dgl.heterograph`` instead (node types ``author``, ``field_of_study``,
``institution``, ``paper``) with these five fields and ``year`` on ``paper`` only, each
relation's duplicate edges dropped, and a reverse relation for each stored one
(``rev_writes``, ``cited_by``, ...) unless ``reverse_edges=False``; see
:func:`sarlite.data.ogb.load_ogbn_mag`.

Errors: an unknown name raises ``ValueError``; a missing ``data_dir`` or dataset file raises
``FileNotFoundError`` naming the path (and, for OGB and Reddit, the layout expected); a file
that cannot be parsed or has the wrong content raises ``ValueError`` naming the file and
the problem.
"""
from __future__ import annotations

import csv
import json
import operator
import os
import warnings
from pathlib import Path
from typing import Callable

import dgl
import numpy as np
import scipy.sparse as sp
import torch

from .edges import simple_graph
from .ogb import MAG, OGBN, load_ogbn, load_ogbn_mag, refuse_reverse_edges
from .reading import PlanetoidUnpickler, check, check_edges, finish, mask, read_npz, reading
from .reddit import load_reddit

_HETEROPHILOUS = (
    "actor", "chameleon", "chameleon_directed", "chameleon_filtered",
    "chameleon_filtered_directed", "cornell", "minesweeper", "squirrel", "squirrel_directed",
    "squirrel_filtered", "squirrel_filtered_directed", "texas", "texas_4_classes",
    "tolokers", "wisconsin",
)


def _random_split(label: np.ndarray, seed: int, per_class: int = 20,
                  num_val: int = 500) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded split: ``per_class`` training nodes per class, ``num_val`` validation, rest test.

    Nodes are visited in the order of ``default_rng(seed).permutation(N)``: the first
    ``per_class`` of each class train, the next ``num_val`` of the others validate.
    """
    n = len(label)
    order = np.random.default_rng(seed).permutation(n)
    train = np.concatenate([order[label[order] == c][:per_class] for c in np.unique(label)])
    rest = order[~np.isin(order, train)]
    return mask(n, train), mask(n, rest[:num_val]), mask(n, rest[num_val:])


# ------------------------------------------------------------------ Planetoid (pickles)

def _load_planetoid(root: Path, name: str, split: int, seed: int) -> dgl.DGLGraph:
    """Planetoid Cora / Citeseer with the standard public split.

    Features are ``allx`` stacked over ``tx``; ``tx`` row ``i`` belongs to node
    ``test.index[i]``. Citeseer test ids without a row (isolated nodes) get zero features
    and label 0 and are in no mask. Split: train = the first ``len(y)`` nodes, validation =
    the next 500, test = the ``test.index`` ids. ``split`` and ``seed`` are unused.
    """
    folder = root / "planetoid" / name
    objs = {}
    for suffix in ("y", "tx", "ty", "allx", "ally", "graph"):
        path = folder / f"ind.{name}.{suffix}"
        with reading(path), open(path, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old scipy module paths
            objs[suffix] = obj = PlanetoidUnpickler(f, encoding="latin1").load()
            if suffix == "graph":
                check(isinstance(obj, dict), f"expected a dict, got {type(obj).__name__}")
            else:
                objs[suffix] = obj = sp.csr_matrix(obj) if suffix in ("tx", "allx") \
                    else np.asarray(obj)
                check(obj.ndim == 2, f"expected a 2-D matrix, got shape {obj.shape}")
    path = folder / f"ind.{name}.test.index"
    with reading(path):
        test = np.loadtxt(path, dtype=np.int64, ndmin=1)
        check(0 < len(test) == objs["tx"].shape[0] == len(objs["ty"]),
               f"{len(test)} test ids but tx/ty have {objs['tx'].shape[0]}/{len(objs['ty'])} "
               "rows")

    allx, ally, tx, ty, graph = (objs[k] for k in ("allx", "ally", "tx", "ty", "graph"))
    n_all = allx.shape[0]
    for ok, what in ((len(ally) == n_all and len(objs["y"]) + 500 <= n_all,
                      f"allx/ally/y rows disagree ({n_all}/{len(ally)}/{len(objs['y'])})"),
                     (tx.shape[1] == allx.shape[1], "tx and allx have different widths"),
                     (test.min() >= n_all and len(np.unique(test)) == len(test),
                      "test.index ids must be distinct and follow the allx rows")):
        if not ok:
            raise ValueError(f"inconsistent Planetoid files in {folder}: {what}")
    num_nodes = int(max(n_all + len(test), test.max() + 1))
    feat = np.zeros((num_nodes, allx.shape[1]), dtype=np.float32)
    feat[:n_all] = allx.toarray()
    feat[test] = tx.toarray()
    label = np.zeros(num_nodes, dtype=np.int64)
    label[:n_all] = ally.argmax(1)
    label[test] = ty.argmax(1)

    path = folder / f"ind.{name}.graph"
    with reading(path):
        src = np.array([u for u, vs in graph.items() for _ in vs], dtype=np.int64)
        dst = np.array([v for vs in graph.values() for v in vs], dtype=np.int64)
        check_edges(np.stack([src, dst], 1), num_nodes)
    g = simple_graph(src, dst, num_nodes, symmetric=True)
    n_train = len(objs["y"])
    masks = (mask(num_nodes, np.arange(n_train)),
             mask(num_nodes, np.arange(n_train, n_train + 500)), mask(num_nodes, test))
    return finish(g, feat, label, masks)


# ------------------------------------------------------------------ heterophilous (npz)

def _load_heterophilous(root: Path, name: str, split: int, seed: int) -> dgl.DGLGraph:
    """A dataset of Platonov et al. with its fixed splits; ``split`` picks one of them.

    ``edges`` [E, 2] stores each undirected edge once, so both directions are added, except
    for the ``*_directed`` variants, which keep the stored directions. ``seed`` is unused.
    """
    path = root / "heterophilous" / f"{name}.npz"
    arrays = read_npz(path, ("node_features", "node_labels", "edges", "train_masks",
                              "val_masks", "test_masks"))
    feat, label, edges = arrays["node_features"], arrays["node_labels"], arrays["edges"]
    with reading(path):
        num_nodes = len(label)
        check(label.ndim == 1 and feat.ndim == 2 and len(feat) == num_nodes,
               f"node_features {feat.shape} and node_labels {label.shape} disagree")
        check_edges(edges, num_nodes)
        masks = [arrays[k] for k in ("train_masks", "val_masks", "test_masks")]
        check(all(m.ndim == 2 and m.shape == masks[0].shape and m.shape[1] == num_nodes
                   for m in masks), f"masks must be [num_splits, {num_nodes}]")
    num_splits = masks[0].shape[0]
    split = operator.index(split)
    if not 0 <= split < num_splits:
        raise ValueError(f"split must be in 0..{num_splits - 1} for {name!r}, got {split}")
    g = simple_graph(edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64), num_nodes,
                      symmetric=not name.endswith("_directed"))
    return finish(g, feat, label,
                   tuple(torch.from_numpy(m[split].astype(bool)) for m in masks))


# ------------------------------------------------------------------ Cora-ML (npz CSR)

def _load_cora_ml(root: Path, name: str, split: int, seed: int) -> dgl.DGLGraph:
    """Cora-ML (PPNP release): symmetrised CSR adjacency, dense tf-idf-like features.

    No fixed split: ``_random_split`` with ``seed`` (20 training nodes per class, 500
    validation, the rest test). ``split`` is unused.
    """
    path = root / "npz" / "cora_ml_ppnp.npz"
    parts = ("data", "indices", "indptr", "shape")
    arrays = read_npz(path, tuple(f"{m}.{p}" for m in ("adj_matrix", "attr_matrix")
                                   for p in parts) + ("labels",))
    with reading(path):
        adj, attr = (sp.csr_matrix(tuple(arrays[f"{m}.{p}"] for p in parts[:3]),
                                   shape=tuple(arrays[f"{m}.shape"]))
                     for m in ("adj_matrix", "attr_matrix"))
        label = arrays["labels"]
        num_nodes = len(label)
        check(adj.shape == (num_nodes, num_nodes) and attr.shape[0] == num_nodes,
               f"adj {adj.shape}, attr {attr.shape} and labels ({num_nodes},) disagree")
    adj = adj.tocoo()
    keep = adj.data != 0
    g = simple_graph(adj.row[keep].astype(np.int64), adj.col[keep].astype(np.int64),
                      num_nodes, symmetric=True)
    return finish(g, attr.toarray(), label, _random_split(label, seed))


# ------------------------------------------------------------------ MUSAE (csv + json)

_MUSAE = {  # name -> (folder / file stem, node id column, label column)
    "facebook": ("facebook", "id", "page_type"),
    "twitch_de": ("DE", "new_id", "mature"),
}


def _load_musae(root: Path, name: str, split: int, seed: int) -> dgl.DGLGraph:
    """A MUSAE graph (Rozemberczki et al.): undirected edges, sparse binary features.

    Features become a dense 0/1 matrix with ``max feature id + 1`` columns. Labels: facebook
    ``page_type`` strings numbered 0.. in sorted order; Twitch ``mature`` False/True -> 0/1,
    node id ``new_id``. No fixed split: ``_random_split`` with ``seed`` (20 training nodes
    per class, 500 validation, the rest test). ``split`` is unused.
    """
    stem, id_col, label_col = _MUSAE[name]
    folder = root / "musae" / stem

    path = folder / f"{stem}_target.csv"
    with reading(path), open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
        check(bool(rows), "no rows")
        missing = {id_col, label_col} - set(rows[0])
        check(not missing, f"missing column(s) {sorted(missing)}; has {list(rows[0])}")
        ids = np.array([int(r[id_col]) for r in rows], dtype=np.int64)
        num_nodes = len(ids)
        check(np.array_equal(np.sort(ids), np.arange(num_nodes)),
               f"column {id_col!r} must hold each of 0..{num_nodes - 1} once")
        values = [r[label_col] for r in rows]
        if label_col == "mature":
            check(set(values) <= {"True", "False"}, "column 'mature' must be True/False")
            codes = np.array([v == "True" for v in values], dtype=np.int64)
        else:
            classes = sorted(set(values))
            codes = np.array([classes.index(v) for v in values], dtype=np.int64)
    label = np.zeros(num_nodes, dtype=np.int64)
    label[ids] = codes

    path = folder / f"{stem}.json"
    with reading(path), open(path, encoding="utf-8") as f:
        table = json.load(f)
        check(isinstance(table, dict), "expected a JSON object {node id: [feature ids]}")
        rows_ = np.array([int(k) for k, v in table.items() for _ in v], dtype=np.int64)
        cols = np.array([int(c) for v in table.values() for c in v], dtype=np.int64)
        check(rows_.size == 0 or (rows_.min() >= 0 and rows_.max() < num_nodes),
               f"node ids must lie in [0, {num_nodes})")
        check(cols.size == 0 or cols.min() >= 0, "feature ids must be non-negative")
    feat = np.zeros((num_nodes, int(cols.max()) + 1 if cols.size else 0), dtype=np.float32)
    feat[rows_, cols] = 1.0

    path = folder / f"{stem}_edges.csv"
    with reading(path), open(path, newline="", encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        # The README documents id_1,id_2; the Twitch files ship with from,to.
        check(header in (["id_1", "id_2"], ["from", "to"]),
               f"header must be id_1,id_2 (or from,to), got {','.join(header)}")
        edges = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
        check_edges(edges, num_nodes)
    g = simple_graph(edges[:, 0], edges[:, 1], num_nodes, symmetric=True)
    return finish(g, feat, label, _random_split(label, seed))


# ------------------------------------------------------------------ public API

_LOADERS: dict[str, Callable[[Path, str, int, int], dgl.DGLGraph]] = {
    "cora": _load_planetoid,
    "citeseer": _load_planetoid,
    "cora_ml": _load_cora_ml,
    **{stem: _load_heterophilous for stem in _HETEROPHILOUS},
    **{name: _load_musae for name in _MUSAE},
    "reddit": lambda root, name, split, seed: load_reddit(root),
}
_HETEROGENEOUS = {MAG.name: MAG}

REAL_DATASETS: tuple[str, ...] = tuple(sorted([*_LOADERS, *OGBN, *_HETEROGENEOUS]))

#: where each dataset lies in the data directory, in one line for help texts
DATA_DIR_LAYOUT = ("planetoid/cora/ and planetoid/citeseer/ (Planetoid's ind.<name>.* "
                   "files), npz/cora_ml_ppnp.npz, heterophilous/<name>.npz, "
                   "musae/facebook/ and musae/DE/ (twitch_de), OGB's ogbn_<name>/ folders "
                   "(ogbn_arxiv/, ogbn_products/, ogbn_papers100M/, ogbn_mag/) and Reddit's "
                   "reddit_data.npz and reddit_graph.npz as DGL keeps them")


def layout(name: str) -> str:
    """Where the real dataset ``name`` (one of ``REAL_DATASETS``, any case) lies under the
    data directory, in one line for error messages."""
    key = str(name).lower()
    if key in ("cora", "citeseer"):
        return f"planetoid/{key}/ind.{key}.{{x,y,tx,ty,allx,ally,graph,test.index}}"
    if key == "cora_ml":
        return "npz/cora_ml_ppnp.npz"
    if key in _HETEROPHILOUS:
        return f"heterophilous/{key}.npz"
    if key in _MUSAE:
        stem = _MUSAE[key][0]
        return f"musae/{stem}/{{{stem}_edges.csv, {stem}_target.csv, {stem}.json}}"
    if key == "reddit":
        return ("reddit_data.npz and reddit_graph.npz (in it, in reddit/ or in DGL's "
                "reddit_<8 hex digits>/)")
    spec = OGBN.get(key) or _HETEROGENEOUS.get(key)
    if spec is None:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(REAL_DATASETS)}")
    return f"{spec.folder}/, as OGB keeps it"


def load_dataset(name: str, data_dir: str | os.PathLike, split: int = 0,
                 seed: int = 0, reverse_edges: bool | None = None) -> dgl.DGLGraph:
    """Load the real dataset ``name`` (case-insensitive, one of ``REAL_DATASETS``).

    Parameters
    ----------
    name:
        Dataset name, e.g. ``"cora"``, ``"tolokers"``, ``"chameleon_directed"``,
        ``"twitch_de"``, ``"ogbn-arxiv"``, ``"ogbn-papers100M"``, ``"ogbn-mag"``,
        ``"reddit"``.
    data_dir:
        Root of the data folder (``planetoid/``, ``heterophilous/``, ``npz/``, ``musae/``,
        OGB's ``ogbn_<name>/`` folders, Reddit's files; see :mod:`sarlite.data.ogb` and
        :mod:`sarlite.data.reddit` for those layouts).
    split:
        Which of the 10 fixed splits (0..9) of a heterophilous dataset to use; other
        datasets ignore it (OGB and Reddit have one fixed split).
    seed:
        Seed of the random split of ``cora_ml``, ``facebook`` and ``twitch_de`` (20 training
        nodes per class, 500 validation, the rest test); other datasets ignore it.
    reverse_edges:
        Only for the datasets stored directed, ``ogbn-arxiv``, ``ogbn-papers100M`` and
        ``ogbn-mag``: ``None`` or ``True`` (the literature's setting) adds the reverse of
        every edge and merges duplicates (``ogbn-mag``: adds a reverse relation for each
        stored relation, ``rev_writes``, ``cited_by``, ...); ``False`` keeps the stored
        directions (relations). Any other dataset refuses a value other than ``None``.

    Returns
    -------
    dgl.DGLGraph
        ``N`` nodes with ``ndata`` ``feat`` (N, F) float32, ``label`` (N,) int64 and
        ``train_mask`` / ``val_mask`` / ``test_mask`` (N,) bool (see the module docstring).
        For ``ogbn-mag`` a heterograph with these fields (and ``year``) on ``paper``.

    Raises
    ------
    ValueError
        Unknown name, heterophilous ``split`` out of range, ``reverse_edges`` for a dataset
        it does not apply to, or a malformed file.
    FileNotFoundError
        ``data_dir`` or a needed file does not exist; the message names the layout.
    """
    key = str(name).lower()
    if key not in REAL_DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(REAL_DATASETS)}")
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data directory not found: {root} (for {key}, a directory "
                                f"holding {layout(key)})")
    if key in OGBN:
        return load_ogbn(root, key, reverse_edges)
    if key in _HETEROGENEOUS:
        return load_ogbn_mag(root, reverse_edges)
    if reverse_edges is not None:
        refuse_reverse_edges(name)
    return _LOADERS[key](root, key, split, seed)
