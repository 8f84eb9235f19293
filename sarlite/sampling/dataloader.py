"""Mini-batch loaders with DGL 2.1's signatures, run in every rank's main process.

:class:`DistDataLoader` (``dgl.distributed.DistDataLoader``) cuts a dataset into batches
and hands each to a ``collate_fn``; :class:`DistNodeDataLoader`
(``dgl.dataloading.DistNodeDataLoader``) does so with a rank's seed node ids and a graph
sampler: sarlite's :class:`DistNeighborSampler` or DGL's own sampler objects
(``dgl.dataloading.NeighborSampler``, ``MultiLayerFullNeighborSampler``, anything with
``sample(g, seeds)`` or ``sample_blocks(g, seeds)``) called on the
:class:`~sarlite.sampling.DistGraph`. The edge loader is in :mod:`.edge_dataloader`.

**Every rank yields the same number of batches.** Sampling and feature pulls are
collectives (every rank takes part in each), so they run in the main process (collectives
cannot run in worker processes; ``num_workers`` is ignored) and the loaders agree, when
they are made, on the largest batch count of any rank. A rank that has run out of ids
then yields **empty batches** (no seeds: 0 output nodes, blocks with no nodes) until the
others finish; its sampler still runs, so the collectives line up. Each id is used exactly
once per epoch, and uneven splits cannot hang (DGL's loader hangs there, dgl#3538).

**Training on an empty batch.** Run the step as usual (the feature pulls are collectives
too, so do not ``continue`` past them): the model's forward on empty blocks gives an
empty prediction. A mean loss over it is ``nan`` (``F.cross_entropy`` of nothing); use
:func:`~sarlite.sampling.mean_loss` on per-element losses instead: the mean over every
rank's batch, 0 on an empty rank, connected to the model's parameters so that DDP's
gradient all-reduce (or :func:`sarlite.all_reduce_gradients`) still runs, with exact
gradients. :func:`~sarlite.sampling.is_empty_batch` tells a rank that its batch is empty
(to leave it out of logged metrics)::

    for input_nodes, seeds, blocks in loader:          # same count on every rank
        x = g.ndata["feat"][input_nodes]               # collective: every batch
        y = g.ndata["label"][seeds]
        pred = model(blocks, x)
        loss = mean_loss(F.cross_entropy(pred, y, reduction="none"), model)
        optimizer.zero_grad()
        loss.backward()                                # DDP all-reduces here
        optimizer.step()
"""
from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Sequence

import dgl
import torch

from ..comm import exchange_sizes, rank, world_size
from ..runtime import allocator
from ..partition.book import DEFAULT_NTYPE, as_id_tensor
from ..kv.routing import take_rows
from .neighbor import check_fanout, owns_all, sample_etype_neighbors, sample_owned_neighbors
from .prefetch import fetch_lazy_features, to_device

#: Keyword arguments of torch's and DGL's loaders that have no meaning here: sampling is a
#: collective, so it always runs in the main process.
IGNORED_KWARGS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")


class DistNeighborSampler:
    """Sample a block per layer, ``fanouts[l]`` neighbours per node for layer ``l``.

    sarlite's sampler; DGL's ``dgl.dataloading.NeighborSampler`` works on a DistGraph too.
    This one pulls its prefetched data eagerly inside :meth:`sample_blocks`.

    Parameters
    ----------
    fanouts:
        Neighbours per node for each layer, input layer first (``-1``: all); on a graph
        with named types an entry may be ``{etype: fanout}`` naming every edge type.
    prob, replace:
        As :func:`sarlite.sampling.sample_neighbors`; blocks hold in-edges.
    prefetch_node_feats:
        Names of node data pulled for the input nodes into ``blocks[0].srcdata`` (with
        types: for every node type that has the field).
    prefetch_labels:
        Names of node data pulled for the output nodes into ``blocks[-1].dstdata`` (with
        types: likewise).

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
            for value in (fanout.values() if isinstance(fanout, Mapping) else [fanout]):
                check_fanout(value)
        self.fanouts = list(fanouts)
        self.prob = prob
        self.replace = replace
        self.prefetch_node_feats = list(prefetch_node_feats or ())
        self.prefetch_labels = list(prefetch_labels or ())
        self.output_device = None          # read by dgl.dataloading.as_edge_prediction_sampler

    def sample_blocks(self, g, seed_nodes, exclude_eids=None, *,
                      seeds_owned: bool = False) -> tuple[Any, Any, list]:
        """``(input_nodes, output_nodes, blocks)`` for ``seed_nodes`` (distinct global ids;
        ``{ntype: ids}`` on a graph with named types, and then so are the node ids
        returned).

        ``blocks[l]`` is a DGL block whose ``srcdata[dgl.NID]`` / ``dstdata[dgl.NID]`` are
        global node ids (destination nodes first among the sources) and whose
        ``edata[dgl.EID]`` are global edge ids; ``output_nodes`` equals ``seed_nodes``
        and ``input_nodes`` is ``blocks[0].srcdata[dgl.NID]``. ``exclude_eids``: global
        edge ids never sampled (as DGL's samplers; link prediction passes the batch's
        edges).

        Collective and blocking: every rank calls it in the same order, also with no
        seeds (one :func:`sample_neighbors` per layer, then the feature pulls), and with
        the same ``seeds_owned``.

        ``seeds_owned=True`` (keyword-only) says that **on every rank** every seed is the
        rank's own: the seeds' hop then samples locally
        (:func:`~sarlite.sampling.neighbor.sample_owned_neighbors`) and their labels are
        read from the local shard, without any exchange; the result is the same.
        :class:`DistNodeDataLoader` passes it when its ranks agreed on that at
        construction. Ignored with ``prob`` or named types.
        """
        seeds = typed_ids(g, seed_nodes)
        output_nodes = seeds
        options = {} if exclude_eids is None else {"exclude_edges": exclude_eids}
        local = seeds_owned and self.prob is None and isinstance(seeds, torch.Tensor)
        blocks = []
        for fanout in reversed(self.fanouts):
            frontier = (sample_owned_neighbors(g, seeds, fanout, replace=self.replace,
                                               **options) if local and not blocks else
                        sample_etype_neighbors(g, seeds, fanout, prob=self.prob,
                                               replace=self.replace, **options))
            block = dgl.to_block(frontier, seeds)
            for c_etype in block.canonical_etypes:
                eids = block.edges[c_etype].data
                eids[dgl.EID] = frontier.edges[c_etype].data[dgl.EID][eids[dgl.EID]]
            seeds = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        for name in self.prefetch_node_feats:
            _pull(g, blocks[0].srcnodes, blocks[0].srctypes, name)
        for name in self.prefetch_labels:
            if local:
                _read_owned(g, blocks[-1].dstdata, name)
            else:
                _pull(g, blocks[-1].dstnodes, blocks[-1].dsttypes, name)
        return seeds, output_nodes, blocks

    def sample(self, g, seed_nodes, exclude_eids=None) -> tuple[torch.Tensor, torch.Tensor,
                                                                  list]:
        """The same as :meth:`sample_blocks` (DGL's sampler interface). Collective."""
        return self.sample_blocks(g, seed_nodes, exclude_eids)


def typed_ids(g, ids):
    """``ids`` as an int64 tensor, or on a graph with named types as ``{ntype: int64
    tensor}`` (plain ids then name the graph's one node type). Local."""
    if not g.get_partition_book().has_named_types:
        return as_id_tensor(ids)
    if not isinstance(ids, Mapping):
        ids = {g.ntypes[0] if len(g.ntypes) == 1 else None: ids}
    return {g.ntypes[g.get_ntype_id(ntype)]: as_id_tensor(v) for ntype, v in ids.items()}


def typed_rows(ids: dict) -> torch.Tensor:
    """``(n, 2)`` rows ``(type index, id)`` of ``{type: ids}``, the types in the dict's
    order: a loader's dataset over several types. Local."""
    return torch.cat([torch.stack([torch.full_like(v, i), v], 1)
                      for i, v in enumerate(ids.values())] or
                     [torch.zeros(0, 2, dtype=torch.int64)])


def typed_batch(rows: torch.Tensor, types: list) -> dict:
    """``{type: ids}`` of :func:`typed_rows` ``rows``, every type present (empty where the
    rows have none of it). Local."""
    return {t: rows[rows[:, 0] == i, 1] for i, t in enumerate(types)}


def _pull(g, nodes, ntypes, name: str) -> None:
    """Fill ``nodes[t].data[name]`` (a block's source or destination frames) from ``g``'s
    node data of type ``t``, for every type that has ``name``. Collective (one pull per
    such type, in type order). ``KeyError`` when no type has it."""
    having = [t for t in ntypes if name in g.nodes[t].data]
    if not having:
        raise KeyError(f"prefetch: the graph has no node data {name!r} (of the types "
                       f"{list(ntypes)})")
    for ntype in having:
        frame = nodes[ntype].data
        frame[name] = g.nodes[ntype].data[name][frame[dgl.NID]]


def _read_owned(g, frame, name: str) -> None:
    """Fill ``frame[name]`` (a homogeneous block's data) from the local shard of
    ``g.ndata[name]``: every id of ``frame[dgl.NID]`` is this rank's own. Local."""
    if name not in g.ndata:
        raise KeyError(f"prefetch: the graph has no node data {name!r}")
    tensor = g.ndata[name]
    frame[name] = take_rows(tensor.local_partition,
                            tensor.part_policy.to_local(frame[dgl.NID]))


def check_batch_size(batch_size) -> None:
    """Raise ``ValueError`` unless ``batch_size`` is a positive integer."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def loader_kwargs(kwargs: dict[str, Any], what: str) -> dict[str, Any]:
    """The keyword arguments of :class:`DistDataLoader` among ``kwargs``, without the
    :data:`IGNORED_KWARGS`. Raises ``TypeError`` naming any other keyword."""
    known = ("batch_size", "shuffle", "drop_last", "queue_size")
    unknown = sorted(set(kwargs) - set(known) - set(IGNORED_KWARGS))
    if unknown:
        raise TypeError(f"{what} got unexpected keyword arguments {unknown}; it takes "
                        f"{list(known)} (and ignores {list(IGNORED_KWARGS)})")
    return {key: value for key, value in kwargs.items() if key in known}


def one_type_ids(ids, types: Sequence, what: str) -> torch.Tensor:
    """``ids`` as an int64 tensor; a ``{type: ids}`` dict must hold only the graph's one
    type (one of ``types``). Raises ``ValueError`` otherwise. Local."""
    if isinstance(ids, Mapping):
        if len(ids) != 1 or next(iter(ids)) not in types:
            raise ValueError(f"{what}: the graph has one type {types[0]!r}, got ids for "
                             f"{sorted(map(str, ids))}")
        ids = next(iter(ids.values()))
    return as_id_tensor(ids)


def sampler_call(sampler, what: str) -> Callable:
    """The method of ``sampler`` a loader calls per batch: ``sample`` (DGL's interface;
    with a ``dgl.dataloading.BlockSampler`` its lazy features are then pulled), else
    ``sample_blocks``. Raises ``TypeError`` when it has neither."""
    for name in ("sample", "sample_blocks"):
        method = getattr(sampler, name, None)
        if callable(method):
            return method
    raise TypeError(f"{what} needs a graph sampler with a sample(g, seeds) or "
                    f"sample_blocks(g, seeds) method, got {type(sampler).__name__}")


class DistDataLoader:
    """Batches of a dataset, the same number on every rank, as
    ``dgl.distributed.DistDataLoader``.

    Parameters
    ----------
    dataset:
        This rank's items (a tensor of node or edge ids, or anything with ``len`` and
        integer indexing).
    batch_size:
        Items per batch (the last one may be smaller).
    shuffle:
        Reshuffle every epoch (torch's global generator: ``torch.manual_seed`` makes it
        reproducible).
    collate_fn:
        Called with each batch, a list of items (tensor items become Python scalars, as
        in DGL); its result is yielded. ``None`` yields the list itself. It is called for
        the empty batches too, with ``[]``, so a sampling ``collate_fn`` takes part in
        every collective.
    drop_last:
        Drop this rank's last incomplete batch.
    queue_size:
        Ignored (DGL's prefetch queue of sampler processes; sampling runs in the main
        process here).

    ``len(loader)`` is the same on every rank: the largest number of batches of any rank
    (``ceil(len(dataset) / batch_size)``, or the floor with ``drop_last``); a rank with
    fewer yields empty batches after its own (see the module docstring for training on
    them).

    Notes
    -----
    Constructing it is a **collective** (one size exchange): every rank makes its loader
    at the same point, even with an empty dataset. Iterating is in step across ranks: when
    the batches sample (a ``collate_fn`` or graph sampler that calls collectives), every
    rank must consume every batch; a rank must not ``break`` out alone.

    When the process runs with ``sarlite.init``'s default allocator setting (made for
    full-graph training), rank 0 warns once that mini-batch scripts should call
    ``sarlite.init(mmap_threshold="retain")`` (see :mod:`sarlite.runtime.allocator`).

    Raises
    ------
    ValueError
        A batch size that is not a positive integer.
    CollectiveError
        A rank failed or did not construct its loader in time.
    """

    def __init__(self, dataset, batch_size: int, shuffle: bool = False,
                 collate_fn: Callable | None = None, drop_last: bool = False,
                 queue_size: int | None = None):
        check_batch_size(batch_size)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.queue_size = queue_size
        rounding = math.floor if drop_last else math.ceil
        self.num_local_batches = rounding(len(dataset) / batch_size)
        self.num_batches = max(exchange_sizes([self.num_local_batches] * world_size()))
        advice = allocator.mini_batch_advice()
        if advice is not None and rank() == 0:
            warnings.warn(advice, stacklevel=2)        # shown once per process

    @property
    def expected_idxs(self) -> int:
        """The number of batches per epoch (DGL's attribute name)."""
        return self.num_batches

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator:
        count = len(self.dataset)
        order = torch.randperm(count) if self.shuffle else torch.arange(count)
        for i in range(self.num_batches):
            index = (order[i * self.batch_size:(i + 1) * self.batch_size]
                     if i < self.num_local_batches else order[:0])
            yield self._collate(self._items(index))

    def _items(self, index: torch.Tensor):
        return [_scalar(self.dataset[i]) for i in index.tolist()]

    def _collate(self, items):
        return items if self.collate_fn is None else self.collate_fn(items)


def _every_rank_owns(g, nids: torch.Tensor | None) -> bool:
    """Whether every rank owns all of its ``nids`` (``None``: typed ids, never taken as
    owned). Collective: one size exchange."""
    mine = int(nids is not None and owns_all(g, nids))
    return all(exchange_sizes([mine] * world_size()))


def _scalar(item):
    """A one-element tensor as a Python number (also inside a ``(type, id)`` pair)."""
    if isinstance(item, torch.Tensor) and item.numel() == 1:
        return item.item()
    if isinstance(item, tuple) and len(item) == 2:
        return item[0], _scalar(item[1])
    return item


class DistNodeDataLoader(DistDataLoader):
    """Batches of this rank's seed nodes with their sampled blocks, as
    ``dgl.dataloading.DistNodeDataLoader``.

    Iterating yields what the sampler returns for each batch of seeds; for a block
    sampler, ``(input_nodes, output_nodes, blocks)`` with global node ids and the blocks'
    ``edata[dgl.EID]`` global edge ids. ``len(loader)`` is the same on every rank; a rank
    that ran out of seeds yields empty batches (``output_nodes`` empty, blocks without
    nodes) until the others finish: train on them with
    :func:`~sarlite.sampling.mean_loss` (module docstring).

    Parameters
    ----------
    g:
        The :class:`~sarlite.sampling.DistGraph`.
    nids:
        Distinct global node ids this rank trains on (e.g. from ``node_split``); a tensor,
        array, list, or ``{"_N": ids}``. On a graph with named types ``{ntype: ids}`` of
        type-wise ids: the batches then cut through the types in the dict's order (as
        DGL's), and each batch's seeds are ``{ntype: ids}`` with every type of ``nids``
        (empty where the batch has none of it).
    graph_sampler:
        DGL's ``dgl.dataloading.NeighborSampler`` / ``MultiLayerFullNeighborSampler`` (their
        ``prefetch_node_feats``, ``prefetch_labels`` and ``prefetch_edge_feats`` are
        pulled from ``g``, which DGL's distributed loader does not do), sarlite's
        :class:`DistNeighborSampler`, or anything with ``sample(g, seeds)`` or
        ``sample_blocks(g, seeds)`` that calls the graph's collectives the same way on
        every rank.
    device:
        Device of the yielded graphs and tensors (default: CPU, where they are sampled).
    **kwargs:
        ``batch_size`` (default 1), ``shuffle``, ``drop_last``: as
        :class:`DistDataLoader`; ``num_workers``, ``pin_memory``, ``persistent_workers``,
        ``prefetch_factor`` and ``queue_size`` are accepted and ignored.

    Notes
    -----
    Constructing it is a collective (two size exchanges), and so is every batch (the
    sampler's collectives and pulls): every rank makes its loader at the same point and
    iterates it in step with the others.

    **Own seeds.** When every rank's ``nids`` are its own nodes (as
    :func:`~sarlite.sampling.node_split` with ``force_even=False`` gives them; its default
    even split may hand a rank some nodes of another) and the sampler is a
    :class:`DistNeighborSampler` (without ``prob``), the ranks agree on that at
    construction, and each batch then samples its seeds' hop and reads their labels
    locally: two exchanges of the four per layer-and-pull fewer, the same batches.

    Raises
    ------
    ValueError
        Duplicate ids, ids of several node types, or a batch size below 1.
    TypeError
        A sampler with neither ``sample`` nor ``sample_blocks``, or an unknown keyword.
    """

    def __init__(self, g, nids, graph_sampler, device=None, **kwargs):
        options = loader_kwargs(kwargs, "DistNodeDataLoader")
        options.setdefault("batch_size", 1)
        self.g = g
        self._types: list[str] | None = None
        if g.get_partition_book().has_named_types:
            self.nids = typed_ids(g, nids)
            self._types = list(self.nids)
            dataset = typed_rows(self.nids)
        else:
            self.nids = dataset = one_type_ids(nids, [DEFAULT_NTYPE],
                                               "DistNodeDataLoader nids")
        for ids in (self.nids.values() if self._types else [self.nids]):
            if torch.unique(ids).numel() != ids.numel():
                raise ValueError("nids has duplicate node ids; every seed must appear once")
        self.graph_sampler = graph_sampler
        self._sample = sampler_call(graph_sampler, "DistNodeDataLoader")
        owned = _every_rank_owns(g, None if self._types else self.nids)   # collective
        if owned and isinstance(graph_sampler, DistNeighborSampler):
            self._sample = functools.partial(graph_sampler.sample_blocks, seeds_owned=True)
        self.device = device
        super().__init__(dataset, collate_fn=self._sample_batch, **options)

    def _items(self, index: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """The batch's seeds: ids, or ``{ntype: ids}`` with every type of ``nids`` (empty
        where the batch has none of a type) on a graph with named types."""
        if self._types is None:
            return self.nids[index]
        return typed_batch(self.dataset[index], self._types)

    def _sample_batch(self, seeds):
        result = fetch_lazy_features(self.g, self._sample(self.g, seeds))
        return to_device(result, self.device)
