"""Partitions for a training run: made once by rank 0, reused while nothing changed."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import dgl

from .. import comm
from ..data import load_graph
from ..partition import partition_graph, read_part_config
from .config import Config, ConfigError

STAMP = "sarlite-stamp.json"
GRAPH_NAME = "graph"


def partition_key(cfg: Config) -> str:
    """Hash of what the partitions depend on: the dataset and partition settings."""
    data = cfg.model_dump()
    relevant = {"dataset": data["dataset"],
                "partition": {k: v for k, v in data["partition"].items() if k != "cache_dir"}}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def existing_partition(cfg: Config) -> dict | None:
    """The stamp of the partitions in ``cfg.partition.cache_dir`` if they match ``cfg``."""
    stamp = Path(cfg.partition.cache_dir) / STAMP
    if not stamp.is_file():
        return None
    try:
        meta = json.loads(stamp.read_text())
    except json.JSONDecodeError:
        return None
    return meta if meta.get("key") == partition_key(cfg) else None


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
                   num_nodes=ds.num_nodes, avg_degree=ds.avg_degree,
                   num_classes=ds.num_classes, feat_dim=ds.feat_dim)
    if ds.row_normalize:
        feat = g.ndata["feat"]
        g.ndata["feat"] = feat / feat.sum(1, keepdim=True).clamp(min=1e-12)
    if ds.self_loops:
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
    return g


def _make(cfg: Config, num_parts: int) -> Path:
    out = Path(cfg.partition.cache_dir)
    config = out / f"{GRAPH_NAME}.json"
    if existing_partition(cfg) is not None:
        read_part_config(config)                         # still readable?
        return config
    g = dataset_graph(cfg)
    part = cfg.partition
    (out / STAMP).unlink(missing_ok=True)
    partition_graph(g, GRAPH_NAME, num_parts, out, part_method=part.method,
                    balance_ntypes=g.ndata["train_mask"].long() if part.balance_train
                    else None, balance_edges=part.balance_edges, objective=part.objective,
                    seed=cfg.dataset.seed)
    (out / STAMP).write_text(json.dumps({"key": partition_key(cfg), "num_parts": num_parts}))
    return config


def prepare_partitions(cfg: Config, rank: int, num_parts: int) -> Path:
    """Path of the partition JSON for this run.

    Collective: rank 0 reuses or makes the partitions while the others wait; everyone then
    gets rank 0's result, or the same error.
    """
    check_world_size(cfg, num_parts)
    outcome, failure = None, None
    if rank == 0:
        try:
            outcome = ("ok", str(_make(cfg, num_parts)))
        except Exception as err:  # every rank must hear about it, whatever it is
            outcome, failure = ("error", f"{type(err).__name__}: {err}"), err
    status, value = comm.broadcast_object(outcome, src=0, kind="prepare_partitions")
    if failure is not None and not isinstance(failure, (ValueError, OSError)):
        raise failure                       # a bug: rank 0 shows its traceback
    if status == "error":
        raise ConfigError(f"preparing partitions failed: {value}")
    return Path(value)
