"""IntelLabs SAR's distributed neighbour sampling: ``DistNeighborSampler`` and
``DataLoader`` over the full graph of :func:`sar.construct_full_graph`, on sarlite's
:class:`~sarlite.DistNeighborSampler` and :class:`~sarlite.DistGraph`.

Sampling and feature pulls are collectives, so they run in each rank's main process, and
every rank's loader yields the same number of batches.
"""
from __future__ import annotations

import itertools
import logging
import math
import os
import weakref

import torch

from ...comm import all_reduce
from ...kv import get_kvstore
from ...partition import NodePartitionPolicy
from ...partition.assign import metis_assignment
from ...partition.book import as_id_tensor
from ...sampling import DistGraph
from ...sampling import DistNeighborSampler as _Sampler
from ..construct_shard_manager import partition_of

log = logging.getLogger("sarlite.sar")
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_feature_keys = itertools.count()


def _dist_graph(full_graph_manager) -> DistGraph:
    """The :class:`sarlite.DistGraph` over the manager's partition (made once; collective
    the first time)."""
    graph = _GRAPHS.get(full_graph_manager)
    if graph is None:
        graph = DistGraph.from_partition_data(partition_of(full_graph_manager))
        _GRAPHS[full_graph_manager] = graph
    return graph


class DistNeighborSampler:
    """Sample one DGL block per layer around seed nodes of the distributed graph.

    ``fanouts[l]``: neighbours per node for layer ``l`` (input layer first; -1: all).
    ``prob``: name of an edge feature of the partition used as unnormalised sampling
    weights. ``input_node_features`` / ``output_node_features``: ``{name: (num_owned, ...)}``
    rows of this worker's nodes, put into ``blocks[0].srcdata`` / ``blocks[-1].dstdata``
    (rows of other workers' nodes are fetched from them). ``output_device``: where the
    blocks go. Blocks carry ``srcdata``/``dstdata[dgl.NID]`` (global node ids) and
    ``edata[dgl.EID]`` (global edge ids); ``copy_edata`` is accepted, and edge features
    are not copied into the blocks.
    """

    def __init__(self, fanouts: list[int], prob: str | None = None, replace: bool = False,
                 copy_edata: bool = True, input_node_features: dict | None = None,
                 output_node_features: dict | None = None, output_device=None):
        self.fanouts = list(fanouts)
        self.prob, self.replace, self.copy_edata = prob, bool(replace), copy_edata
        self.input_node_features = dict(input_node_features or {})
        self.output_node_features = dict(output_node_features or {})
        self.output_device = output_device
        self._sampler = _Sampler(self.fanouts, prob=prob, replace=self.replace)
        self._keys: dict[str, str] | None = None

    def _store_keys(self, graph: DistGraph) -> dict[tuple[str, str], str]:
        """Put the feature rows into the graph's key-value store once (no copy for
        contiguous CPU tensors); collective, in the same order on every rank."""
        if self._keys is None:
            policy = NodePartitionPolicy(graph.get_partition_book())
            features = {("in", n): t for n, t in self.input_node_features.items()}
            features.update({("out", n): t for n, t in self.output_node_features.items()})
            self._keys = {}
            for side, name in sorted(features):
                key = f"{policy.policy_str}:sar.sampler.{next(_feature_keys)}.{side}.{name}"
                get_kvstore().add_data(key, features[(side, name)], policy)
                self._keys[(side, name)] = key
        return self._keys

    def sample(self, full_graph_manager, seeds) -> list:
        """The blocks of ``seeds`` (distinct global node ids), input layer first.

        Collective: every rank calls it in the same order, also with no seeds.
        """
        graph = _dist_graph(full_graph_manager)
        keys = self._store_keys(graph)
        input_nodes, output_nodes, blocks = self._sampler.sample_blocks(graph, seeds)
        for (side, name), key in sorted(keys.items()):
            if side == "in":
                blocks[0].srcdata[name] = get_kvstore().pull(key, input_nodes)
            else:
                blocks[-1].dstdata[name] = get_kvstore().pull(key, output_nodes)
        if self.output_device is not None:
            blocks = [block.to(self.output_device) for block in blocks]
        return blocks


def _clustered(full_graph_manager, seeds: torch.Tensor, parts: int,
               cache: str | None) -> torch.Tensor:
    """``seeds`` ordered by METIS cluster of the owned in-edges (SAR's optimized batches),
    read from / written to ``cache`` when given. Local."""
    if parts <= 1 or seeds.numel() == 0:
        return seeds
    path = None if cache is None else f"{cache}_{partition_of(full_graph_manager).rank}_{parts}"
    if path is not None and os.path.isfile(path):
        return _cached_order(path, seeds)
    sampling_graph = full_graph_manager.sampling_graph
    labeled = torch.zeros(sampling_graph.num_nodes(), dtype=torch.int64)
    labeled[seeds] = 1
    cluster = metis_assignment(sampling_graph, parts, balance_ntypes=labeled,
                               balance_edges=True)
    ordered = seeds[torch.sort(cluster[seeds], stable=True).indices]
    if path is not None:
        torch.save(ordered, path)
    return ordered


def _cached_order(path: str, seeds: torch.Tensor) -> torch.Tensor:
    """The order of ``seeds`` saved in ``path`` by :func:`_clustered`. Loads tensors only
    (no code runs) and refuses a file that does not hold an order of exactly ``seeds``.

    Raises
    ------
    ValueError
        The file is not such a tensor (damaged, from other seeds, or not sarlite's).
    """
    try:
        ordered = torch.load(path, weights_only=True)
    except Exception as err:  # torch raises several types for a damaged or foreign file
        ordered, cause = None, f"{type(err).__name__}: {str(err).splitlines()[0]}"
    else:
        cause = "it does not hold an order of this rank's seeds"
    if isinstance(ordered, torch.Tensor) and ordered.dtype == torch.int64 and \
            ordered.shape == seeds.shape and \
            torch.equal(torch.sort(ordered).values, torch.sort(seeds).values):
        return ordered
    raise ValueError(f"SAR's batch cache {path} cannot be used ({cause}); remove it to "
                     f"recompute the clustering")


class DataLoader:
    """Batches of sampled blocks for ``seed_nodes`` (SAR's signature); iterating yields the
    list of blocks of each batch, input layer first.

    ``seed_nodes``: this rank's global node ids (duplicates are dropped). Every rank yields
    the same number of batches: the largest ``ceil(n / batch_size)`` (``floor`` with
    ``drop_last``, which first drops this rank's incomplete batch) of any rank. Each rank
    cuts its seeds into that many near-equal batches, so each seed is used once per epoch
    and no batch is empty; a rank with fewer seeds than batches repeats seeds (one per
    batch), and a rank with none yields blocks without nodes (train with a loss summed over
    the batch and divided by a global count, or batches would give NaN means there).
    ``precompute_optimized_batches`` orders the seeds by METIS clusters of the local
    in-edges before cutting (``optimized_batches_cache``: file prefix to keep that order).
    ``shuffle`` shuffles the seeds each epoch (with precomputed batches: the batch order),
    from torch's global generator. ``num_workers`` is accepted and ignored: collectives run
    in the main process.

    Constructing it is a collective (one all-reduce), and so is every batch.

    Raises ``ValueError`` for a batch size below 1.
    """

    def __init__(self, full_graph_manager, seed_nodes, graph_sampler: DistNeighborSampler,
                 batch_size: int = 1, drop_last: bool = False, shuffle: bool = False,
                 precompute_optimized_batches: bool = True,
                 optimized_batches_cache: str | None = None, num_workers: int = 0):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if num_workers:
            log.warning("sar.DataLoader: num_workers=%d ignored (sampling is collective and "
                        "runs in the main process)", num_workers)
        self.graph, self.sampler = full_graph_manager, graph_sampler
        seeds = torch.unique(as_id_tensor(seed_nodes.cpu() if torch.is_tensor(seed_nodes)
                                          else seed_nodes))
        if drop_last:
            seeds = seeds[torch.randperm(seeds.numel())] if shuffle else seeds
            seeds = seeds[:seeds.numel() // batch_size * batch_size]
        local = (seeds.numel() // batch_size if drop_last
                 else math.ceil(seeds.numel() / batch_size))
        self.num_batches = int(all_reduce(torch.tensor([local]), "max",
                                          kind="sar.DataLoader")[0])
        self.precomputed = precompute_optimized_batches
        if precompute_optimized_batches:
            seeds = _clustered(full_graph_manager, seeds, self.num_batches,
                               optimized_batches_cache)
        self.seeds, self.shuffle = seeds, shuffle

    def __len__(self) -> int:
        return self.num_batches

    def _batches(self) -> list[torch.Tensor]:
        seeds, count = self.seeds, self.num_batches
        if self.shuffle and not self.precomputed:
            seeds = seeds[torch.randperm(seeds.numel())]
        if 0 < seeds.numel() < count:
            seeds = seeds.repeat(math.ceil(count / seeds.numel()))[:count]
        batches = list(torch.tensor_split(seeds, count)) if count else []
        if self.shuffle and self.precomputed:
            batches = [batches[i] for i in torch.randperm(count).tolist()]
        return batches

    def __iter__(self):
        for batch in self._batches():
            yield self.sampler.sample(self.graph, batch)


__all__ = ["DataLoader", "DistNeighborSampler"]
