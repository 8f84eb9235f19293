"""Edge-list clean-up shared by the generators and the loaders."""
from __future__ import annotations

import dgl
import numpy as np
import torch


def simple_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                 symmetric: bool) -> dgl.DGLGraph:
    """Drop self-loops and duplicate edges (optionally adding reverses) and build a graph.

    Edges come out sorted by (src, dst), so the result does not depend on draw order.
    """
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = np.unique(src * np.int64(num_nodes) + dst)
    del src, dst
    src, dst = np.divmod(key, np.int64(num_nodes))
    del key
    return dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
