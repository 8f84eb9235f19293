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

import errno
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import dgl
from dgl._ffi.base import DGLError
from dgl.data.utils import load_tensors, save_tensors

from .book import DEFAULT_ETYPE_STR, DEFAULT_NTYPE, RangePartitionBook
from .integrity import (check_inner_counts, check_mode, check_rows, check_tensor_file,
                        verify_files)

REQUIRED_KEYS = ("graph_name", "num_nodes", "num_edges", "num_parts", "node_map",
                 "edge_map")

# torch.save and DGL's C++ writers report a full disk as one of these, without errno
_WRITER_ERRORS = (RuntimeError, DGLError)
# after such an error, a file system with less than this available counts as full
FULL_BELOW = 16 << 20
_TEMPORARY = re.compile(r".\.tmp-([0-9]+)$")


def no_space_error(path: str | os.PathLike) -> OSError:
    """The one error sarlite raises for a full disk: errno ``ENOSPC``, naming ``path``."""
    return OSError(errno.ENOSPC, f"no space left on device while writing {path}")


def _disk_full(err: Exception, directory: str) -> bool:
    """Whether ``err``, raised by a writer in ``directory``, means the disk is full."""
    if isinstance(err, OSError):
        return err.errno == errno.ENOSPC
    if not isinstance(err, _WRITER_ERRORS):
        return False
    try:
        stats = os.statvfs(directory)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_BELOW


def _drop_frames(err: BaseException | None) -> None:
    """Detach the tracebacks of ``err`` and the errors it chains: their frames may hold a
    writer whose open file keeps a deleted temporary file's space in use."""
    while err is not None and err.__traceback__ is not None:
        err.__traceback__ = None
        err = err.__cause__ or err.__context__


def _full_disk_error(err: Exception, path: str | os.PathLike) -> OSError | None:
    """:func:`no_space_error` for ``path`` if ``err`` means the disk is full (``err``'s
    frames then detached), else ``None``."""
    if not _disk_full(err, os.path.dirname(os.path.abspath(path))):
        return None
    _drop_frames(err)
    return no_space_error(path)


@contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """Turn a full disk met while writing ``path`` in the block into :func:`no_space_error`
    (chained to the writer's own error, without its frames).

    Raises
    ------
    OSError
        errno ``ENOSPC``, "no space left on device while writing <path>".
    """
    try:
        yield
    except Exception as err:
        full = _full_disk_error(err, path)
        if full is None:
            raise
        raise full from err


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` and rename the result to ``path`` (atomic on POSIX).

    The temporary file is ``<path>.tmp-<pid>``; it is removed when ``write`` fails (one a
    killed process leaves is removed by :func:`remove_stale_temporaries`).

    Raises
    ------
    OSError
        errno ``ENOSPC`` with the message "no space left on device while writing <path>"
        when the disk is full, whatever error the writer (Python, torch or DGL) raised;
        other errors pass unchanged.
    """
    path = str(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except Exception as err:
        # not naming_full_disk: contextlib's __exit__ frame would keep the writer's frames,
        # and with them its open file, whose space the removal below must free
        full = _full_disk_error(err, path)
        if full is None:
            raise
        raise full from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:             # it exists, as another user's process
        return True
    except (OverflowError, ValueError):  # not a possible pid
        return False
    return True


def remove_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of :func:`atomic_write` that killed processes left.

    Looks in ``directory`` and its ``part*/`` subdirectories (a partition's layout) for
    files ``<name>.tmp-<pid>`` whose process no longer exists. A pid means something on
    this machine only: a directory that a process on another machine is writing into at
    the same moment must not be cleaned from here.

    Returns
    -------
    list[Path]
        The removed files (none when ``directory`` does not exist).
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for path in sorted([*directory.glob("*.tmp-*"), *directory.glob("part*/*.tmp-*")]):
        match = _TEMPORARY.search(path.name)
        if match and path.is_file() and not _running(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def write_json(path: str | os.PathLike, obj: dict) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=4)
    atomic_write(path, write)


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
