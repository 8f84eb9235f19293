"""SAR's ``sar.core.full_partition_block``: the one-shot :class:`sarlite.DistributedBlock`."""
from ...core import DistributedBlock

__all__ = ["DistributedBlock"]
