"""The mini-batch side of sampled training: this rank's loader of sampled blocks.

With ``train.sampling`` set, each epoch walks the training nodes this rank owns
(:func:`sarlite.sampling.node_split` with ``force_even=False``) in shuffled batches of
``train.sampling.batch_size`` seeds (of the labelled type, on a heterogeneous graph);
each batch carries one sampled block per layer with ``feat`` on the input nodes (of the
types that have it) and ``label`` on the seeds, pulled through the KV layer.
Evaluation stays one exact full-graph pass (:mod:`sarlite.train.loop`).
"""
from __future__ import annotations

import dgl

from ..partition import PartitionData
from ..sampling import DistGraph, DistNeighborSampler, DistNodeDataLoader, node_split
from .config import Config


def sampled_loader(cfg: Config, data: PartitionData, rank: int,
                   target: str) -> DistNodeDataLoader:
    """The loader of sampled training batches for this rank, over ``data``: the
    partition the loop loaded for the full-graph evaluation (its feature rows become the
    KV store's rows, not copies; nothing is read from disk again). ``target``: the
    labelled node type, whose training nodes are the seeds (``{target: ids}`` on a
    heterogeneous graph); ``feat`` is prefetched for every type that has it, and each
    fanout applies to every edge type. ``loader.g`` is the :class:`DistGraph`.

    The run owns the process's default KV store: the graph makes a new one
    (``replace_kvstore=True``), so an earlier run in the same process over another
    partitioning is no obstacle. Seeds DGL's sampling generator with ``train.seed * 1000
    + rank`` (the rank's dropout stream seed, as in the loop), so a run is reproducible.

    Collective: every rank builds it at the same point (the ``DistGraph``, the pull of
    the training mask, the loader's size exchange), and every batch is a collective.
    """
    graph = DistGraph.from_partition_data(data, replace_kvstore=True)
    book = graph.get_partition_book()
    # each rank's own training nodes: the loader then samples their hop and reads their
    # labels locally (DistNodeDataLoader, "own seeds"); ranks with fewer batches get
    # empty ones, which the step handles
    if data.is_homogeneous:
        train_nids = node_split(graph.ndata["train_mask"], book, force_even=False)
    else:
        train_nids = {target: node_split(graph.nodes[target].data["train_mask"], book,
                                         ntype=target, force_even=False)}
    sampler = DistNeighborSampler(cfg.train.sampling.fanouts, prefetch_node_feats=["feat"],
                                  prefetch_labels=["label"])
    dgl.seed(cfg.train.seed * 1000 + rank)
    return DistNodeDataLoader(graph, train_nids, sampler,
                              batch_size=cfg.train.sampling.batch_size, shuffle=True)
