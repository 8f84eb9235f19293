"""IntelLabs SAR's partition loading: ``load_dgl_partition_data`` and ``suffix_key_lookup``."""
from __future__ import annotations

import dgl
import torch

from ..partition import load_partition_data
from .common_tuples import PartitionData, ShardEdgesAndFeatures


def suffix_key_lookup(feature_dict: dict, key: str, expand_to_all: bool = False,
                      type_list: list | None = None) -> torch.Tensor:
    """The tensor of ``feature_dict`` whose key ends with ``key`` (so ``"labels"`` finds
    ``"paper/labels"``), or an empty int64 tensor when none does, as in SAR.

    With ``expand_to_all`` and several node types in ``type_list`` (the partition's
    ``node_type_names``), the feature of one type is spread over all owned nodes in
    ``feature_dict[dgl.NTYPE]``'s order: the rows of its type hold it, the others zeros.

    Raises ``KeyError`` when several keys end with ``key``, ``ValueError`` for
    ``expand_to_all`` without ``type_list`` or for a key whose type is not in it.
    """
    matched = [name for name in feature_dict if name.endswith(key)]
    if not matched:
        return torch.LongTensor([])
    if len(matched) > 1:
        raise KeyError(f"{key!r} is the suffix of several features: {sorted(matched)}")
    value = feature_dict[matched[0]]
    if not expand_to_all:
        return value
    if type_list is None:
        raise ValueError("suffix_key_lookup: expand_to_all needs type_list (the "
                         "partition's node_type_names)")
    if len(type_list) < 2 or dgl.NTYPE not in feature_dict:
        return value
    return _expanded(value, matched[0], feature_dict[dgl.NTYPE], list(type_list))


def _expanded(value: torch.Tensor, name: str, node_types: torch.Tensor,
              type_list: list) -> torch.Tensor:
    """``value`` (rows of one node type) placed at that type's rows of all owned nodes."""
    ntype = name.split("/")[0]
    if ntype not in type_list:
        raise ValueError(f"suffix_key_lookup: feature {name!r} names no node type of "
                         f"{type_list}")
    out = value.new_zeros((node_types.numel(), *value.shape[1:]))
    out[node_types.to(value.device) == type_list.index(ntype)] = value
    return out


def _owned_node_types(data) -> torch.Tensor:
    """``(owned nodes,)`` int32 type id of each owned node, in homogeneous id order."""
    lo, hi = data.partition_book.node_ranges[data.rank].tolist()
    return data.partition_book.map_to_per_ntype(torch.arange(lo, hi))[0].to(torch.int32)


def _shard_edges(data, device) -> list[ShardEdgesAndFeatures]:
    """SAR's shards: the owned edges from each partition as homogeneous ``(src, dst)``,
    grouped by edge type, with ``dgl.ETYPE`` and each relation's edge features."""
    book, relations = data.partition_book, data.canonical_etypes
    edge_rows = {}
    for c_etype in relations:
        sizes = [len(shard) for shard in data.relations[c_etype]]
        key = ":".join(c_etype)
        edge_rows[c_etype] = {f"{key}/{name}": value.split(sizes)
                              for name, value in data.edge_frames[c_etype].items()}
    shards = []
    for j in range(data.num_parts):
        src, dst, etype, features = [], [], [], {}
        for t, c_etype in enumerate(relations):
            edges = data.relations[c_etype][j]
            src.append(book.map_to_homo_nid(edges.src, c_etype[0]))
            dst.append(book.map_to_homo_nid(edges.dst, c_etype[2]))
            etype.append(torch.full((len(edges),), t, dtype=torch.int32))
            features.update({name: rows[j] for name, rows in edge_rows[c_etype].items()})
        features[dgl.ETYPE] = torch.cat(etype).to(device)
        shards.append(ShardEdgesAndFeatures((torch.cat(src), torch.cat(dst)), features))
    return shards


def load_dgl_partition_data(partition_json_file: str, own_partition_idx: int,
                            device: torch.device | str | None = None) -> PartitionData:
    """Load partition ``own_partition_idx`` of a DGL-format partitioning in SAR's shape,
    for graphs of one node and edge type or several.

    Reads what :func:`sarlite.partition_graph` or ``dgl.distributed.partition_graph`` wrote,
    with :func:`sarlite.load_partition_data` (``device`` moves the node and edge features).
    Not a collective. Returns a :class:`~sarlite.sar.common_tuples.PartitionData`:
    ``node_features`` under DGL's keys ``"<ntype>/<name>"`` (rows of the owned nodes of
    that type) with ``dgl.NTYPE``, the type of every owned node; node and edge ids are
    homogeneous (all types in one id space).

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`sarlite.load_partition_data` (missing or inconsistent files).
    """
    data = load_partition_data(partition_json_file, own_partition_idx, device)
    book = data.partition_book
    node_features = {f"{ntype}/{name}": value for ntype, frame in data.node_frames.items()
                     for name, value in frame.items()}
    node_features[dgl.NTYPE] = _owned_node_types(data).to(device)
    result = PartitionData(_shard_edges(data, device),
                           [tuple(r) for r in book.node_ranges.tolist()], node_features,
                           list(book.ntypes), list(book.canonical_etypes), book)
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
