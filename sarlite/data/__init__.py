"""Datasets: the embedded synthetic generators and loaders for real graphs on disk."""
from __future__ import annotations

import os

import dgl

from .loaders import DATA_DIR_LAYOUT, REAL_DATASETS, layout, load_dataset
from .ogb import read_ogbn_mag, refuse_reverse_edges
from .synthetic import homophilous_graph, powerlaw_graph
from .synthetic_hetero import mag_like_graph, mag_like_sized

SYNTHETIC_DATASETS = {"synthetic": homophilous_graph, "powerlaw": powerlaw_graph,
                      "mag_like": mag_like_sized}
DATASETS = tuple(sorted(SYNTHETIC_DATASETS)) + tuple(REAL_DATASETS)


def load_graph(name: str, data_dir: str | os.PathLike | None = None, split: int = 0,
               seed: int = 0, reverse_edges: bool | None = None, **sizes) -> dgl.DGLGraph:
    """Load a dataset by name.

    ``"synthetic"`` (the homophilous default), ``"powerlaw"`` and ``"mag_like"`` (a
    heterograph with ogbn-mag's schema, ``num_nodes`` papers) are generated with ``seed``
    and the size keywords in ``sizes`` (``num_nodes``, ``avg_degree``, ``num_classes``,
    ``feat_dim``, ...); every other name is a real dataset read from ``data_dir``, with
    ``split`` (heterophilous sets), ``seed`` (random splits) and ``reverse_edges``
    (``ogbn-arxiv`` / ``ogbn-papers100M``: reverse edges; ``ogbn-mag``: reverse relations;
    see :func:`load_dataset`). Size keywords are ignored for real datasets. ``mag_like``
    and ``ogbn-mag`` are heterographs with the same schema (4 relations and their
    reverses), the others homogeneous; :func:`read_ogbn_mag` is ogbn-mag's raw reader
    (stored relations and edges only).

    Raises
    ------
    ValueError
        Unknown name, or a real dataset without ``data_dir``.
    """
    key = name.lower()
    if key in SYNTHETIC_DATASETS:
        if reverse_edges is not None:
            refuse_reverse_edges(name)
        return SYNTHETIC_DATASETS[key](seed=seed, **sizes)
    if key not in REAL_DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if data_dir is None:
        raise ValueError(f"dataset {name!r} is read from disk: give the directory holding "
                         f"{layout(key)} (--data-dir, or dataset.data_dir in a config)")
    return load_dataset(key, data_dir, split=split, seed=seed, reverse_edges=reverse_edges)


def train_classes(g: dgl.DGLGraph, name: str = "the graph"):
    """The training mask as classes for the partitioner to balance (``balance_ntypes``):
    a tensor, or ``{ntype: tensor}`` for the types of a heterograph that have one.

    Raises
    ------
    ValueError
        No node (of any type) has a ``train_mask``.
    """
    mask = g.ndata["train_mask"] if "train_mask" in g.ndata else {}
    if isinstance(mask, dict):
        if not mask:
            raise ValueError(f"{name} has no train_mask to balance")
        return {t: m.long() for t, m in mask.items()}
    return mask.long()


__all__ = ["DATASETS", "DATA_DIR_LAYOUT", "REAL_DATASETS", "SYNTHETIC_DATASETS",
           "homophilous_graph", "layout", "load_dataset", "load_graph", "mag_like_graph",
           "powerlaw_graph", "read_ogbn_mag", "train_classes"]
