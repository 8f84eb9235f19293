"""Synthetic graphs: the embedded default dataset and a power-law graph for scale tests.

Both generators are deterministic for a given ``seed`` and build the edge list with numpy
in a handful of int64 arrays of length ``num_nodes * avg_degree`` (no Python loops over
edges), so they reach several million nodes on one machine.

Every graph returned carries the node data a training job expects:

==============  ===================  ==========================================
key             shape / dtype        meaning
==============  ===================  ==========================================
``feat``        ``(N, feat_dim)`` f32  node features
``label``       ``(N,)`` int64        class of the node
``train_mask``  ``(N,)`` bool         training nodes
``val_mask``    ``(N,)`` bool         validation nodes
``test_mask``   ``(N,)`` bool         test nodes
==============  ===================  ==========================================
"""
from __future__ import annotations

import dgl
import numpy as np
import torch

from .edges import simple_graph


def _check_sizes(num_nodes: int, avg_degree: float, num_classes: int, feat_dim: int) -> None:
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be at least 2, got {num_nodes}")
    if avg_degree <= 0:
        raise ValueError(f"avg_degree must be positive, got {avg_degree}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be at least 2, got {num_classes}")
    if feat_dim < 1:
        raise ValueError(f"feat_dim must be at least 1, got {feat_dim}")


def _random_masks(rng: np.random.Generator, num_nodes: int, train_frac: float,
                  val_frac: float) -> dict[str, torch.Tensor]:
    if not (0 < train_frac and 0 <= val_frac and train_frac + val_frac < 1):
        raise ValueError(
            f"need 0 < train_frac, 0 <= val_frac and train_frac + val_frac < 1, "
            f"got train_frac={train_frac}, val_frac={val_frac}")
    order = rng.permutation(num_nodes)
    n_train = max(1, int(round(train_frac * num_nodes)))
    n_val = int(round(val_frac * num_nodes))
    masks = {}
    for key, ids in (("train_mask", order[:n_train]),
                     ("val_mask", order[n_train:n_train + n_val]),
                     ("test_mask", order[n_train + n_val:])):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(ids)] = True
        masks[key] = mask
    return masks


def homophilous_graph(num_nodes: int = 10_000, avg_degree: float = 10.0,
                      num_classes: int = 8, feat_dim: int = 64, homophily: float = 0.8,
                      feature_signal: float = 0.12, train_frac: float = 0.1,
                      val_frac: float = 0.1, seed: int = 0) -> dgl.DGLGraph:
    """The embedded default: an undirected graph with planted classes.

    Each node draws a class uniformly. ``num_nodes * avg_degree / 2`` undirected pairs are
    drawn: the first end is uniform, the second is a uniform node of the same class with
    probability ``homophily`` and a uniform node otherwise. Self-loops and duplicates are
    dropped, so the realised average in-degree is slightly below ``avg_degree``.

    Features are ``feature_signal * centroid[label] + N(0, 1)`` noise with one Gaussian
    centroid per class. The default signal is weak enough that a per-node classifier (an MLP)
    does clearly worse than a GNN that averages over the homophilous neighbourhood.

    Parameters
    ----------
    num_nodes, avg_degree, num_classes, feat_dim:
        Sizes. ``avg_degree`` counts both directions of an undirected edge.
    homophily:
        Probability in ``[0, 1]`` that a drawn edge joins two nodes of the same class.
    feature_signal:
        Scale of the class centroid in the features (0 gives pure noise).
    train_frac, val_frac:
        Fractions of nodes in the random train and validation masks; the rest is test.
    seed:
        Seed of every random draw.

    Returns
    -------
    dgl.DGLGraph
        With ``feat``, ``label`` and the three masks in ``ndata`` (see the module docstring).

    Example
    -------
    >>> g = homophilous_graph(num_nodes=1000, avg_degree=8, seed=1)
    >>> g.ndata["feat"].shape
    torch.Size([1000, 64])
    """
    _check_sizes(num_nodes, avg_degree, num_classes, feat_dim)
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num_nodes)
    by_class = np.argsort(labels, kind="stable")
    class_size = np.bincount(labels, minlength=num_classes)
    class_start = np.concatenate([[0], np.cumsum(class_size)[:-1]])

    num_pairs = int(num_nodes * avg_degree / 2)
    src = rng.integers(0, num_nodes, num_pairs)
    dst = rng.integers(0, num_nodes, num_pairs)
    same = rng.random(num_pairs) < homophily
    cls = labels[src[same]]
    offset = (rng.random(int(same.sum())) * class_size[cls]).astype(np.int64)
    dst[same] = by_class[class_start[cls] + offset]
    del same, cls, offset
    g = simple_graph(src, dst, num_nodes, symmetric=True)
    del src, dst

    centroids = rng.standard_normal((num_classes, feat_dim)).astype(np.float32)
    feat = rng.standard_normal((num_nodes, feat_dim), dtype=np.float32)
    feat += feature_signal * centroids[labels]
    g.ndata["feat"] = torch.from_numpy(feat)
    g.ndata["label"] = torch.from_numpy(labels.astype(np.int64))
    g.ndata.update(_random_masks(rng, num_nodes, train_frac, val_frac))
    return g


def powerlaw_graph(num_nodes: int = 10_000, avg_degree: float = 10.0,
                   num_classes: int = 8, feat_dim: int = 64,
                   rmat_probs: tuple[float, float, float] = (0.57, 0.19, 0.19),
                   train_frac: float = 0.1, val_frac: float = 0.1,
                   seed: int = 0) -> dgl.DGLGraph:
    """A directed R-MAT graph with a skewed (power-law-like) degree distribution.

    ``num_nodes * avg_degree`` edges are drawn by R-MAT recursion on ``ceil(log2 N)``
    levels with quadrant probabilities ``(a, b, c, 1 - a - b - c)``; ids are scaled into
    ``[0, N)`` and then relabelled by a random permutation, so hubs are spread over the id
    space. Self-loops and duplicate edges are dropped.

    Features are Gaussian; the label of a node is the arg-max of a fixed random linear map of
    its features, so the task is learnable but carries no graph signal. The graph is meant
    for scale, skew and balance tests, not for accuracy.

    Returns
    -------
    dgl.DGLGraph
        With ``feat``, ``label`` and the three masks in ``ndata``.
    """
    _check_sizes(num_nodes, avg_degree, num_classes, feat_dim)
    a, b, c = rmat_probs
    if min(a, b, c) < 0 or a + b + c >= 1:
        raise ValueError(f"rmat_probs (a, b, c) must be non-negative with a+b+c < 1, "
                         f"got {rmat_probs}")
    rng = np.random.default_rng(seed)
    levels = max(1, int(np.ceil(np.log2(num_nodes))))
    num_edges = int(num_nodes * avg_degree)
    src = np.zeros(num_edges, dtype=np.int64)
    dst = np.zeros(num_edges, dtype=np.int64)
    for _ in range(levels):
        r = rng.random(num_edges)
        src = (src << 1) | (r >= a + b)
        dst = (dst << 1) | (((r >= a) & (r < a + b)) | (r >= a + b + c))
    del r
    relabel = rng.permutation(num_nodes)
    src = relabel[(src * num_nodes) >> levels]
    dst = relabel[(dst * num_nodes) >> levels]
    g = simple_graph(src, dst, num_nodes, symmetric=False)
    del src, dst

    feat = rng.standard_normal((num_nodes, feat_dim), dtype=np.float32)
    weight = rng.standard_normal((feat_dim, num_classes)).astype(np.float32)
    g.ndata["feat"] = torch.from_numpy(feat)
    g.ndata["label"] = torch.from_numpy((feat @ weight).argmax(1).astype(np.int64))
    g.ndata.update(_random_masks(rng, num_nodes, train_frac, val_frac))
    return g
