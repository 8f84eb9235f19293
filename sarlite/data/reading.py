"""File reading shared by the dataset loaders: one error per bad file, bounded memory.

Every read happens inside :func:`reading`, which turns a missing file into one
``FileNotFoundError`` and any parse failure into one ``ValueError``, each naming the file
and, when given, the layout the loader expects. Large inputs are read in chunks
(:func:`csv_chunks`) or memory-mapped (:func:`npz_array`).
"""
from __future__ import annotations

import contextlib
import gzip
import pickle
import zipfile
from pathlib import Path
from typing import Iterator

import dgl
import numpy as np
import torch

CSV_CHUNK_ROWS = 1 << 20


class FormatError(ValueError):
    """Raised inside :func:`reading` for content problems; turned into a ``ValueError``."""


def _expected(layout: str | None) -> str:
    return f" (expected layout: {layout})" if layout else ""


@contextlib.contextmanager
def reading(path: Path, layout: str | None = None) -> Iterator[None]:
    """Check that ``path`` exists and turn any parse failure in the block into one error."""
    if not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {path}{_expected(layout)}")
    try:
        yield
    except gzip.BadGzipFile as err:
        raise ValueError(f"malformed dataset file {path}: not gzip data ({err})"
                         f"{_expected(layout)}") from None
    except OSError:
        raise
    except FormatError as err:
        raise ValueError(f"malformed dataset file {path}: {err}{_expected(layout)}") \
            from None
    except Exception as err:  # noqa: BLE001 - any parser failure means a bad file
        raise ValueError(f"malformed dataset file {path}: {type(err).__name__}: {err}"
                         f"{_expected(layout)}") from err


class PlanetoidUnpickler(pickle.Unpickler):
    """Reads Planetoid's pickles (lists, dicts, NumPy arrays, SciPy CSR matrices) and
    refuses every other class, so that a crafted file cannot run code."""

    _ALLOWED = {("__builtin__", "list"), ("builtins", "list"), ("__builtin__", "dict"),
                ("builtins", "dict"), ("collections", "defaultdict"),
                ("collections", "OrderedDict"), ("numpy", "dtype"), ("numpy", "ndarray"),
                ("numpy.core.multiarray", "_reconstruct"),
                ("numpy._core.multiarray", "_reconstruct"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}
    _CSR = {"scipy.sparse.csr", "scipy.sparse._csr", "scipy.sparse"}

    def find_class(self, module: str, name: str):
        if module in self._CSR and name == "csr_matrix":
            import scipy.sparse
            return scipy.sparse.csr_matrix
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise FormatError(f"it pickles {module}.{name}, which a Planetoid file never holds "
                          f"(refused: unpickling it could run code)")


def check(ok: bool, what: str) -> None:
    if not ok:
        raise FormatError(what)


def mask(num_nodes: int, ids: np.ndarray) -> torch.Tensor:
    out = torch.zeros(num_nodes, dtype=torch.bool)
    out[torch.from_numpy(np.asarray(ids, dtype=np.int64))] = True
    return out


def finish(g: dgl.DGLGraph, feat: np.ndarray, label: np.ndarray,
           masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> dgl.DGLGraph:
    """Attach ``feat`` (float32), ``label`` (int64) and the three masks to ``g``.

    Arrays already of the right type (a memory map included) are shared, not copied.
    """
    g.ndata["feat"] = torch.from_numpy(_writable(feat, np.float32))
    g.ndata["label"] = torch.from_numpy(_writable(label, np.int64))
    for key, m in zip(("train_mask", "val_mask", "test_mask"), masks):
        g.ndata[key] = m
    return g


def _writable(array: np.ndarray, dtype) -> np.ndarray:
    array = np.ascontiguousarray(array, dtype=dtype)
    return array if array.flags.writeable else array.copy()


def read_npz(path: Path, keys: tuple[str, ...], layout: str | None = None
             ) -> dict[str, np.ndarray]:
    """Read the named arrays of an ``.npz`` file (no pickled objects are loaded)."""
    with reading(path, layout):
        data = np.load(path, allow_pickle=False)
        check(isinstance(data, np.lib.npyio.NpzFile), "not an .npz archive")
        with data:
            missing = [k for k in keys if k not in data.files]
            check(not missing, f"missing array(s) {missing}; it has {sorted(data.files)}")
            return {k: data[k] for k in keys}


def npz_array(path: Path, key: str, layout: str | None = None) -> np.ndarray:
    """One array of an ``.npz`` file, memory-mapped when it is stored uncompressed.

    ``np.savez`` stores members uncompressed: such a member is mapped copy-on-write
    (nothing is read until used, and writes stay private). A compressed member
    (``np.savez_compressed``) is decompressed into memory, once.
    """
    with reading(path, layout), zipfile.ZipFile(path) as archive:
        name = f"{key}.npy"
        names = archive.namelist()
        check(name in names, f"missing array {key!r}; it has "
                             f"{sorted(n[:-4] for n in names if n.endswith('.npy'))}")
        info = archive.getinfo(name)
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(member)
            check(not dtype.hasobject, f"array {key!r} holds Python objects")
            if info.compress_type != zipfile.ZIP_STORED:
                return np.lib.format.read_array(archive.open(info), allow_pickle=False)
            header_size = member.tell()
        with open(path, "rb") as raw:   # the member's data follows its local file header
            raw.seek(info.header_offset)
            local = raw.read(30)
            check(local[:4] == b"PK\x03\x04", f"bad zip entry for {key!r}")
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
        offset = info.header_offset + 30 + name_len + extra_len + header_size
        return np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=shape,
                         order="F" if fortran else "C")


def csv_chunks(path: Path, dtype, width: int | None,
               chunk_rows: int = CSV_CHUNK_ROWS) -> Iterator[np.ndarray]:
    """Rows of a header-less (optionally gzip-compressed) csv, ``chunk_rows`` at a time.

    Each chunk is a ``(rows, width)`` array of ``dtype``; ``width=None`` takes the width of
    the first row. Call inside :func:`reading`: a ragged row, a bad value or a truncated
    file raises there.
    """
    import pandas as pd

    reader = pd.read_csv(path, header=None, dtype=dtype, chunksize=chunk_rows,
                         compression="infer", engine="c", na_filter=False)
    with reader:
        for frame in reader:
            chunk = frame.to_numpy()
            if width is None:
                width = chunk.shape[1]
            check(chunk.shape[1] == width,
                  f"expected {width} column(s) per row, found {chunk.shape[1]}")
            yield chunk


def csv_array(path: Path, dtype, rows: int, width: int | None = None,
              layout: str | None = None) -> np.ndarray:
    """A whole header-less csv as one ``(rows, width)`` array, filled chunk by chunk."""
    out = None
    filled = 0
    with reading(path, layout):
        for chunk in csv_chunks(path, dtype, width):
            if out is None:
                out = np.empty((rows, chunk.shape[1]), dtype=dtype)
            check(filled + len(chunk) <= rows, f"more than the {rows} rows expected")
            out[filled:filled + len(chunk)] = chunk
            filled += len(chunk)
        check(filled == rows, f"{filled} rows, expected {rows}")
    return out


def csv_ids(path: Path, upper: int, layout: str | None = None) -> np.ndarray:
    """A one-column csv of ids, each checked to lie in ``[0, upper)``."""
    with reading(path, layout):
        chunks = list(csv_chunks(path, np.int64, 1))
        ids = np.concatenate(chunks)[:, 0] if chunks else np.empty(0, dtype=np.int64)
        check(ids.size == 0 or (ids.min() >= 0 and ids.max() < upper),
              f"ids must lie in [0, {upper})")
    return ids


def check_edges(edges: np.ndarray, num_nodes: int) -> None:
    check(edges.ndim == 2 and edges.shape[1] == 2, f"edges must be [E, 2], got {edges.shape}")
    check(np.issubdtype(edges.dtype, np.integer), f"edge ids must be integers, "
                                                  f"got {edges.dtype}")
    check(edges.size == 0 or (edges.min() >= 0 and edges.max() < num_nodes),
          f"edge ids must lie in [0, {num_nodes})")
