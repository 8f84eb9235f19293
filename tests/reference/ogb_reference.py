"""What OGB's own reader returns for the loaders' fixtures, and the forms sarlite must match.

``ogb`` (the pip package) is no dependency of sarlite, not even for its tests: it prompts
with ``input()``, downloads at run time, checks PyPI for a newer version in a thread at
import, and pulls in pandas and scikit-learn. So OGB's reader was run once on the fixtures
(``tests/ogb_layout.py``'s :func:`write_fixtures`) by ``record_ogb.py`` beside this file,
and what it returned is kept in ``ogb_reader.json``: for each array its shape, dtype and
the SHA-256 of its bytes (little-endian, C order). The tests compare sarlite's arrays with
that record always, and with OGB's reader itself (:func:`read_with_ogb`) where ``ogb`` can
be imported.

Two kinds of entries per dataset:

``ogb``
    OGB's output as it is: ``NodePropPredDataset(name)[0]`` (the graph dict and the labels)
    and ``get_idx_split()``; for ogbn-mag one entry per relation / node type.
``views``
    the same data in the form sarlite gives it (:func:`views`), each the counterpart of
    one sarlite array: masks built from the split indices, papers100M's NaN labels as 0
    and its unlabelled nodes in no mask, edges with self-loops and duplicates dropped and
    sorted by ``(src, dst)`` (``edges``) and with every edge's reverse added first
    (``edges_with_reverse``; OGB adds them itself for ogbn-products only). ogbn-mag's
    ``edges/<relation>`` is OGB's ``edge_index`` as stored (:func:`sarlite.data.read_ogbn_mag`)
    and ``edges_simple/<relation>`` its distinct pairs, sorted, self-loops kept
    (``load_graph("ogbn-mag")``).
"""
from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

RECORD = Path(__file__).with_name("ogb_reader.json")
HOMOGENEOUS = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M")
DATASETS = (*HOMOGENEOUS, "ogbn-mag")
MASKS = {"train": "train_mask", "valid": "val_mask", "test": "test_mask"}
META = ("version", "split", "binary", "add_inverse_edge", "num classes", "is hetero",
        "additional node files", "additional edge files")


def digest(array) -> dict:
    """Shape, dtype and SHA-256 of an array's bytes (little-endian, C order)."""
    array = np.asarray(array)
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {"shape": list(array.shape), "dtype": array.dtype.name,
            "sha256": hashlib.sha256(data.tobytes()).hexdigest()}


def simple_edges(edge_index: np.ndarray, num_src: int, num_dst: int, reverse: bool = False,
                 self_loops: bool = False) -> np.ndarray:
    """``(2, E)`` edges without duplicates (and self-loops unless ``self_loops``), sorted
    by ``(src, dst)``; with ``reverse`` every edge's reverse is added first."""
    src, dst = (np.asarray(x, dtype=np.int64) for x in edge_index)
    if reverse:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if not self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    keys = np.unique(src * np.int64(num_dst) + dst)
    return np.stack([keys // num_dst, keys % num_dst]).astype(np.int64)


def index_mask(index: np.ndarray, num_nodes: int) -> np.ndarray:
    out = np.zeros(num_nodes, dtype=bool)
    out[np.asarray(index, dtype=np.int64)] = True
    return out


def views(name: str, ogb: dict[str, np.ndarray], num_nodes) -> dict[str, np.ndarray]:
    """OGB's output (``ogb``, as :func:`read_with_ogb` names it) in sarlite's forms."""
    if name == "ogbn-mag":
        out = {}
        for key, value in ogb.items():
            kind, _, part = key.partition("/")
            if kind == "edge_index":
                s, _, d = part.split("___")
                out[f"edges/{part}"] = value
                out[f"edges_simple/{part}"] = simple_edges(value, num_nodes[s], num_nodes[d],
                                                           self_loops=True)
            elif kind == "node_feat":
                out[f"feat/{part}"] = value.astype(np.float32)
            elif kind == "node_year":
                out[f"year/{part}"] = value[:, 0].astype(np.int64)
            elif kind == "labels":
                out[f"label/{part}"] = value[:, 0].astype(np.int64)
            elif kind in MASKS:
                out[f"{MASKS[kind]}/{part}"] = index_mask(value, num_nodes[part])
        return out
    n = int(num_nodes)
    labels = ogb["labels"].reshape(n)
    labelled = ~np.isnan(labels) if labels.dtype.kind == "f" else np.ones(n, dtype=bool)
    out = {"feat": ogb["node_feat"].astype(np.float32),
           "label": np.where(labelled, labels, 0).astype(np.int64),
           "edges": simple_edges(ogb["edge_index"], n, n),
           "edges_with_reverse": simple_edges(ogb["edge_index"], n, n, reverse=True)}
    for part, key in MASKS.items():
        out[key] = index_mask(ogb[part], n) & labelled
    return out


def fixture_digests() -> dict:
    """The fixture builders' output: a changed builder shows here before any reader is
    blamed (``ogb_layout`` is imported from ``tests/``, on the path in both uses)."""
    import ogb_layout as layout

    feat, label, splits = layout.fixture_node_data()
    out = {"node_feat": feat, "node_label": label, "stored_edges": layout.fixture_stored_edges(),
           "papers_labels": layout.fixture_papers_labels(label),
           "reddit_node_types": layout.fixture_node_types(), "year": layout.fixture_year()}
    out.update({f"split/{k}": v for k, v in splits.items()})
    out.update({f"mag_edges/{'___'.join(t)}": v for t, v in layout.fixture_mag_edges().items()})
    return {k: digest(v) for k, v in sorted(out.items())}


def load_record() -> dict:
    return json.loads(RECORD.read_text())


@contextlib.contextmanager
def _no_prompt_no_download():
    """``input()`` and OGB's download helpers raise: the fixtures are complete, so OGB
    asking or fetching anything would mean a wrong layout, not a reason to go online."""
    import ogb.nodeproppred.dataset as dataset

    def refuse(*args, **kwargs):
        raise AssertionError(f"OGB tried to prompt or download ({args[:1]})")
    saved = builtins.input, dataset.decide_download, dataset.download_url
    builtins.input = dataset.decide_download = dataset.download_url = refuse
    try:
        yield
    finally:
        builtins.input, dataset.decide_download, dataset.download_url = saved


def ogb_version() -> str:
    sys.modules.setdefault("outdated", None)    # no PyPI version check in a thread
    import ogb
    return ogb.__version__


def read_with_ogb(root: Path) -> dict[str, dict]:
    """Each fixture under ``root`` read by OGB's ``NodePropPredDataset``.

    Works on a copy (OGB writes ``processed/`` into the dataset folder). Returns, per
    dataset, ``{"meta": <master.csv's values>, "num_nodes": ..., "ogb": {name: array}}``.
    """
    ogb_version()
    from ogb.nodeproppred import NodePropPredDataset

    out = {}
    with tempfile.TemporaryDirectory() as tmp, _no_prompt_no_download():
        for name in DATASETS:
            folder = name.replace("-", "_")
            shutil.copytree(Path(root) / folder, Path(tmp) / folder)
            (Path(tmp) / folder / "processed").mkdir(exist_ok=True)
            data = NodePropPredDataset(name, root=tmp)
            graph, labels = data[0]
            split = data.get_idx_split()
            meta = {k: str(data.meta_info[k]) for k in META}
            if name == "ogbn-mag":
                arrays = {}
                for kind in ("edge_index_dict", "node_feat_dict", "node_year",
                             "edge_reltype"):
                    for key, value in graph[kind].items():
                        part = "___".join(key) if isinstance(key, tuple) else key
                        arrays[f"{kind.removesuffix('_dict')}/{part}"] = value
                arrays.update({f"labels/{t}": v for t, v in labels.items()})
                for part in MASKS:
                    arrays.update({f"{part}/{t}": v for t, v in split[part].items()})
                num_nodes = {t: int(v) for t, v in graph["num_nodes_dict"].items()}
            else:
                arrays = {k: graph[k] for k in ("edge_index", "node_feat", "node_year")
                          if graph.get(k) is not None}
                arrays["labels"] = labels
                arrays.update({part: split[part] for part in MASKS})
                num_nodes = int(graph["num_nodes"])
            out[name] = {"meta": meta, "num_nodes": num_nodes,
                         "ogb": {k: np.asarray(v) for k, v in arrays.items()}}
    return out
