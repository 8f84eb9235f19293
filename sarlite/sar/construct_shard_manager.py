"""IntelLabs SAR's graph constructors, on :func:`sarlite.construct_full_graph` and
:func:`sarlite.construct_mfgs`. The graphs read :class:`~sarlite.sar.config.Config` at
every call."""
from __future__ import annotations

import weakref

import torch

from ..core import construct_full_graph as _full_graph
from ..core import construct_mfgs as _mfgs
from ..partition import partition_data_from
from ..sampling import DistGraph
from .config import engine_options
from .data_loading import sarlite_data

# full graph -> the sarlite.PartitionData it was built from (for sar's samplers)
_PARTITIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def construct_full_graph(partition_data):
    """This worker's full graph: a :class:`sarlite.GraphShardManager` that unmodified
    ``dgl.nn`` layers take in place of a ``DGLGraph``.

    Mode, pipeline depth and rows per collective come from :class:`sar.Config` when each
    ``update_all``/``apply_edges`` runs; ``.get_full_partition_graph()`` gives the one-shot
    :class:`sarlite.DistributedBlock`. Collective: every rank calls it once per graph.

    Raises ``ValueError`` when the world size differs from the number of partitions.
    """
    data = sarlite_data(partition_data)
    graph = _full_graph(data, options=engine_options)
    _PARTITIONS[graph] = data
    return graph


def partition_of(graph):
    """The :class:`sarlite.PartitionData` a graph of :func:`construct_full_graph` holds.

    Raises ``TypeError`` for any other graph.
    """
    data = _PARTITIONS.get(graph)
    if data is None:
        raise TypeError("sampling needs the full graph of sar.construct_full_graph (not a "
                        "message-flow graph or a one-shot block)")
    return data


def construct_mfgs(partition_data, seed_nodes: torch.Tensor, n_layers: int,
                   keep_seed_nodes: bool = True) -> list:
    """One message-flow graph per layer, computing only what ``seed_nodes`` need.

    ``seed_nodes``: **global** ids of owned nodes (SAR's convention: local index plus
    ``partition_data.node_ranges[rank][0]``); may be empty. Block ``l`` has
    ``input_nodes`` (local ids; feed ``features[blocks[0].input_nodes]``) and
    ``output_nodes`` (local ids); the last block's outputs are the sorted seeds, and each
    block's sources start with its destinations, as in DGL. ``keep_seed_nodes=False`` is
    accepted and the seeds are kept all the same (a few more rows are computed; no layer is
    fed wrong destination rows). Collective: every rank calls it, also with no seeds.

    Raises ``ValueError`` for seeds outside this worker's node range.
    """
    data = sarlite_data(partition_data)
    lo, hi = data.owned_range
    seeds = torch.as_tensor(seed_nodes).reshape(-1).to("cpu", torch.int64)
    if seeds.numel() and (int(seeds.min()) < lo or int(seeds.max()) >= hi):
        raise ValueError(f"seed_nodes must be global ids of this worker's nodes "
                         f"[{lo}, {hi}), got values in [{int(seeds.min())}, "
                         f"{int(seeds.max())}]")
    return _mfgs(data, seeds - lo, n_layers, options=engine_options)


def convert_dist_graph(dist_graph):
    """The full graph (as :func:`construct_full_graph`) of a :class:`sarlite.DistGraph`'s
    partition, from the rows it already holds. Collective.

    Raises ``TypeError`` for anything but a :class:`sarlite.DistGraph` (``dgl.distributed``
    graphs need DGL's servers, which sarlite replaces).
    """
    if not isinstance(dist_graph, DistGraph):
        raise TypeError(f"convert_dist_graph takes a sarlite.DistGraph, got "
                        f"{type(dist_graph).__name__}: open the partitions with "
                        f"sarlite.DistGraph(name, part_config=...) instead")
    data = partition_data_from(
        dist_graph.local_partition,
        {name: t.local_partition for name, t in dist_graph.ndata.items()},
        {name: t.local_partition for name, t in dist_graph.edata.items()},
        dist_graph.get_partition_book(), dist_graph.graph_name, source="DistGraph")
    return construct_full_graph(data)
