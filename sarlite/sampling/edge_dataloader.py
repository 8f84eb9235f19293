"""``DistEdgeDataLoader``: batches of a rank's edges for edge prediction and link
prediction, as ``dgl.dataloading.DistEdgeDataLoader``, with the equal batch count of
:mod:`.dataloader`.

Each batch goes through DGL's own ``EdgePredictionSampler`` (what
``dgl.dataloading.as_edge_prediction_sampler`` returns) on the
:class:`~sarlite.sampling.DistGraph`: the batch's edges (``g.edge_subgraph``), its negative
pairs (e.g. ``dgl.dataloading.negative_sampler.Uniform``, which calls ``g.find_edges``),
the edges to exclude, and the blocks of the pairs' end nodes (the node sampler, with
``exclude_eids``). All of these are collectives; every rank runs them for every batch,
an empty one included (no positive edges, no negative pairs, blocks without nodes).
"""
from __future__ import annotations

from collections.abc import Mapping

import dgl
import torch

from ..partition.book import DEFAULT_ETYPE, DEFAULT_ETYPE_STR, as_id_tensor
from .dataloader import (DistDataLoader, loader_kwargs, one_type_ids, typed_batch,
                         typed_rows)
from .prefetch import fetch_lazy_features, to_device

#: DGL's ``EdgeCollator`` keywords, which ``DistEdgeDataLoader`` takes with a node sampler.
EDGE_COLLATOR_KWARGS = ("g_sampling", "exclude", "reverse_eids", "reverse_etypes",
                        "negative_sampler")


def _typed_eids(g, eids) -> dict:
    """``{canonical etype: int64 ids}`` of ``eids`` on a graph with named types (plain ids
    name its one edge type). Local; ``ValueError`` for an unknown type."""
    if not isinstance(eids, Mapping):
        if len(g.canonical_etypes) != 1:
            raise ValueError(f"DistEdgeDataLoader eids: the graph has edge types "
                             f"{g.canonical_etypes}; give {{etype: ids}}")
        eids = {g.canonical_etypes[0]: eids}
    return {g.to_canonical_etype(etype): as_id_tensor(ids) for etype, ids in eids.items()}


def _is_edge_sampler(sampler) -> bool:
    """An edge sampler (``sample(g, eids)`` returns whole batches) rather than a node
    sampler that ``as_edge_prediction_sampler`` must wrap."""
    if isinstance(sampler, dgl.dataloading.EdgePredictionSampler):
        return True
    return callable(getattr(sampler, "sample", None)) and not callable(
        getattr(sampler, "sample_blocks", None))


def _edge_sampler(graph_sampler, g, collator: dict):
    """The edge sampler to call per batch: ``graph_sampler`` itself, or a node sampler
    wrapped by ``as_edge_prediction_sampler`` with DGL's ``EdgeCollator`` keywords."""
    if _is_edge_sampler(graph_sampler):
        if collator:
            raise TypeError(f"DistEdgeDataLoader: {sorted(collator)} belong to "
                            f"as_edge_prediction_sampler(...), which graph_sampler already "
                            f"is; pass them there")
        return graph_sampler
    g_sampling = collator.pop("g_sampling", None)
    if g_sampling is not None and g_sampling is not g:
        raise NotImplementedError("DistEdgeDataLoader: g_sampling (a second graph to "
                                  "sample on) is not supported; sampling uses g")
    if collator.get("exclude") == "reverse_types" or collator.get("reverse_etypes"):
        raise ValueError("DistEdgeDataLoader: exclude='reverse_types' needs several edge "
                         "types; the DistGraph has one (use 'reverse_id' with "
                         "reverse_eids)")
    collator.pop("reverse_etypes", None)
    if not callable(getattr(graph_sampler, "sample", None)):
        raise TypeError(f"DistEdgeDataLoader needs an edge sampler "
                        f"(dgl.dataloading.as_edge_prediction_sampler(...)) or a node "
                        f"sampler with sample(g, seeds, exclude_eids), got "
                        f"{type(graph_sampler).__name__}")
    return dgl.dataloading.as_edge_prediction_sampler(graph_sampler, **collator)


class DistEdgeDataLoader(DistDataLoader):
    """Batches of this rank's edges with their pair graphs and sampled blocks, as
    ``dgl.dataloading.DistEdgeDataLoader``.

    Iterating yields the edge sampler's result for each batch of edge ids; with DGL's
    ``as_edge_prediction_sampler(node_sampler, negative_sampler=...)``,
    ``(input_nodes, pair_graph, neg_pair_graph, blocks)`` (without a negative sampler,
    ``(input_nodes, pair_graph, blocks)``): ``pair_graph`` holds the batch's edges
    between compacted end nodes (``ndata[dgl.NID]`` global node ids, ``edata[dgl.EID]``
    global edge ids), ``neg_pair_graph`` the negative pairs over the same nodes, and
    ``blocks`` compute those nodes' representations. ``len(loader)`` is the same on every
    rank; a rank that ran out of edges yields empty batches (no positive edges, no
    negative pairs, blocks without nodes) until the others finish: train on them with
    :func:`~sarlite.sampling.mean_loss` over the per-pair losses (see
    :mod:`sarlite.sampling.dataloader`).

    Parameters
    ----------
    g:
        The :class:`~sarlite.sampling.DistGraph`.
    eids:
        Distinct global edge ids this rank trains on (e.g. from ``edge_split``); a tensor,
        array, list, or ``{etype: ids}`` (type-wise ids; what a graph with several edge
        types needs). Each batch is then ``{canonical etype: ids}`` with every type of
        the dict, empty where the batch has none of it.
    graph_sampler:
        Either an edge sampler, ``dgl.dataloading.as_edge_prediction_sampler(sampler,
        exclude=..., reverse_eids=..., negative_sampler=...)``, or a node sampler
        (``dgl.dataloading.NeighborSampler``, :class:`DistNeighborSampler`) with DGL's
        ``EdgeCollator`` keywords below, which wrap it the same way (DGL 2.1's
        distributed examples do this).
    device:
        Device of the yielded graphs and tensors (default: CPU, where they are sampled).
    **kwargs:
        ``exclude`` (``None``, ``"self"``, ``"reverse_id"``, edge ids or a callable, as
        DGL), ``reverse_eids``, ``negative_sampler``; ``g_sampling`` only as ``g``.
        ``batch_size`` (default 1), ``shuffle``, ``drop_last``: as
        :class:`DistDataLoader`; ``num_workers``, ``pin_memory``, ``persistent_workers``,
        ``prefetch_factor`` and ``queue_size`` are accepted and ignored.

    Constructing it is a collective (one size exchange), and so is every batch: every
    rank makes its loader at the same point and iterates it in step with the others.

    Raises
    ------
    ValueError
        Duplicate edge ids, ids of another edge type, ``exclude="reverse_types"``, or a
        batch size below 1.
    TypeError
        EdgeCollator keywords next to an edge sampler, a sampler without ``sample``, or an
        unknown keyword.
    NotImplementedError
        A ``g_sampling`` other than ``g``.
    """

    def __init__(self, g, eids, graph_sampler, device=None, **kwargs):
        collator = {key: kwargs.pop(key) for key in EDGE_COLLATOR_KWARGS if key in kwargs}
        options = loader_kwargs(kwargs, "DistEdgeDataLoader")
        options.setdefault("batch_size", 1)
        self.g = g
        self.graph_sampler = _edge_sampler(graph_sampler, g, collator)
        self._types: list | None = None
        if g is not None and g.get_partition_book().has_named_types:
            self.eids = _typed_eids(g, eids)
            self._types = list(self.eids)
            dataset = typed_rows(self.eids)
        else:
            self.eids = dataset = one_type_ids(
                eids, [DEFAULT_ETYPE, DEFAULT_ETYPE[1], DEFAULT_ETYPE_STR],
                "DistEdgeDataLoader eids")
        for ids in (self.eids.values() if self._types else [self.eids]):
            if torch.unique(ids).numel() != ids.numel():
                raise ValueError("eids has duplicate edge ids; every edge must appear once")
        self.device = device
        super().__init__(dataset, collate_fn=self._sample_batch, **options)

    def _items(self, index: torch.Tensor):
        """The batch's edges: ids, or ``{canonical etype: ids}`` with every type of
        ``eids`` (empty where the batch has none of a type) on a graph with named
        types."""
        if self._types is None:
            return self.eids[index]
        return typed_batch(self.dataset[index], self._types)

    def _sample_batch(self, eids: torch.Tensor):
        result = fetch_lazy_features(self.g, self.graph_sampler.sample(self.g, eids))
        return to_device(result, self.device)
