"""Partitions for a training run: made once by rank 0, reused while nothing changed, and
sent by rank 0 to any rank whose own ``partition.cache_dir`` lacks its part.

Rank 0's directory is the source. Its stamp (``sarlite-stamp.json``) holds the partition
key, the number of parts and a unique ``id`` of that partitioning; a rank holds its part
when its local stamp equals rank 0's and the partition JSON and its ``part<rank>/`` files
are there with rank 0's sizes. So one shared directory, a copy per host, or a fresh empty
directory per host all work: only what is missing travels, over the process group.

Files are checked as ``partition.verify`` says (see :mod:`sarlite.partition.integrity`):
rank 0 checks every part it reuses and refuses a damaged one; another rank treats a damaged
copy of its part as missing and receives it again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import uuid
from pathlib import Path, PurePosixPath

import dgl

from .. import comm
from ..runtime import health
from ..data import load_graph, train_classes
from ..partition import partition_graph, read_part_config
from ..partition.atomic import atomic_write, write_json
from ..partition.files import check_part_files
from .config import Config, ConfigError

STAMP = "sarlite-stamp.json"
GRAPH_NAME = "graph"
KIND = "prepare_partitions"
_PART_KEYS = ("part_graph", "node_feats", "edge_feats")
_NOT_KEYED = ("cache_dir", "verify")      # settings the partitions do not depend on
log = logging.getLogger("sarlite")


def partition_key(cfg: Config) -> str:
    """Hash of what the partitions depend on: the dataset and partition settings."""
    data = cfg.model_dump()
    relevant = {"dataset": data["dataset"],
                "partition": {k: v for k, v in data["partition"].items()
                              if k not in _NOT_KEYED}}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def _read_stamp(out: Path) -> dict | None:
    """The stamp in directory ``out``, or ``None`` if it is absent or unreadable."""
    try:
        meta = json.loads((out / STAMP).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


def existing_partition(cfg: Config) -> dict | None:
    """The stamp of the partitions in ``cfg.partition.cache_dir`` if they match ``cfg``."""
    meta = _read_stamp(Path(cfg.partition.cache_dir))
    return meta if meta is not None and meta.get("key") == partition_key(cfg) else None


def check_world_size(cfg: Config, num_parts: int) -> None:
    """Refuse to run ``num_parts`` workers on matching partitions made for another count."""
    meta = existing_partition(cfg)
    if meta is not None and meta["num_parts"] != num_parts:
        raise ConfigError(
            f"partition directory {cfg.partition.cache_dir} holds {meta['num_parts']} "
            f"partitions of this dataset, but {num_parts} workers were asked for: use "
            f"--nproc {meta['num_parts']}, or another partition.cache_dir to repartition")


def dataset_graph(cfg: Config):
    """The graph ``cfg.dataset`` describes, with its preprocessing applied."""
    ds = cfg.dataset
    g = load_graph(ds.name, ds.data_dir, split=ds.split, seed=ds.seed,
                   reverse_edges=ds.reverse_edges, num_nodes=ds.num_nodes,
                   avg_degree=ds.avg_degree, num_classes=ds.num_classes, feat_dim=ds.feat_dim)
    if not g.is_homogeneous and (ds.row_normalize or ds.self_loops):
        raise ConfigError(f"dataset {ds.name!r} is heterogeneous: dataset.row_normalize and "
                          f"dataset.self_loops apply to homogeneous graphs only")
    if ds.row_normalize:
        feat = g.ndata["feat"]
        g.ndata["feat"] = feat / feat.sum(1, keepdim=True).clamp(min=1e-12)
    if ds.self_loops:
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
    return g


def _part_files(config: Path, meta: dict, part: int) -> list[str]:
    """Part ``part``'s files, relative to the partition directory, from its JSON entry.

    Raises
    ------
    ValueError
        The entry is missing or incomplete, or names a path outside the directory.
    """
    entry = meta.get(f"part-{part}")
    if not isinstance(entry, dict) or any(key not in entry for key in _PART_KEYS):
        raise ValueError(f"partition config {config} lacks a complete 'part-{part}' entry "
                         f"with {_PART_KEYS}")
    files = []
    for key in _PART_KEYS:
        rel = PurePosixPath(str(entry[key]))
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"partition config {config}: 'part-{part}' names {key} "
                             f"{entry[key]!r}, which is not inside {config.parent}")
        files.append(str(rel))
    return files


def _manifest(config: Path, num_parts: int) -> list[dict[str, int]]:
    """Per part, the byte size of each file a rank needs for it (the partition JSON and
    the part's files), keyed by path relative to the partition directory.

    Raises
    ------
    FileNotFoundError
        The JSON or a part's file is missing.
    ConfigError
        The JSON holds another number of parts than ``num_parts`` (its stamp's and the
        run's): it was changed after partitioning.
    ValueError
        The JSON is invalid.
    """
    meta = read_part_config(config)
    out = config.parent
    if meta["num_parts"] != num_parts:
        raise ConfigError(
            f"world size {num_parts} does not match the {meta['num_parts']} partitions of "
            f"{config}, whose {STAMP} records {num_parts}: the JSON was changed after "
            f"partitioning; remove {out} or use another partition.cache_dir to repartition")
    return [{config.name: config.stat().st_size,
             **{rel: (out / rel).stat().st_size for rel in _part_files(config, meta, part)}}
            for part in range(meta["num_parts"])]


def _reusable(cfg: Config, config: Path, num_parts: int) -> tuple[dict, list] | None:
    """The stamp and manifest of matching, complete partitions in the cache, else ``None``
    (a directory that holds only some parts, as another rank's copy does, is not).

    Raises
    ------
    ConfigError
        The JSON holds another number of parts than the stamp and the run.
    PartitionFileError
        A part's file differs from its record (checked as ``partition.verify`` says).
    """
    stamp = existing_partition(cfg)
    if stamp is None or "id" not in stamp:
        return None
    try:
        manifest = _manifest(config, num_parts)
    except FileNotFoundError:
        return None
    for part in range(num_parts):
        check_part_files(config, part, cfg.partition.verify)
    return stamp, manifest


def _make(cfg: Config, num_parts: int) -> tuple[dict, list]:
    """Rank 0: reuse or make the partitions; their stamp and manifest."""
    check_world_size(cfg, num_parts)
    out = Path(cfg.partition.cache_dir)
    config = out / f"{GRAPH_NAME}.json"
    found = _reusable(cfg, config, num_parts)
    if found is not None:
        return found
    g = dataset_graph(cfg)
    part = cfg.partition
    (out / STAMP).unlink(missing_ok=True)
    partition_graph(g, GRAPH_NAME, num_parts, out, part_method=part.method,
                    balance_ntypes=train_classes(g, f"dataset {cfg.dataset.name!r}")
                    if part.balance_train else None,
                    balance_edges=part.balance_edges, objtype=part.objective,
                    seed=cfg.dataset.seed, metis_max_edges=part.metis_max_edges)
    stamp = {"key": partition_key(cfg), "num_parts": num_parts, "id": uuid.uuid4().hex}
    write_json(out / STAMP, stamp)                      # last: the partitions are complete
    return stamp, _manifest(config, num_parts)


def _holds(out: Path, part: int, stamp: dict, files: dict[str, int], verify: str) -> bool:
    """Whether ``out`` holds rank 0's partitioning ``stamp`` with ``files`` at their sizes
    and part ``part``'s files as their records say (checked as ``verify`` says)."""
    if _read_stamp(out) != stamp:
        return False
    try:
        if any((out / rel).stat().st_size != size for rel, size in files.items()):
            return False
        check_part_files(out / f"{GRAPH_NAME}.json", part, verify)
    except OSError:
        return False
    except ValueError as err:
        log.warning("rank %d: the copy of partition %d in %s is damaged (%s); receiving it "
                    "again from rank 0", part, part, out, err)
        return False
    return True


def _payloads(out: Path, needs: list[bool], manifest: list) -> list:
    """Rank 0: for each rank that needs it, ``{relative path: bytes}`` of its files."""
    return [{rel: (out / rel).read_bytes() for rel in manifest[peer]} if need else None
            for peer, need in enumerate(needs)]


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def _store(out: Path, part: int, files: dict[str, bytes], stamp: dict) -> None:
    """Write a received part into ``out``: the old stamp is removed first, then the part's
    files, the JSON and the stamp are written, each atomically and the stamp last, so an
    interrupted copy never looks complete.

    Raises
    ------
    OSError
        ``out`` cannot be written; the message names it.
    """
    config = f"{GRAPH_NAME}.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / STAMP).unlink(missing_ok=True)
        for rel in sorted(files, key=lambda rel: rel == config):       # the JSON last
            _write_bytes(out / rel, files[rel])
        write_json(out / STAMP, stamp)
    except OSError as err:
        raise OSError(f"cannot store partition {part} in {out} (partition.cache_dir): "
                      f"{err}") from err


def _agree(error: Exception | None) -> None:
    """Raise on every rank if any failed: its own error, else one naming the failed rank.

    Every rank must call it. Blocking: one object gather.
    """
    texts = comm.all_gather_object(None if error is None else
                                   f"{type(error).__name__}: {error}", kind=f"{KIND}/stored")
    if error is not None:
        raise error
    failed = [(peer, text) for peer, text in enumerate(texts) if text is not None]
    if failed:
        peer, text = failed[0]
        raise ConfigError(f"preparing partitions failed on rank {peer}: {text}")


def receive_missing(out: Path, rank: int, stamp: dict, manifest: list,
                    verify: str = "auto") -> int:
    """Copy each rank's partition from rank 0 into its ``out`` where it is not already there.

    Every rank must call it with rank 0's ``stamp`` and ``manifest`` (see
    :func:`prepare_partitions`); a copy whose files differ from their records (checked
    as ``verify`` says) counts as missing. Blocking: one object gather when every rank
    holds its part; otherwise also a scatter from rank 0 of the missing files and a
    gather of the outcome.

    Returns
    -------
    int
        Bytes this rank received and stored (0 when it already held its part).

    Raises
    ------
    OSError
        This rank could not store its part (the message names the directory) or rank 0
        could not read it.
    ConfigError
        ``manifest`` lists another number of parts than there are ranks (on every rank),
        or another rank failed to send or store; the message names it.
    CollectiveError
        A rank died or did not make the same calls in time.
    """
    if len(manifest) != comm.world_size():
        raise ConfigError(f"world size {comm.world_size()} does not match the "
                          f"{len(manifest)} partitions rank 0 made: use another "
                          f"partition.cache_dir to repartition")
    missing = rank != 0 and not _holds(out, rank, stamp, manifest[rank], verify)
    needs = comm.all_gather_object(missing, kind=f"{KIND}/check")
    if not any(needs):
        return 0
    payloads, error = None, None
    if rank == 0:
        try:
            payloads = _payloads(out, needs, manifest)
        except OSError as err:
            payloads, error = [None] * len(needs), err
    files = comm.scatter_object(payloads, src=0, kind=f"{KIND}/send")
    received = sum(map(len, files.values())) if files is not None else 0
    if files is not None:
        try:
            _store(out, rank, files, stamp)
            log.info("rank %d: partition %d not in %s; received %.2f MiB from rank 0",
                     rank, rank, out, received / 2**20)
        except OSError as err:
            error = err
    _agree(error)                 # rank 0's read error, if any, reaches the receivers here
    return received


def prepare_partitions(cfg: Config, rank: int, num_parts: int) -> Path:
    """Path of this rank's partition JSON for this run, in its ``partition.cache_dir``.

    Collective: every rank must call it; it blocks until every rank holds its part. Rank 0
    reuses or makes the partitions while the others wait; every rank then gets rank 0's
    result, or the same error. A rank whose own directory lacks its part (another host,
    no shared file system) receives it from rank 0 and stores it there (see
    :func:`receive_missing`); the caller then reads it with
    :func:`sarlite.partition.load_partition_data` as usual.

    Raises
    ------
    ConfigError
        Rank 0 could not make or read the partitions (on every rank, with rank 0's reason),
        or another rank could not receive its part.
    OSError
        This rank could not store its part; the message names the directory.
    """
    outcome, failure = None, None
    if rank == 0:
        try:
            with health.busy("making partitions"):     # METIS holds Python's lock
                outcome = ("ok", _make(cfg, num_parts))
        except Exception as err:  # every rank must hear about it, whatever it is
            outcome, failure = ("error", f"{type(err).__name__}: {err}"), err
    status, value = comm.broadcast_object(outcome, src=0, kind=KIND)
    if failure is not None and not isinstance(failure, (ValueError, OSError)):
        raise failure                       # a bug: rank 0 shows its traceback
    if status == "error":
        raise ConfigError(f"preparing partitions failed: {value}")
    out = Path(cfg.partition.cache_dir)
    stamp, manifest = value
    receive_missing(out, rank, stamp, manifest, cfg.partition.verify)
    return out / f"{GRAPH_NAME}.json"
