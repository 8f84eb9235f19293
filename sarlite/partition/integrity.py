"""Checks that a partition's files are the ones its partition JSON was written with.

:func:`sarlite.partition_graph` records, in each ``"part-<i>"`` entry of the JSON, the
size and CRC-32 of every file it writes for the part under the key ``sarlite_files``
(``{"part_graph": {"size": bytes, "crc32": int}, "node_feats": ..., "edge_feats": ...}``);
DGL ignores the key. Loading compares them (:func:`verify_files`):

* ``"size"``: the size of every file;
* ``"auto"`` (the default): the sizes, and the CRC-32 of every file that changed (size,
  mtime or ctime) since its last successful check, which is remembered in memory and in
  a sidecar ``<json name>.part<i>.sarlite-checked`` next to the JSON (written atomically
  when the directory is writable; a sidecar that cannot be written or read only costs
  a checksum);
* ``"full"``: the sizes and every CRC-32.

Sizes catch truncation; a CRC-32 catches changed bytes. ``"auto"`` misses only a file
rewritten at its old size within the clock tick of its last check (same size, mtime and
ctime), and damage on the medium that leaves the metadata alone: ``"full"`` catches both.

CRC-32 rather than BLAKE2: it only has to catch damage, not forgery, and zlib's CRC-32
streams at about 2.7 GB/s here against BLAKE2b's 0.7 GB/s (a 200 MiB file from the page
cache, 4 MiB reads).

DGL's tensor files (``node_feat.dgl``, ``edge_feat.dgl``) also declare the byte size of
every tensor they hold, and DGL's reader fills a tensor cut short by a truncated file
with whatever memory held, keeping its shape. :func:`check_tensor_file` therefore compares
what the header declares with the file's size: this catches truncated files of
partitions DGL wrote, which record no checksums. Last, :func:`check_rows` and
:func:`check_inner_counts` compare every feature's rows and the partition graph's inner
nodes and edges with the partition book (a file of another part or partitioning).
"""
from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from pathlib import Path

from .atomic import write_json

FILES_KEY = "sarlite_files"
VERIFY_MODES = ("size", "auto", "full")
CHUNK = 4 << 20
_FIX = "re-copy the partition from where it was made, or partition the graph again"
# dgl/src/graph/serialize/tensor_serialize.cc and dgl/src/runtime/ndarray.cc
_TENSORS_MAGIC = 0xDD5A9FBE3FA2443F
_ARRAY_MAGIC = 0xDD5E40F096B4A13F
_MAX_NDIM = 64
_STAT_FIELDS = ("size", "mtime_ns", "ctime_ns")
# absolute path -> ((size, mtime_ns, ctime_ns), crc32) of its last successful check
_checked: dict[str, tuple[tuple[int, int, int], int]] = {}
log = logging.getLogger("sarlite.partition")


class PartitionFileError(ValueError):
    """A partition file differs from what its partition JSON, its own header or the
    partition book says; the message names the file and what to do."""


def check_mode(verify: str) -> str:
    """``verify`` if it is one of :data:`VERIFY_MODES`, else ``ValueError``."""
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
    return verify


def crc32_of(path: str | os.PathLike) -> int:
    """The CRC-32 of the file at ``path``, read in :data:`CHUNK`-byte pieces."""
    crc, buf = 0, bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)     # releases the GIL for big pieces
    return crc


def _stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_record(path: str | os.PathLike) -> dict:
    """``{"size": bytes, "crc32": int}`` of a file just written, which counts as checked."""
    crc = crc32_of(path)
    st = os.stat(path)
    _checked[os.path.abspath(path)] = (_stat_key(st), crc)
    return {"size": st.st_size, "crc32": crc}


def _where(path: Path, config, part: int) -> str:
    return f"partition file {path} (part {part} of {config})"


def _records(config, part: int, entry: dict) -> dict | None:
    """The part's ``sarlite_files`` records, ``None`` when the JSON has none (DGL's).

    Raises
    ------
    PartitionFileError
        The records are not ``{key: {"size": int, "crc32": int}}``.
    """
    records = entry.get(FILES_KEY)
    if records is None:
        return None
    valid = isinstance(records, dict) and all(
        isinstance(r, dict) and all(isinstance(r.get(k), int) for k in ("size", "crc32"))
        for r in records.values())
    if not valid:
        raise PartitionFileError(f"partition config {config}: 'part-{part}' has a "
                                 f"malformed {FILES_KEY!r} entry; {_FIX}")
    return records


def sidecar_path(config: str | os.PathLike, part: int) -> Path:
    """Where the last successful checks of part ``part``'s files are kept."""
    config = Path(config)
    return config.parent / f"{config.name}.part{part}.sarlite-checked"


def _read_sidecar(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return found if isinstance(found, dict) else {}


def _write_sidecar(path: Path, checked: dict) -> None:
    """Write ``checked`` atomically; a directory that cannot take it is left alone."""
    try:
        write_json(path, checked)
    except OSError as err:
        log.debug("cannot record partition checks in %s: %s", path, err)


def _still_valid(known, key: tuple, crc: int) -> bool:
    """Whether ``known`` (a remembered ``(stat key, crc)``, or a sidecar's
    ``{"size", "mtime_ns", "ctime_ns", "crc32"}``) vouches for ``key`` and ``crc``;
    anything malformed (a hand-edited sidecar) does not."""
    if isinstance(known, dict):
        known = (tuple(known.get(k) for k in _STAT_FIELDS), known.get("crc32"))
    try:
        return tuple(known[0]) == key and known[1] == crc
    except (TypeError, IndexError, KeyError):
        return False


def _check_one(path: Path, where: str, record: dict, verify: str, known) -> tuple | None:
    """Compare one file with its record; ``known`` are its remembered checks (from memory
    and the sidecar). Its ``(stat key, crc)`` when it was (or had been) checksummed,
    ``None`` when only its size was compared."""
    st = path.stat()
    if st.st_size != record["size"]:
        raise PartitionFileError(f"{where} has {st.st_size} bytes but the partition "
                                 f"config records {record['size']}: it is truncated or was "
                                 f"changed after partitioning; {_FIX}")
    if verify == "size":
        return None
    key = _stat_key(st)
    if verify == "auto" and any(_still_valid(k, key, record["crc32"]) for k in known):
        return key, record["crc32"]
    crc = crc32_of(path)
    if crc != record["crc32"]:
        raise PartitionFileError(f"{where} has CRC-32 {crc:08x} but the partition config "
                                 f"records {record['crc32']:08x}: its content was damaged "
                                 f"or changed after partitioning; {_FIX}")
    return key, crc


def verify_files(config: str | os.PathLike, part: int, entry: dict, files: dict,
                 verify: str = "auto") -> None:
    """Compare the files ``{key: path}`` of part ``part`` with the sizes and checksums
    its JSON ``entry`` records (nothing for a JSON without them), as ``verify`` says
    (see the module's docstring).

    Raises
    ------
    PartitionFileError
        A file's size or CRC-32 differs from the record; the message names the file,
        both values and what to do.
    ValueError
        ``verify`` is not one of :data:`VERIFY_MODES`.
    """
    check_mode(verify)
    records = _records(config, part, entry)
    if not records:
        return
    sidecar = sidecar_path(config, part)
    stored = _read_sidecar(sidecar) if verify != "size" else {}
    checked = dict(stored)
    for key, path in files.items():
        if key not in records:
            continue
        name = os.path.abspath(path)
        known = (_checked.get(name), stored.get(str(entry[key])))
        done = _check_one(Path(path), _where(path, config, part), records[key], verify,
                          known)
        if done is not None:
            _checked[name] = done
            checked[str(entry[key])] = {**dict(zip(_STAT_FIELDS, done[0])),
                                        "crc32": done[1]}
    if verify != "size" and checked != stored:
        _write_sidecar(sidecar, checked)


def _read_exactly(f, size: int, where: str) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise PartitionFileError(f"{where} ends inside a tensor's header: it is truncated; "
                                 f"{_FIX}")
    return data


def _corrupt(where: str) -> PartitionFileError:
    return PartitionFileError(f"{where} has a corrupt DGL tensor header; {_FIX}")


def _skip_tensor(f, where: str, file_size: int) -> None:
    """Read one named tensor's header from ``f`` and move past its data."""
    (name_len,) = struct.unpack("<Q", _read_exactly(f, 8, where))
    if name_len > file_size:
        raise _corrupt(where)
    f.seek(name_len, os.SEEK_CUR)
    magic, _, _, ndim = struct.unpack("<QQQi", _read_exactly(f, 28, where))
    if magic != _ARRAY_MAGIC or not 0 <= ndim <= _MAX_NDIM:
        raise _corrupt(where)
    _, bits, lanes = struct.unpack("<BBH", _read_exactly(f, 4, where))
    shape = struct.unpack(f"<{ndim}q", _read_exactly(f, 8 * ndim, where))
    (nbytes,) = struct.unpack("<q", _read_exactly(f, 8, where))
    count = 1
    for dim in shape:
        count *= dim
    if min(shape, default=0) < 0 or nbytes != count * bits * lanes // 8:
        raise _corrupt(where)
    f.seek(nbytes, os.SEEK_CUR)


def declared_size(path: str | os.PathLike, where: str | None = None) -> int:
    """The byte size that the header of DGL tensor file ``path`` (``save_tensors``'s
    format) declares: its headers and every tensor's data. Reads the headers only;
    ``where`` names the file in errors.

    Raises
    ------
    PartitionFileError
        The file is not a DGL tensor file, or ends inside a header.
    """
    path = Path(path)
    where = where or f"tensor file {path}"
    file_size = path.stat().st_size
    with open(path, "rb") as f:
        magic, _, count = struct.unpack("<QQQ", _read_exactly(f, 24, where))
        if magic != _TENSORS_MAGIC:
            raise PartitionFileError(f"{where} is not a DGL tensor file; {_FIX}")
        for _ in range(count):
            _skip_tensor(f, where, file_size)
        return f.tell()


def check_tensor_file(path: str | os.PathLike, config, part: int) -> None:
    """Refuse DGL tensor file ``path`` unless its size is what its header declares.

    Raises
    ------
    PartitionFileError
        The file is shorter (truncated) or longer than its header declares, or its
        header is corrupt or cut short.
    """
    path = Path(path)
    where = _where(path, config, part)
    size, declared = path.stat().st_size, declared_size(path, where)
    if size != declared:
        raise PartitionFileError(f"{where} has {size} bytes but its header declares "
                                 f"{declared}: it is truncated or damaged; {_FIX}")


def _owned(book, part: int, type_name: str, nodes: bool) -> int | None:
    """How many nodes (edges) of ``type_name`` partition ``part`` owns in ``book``;
    ``None`` for a type the book does not know."""
    try:
        ranges = book.typed_node_ranges(type_name) if nodes else \
            book.typed_edge_ranges(type_name)
    except (ValueError, NotImplementedError, KeyError):
        return None
    lo, hi = ranges[part].tolist()
    return hi - lo


def check_rows(path, features: dict, book, config, part: int, nodes: bool) -> None:
    """Refuse features ``{"<type>/<name>": rows}`` read from ``path`` whose row count is
    not the number of nodes (``nodes``) or edges of that type the partition book gives
    part ``part``. Keys without a type, or of a type the book lacks, are not judged.

    Raises
    ------
    PartitionFileError
        A feature has another number of rows; the message names the file, the feature
        and both counts.
    """
    what = "node" if nodes else "edge"
    for key, value in features.items():
        type_name, sep, _ = key.partition("/")
        owned = _owned(book, part, type_name, nodes) if sep else None
        rows = value.shape[0] if value.dim() else 1
        if owned is not None and rows != owned:
            raise PartitionFileError(
                f"{_where(Path(path), config, part)}: {what} feature {key!r} has {rows} "
                f"rows but the partition book gives the part {owned} {what}s of type "
                f"{type_name!r}: the file belongs to another partitioning or is damaged; "
                f"{_FIX}")


def check_inner_counts(path, graph, book, config, part: int) -> None:
    """Refuse partition graph ``graph`` (read from ``path``) unless it marks as inner
    (``inner_node``/``inner_edge``) as many nodes and edges as the partition book gives
    part ``part``. A graph without those fields is not judged.

    Raises
    ------
    PartitionFileError
        The counts differ; the message names the file, the owned id range and the count.
    """
    for what, data, ranges in (("node", graph.ndata, book.node_ranges),
                               ("edge", graph.edata, book.edge_ranges)):
        if f"inner_{what}" not in data:
            continue
        inner = int(data[f"inner_{what}"].sum())
        lo, hi = ranges[part].tolist()
        if inner != hi - lo:
            raise PartitionFileError(
                f"{config}: the inner {what}s of part {part} are not exactly the {what} "
                f"ids [{lo}, {hi}) it owns: the partition graph {path} has {inner} inner "
                f"{what}s; {_FIX}")
