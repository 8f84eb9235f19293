"""IntelLabs SAR's graph constructors, on :func:`sarlite.construct_full_graph` and
:func:`sarlite.construct_mfgs`, for graphs of one node and edge type or several. The
graphs read :class:`~sarlite.sar.config.Config` at every call."""
from __future__ import annotations

import weakref

import torch

from ..core import construct_full_graph as _full_graph
from ..core import construct_mfgs as _mfgs
from ..partition import RangePartitionBook, partition_data_from
from ..sampling import DistGraph
from .config import engine_options
from .data_loading import sarlite_data

# full graph -> the sarlite.PartitionData it was built from (for sar's samplers)
_PARTITIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _sar_graph(graph):
    """``graph`` with SAR's ``tgt_in_src`` (destination nodes are among the source nodes:
    always, in sarlite, also for ``keep_seed_nodes=False``)."""
    graph.tgt_in_src = True
    return graph


def construct_full_graph(partition_data):
    """This worker's full graph, which unmodified ``dgl.nn`` layers take in place of a
    ``DGLGraph``: a :class:`sarlite.GraphShardManager` for a graph of one node and edge
    type, a :class:`sarlite.HeteroGraphShardManager` (``g[etype]``, ``srcnodes(ntype)``,
    ``dgl.nn.HeteroGraphConv``, ...) for several.

    Mode, pipeline depth and rows per collective come from :class:`sar.Config` when each
    ``update_all``/``apply_edges`` runs; for one type, ``.get_full_partition_graph()``
    gives the one-shot :class:`sarlite.DistributedBlock`. Collective: every rank calls it
    once per graph.

    Raises ``ValueError`` when the world size differs from the number of partitions.
    """
    data = sarlite_data(partition_data)
    graph = _sar_graph(_full_graph(data, options=engine_options))
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

    ``seed_nodes``: **global** ids of owned nodes (SAR's convention: an index into the
    owned nodes plus ``partition_data.node_ranges[rank][0]``; of any node types); may be
    empty. Block ``l`` has ``input_nodes`` (local ids; feed
    ``features[blocks[0].input_nodes]``) and ``output_nodes`` (local ids); the last block's
    outputs are the sorted seeds, and each block's sources start with its destinations, as
    in DGL. For a graph of several types the blocks are
    :class:`sarlite.HeteroGraphShardManager` whose ``input_nodes``/``output_nodes`` (and
    ``srcnodes(ntype)``/``dstnodes(ntype)``) are ``{ntype: local ids}`` among the owned
    nodes of that type. ``keep_seed_nodes=False`` is accepted and the seeds are kept all
    the same (a few more rows are computed; no layer is fed wrong destination rows).
    Collective: every rank calls it, also with no seeds.

    Raises ``ValueError`` for seeds outside this worker's node range.
    """
    data = sarlite_data(partition_data)
    book = data.partition_book
    lo, hi = book.node_ranges[data.rank].tolist()
    seeds = torch.as_tensor(seed_nodes).reshape(-1).to("cpu", torch.int64)
    if seeds.numel() and (int(seeds.min()) < lo or int(seeds.max()) >= hi):
        raise ValueError(f"seed_nodes must be global ids of this worker's nodes "
                         f"[{lo}, {hi}), got values in [{int(seeds.min())}, "
                         f"{int(seeds.max())}]")
    type_ids, typewise = book.map_to_per_ntype(seeds)
    local = {t: typewise[type_ids == i] - data.range_of(t)[0]
             for i, t in enumerate(data.ntypes)}
    blocks = _mfgs(data, local, n_layers, options=engine_options)
    return [_sar_graph(block) for block in blocks]


def convert_dist_graph(dist_graph):
    """The full graph (as :func:`construct_full_graph`) of a distributed graph's partition,
    from the rows it already holds: a :class:`sarlite.distributed.DistGraph` (also
    ``dgl.distributed.DistGraph`` under ``sarlite run``), or DGL's own
    ``dgl.distributed.DistGraph`` (as SAR takes it; its local partition, its tensors'
    local rows and its partition book). Collective.

    Raises ``TypeError`` for anything else.
    """
    if isinstance(dist_graph, DistGraph):
        data = partition_data_from(
            dist_graph.local_partition,
            {name: t.local_partition for name, t in dist_graph.ndata.items()},
            {name: t.local_partition for name, t in dist_graph.edata.items()},
            dist_graph.get_partition_book(), dist_graph.graph_name, source="DistGraph")
    elif type(dist_graph).__module__.startswith("dgl.distributed"):
        data = _from_dgl_dist_graph(dist_graph)
    else:
        raise TypeError(f"convert_dist_graph takes a DistGraph (sarlite's or DGL's), got "
                        f"{type(dist_graph).__name__}")
    return construct_full_graph(data)


def _from_dgl_dist_graph(g):
    """The :class:`sarlite.PartitionData` of DGL 2.1's own ``DistGraph`` ``g``."""
    book = g.get_partition_book()
    ours = RangePartitionBook(
        book.partid, book.num_partitions(),
        {t: book._typed_nid_range[t].tolist() for t in book.ntypes},      # DGL 2.1's ranges
        {":".join(c): book._typed_eid_range[c].tolist() for c in book.canonical_etypes},
        {t: i for i, t in enumerate(book.ntypes)},
        {":".join(c): i for i, c in enumerate(book.canonical_etypes)})
    nodes = {f"{t}/{name}": g.nodes[t].data[name].local_partition
             for t in g.ntypes for name in g.nodes[t].data.keys()}
    edges = {f"{':'.join(c)}/{name}": g.edges[c].data[name].local_partition
             for c in g.canonical_etypes for name in g.edges[c].data.keys()}
    return partition_data_from(g.local_partition, nodes, edges, ours, g.graph_name,
                               source="dgl.distributed.DistGraph")
