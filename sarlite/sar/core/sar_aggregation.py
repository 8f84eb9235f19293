"""SAR's ``sar.core.sar_aggregation``: :func:`sarlite.message_has_parameters` (an optional
hint in sarlite, which finds the parameters a message function uses by itself)."""
from ...core import message_has_parameters

__all__ = ["message_has_parameters"]
