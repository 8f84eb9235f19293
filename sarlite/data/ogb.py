"""OGB node property prediction datasets, read from OGB's own folders without OGB.

The ``ogb`` package is not used: it prompts with ``input()`` when a folder's release does
not match and downloads when files are missing. These readers only read. A dataset
``ogbn-<name>`` lives in ``<data_dir>/ogbn_<name>/`` (OGB's folder name, case kept:
``ogbn_papers100M``; the ``_dgl`` / ``_pyg`` folders OGB's loaders make are accepted too,
as is ``data_dir`` being the dataset folder itself)::

    ogbn_arxiv/RELEASE_v1.txt
    ogbn_arxiv/raw/{edge,node-feat,node-label,num-node-list,num-edge-list}.csv.gz
    ogbn_arxiv/split/time/{train,valid,test}.csv.gz
    ogbn_products/...                              (the same, split/sales_ranking/)
    ogbn_papers100M/raw/data.npz                   (edge_index [2, E], num_nodes_list,
                                                    num_edges_list, node_feat [N, 128])
    ogbn_papers100M/raw/node-label.npz             (node_label [N, 1], NaN = unlabelled)
    ogbn_papers100M/split/time/{train,valid,test}.csv.gz
    ogbn_mag/RELEASE_v2.txt, raw/num-node-dict.csv.gz, raw/triplet-type-list.csv.gz,
    ogbn_mag/raw/relations/<src>___<rel>___<dst>/{edge,num-edge-list}.csv.gz,
    ogbn_mag/raw/node-feat/paper/{node-feat,node_year}.csv.gz,
    ogbn_mag/raw/nodetype-has-label.csv.gz, raw/node-label/paper/node-label.csv.gz,
    ogbn_mag/split/time/nodetype-has-split.csv.gz, split/time/paper/{train,valid,test}.csv.gz

``ogbn-mag`` is heterogeneous: :func:`read_ogbn_mag` returns its files as they are, and
:func:`load_ogbn_mag` (what ``load_dataset("ogbn-mag", ...)`` and the trainer use) the
graph to train on, with a reverse relation for each stored one.

Memory: ``csv.gz`` files are parsed a million rows at a time into preallocated arrays,
edges go straight into one packed key array (:class:`~sarlite.data.edges.EdgeKeys`), and
uncompressed ``.npz`` members are memory-mapped. So an edge list is held at most twice and
features once.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import dgl
import numpy as np
import torch

from .edges import EdgeKeys
from .reading import (check, csv_array, csv_chunks, csv_ids, finish, mask, npz_array,
                      reading)
from .synthetic_hetero import REVERSE

log = logging.getLogger("sarlite.data")

_SPLIT_FILES = ("train", "valid", "test")
_CSV_RAW = "raw/{edge,node-feat,node-label,num-node-list,num-edge-list}.csv.gz"


@dataclass(frozen=True)
class OgbnSpec:
    """What OGB's ``master.csv`` says of one node property prediction dataset."""

    name: str           # ogbn-arxiv
    folder: str         # ogbn_arxiv (OGB's case)
    version: int        # the RELEASE_v<version>.txt the files belong to
    split: str          # split scheme folder
    binary: bool        # raw/data.npz instead of csv.gz files
    directed: bool      # edges stored in one direction that matters (no inverse added)
    num_classes: int

    def layout(self) -> str:
        raw = ("raw/data.npz (edge_index, num_nodes_list, num_edges_list, node_feat), "
               "raw/node-label.npz (node_label)" if self.binary else _CSV_RAW)
        return (f"{self.folder}/{{RELEASE_v{self.version}.txt, {raw}, "
                f"split/{self.split}/{{train,valid,test}}.csv.gz}}, as OGB keeps it")


OGBN = {spec.name.lower(): spec for spec in (
    OgbnSpec("ogbn-arxiv", "ogbn_arxiv", 1, "time", False, True, 40),
    OgbnSpec("ogbn-products", "ogbn_products", 1, "sales_ranking", False, False, 47),
    OgbnSpec("ogbn-papers100M", "ogbn_papers100M", 1, "time", True, True, 172),
)}
MAG = OgbnSpec("ogbn-mag", "ogbn_mag", 2, "time", False, True, 349)


def dataset_dir(root: Path, spec: OgbnSpec) -> Path:
    """The dataset's folder under ``root`` (or ``root`` itself), release file checked."""
    names = [spec.folder + suffix for suffix in ("", "_dgl", "_pyg")]
    found = [root / n for n in names if (root / n).is_dir()]
    if root.name in names:
        found.insert(0, root)
    if not found:
        raise FileNotFoundError(f"{spec.name}: folder not found: {root / spec.folder} "
                                f"(expected layout: {spec.layout()})")
    folder = found[0]
    release = folder / f"RELEASE_v{spec.version}.txt"
    if not release.is_file():
        others = sorted(p.name for p in folder.glob("RELEASE_v*.txt"))
        seen = f"; found {', '.join(others)}: another OGB release" if others else ""
        raise FileNotFoundError(f"{spec.name}: release file not found: {release}{seen} "
                                f"(expected layout: {spec.layout()})")
    return folder


def _split_dir(folder: Path, spec: OgbnSpec, *sub: str) -> Path:
    path = folder.joinpath("split", spec.split, *sub)
    if not path.is_dir():
        raise FileNotFoundError(f"{spec.name}: split folder not found: {path} "
                                f"(expected layout: {spec.layout()})")
    return path


def _count(path: Path, layout: str) -> int:
    """The single count in a ``num-*-list.csv.gz`` file (one graph per dataset)."""
    with reading(path, layout):
        rows = np.concatenate(list(csv_chunks(path, np.int64, 1)))
        check(rows.shape == (1, 1), f"expected one count (one graph), found "
                                    f"{rows.shape[0]} rows")
        check(rows[0, 0] >= 0, "negative count")
    return int(rows[0, 0])


def _splits(split_dir: Path, num_nodes: int, layout: str) -> list[torch.Tensor]:
    return [mask(num_nodes, csv_ids(split_dir / f"{part}.csv.gz", num_nodes, layout))
            for part in _SPLIT_FILES]


def _timed(what: str):
    """Log ``what ...`` now; the returned function logs how long it took."""
    start = time.time()
    log.info("%s ...", what)
    return lambda: log.info("  done in %.1fs", time.time() - start)


def _csv_edges(path: Path, keys: EdgeKeys, layout: str) -> None:
    done = _timed(f"reading {path.name} ({keys.num_edges:,} edges)")
    with reading(path, layout):
        for chunk in csv_chunks(path, np.int64, 2):
            keys.add(chunk[:, 0], chunk[:, 1])
        check(keys.filled == keys.num_edges, f"{keys.filled} rows, but num-edge-list.csv.gz "
                                             f"gives {keys.num_edges} edges")
    done()


def refuse_reverse_edges(name: str) -> None:
    """The one error for ``reverse_edges`` given to a dataset it does not apply to."""
    raise ValueError(f"reverse_edges applies to datasets stored directed (ogbn-arxiv, "
                     f"ogbn-papers100M, ogbn-mag), not to {name!r}: the others are read "
                     f"in the one form they have")


def _symmetric(spec: OgbnSpec, reverse_edges: bool | None) -> bool:
    if reverse_edges is None:
        return True
    if not spec.directed:
        refuse_reverse_edges(spec.name)
    return bool(reverse_edges)


def load_ogbn(root: Path, key: str, reverse_edges: bool | None = None) -> dgl.DGLGraph:
    """Read ``ogbn-arxiv``, ``ogbn-products`` or ``ogbn-papers100M`` (``key`` lower-case).

    Edges: self-loops and duplicates are dropped and edges are sorted by ``(src, dst)``.
    ``ogbn-products`` stores each undirected edge once; both directions are added, as
    OGB's own reader does. ``ogbn-arxiv`` and ``ogbn-papers100M`` store citations in one
    direction; by default (``reverse_edges=None`` or ``True``) the reverse of every edge
    is added and the duplicates merged, as the literature trains on them;
    ``reverse_edges=False`` keeps the stored directions.

    Labels are int64. ``ogbn-papers100M`` labels only about 1.5 M of its 111 M nodes (the
    file holds NaN elsewhere): unlabelled nodes get label 0 and are in no mask.
    """
    spec = OGBN[key]
    symmetric = _symmetric(spec, reverse_edges)
    folder = dataset_dir(root, spec)
    split_dir = _split_dir(folder, spec)
    layout = spec.layout()
    raw = folder / "raw"
    if spec.binary:
        g, feat, label, labelled = _read_binary(raw, symmetric, layout)
    else:
        g, feat, label = _read_csv(raw, symmetric, layout)
        labelled = None
    with reading(raw / ("node-label.npz" if spec.binary else "node-label.csv.gz"), layout):
        check(label.min(initial=0) >= 0 and label.max(initial=0) < spec.num_classes,
              f"labels must lie in [0, {spec.num_classes})")
    masks = _splits(split_dir, g.num_nodes(), layout)
    if labelled is not None:
        masks = [m & labelled for m in masks]
    return finish(g, feat, label, tuple(masks))


def _read_csv(raw: Path, symmetric: bool, layout: str):
    num_nodes = _count(raw / "num-node-list.csv.gz", layout)
    num_edges = _count(raw / "num-edge-list.csv.gz", layout)
    keys = EdgeKeys(num_edges, num_nodes, symmetric)
    _csv_edges(raw / "edge.csv.gz", keys, layout)
    done = _timed("sorting and de-duplicating the edges")
    g = keys.graph()
    done()
    done = _timed(f"reading node-feat.csv.gz ({num_nodes:,} rows)")
    feat = csv_array(raw / "node-feat.csv.gz", np.float32, num_nodes, layout=layout)
    done()
    label = csv_array(raw / "node-label.csv.gz", np.int64, num_nodes, 1, layout)[:, 0]
    return g, feat, label


def _read_binary(raw: Path, symmetric: bool, layout: str):
    path = raw / "data.npz"
    arrays = {k: npz_array(path, k, layout)
              for k in ("num_nodes_list", "num_edges_list", "edge_index", "node_feat")}
    with reading(path, layout):
        counts = arrays["num_nodes_list"], arrays["num_edges_list"]
        check(all(c.shape == (1,) for c in counts), "num_nodes_list and num_edges_list must "
                                                    "hold one count (one graph)")
        num_nodes, num_edges = (int(c[0]) for c in counts)
        edge_index, feat = arrays["edge_index"], arrays["node_feat"]
        check(edge_index.shape == (2, num_edges), f"edge_index has shape {edge_index.shape}, "
                                                  f"expected (2, {num_edges})")
        check(feat.ndim == 2 and len(feat) == num_nodes,
              f"node_feat has shape {feat.shape}, expected ({num_nodes}, F)")
        keys = EdgeKeys(num_edges, num_nodes, symmetric)
        done = _timed(f"reading edge_index ({num_edges:,} edges)")
        keys.extend(edge_index[0], edge_index[1])
        done()
    del arrays, edge_index
    g = keys.graph()
    path = raw / "node-label.npz"
    node_label = npz_array(path, "node_label", layout)
    with reading(path, layout):
        check(node_label.shape in ((num_nodes,), (num_nodes, 1)),
              f"node_label has shape {node_label.shape}, expected ({num_nodes}, 1)")
        values = np.asarray(node_label, dtype=np.float64).reshape(num_nodes)
        labelled = ~np.isnan(values)
        check(np.array_equal(values[labelled], np.round(values[labelled])),
              "labels must be whole numbers (or NaN for unlabelled nodes)")
        label = np.where(labelled, values, 0).astype(np.int64)
    return g, feat, label, torch.from_numpy(labelled)


# ------------------------------------------------------------------ ogbn-mag

_MAG_LAYOUT = (f"{MAG.folder}/{{RELEASE_v{MAG.version}.txt, raw/num-node-dict.csv.gz, "
               f"raw/triplet-type-list.csv.gz, raw/relations/<src>___<rel>___<dst>/"
               f"{{edge,num-edge-list}}.csv.gz, raw/node-feat/<type>/node-feat.csv.gz, "
               f"raw/nodetype-has-label.csv.gz, raw/node-label/<type>/node-label.csv.gz, "
               f"split/time/nodetype-has-split.csv.gz, split/time/<type>/"
               f"{{train,valid,test}}.csv.gz}}, as OGB keeps it")


def read_ogbn_mag(data_dir) -> dgl.DGLGraph:
    """ogbn-mag as a ``dgl.heterograph``, read from OGB's folder ``ogbn_mag`` (release 2).

    Node types ``author``, ``field_of_study``, ``institution``, ``paper``; the relations of
    ``raw/triplet-type-list.csv.gz`` with their edges as stored (OGB adds no inverse
    relation). ``paper`` carries ``feat`` (float32), ``year``, ``label`` (int64) and
    ``train_mask`` / ``val_mask`` / ``test_mask`` from ``split/time/paper/``.

    This is the raw reader: edges in the files' order, duplicates kept, no reverse
    relation. :func:`load_ogbn_mag` (``load_dataset("ogbn-mag", ...)``, ``--dataset
    ogbn-mag``) builds the graph to train on from it.
    """
    spec = MAG
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"data directory not found: {root}")
    folder = dataset_dir(root, spec)
    layout = _MAG_LAYOUT
    raw = folder / "raw"
    split_dir = _split_dir(folder, spec)
    num_nodes = {k: int(v) for k, v in _header_row(raw / "num-node-dict.csv.gz", layout).items()}
    edges = {}
    for triplet in _triplets(raw / "triplet-type-list.csv.gz", num_nodes, layout):
        sub = raw / "relations" / "___".join(triplet)
        count = _count(sub / "num-edge-list.csv.gz", layout)
        pairs = csv_array(sub / "edge.csv.gz", np.int64, count, 2, layout)
        with reading(sub / "edge.csv.gz", layout):
            check(count == 0 or (pairs.min() >= 0 and pairs[:, 0].max() < num_nodes[triplet[0]]
                                 and pairs[:, 1].max() < num_nodes[triplet[2]]),
                  f"ids must lie in the node counts of {triplet[0]} and {triplet[2]}")
        edges[triplet] = (torch.from_numpy(pairs[:, 0].copy()),
                          torch.from_numpy(pairs[:, 1].copy()))
    g = dgl.heterograph(edges, num_nodes_dict=num_nodes)
    for ntype in g.ntypes:
        sub = raw / "node-feat" / ntype
        if (sub / "node-feat.csv.gz").is_file():
            g.nodes[ntype].data["feat"] = torch.from_numpy(csv_array(
                sub / "node-feat.csv.gz", np.float32, num_nodes[ntype], layout=layout))
        if (sub / "node_year.csv.gz").is_file():
            g.nodes[ntype].data["year"] = torch.from_numpy(csv_array(
                sub / "node_year.csv.gz", np.int64, num_nodes[ntype], 1, layout)[:, 0])
    for ntype, has in _header_row(raw / "nodetype-has-label.csv.gz", layout).items():
        if _true(has):
            g.nodes[ntype].data["label"] = torch.from_numpy(csv_array(
                raw / "node-label" / ntype / "node-label.csv.gz", np.int64, num_nodes[ntype],
                1, layout)[:, 0])
    for ntype, has in _header_row(split_dir / "nodetype-has-split.csv.gz", layout).items():
        if _true(has):
            masks = _splits(_split_dir(folder, spec, ntype), num_nodes[ntype], layout)
            for name, m in zip(("train_mask", "val_mask", "test_mask"), masks):
                g.nodes[ntype].data[name] = m
    return g


def load_ogbn_mag(root: Path, reverse_edges: bool | None = None) -> dgl.DGLGraph:
    """ogbn-mag as the heterograph to train on, built from :func:`read_ogbn_mag`.

    Edges: within each relation duplicates are dropped and the edges sorted by
    ``(src, dst)`` (DGL's ``ToSimple``, as SAR's and DGL's R-GCN examples do before
    training; a paper citing itself is kept, as there). OGB stores each relation in one
    direction (``author-writes-paper``, ``paper-cites-paper``, ...), so papers would hear
    nothing from their fields of study. By default (``reverse_edges=None`` or ``True``)
    each relation ``(src, rel, dst)`` gets a reverse relation ``(dst, REVERSE[rel], src)``
    named as in :mod:`sarlite.data.synthetic_hetero` (``rev_writes``, ``cited_by``,
    ``rev_has_topic``, ``rev_affiliated_with``; ``rev_<rel>`` for a relation not listed
    there) holding the same edges with their ends swapped, in the same order; citations
    and their reverses stay two relations with a weight each. ``reverse_edges=False``
    keeps the stored relations only.

    Node data as :func:`read_ogbn_mag` reads it: ``paper`` carries ``feat`` (float32),
    ``year`` (int64, unused by the trainer), ``label`` (int64, in ``[0, 349)``) and the
    ``train_mask`` / ``val_mask`` / ``test_mask`` of ``split/time/paper/`` (bool); the
    other types carry nothing (a model learns an embedding for them).
    """
    symmetric = _symmetric(MAG, reverse_edges)
    raw = read_ogbn_mag(root)
    edges = {}
    for src_type, rel, dst_type in raw.canonical_etypes:
        src, dst = _simple(*raw.edges(etype=(src_type, rel, dst_type)),
                           raw.num_nodes(dst_type))
        edges[(src_type, rel, dst_type)] = (src, dst)
        if symmetric:
            edges[(dst_type, REVERSE.get(rel, f"rev_{rel}"), src_type)] = (dst, src)
    g = dgl.heterograph(edges, num_nodes_dict={t: raw.num_nodes(t) for t in raw.ntypes})
    for ntype in raw.ntypes:
        g.nodes[ntype].data.update(raw.nodes[ntype].data)
        label = g.nodes[ntype].data.get("label")
        if label is not None:
            path = dataset_dir(Path(root), MAG) / "raw" / "node-label" / ntype
            with reading(path / "node-label.csv.gz", _MAG_LAYOUT):
                check(label.numel() == 0 or (int(label.min()) >= 0 and
                                             int(label.max()) < MAG.num_classes),
                      f"labels must lie in [0, {MAG.num_classes})")
    return g


def _simple(src: torch.Tensor, dst: torch.Tensor,
            num_dst: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct ``(src, dst)`` pairs, sorted by ``(src, dst)``."""
    keys = np.unique(src.numpy() * np.int64(num_dst) + dst.numpy())
    return torch.from_numpy(keys // num_dst), torch.from_numpy(keys % num_dst)


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1")


def _header_row(path: Path, layout: str) -> dict[str, str]:
    """A csv with a header of node types and one row of values, as a dict."""
    import pandas as pd

    with reading(path, layout):
        frame = pd.read_csv(path, dtype=str)
        check(len(frame) == 1, f"expected a header and one row, found {len(frame)} rows")
        return {str(k): frame[k].iloc[0] for k in frame.columns}


def _triplets(path: Path, num_nodes: dict[str, int], layout: str) -> list[tuple[str, ...]]:
    with reading(path, layout):
        rows = np.concatenate(list(csv_chunks(path, str, 3)))
        triplets = sorted(tuple(str(x) for x in row) for row in rows)
        unknown = {t for s, _, d in triplets for t in (s, d)} - set(num_nodes)
        check(not unknown, f"node types {sorted(unknown)} are not in num-node-dict.csv.gz")
    return triplets


__all__ = ["MAG", "OGBN", "OgbnSpec", "dataset_dir", "load_ogbn", "load_ogbn_mag",
           "read_ogbn_mag", "refuse_reverse_edges"]
