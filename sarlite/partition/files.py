"""Reading and writing the DGL 2.x partition format.

Layout (what ``dgl.distributed.partition_graph`` writes)::

    <out>/<graph_name>.json          graph_name, num_nodes, num_edges, part_method,
                                     num_parts, halo_hops, node_map, edge_map, ntypes,
                                     etypes, and "part-<i>": {node_feats, edge_feats,
                                     part_graph} paths relative to the JSON
    <out>/part<i>/graph.dgl          the partition graph: ndata _ID, inner_node, part_id;
                                     edata _ID, inner_edge; for a heterogeneous graph
                                     also ndata/edata _TYPE (node and edge type ids)
    <out>/part<i>/node_feat.dgl      {"<ntype>/<name>": owned rows}
    <out>/part<i>/edge_feat.dgl      {"<src>:<rel>:<dst>/<name>": owned rows}

A homogeneous graph has the one node type ``_N`` and the one edge type ``_N:_E:_N``.

Every file is written under a temporary name and renamed into place, and the JSON is
written last, so an interrupted run never leaves a partition that looks complete.

sarlite's JSON also records each part file's size and CRC-32 (``"part-<i>"``'s
``sarlite_files``, which DGL ignores); the loaders here compare them, the sizes that DGL's
tensor files declare, and the rows of every feature with the partition book (see
:mod:`sarlite.partition.integrity`).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable

import dgl
from dgl.data.utils import load_tensors, save_tensors

from .atomic import atomic_write
from .book import DEFAULT_ETYPE_STR, DEFAULT_NTYPE, RangePartitionBook
from .integrity import (check_inner_counts, check_mode, check_rows, check_tensor_file,
                        verify_files)

REQUIRED_KEYS = ("graph_name", "num_nodes", "num_edges", "num_parts", "node_map",
                 "edge_map")


def write_graph(path: str | os.PathLike, graph: dgl.DGLGraph, formats=None) -> None:
    """Save ``graph`` to ``path`` in the sparse ``formats`` (``dgl.save_graphs``'s)."""
    atomic_write(path, lambda tmp: dgl.save_graphs(tmp, [graph], formats=formats))


def write_tensors(path: str | os.PathLike, tensors: dict) -> None:
    atomic_write(path, lambda tmp: save_tensors(tmp, tensors))


def read_part_config(part_config: str | os.PathLike) -> dict:
    """Load and validate a partition JSON.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        It is not valid JSON, or lacks a required key, or its values are inconsistent.
    """
    path = Path(part_config)
    if not path.is_file():
        raise FileNotFoundError(f"partition config {path} does not exist")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"partition config {path} is not valid JSON: {err}") from err
    if not isinstance(meta, dict):
        raise ValueError(f"partition config {path} must hold a JSON object")
    missing = [key for key in REQUIRED_KEYS if key not in meta]
    if missing:
        raise ValueError(f"partition config {path} lacks the key(s) {missing}")
    if not isinstance(meta["num_parts"], int) or meta["num_parts"] < 1:
        raise ValueError(f"partition config {path}: num_parts must be a positive integer, "
                         f"got {meta['num_parts']!r}")
    return meta


def is_heterogeneous(meta: dict) -> bool:
    """Whether a partition JSON (as :func:`read_part_config` returns it) describes a graph
    with several node or edge types."""
    return len(meta.get("ntypes", {DEFAULT_NTYPE: 0})) != 1 or \
        len(meta.get("etypes", {DEFAULT_ETYPE_STR: 0})) != 1


def _check_part_id(part_config, meta: dict, part_id) -> None:
    num_parts = meta["num_parts"]
    if not isinstance(part_id, int) or not 0 <= part_id < num_parts:
        raise ValueError(f"part_id {part_id!r} is out of range: {part_config} has "
                         f"{num_parts} partitions (0..{num_parts - 1})")


def _part_files(part_config: str | os.PathLike, meta: dict, part_id: int) -> dict:
    _check_part_id(part_config, meta, part_id)
    entry = meta.get(f"part-{part_id}")
    keys = ("part_graph", "node_feats", "edge_feats")
    if not isinstance(entry, dict) or any(key not in entry for key in keys):
        raise ValueError(f"partition config {part_config} lacks a complete 'part-{part_id}' "
                         f"entry with {keys}")
    base = Path(part_config).parent
    files = {key: base / entry[key] for key in keys}
    for path in files.values():
        if not path.is_file():
            raise FileNotFoundError(f"partition file {path} (part {part_id} of "
                                    f"{part_config}) is missing")
    return files


def load_partition_book(part_config: str | os.PathLike, part_id: int):
    """Read the partition book of a partition, as ``dgl.distributed.load_partition_book``.

    Reads the JSON only (no collective).

    Returns
    -------
    (RangePartitionBook, str, dict, dict)
        The book, the graph name, ``{ntype: id}`` and ``{canonical etype: id}``. As in DGL
        2.x, the edge types are ``(src, rel, dst)`` tuples: ``("_N", "_E", "_N")`` for a
        homogeneous graph.
    """
    meta = read_part_config(part_config)
    _check_part_id(part_config, meta, part_id)
    ntypes = meta.get("ntypes", {DEFAULT_NTYPE: 0})
    etypes = meta.get("etypes", {DEFAULT_ETYPE_STR: 0})
    try:
        book = RangePartitionBook(part_id, meta["num_parts"], meta["node_map"], meta["edge_map"],
                                  ntypes, etypes)
    except ValueError as err:
        raise ValueError(f"partition config {part_config}: {err}") from err
    if book._num_nodes() != meta["num_nodes"] or book._num_edges() != meta["num_edges"]:
        raise ValueError(f"partition config {part_config}: node_map/edge_map cover "
                         f"{book._num_nodes()} nodes / {book._num_edges()} edges but the "
                         f"graph has {meta['num_nodes']} / {meta['num_edges']}")
    return book, meta["graph_name"], dict(ntypes), {book.to_canonical_etype(name): type_id
                                                    for name, type_id in etypes.items()}


def _read(path: Path, reader: Callable, what: str):
    try:
        return reader(str(path))
    except Exception as err:  # DGL raises its own error types for corrupt files
        raise ValueError(f"cannot read {what} {path}: {_first_line(err)}") from err


def _first_line(err: Exception) -> str:
    """``err``'s message without the C++ stack trace and source location DGL adds."""
    text = str(err).split("Stack trace:")[0].strip()
    return re.sub(r"^\[[0-9:]+\] \S+:\d+: ", "", text.splitlines()[0] if text else "")


def _verified(part_config, meta: dict, part_id: int, files: dict, keys: tuple,
              verify: str) -> None:
    """Check the files ``keys`` of part ``part_id`` before they are read: their recorded
    sizes and checksums as ``verify`` says, and the tensor files' declared sizes."""
    wanted = {key: files[key] for key in keys}
    verify_files(part_config, part_id, meta[f"part-{part_id}"], wanted, verify)
    for key in keys:
        if key != "part_graph":
            check_tensor_file(files[key], part_config, part_id)


def _checked_part(part_config, part_id: int, verify: str) -> tuple[dict, dict]:
    """The JSON and part ``part_id``'s file paths, after checking ``verify``."""
    check_mode(verify)
    meta = read_part_config(part_config)
    return meta, _part_files(part_config, meta, part_id)


def check_part_files(part_config: str | os.PathLike, part_id: int,
                     verify: str = "auto") -> None:
    """Check part ``part_id``'s files as :func:`load_partition` does before reading them:
    recorded sizes and checksums (as ``verify`` says) and the tensor files' declared
    sizes. Reads the files' headers, and their bytes where a checksum is due.

    Raises
    ------
    FileNotFoundError, ValueError, PartitionFileError
        As :func:`load_partition`.
    """
    meta, files = _checked_part(part_config, part_id, verify)
    _verified(part_config, meta, part_id, files, tuple(files), verify)


def _features(part_config, path: Path, book, part_id: int, nodes: bool) -> dict:
    """The features in tensor file ``path``, each with the rows the book gives the part."""
    features = _read(path, load_tensors, "node features" if nodes else "edge features")
    check_rows(path, features, book, part_config, part_id, nodes)
    return features


def load_partition(part_config: str | os.PathLike, part_id: int, load_feats: bool = True,
                   use_graphbolt: bool = False, *, verify: str = "auto"):
    """Load one partition, returning what ``dgl.distributed.load_partition`` returns.

    Takes DGL 2.1's parameters in its order. Reads files only (no collective); any process
    may call it for any partition. The files are checked before use (see
    :mod:`sarlite.partition.integrity`): sizes and, as ``verify`` says, checksums that
    sarlite recorded; the sizes DGL's tensor files declare; inner node and edge counts
    and the rows of every feature against the partition book.

    Parameters
    ----------
    part_config:
        The partition JSON.
    part_id:
        The partition to load, ``0 <= part_id < num_parts``.
    load_feats:
        Also read the node and edge features (else both dicts are empty).
    use_graphbolt:
        Must be ``False``: DGL then returns a GraphBolt sampling graph instead of a
        ``DGLGraph``, which sarlite does not build; ``True`` raises
        ``NotImplementedError``.
    verify:
        Keyword-only (sarlite). ``"auto"`` (default): recorded sizes, and the CRC-32 of
        each file changed since its last successful check; ``"full"``: every CRC-32;
        ``"size"``: sizes only.

    Returns
    -------
    (DGLGraph, dict, dict, RangePartitionBook, str, list, list)
        The partition graph (owned nodes and edges first, then the halo; with ``_TYPE``
        node and edge data for a heterogeneous graph), node features
        ``{"<ntype>/<name>": owned rows}``, edge features
        ``{"<src>:<rel>:<dst>/<name>": owned rows}``, the partition book, the graph
        name, the node types and the canonical edge types (``["_N"]`` and
        ``[("_N", "_E", "_N")]`` for a homogeneous graph), in type-id order.

    Raises
    ------
    FileNotFoundError
        The config or one of this partition's files is missing.
    ValueError
        ``part_id`` or ``verify`` is out of range, or a file is corrupt.
    PartitionFileError
        (a ``ValueError``) A file differs from its recorded size or checksum, from the
        size its header declares, or from the partition book's counts; the message names
        the file and what to do.
    NotImplementedError
        ``use_graphbolt=True``.
    """
    if use_graphbolt:
        raise NotImplementedError("load_partition: use_graphbolt=True is not supported: "
                                  "sarlite loads DGL partitions as DGLGraphs only; use "
                                  "dgl.distributed.load_partition for GraphBolt partitions")
    meta, files = _checked_part(part_config, part_id, verify)
    book, graph_name, ntypes, etypes = load_partition_book(part_config, part_id)
    keys = ("part_graph", "node_feats", "edge_feats") if load_feats else ("part_graph",)
    _verified(part_config, meta, part_id, files, keys, verify)
    graph = _read(files["part_graph"], lambda p: dgl.load_graphs(p)[0][0], "partition graph")
    check_inner_counts(files["part_graph"], graph, book, part_config, part_id)
    node_feats, edge_feats = {}, {}
    if load_feats:
        node_feats = _features(part_config, files["node_feats"], book, part_id, True)
        edge_feats = _features(part_config, files["edge_feats"], book, part_id, False)
    return (graph, node_feats, edge_feats, book, graph_name, book.ntypes,
            book.canonical_etypes)


def load_partition_feats(part_config: str | os.PathLike, part_id: int,
                         load_nodes: bool = True, load_edges: bool = True, *,
                         verify: str = "auto"):
    """The features of one partition, as ``dgl.distributed.load_partition_feats``.

    Reads files only (no collective). The feature files are checked as in
    :func:`load_partition` (``verify`` likewise).

    Returns
    -------
    (dict or None, dict or None)
        ``{"<ntype>/<name>": owned rows}`` (``None`` unless ``load_nodes``) and
        ``{"<src>:<rel>:<dst>/<name>": owned rows}`` (``None`` unless ``load_edges``).

    Raises
    ------
    FileNotFoundError, ValueError, PartitionFileError
        As :func:`load_partition`.
    """
    meta, files = _checked_part(part_config, part_id, verify)
    book = load_partition_book(part_config, part_id)[0]
    keys = tuple(key for key, wanted in (("node_feats", load_nodes),
                                         ("edge_feats", load_edges)) if wanted)
    _verified(part_config, meta, part_id, files, keys, verify)
    node_feats = _features(part_config, files["node_feats"], book, part_id, True) \
        if load_nodes else None
    edge_feats = _features(part_config, files["edge_feats"], book, part_id, False) \
        if load_edges else None
    return node_feats, edge_feats
