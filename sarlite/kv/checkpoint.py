"""Saving DistTensors so that any number of ranks can load them.

A checkpoint directory holds, per tensor, one file per saving rank with that rank's rows
(``tensor<i>.part<r>.pt``, rows ``[start, end)`` of the policy's id order) and one
``tensors.json`` naming each tensor's shape, dtype, partition policy and the id range of
every file. The ids are those of the tensor's partition policy: homogeneous ids for
``"node~_N"`` and the homogeneous edge type, type-wise ids for a policy of one node or
edge type (:attr:`~sarlite.partition.PartitionPolicy.ranges`). Together the files are
the tensor in that id order, so a loading rank reads only the files that overlap the ids
it owns, whatever the number of ranks was when it was saved. Re-sharding keeps the ids.
Loading into tensors of a different partitioning of the same graph (whose reshuffled ids
differ) would put rows on the wrong ids; only the shapes, dtypes and policy strings are
checked.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

import torch

from ..comm import rank, world_size
from ..partition.atomic import atomic_write, write_json
from .dist_tensor import DistTensor
from .protocol import agree

INDEX = "tensors.json"


def save_dist_tensors(path: str | os.PathLike, tensors: Mapping[str, DistTensor],
                      meta: dict | None = None) -> None:
    """Save ``tensors`` (``{key: DistTensor}``) and the JSON-serialisable ``meta`` to the
    directory ``path`` (created if needed; existing files are replaced).

    Collective and blocking: every rank calls it with the same keys. Each rank writes its
    own rows, then rank 0 writes the index once all ranks have succeeded.

    Raises
    ------
    OSError
        On a rank that cannot write (the others raise ``CollectiveError``).
    """
    path = Path(path)
    what = f"saving {sorted(tensors)} to {path}"
    error = None
    try:
        path.mkdir(parents=True, exist_ok=True)
        for i, tensor in enumerate(tensors.values()):
            atomic_write(path / f"tensor{i}.part{rank()}.pt",
                         lambda tmp, t=tensor: torch.save(t.local_partition, tmp))
    except OSError as err:
        error = err
    agree(what, sorted(tensors), error)
    error = None
    if rank() == 0:
        index = {"world_size": world_size(), "meta": meta or {},
                 "tensors": {key: {"file": f"tensor{i}", "shape": list(t.shape),
                                   "dtype": str(t.dtype),
                                   "policy": t.part_policy.policy_str,
                                   "ranges": t.part_policy.ranges.tolist()}
                             for i, (key, t) in enumerate(tensors.items())}}
        try:
            write_json(path / INDEX, index)
        except OSError as err:
            error = err
    agree(what, None, error)


def load_dist_tensors(path: str | os.PathLike, tensors: Mapping[str, DistTensor],
                      meta: dict | None = None) -> dict:
    """Fill ``tensors`` (``{key: DistTensor}``) from a checkpoint written by
    :func:`save_dist_tensors`, with any number of ranks; return the saved ``meta``.

    Every key must be in the checkpoint with the same shape and dtype, and every item of
    ``meta`` must equal the saved one. Collective and blocking; when any rank fails, no
    rank changes any tensor.

    Raises
    ------
    FileNotFoundError
        The index or a needed file is missing.
    ValueError
        A key is missing, or a shape, dtype, partition policy or ``meta`` item differs.
    CollectiveError
        Another rank failed.
    """
    path = Path(path)
    staged, saved_meta, error = {}, None, None
    try:
        index = json.loads((path / INDEX).read_text())
        saved_meta = index["meta"]
        for item, value in (meta or {}).items():
            if saved_meta.get(item) != value:
                raise ValueError(f"checkpoint {path} has {item} = {saved_meta.get(item)!r}, "
                                 f"expected {value!r}")
        for key, tensor in tensors.items():
            staged[key] = _read_rows(path, index["tensors"], key, tensor)
    except FileNotFoundError as err:
        error = FileNotFoundError(f"checkpoint {path} is incomplete: {err}")
    except (OSError, ValueError, RuntimeError) as err:
        error = err
    agree(f"loading {sorted(tensors)} from {path}", sorted(tensors), error)
    for key, rows in staged.items():
        tensors[key].local_partition.copy_(rows)
    return saved_meta


def _read_rows(path: Path, saved: dict, key: str, tensor: DistTensor) -> torch.Tensor:
    """This rank's rows of ``tensor`` from the saved files that overlap them."""
    entry = saved.get(key)
    if entry is None:
        raise ValueError(f"checkpoint {path} has no tensor {key!r} (it has {sorted(saved)})")
    if tuple(entry["shape"]) != tensor.shape or entry["dtype"] != str(tensor.dtype):
        raise ValueError(f"checkpoint {path} has {key!r} with shape {tuple(entry['shape'])} "
                         f"and dtype {entry['dtype']}, but the tensor has shape "
                         f"{tensor.shape} and dtype {tensor.dtype}")
    policy = tensor.part_policy.policy_str
    if entry.get("policy", policy) != policy:   # checkpoints before policies were saved
        raise ValueError(f"checkpoint {path} has {key!r} with partition policy "
                         f"{entry['policy']!r} (rows in its id order), but the tensor's is "
                         f"{policy!r}")
    lo, hi = tensor.part_policy.ranges[tensor.part_policy.part_id].tolist()
    rows = torch.empty_like(tensor.local_partition)
    for part, (start, end) in enumerate(entry["ranges"]):
        first, last = max(start, lo), min(end, hi)
        if first < last:
            saved_rows = _saved_rows(path / f"{entry['file']}.part{part}.pt", end - start,
                                     tensor)
            rows[first - lo:last - lo] = saved_rows[first - start:last - start]
    return rows


def _saved_rows(file: Path, count: int, like: DistTensor) -> torch.Tensor:
    """The ``count`` rows saved in ``file``, shaped and typed like ``like``'s. Reads
    tensors only (``weights_only``: nothing in the file runs).

    Raises
    ------
    ValueError
        The file is damaged, holds anything but such a tensor, or other rows.
    """
    try:
        rows = torch.load(str(file), mmap=True, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # torch raises several types for a damaged or foreign file
        raise ValueError(f"checkpoint file {file} cannot be loaded as rows (it is damaged, "
                         f"or holds objects, which are never loaded): "
                         f"{type(err).__name__}: {str(err).splitlines()[0][:200]}") from None
    want = (count, *like.shape[1:])
    if not isinstance(rows, torch.Tensor) or tuple(rows.shape) != want or \
            rows.dtype != like.dtype:
        found = (f"shape {tuple(rows.shape)} and dtype {rows.dtype}"
                 if isinstance(rows, torch.Tensor) else f"a {type(rows).__name__}")
        raise ValueError(f"checkpoint file {file} holds {found}, expected rows of shape "
                         f"{want} and dtype {like.dtype}")
    return rows
