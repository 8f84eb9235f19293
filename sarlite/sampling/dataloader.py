"""Mini-batches of sampled message-flow graphs, in every rank's main process.

:class:`DistNeighborSampler` turns seed nodes into one DGL block per layer with
:func:`sample_neighbors`; :class:`DistNodeDataLoader` cuts this rank's training ids into
batches and samples each. Sampling and feature pulls are collectives, so they run in the
main process (collectives cannot run in worker processes) and **every rank yields the
same number of batches**: the loader agrees on the largest batch count of any rank, and a
rank that has run out of ids yields empty batches (no output nodes, blocks with no
nodes) until the others finish. Each id is then used exactly once per epoch, and training
on uneven splits cannot hang (DGL's loader hangs there, dgl#3538). A training step on an
empty batch still has to take part in the gradient all-reduce.
"""
from __future__ import annotations

import math
from typing import Iterator, Sequence

import dgl
import torch

from ..comm import exchange_sizes, world_size
from ..partition.book import as_id_tensor
from .neighbor import check_fanout, sample_neighbors


class DistNeighborSampler:
    """Sample a block per layer, ``fanouts[l]`` neighbours per node for layer ``l``.

    Parameters
    ----------
    fanouts:
        Neighbours per node for each layer, input layer first (``-1``: all).
    prob, replace:
        As :func:`sarlite.sampling.sample_neighbors`; blocks hold in-edges.
    prefetch_node_feats:
        Names in ``g.ndata`` pulled for the input nodes into ``blocks[0].srcdata``.
    prefetch_labels:
        Names in ``g.ndata`` pulled for the output nodes into ``blocks[-1].dstdata``.

    Raises
    ------
    ValueError
        No fanouts, or a fanout that is not an integer >= -1.
    """

    def __init__(self, fanouts: Sequence[int], prob: str | None = None,
                 replace: bool = False, prefetch_node_feats: Sequence[str] = (),
                 prefetch_labels: Sequence[str] = ()):
        if len(fanouts) == 0:
            raise ValueError("fanouts needs one entry per layer, got none")
        for fanout in fanouts:
            check_fanout(fanout)
        self.fanouts = list(fanouts)
        self.prob = prob
        self.replace = replace
        self.prefetch_node_feats = list(prefetch_node_feats or ())
        self.prefetch_labels = list(prefetch_labels or ())

    def sample_blocks(self, g, seed_nodes) -> tuple[torch.Tensor, torch.Tensor, list]:
        """``(input_nodes, output_nodes, blocks)`` for ``seed_nodes`` (distinct global ids).

        ``blocks[l]`` is a DGL block whose ``srcdata[dgl.NID]`` / ``dstdata[dgl.NID]`` are
        global node ids (destination nodes first among the sources) and whose
        ``edata[dgl.EID]`` are global edge ids; ``output_nodes`` equals ``seed_nodes``
        and ``input_nodes`` is ``blocks[0].srcdata[dgl.NID]``.

        Collective and blocking: every rank calls it in the same order, also with no
        seeds (one :func:`sample_neighbors` per layer, then the feature pulls).
        """
        seeds = as_id_tensor(seed_nodes)
        output_nodes = seeds
        blocks = []
        for fanout in reversed(self.fanouts):
            frontier = sample_neighbors(g, seeds, fanout, prob=self.prob,
                                        replace=self.replace)
            block = dgl.to_block(frontier, seeds)
            block.edata[dgl.EID] = frontier.edata[dgl.EID][block.edata[dgl.EID]]
            seeds = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        for name in self.prefetch_node_feats:
            blocks[0].srcdata[name] = g.ndata[name][seeds]
        for name in self.prefetch_labels:
            blocks[-1].dstdata[name] = g.ndata[name][output_nodes]
        return seeds, output_nodes, blocks


class DistNodeDataLoader:
    """Batches of this rank's node ids with their sampled blocks, for distributed training.

    Iterating yields ``(input_nodes, output_nodes, blocks)`` from
    ``graph_sampler.sample_blocks``. ``len(loader)`` is the same on every rank: the
    largest number of batches of any rank (``ceil(len(nids) / batch_size)``, or the floor
    with ``drop_last``); a rank with fewer yields empty batches after its own.

    Parameters
    ----------
    g:
        The :class:`~sarlite.sampling.DistGraph`.
    nids:
        Distinct global node ids this rank trains on (e.g. from :func:`node_split`).
    graph_sampler:
        A :class:`DistNeighborSampler` (anything with ``sample_blocks(g, seeds)``).
    batch_size, shuffle, drop_last:
        As ``torch.utils.data.DataLoader``; shuffling draws from torch's global
        generator (``torch.manual_seed`` makes it reproducible).

    Collective: every rank constructs its loader at the same point (one size exchange)
    and iterates it in step with the others; every batch is a collective.

    Raises
    ------
    ValueError
        Duplicate ids or a batch size below 1.
    """

    def __init__(self, g, nids, graph_sampler, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.g = g
        self.nids = as_id_tensor(nids)
        if torch.unique(self.nids).numel() != self.nids.numel():
            raise ValueError("nids has duplicate node ids; every seed must appear once")
        self.graph_sampler = graph_sampler
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        rounding = math.floor if drop_last else math.ceil
        self.num_local_batches = rounding(self.nids.numel() / batch_size)
        self.num_batches = max(exchange_sizes([self.num_local_batches] * world_size()))

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, list]]:
        order = self.nids[torch.randperm(self.nids.numel())] if self.shuffle else self.nids
        for i in range(self.num_batches):
            seeds = (order[i * self.batch_size:(i + 1) * self.batch_size]
                     if i < self.num_local_batches else order[:0])
            yield self.graph_sampler.sample_blocks(self.g, seeds)
