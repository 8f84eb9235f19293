"""torch.distributed plumbing: set-up (and the settings ``init`` read), row exchanges,
wrapped collectives, parameter sync, traffic counters. Every collective sarlite runs goes
through this package; the process runtime under it is :mod:`sarlite.runtime`."""
from . import traffic
from .collectives import (agree_row_shapes, all_gather_object, all_reduce, all_reduce_autograd,
                          barrier, broadcast, broadcast_object, finalize,
                          scatter_object)
from .context import init, run_key, settings
from .errors import CollectiveError
from .exchange import (PendingRows, all_to_all_rows, exchange_sizes, ring_exchange,
                       start_known_rows)
from .group import comm_device, rank, world_size
from .params import all_reduce_gradients, sync_params

__all__ = ["CollectiveError", "PendingRows", "agree_row_shapes", "all_gather_object",
           "all_reduce", "all_reduce_autograd", "all_reduce_gradients", "all_to_all_rows",
           "barrier", "broadcast", "broadcast_object", "comm_device", "exchange_sizes",
           "finalize", "init", "rank", "ring_exchange", "run_key", "scatter_object",
           "settings", "start_known_rows", "sync_params", "traffic",
           "world_size"]
