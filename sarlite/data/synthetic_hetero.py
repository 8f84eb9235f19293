"""A synthetic heterogeneous graph with ogbn-mag's schema and planted classes.

:func:`mag_like_graph` returns a ``dgl.heterograph`` with ogbn-mag's four node types and
four relations, plus one reverse relation for each, so that messages flow both ways:

===================  ==================  ==================  =======================
relation             source type         destination type    reverse relation
===================  ==================  ==================  =======================
``affiliated_with``  ``author``          ``institution``     ``rev_affiliated_with``
``writes``           ``author``          ``paper``           ``rev_writes``
``cites``            ``paper``           ``paper``           ``cited_by``
``has_topic``        ``paper``           ``field_of_study``  ``rev_has_topic``
===================  ==================  ==================  =======================

A reverse relation holds the forward edges with their ends swapped, in the same order, so
edge ``i`` of one is edge ``i`` of the other. Only ``paper`` carries node data; as in
ogbn-mag, the other types have no features (a model learns an embedding for them):

==============  =========================  ==============================================
key             shape / dtype              meaning
==============  =========================  ==============================================
``feat``        ``(P, feat_dim)`` float32  paper features (weak class signal)
``label``       ``(P,)`` int64             class of the paper
``year``        ``(P,)`` int64             publication year
``train_mask``  ``(P,)`` bool              oldest papers
``val_mask``    ``(P,)`` bool              the next ones in time
``test_mask``   ``(P,)`` bool              newest papers
==============  =========================  ==============================================

The generator is deterministic for a given ``seed`` and builds every edge list with numpy
in a few vectorised draws (no Python loops over edges).
"""
from __future__ import annotations

import dgl
import numpy as np
import torch

NTYPES = ("author", "field_of_study", "institution", "paper")
RELATIONS = (("author", "affiliated_with", "institution"),
             ("author", "writes", "paper"),
             ("paper", "cites", "paper"),
             ("paper", "has_topic", "field_of_study"))
REVERSE = {"affiliated_with": "rev_affiliated_with", "writes": "rev_writes",
           "cites": "cited_by", "has_topic": "rev_has_topic"}
FIRST_YEAR, LAST_YEAR = 2010, 2019


def _check_arguments(sizes: dict[str, int], averages: dict[str, float], homophily: float,
                     feature_signal: float, train_frac: float, val_frac: float) -> None:
    for name, value in sizes.items():
        low = 2 if name in ("num_papers", "num_classes") else 1
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer of at least {low}, got {value}")
    for name, value in averages.items():
        if name == "avg_citations" and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
        if name != "avg_citations" and not value >= 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    if not feature_signal >= 0:
        raise ValueError(f"feature_signal must be non-negative, got {feature_signal}")
    if not (0 < train_frac and 0 <= val_frac and train_frac + val_frac < 1):
        raise ValueError(
            f"need 0 < train_frac, 0 <= val_frac and train_frac + val_frac < 1, "
            f"got train_frac={train_frac}, val_frac={val_frac}")


def _pick(rng: np.random.Generator, wanted: np.ndarray, classes: np.ndarray,
          same_prob: float) -> np.ndarray:
    """For each entry of ``wanted`` (a class), one node id among those labelled ``classes``.

    With probability ``same_prob`` the node is uniform among the nodes of the wanted class
    (uniform among all when that class has none); otherwise it is uniform among all.
    """
    num_classes = max(int(wanted.max(initial=0)), int(classes.max(initial=0))) + 1
    by_class = np.argsort(classes, kind="stable")
    size = np.bincount(classes, minlength=num_classes)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    out = rng.integers(0, len(classes), len(wanted))
    same = (rng.random(len(wanted)) < same_prob) & (size[wanted] > 0)
    cls = wanted[same]
    offset = (rng.random(len(cls)) * size[cls]).astype(np.int64)
    out[same] = by_class[start[cls] + offset]
    return out


def _unique_pairs(src: np.ndarray, dst: np.ndarray,
                  num_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(src, dst)`` pairs, sorted by ``(src, dst)``."""
    keys = np.unique(src.astype(np.int64) * np.int64(num_dst) + dst)
    return keys // num_dst, keys % num_dst


def _with_extra(rng: np.random.Generator, num: int, average: float) -> np.ndarray:
    """Every id of ``range(num)`` once, then ``(average - 1) * num`` uniform ids."""
    extra = int(round((average - 1.0) * num))
    return np.concatenate([np.arange(num, dtype=np.int64), rng.integers(0, num, extra)])


def _time_masks(rank: np.ndarray, train_frac: float,
                val_frac: float) -> dict[str, torch.Tensor]:
    """Train on the oldest papers, validate on the next ones, test on the newest."""
    num = len(rank)
    n_train = max(1, int(round(train_frac * num)))
    n_val = int(round(val_frac * num))
    bounds = {"train_mask": (0, n_train), "val_mask": (n_train, n_train + n_val),
              "test_mask": (n_train + n_val, num)}
    return {key: torch.from_numpy((rank >= lo) & (rank < hi))
            for key, (lo, hi) in bounds.items()}


def mag_like_graph(num_papers: int = 4000, num_authors: int = 5000,
                   num_institutions: int = 200, num_fields: int = 300,
                   num_classes: int = 8, feat_dim: int = 64, avg_citations: float = 6.0,
                   avg_authors_per_paper: float = 3.0, avg_topics_per_paper: float = 3.0,
                   homophily: float = 0.6, feature_signal: float = 0.12,
                   train_frac: float = 0.6, val_frac: float = 0.2,
                   seed: int = 0) -> dgl.DGLGraph:
    """A heterograph shaped like ogbn-mag whose classes the graph reveals far better
    than the paper features do.

    Papers draw a class uniformly; authors, fields of study and institutions each draw a
    class of their own (an author's "home" class). Edges, with ``h = homophily``:

    * ``writes``: every paper gets one author, then ``(avg_authors_per_paper - 1) * P``
      more authorships go to uniform papers; each author is, with probability ``h``,
      uniform among the authors whose home class is the paper's class, else uniform among
      all authors.
    * ``has_topic``: the same with ``avg_topics_per_paper`` and the fields of study.
    * ``cites``: ``avg_citations * P`` pairs of a uniform paper and a paper of its class
      (probability ``h``) or a uniform one; each pair points from the newer to the older
      paper (by year, ties broken at random) and a paper drawn with itself is dropped,
      so citations form a DAG: no self-citations, no pair cited both ways.
    * ``affiliated_with``: every author gets one institution, of its home class with
      probability ``h / 2`` (institutions group authors only loosely), else uniform.

    Duplicate pairs are dropped, so the realised averages are slightly below the requested
    ones. Paper features are ``feature_signal * centroid[label] + N(0, 1)`` noise with one
    Gaussian centroid per class: weak by default, so a per-paper classifier (an MLP) does
    far worse than a relational GNN. Years are uniform in ``[2010, 2019]``; the split is by
    time like ogbn-mag's: the oldest ``train_frac`` of the papers train, the next
    ``val_frac`` validate and the newest rest are the test set.

    Parameters
    ----------
    num_papers, num_authors, num_institutions, num_fields, num_classes, feat_dim:
        Sizes (``num_papers`` and ``num_classes`` at least 2, the others at least 1).
    avg_citations:
        Citations drawn per paper (positive).
    avg_authors_per_paper, avg_topics_per_paper:
        Authors and fields of study drawn per paper (at least 1: each paper has one).
    homophily:
        Probability in ``[0, 1]`` that a drawn edge ends at a node of the same class.
    feature_signal:
        Scale of the class centroid in the paper features (0 gives pure noise).
    train_frac, val_frac:
        Fractions of papers in the train and validation masks; the rest is test.
    seed:
        Seed of every random draw.

    Returns
    -------
    dgl.DGLGraph
        A heterograph with 4 node types and 8 canonical edge types; ``paper`` carries the
        data in the module docstring.

    Raises
    ------
    ValueError
        A size, average, probability or fraction out of range.

    Example
    -------
    >>> g = mag_like_graph(num_papers=500, num_authors=600, seed=1)
    >>> g.nodes["paper"].data["feat"].shape
    torch.Size([500, 64])
    """
    sizes = {"num_papers": num_papers, "num_authors": num_authors,
             "num_institutions": num_institutions, "num_fields": num_fields,
             "num_classes": num_classes, "feat_dim": feat_dim}
    averages = {"avg_citations": avg_citations,
                "avg_authors_per_paper": avg_authors_per_paper,
                "avg_topics_per_paper": avg_topics_per_paper}
    _check_arguments(sizes, averages, homophily, feature_signal, train_frac, val_frac)
    rng = np.random.default_rng(seed)
    label = rng.integers(0, num_classes, num_papers)
    author_class = rng.integers(0, num_classes, num_authors)
    field_class = rng.integers(0, num_classes, num_fields)
    institution_class = rng.integers(0, num_classes, num_institutions)
    year = rng.integers(FIRST_YEAR, LAST_YEAR + 1, num_papers)
    rank = np.empty(num_papers, dtype=np.int64)
    rank[np.lexsort((rng.random(num_papers), year))] = np.arange(num_papers)

    paper = _with_extra(rng, num_papers, avg_authors_per_paper)
    writes = _unique_pairs(_pick(rng, label[paper], author_class, homophily), paper,
                           num_papers)
    paper = _with_extra(rng, num_papers, avg_topics_per_paper)
    has_topic = _unique_pairs(paper, _pick(rng, label[paper], field_class, homophily),
                              num_fields)
    author = np.arange(num_authors, dtype=np.int64)
    affiliated = _unique_pairs(
        author, _pick(rng, author_class, institution_class, homophily / 2),
        num_institutions)
    paper = rng.integers(0, num_papers, int(round(avg_citations * num_papers)))
    other = _pick(rng, label[paper], label, homophily)
    keep = paper != other
    paper, other = paper[keep], other[keep]
    newer = rank[paper] > rank[other]
    cites = _unique_pairs(np.where(newer, paper, other), np.where(newer, other, paper),
                          num_papers)
    del paper, other, keep, newer

    forward = dict(zip(RELATIONS, (affiliated, writes, cites, has_topic)))
    edges = {}
    for (src_type, rel, dst_type), (src, dst) in forward.items():
        src, dst = torch.from_numpy(src), torch.from_numpy(dst)
        edges[(src_type, rel, dst_type)] = (src, dst)
        edges[(dst_type, REVERSE[rel], src_type)] = (dst, src)
    num_nodes = {"paper": num_papers, "author": num_authors,
                 "institution": num_institutions, "field_of_study": num_fields}
    g = dgl.heterograph(edges, num_nodes_dict=num_nodes)

    centroids = rng.standard_normal((num_classes, feat_dim)).astype(np.float32)
    feat = rng.standard_normal((num_papers, feat_dim), dtype=np.float32)
    feat += feature_signal * centroids[label]
    data = g.nodes["paper"].data
    data["feat"] = torch.from_numpy(feat)
    data["label"] = torch.from_numpy(label.astype(np.int64))
    data["year"] = torch.from_numpy(year.astype(np.int64))
    data.update(_time_masks(rank, train_frac, val_frac))
    return g


def mag_like_sized(num_nodes: int = 4000, avg_degree: float = 6.0, num_classes: int = 8,
                   feat_dim: int = 64, seed: int = 0) -> dgl.DGLGraph:
    """:func:`mag_like_graph` from the synthetic datasets' size keywords (the
    ``dataset`` section of a training config): ``num_nodes`` papers, ``avg_degree``
    citations per paper, and the other types in the default proportions (1.25 authors,
    0.05 institutions and 0.075 fields of study per paper)."""
    return mag_like_graph(num_papers=num_nodes, num_authors=max(1, num_nodes * 5 // 4),
                          num_institutions=max(1, num_nodes // 20),
                          num_fields=max(1, num_nodes * 3 // 40), num_classes=num_classes,
                          feat_dim=feat_dim, avg_citations=avg_degree, seed=seed)


__all__ = ["NTYPES", "RELATIONS", "REVERSE", "mag_like_graph", "mag_like_sized"]
