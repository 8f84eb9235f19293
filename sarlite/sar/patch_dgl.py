"""IntelLabs SAR's ``patch_dgl``: route DGL's attention and kernel functions to sarlite
graphs (:func:`sarlite.install_dgl_dispatch`)."""
from __future__ import annotations

import dgl

from ..core import edge_softmax, install_dgl_dispatch

# sarlite finds the parameters a message function uses by itself, so DGL's RelGraphConv
# needs no subclass declaring them.
RelGraphConv = dgl.nn.RelGraphConv

# Given a sarlite graph it computes on it; given anything else it is DGL's edge_softmax.
patched_edge_softmax = edge_softmax


def patch_dgl() -> None:
    """Make ``dgl.nn`` attention layers (GATConv, DotGatConv, AGNNConv, ...), ``dgl.ops``
    kernels and the readouts work on sarlite graphs, as SAR's ``patch_dgl`` does for its
    graphs. DGL graphs still get DGL's functions. Idempotent; undo with
    :func:`sarlite.uninstall_dgl_dispatch`. Not a collective."""
    install_dgl_dispatch()


__all__ = ["RelGraphConv", "patch_dgl", "patched_edge_softmax"]
