"""IntelLabs SAR's ``edge_softmax``: :func:`sarlite.edge_softmax` (same signature; DGL's
own result on ordinary DGL graphs)."""
from ..core import edge_softmax

__all__ = ["edge_softmax"]
