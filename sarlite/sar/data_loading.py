"""IntelLabs SAR's partition loading: ``load_dgl_partition_data`` and ``suffix_key_lookup``."""
from __future__ import annotations

import dgl
import torch

from ..partition import load_partition_data
from ..partition.book import DEFAULT_ETYPE, DEFAULT_ETYPE_STR, DEFAULT_NTYPE
from .common_tuples import PartitionData, ShardEdgesAndFeatures


def suffix_key_lookup(feature_dict: dict, key: str, expand_to_all: bool = False,
                      type_list: list | None = None) -> torch.Tensor:
    """The tensor of ``feature_dict`` whose key ends with ``key`` (so ``"labels"`` finds
    ``"_N/labels"``), or an empty int64 tensor when none does, as in SAR. Homogeneous
    graphs have one node type, so ``expand_to_all`` and ``type_list`` change nothing.

    Raises ``KeyError`` when several keys end with ``key``.
    """
    matched = [name for name in feature_dict if name.endswith(key)]
    if not matched:
        return torch.LongTensor([])
    if len(matched) > 1:
        raise KeyError(f"{key!r} is the suffix of several features: {sorted(matched)}")
    return feature_dict[matched[0]]


def load_dgl_partition_data(partition_json_file: str, own_partition_idx: int,
                            device: torch.device | str | None = None) -> PartitionData:
    """Load partition ``own_partition_idx`` of a DGL-format partitioning in SAR's shape.

    Reads what :func:`sarlite.partition_graph` or ``dgl.distributed.partition_graph`` wrote,
    with :func:`sarlite.load_partition_data` (``device`` moves the features). Not a
    collective. Returns a :class:`~sarlite.sar.common_tuples.PartitionData`.

    Raises
    ------
    FileNotFoundError, ValueError, NotImplementedError
        As :func:`sarlite.load_partition_data` (missing or inconsistent files,
        heterogeneous graphs).
    """
    data = load_partition_data(partition_json_file, own_partition_idx, device)
    if not data.is_homogeneous:
        raise NotImplementedError(
            f"load_dgl_partition_data: the partition of {data.graph_name!r} is "
            f"heterogeneous (node types {data.ntypes}); SAR's typed partition layout is not "
            f"offered yet. sarlite's own API takes it: sarlite.load_partition_data, then "
            f"sarlite.construct_full_graph(data)")
    node_features = {f"{DEFAULT_NTYPE}/{name}": value
                     for name, value in data.node_features.items()}
    node_features[dgl.NTYPE] = torch.zeros(data.num_owned_nodes, dtype=torch.int32,
                                          device=device)
    sizes = [len(shard) for shard in data.shards]
    edge_rows = {f"{DEFAULT_ETYPE_STR}/{name}": value.split(sizes)
                 for name, value in data.edge_features.items()}
    shards = []
    for j, shard in enumerate(data.shards):
        features = {name: rows[j] for name, rows in edge_rows.items()}
        features[dgl.ETYPE] = torch.zeros(len(shard), dtype=torch.int32, device=device)
        shards.append(ShardEdgesAndFeatures((shard.src, shard.dst), features))
    result = PartitionData(shards, [tuple(r) for r in data.node_ranges.tolist()],
                           node_features, [DEFAULT_NTYPE], [DEFAULT_ETYPE],
                           data.partition_book)
    result.sarlite_data = data
    return result


def sarlite_data(partition_data):
    """The :class:`sarlite.PartitionData` behind ``partition_data`` (either kind).

    Raises ``TypeError`` for anything not loaded by :func:`load_dgl_partition_data` or
    :func:`sarlite.load_partition_data`.
    """
    inner = getattr(partition_data, "sarlite_data", None)
    if inner is not None:
        return inner
    if hasattr(partition_data, "shards") and hasattr(partition_data, "owned_range"):
        return partition_data
    raise TypeError(f"expected the PartitionData of sar.load_dgl_partition_data, got "
                    f"{type(partition_data).__name__}")
