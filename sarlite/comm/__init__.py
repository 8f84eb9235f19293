"""torch.distributed plumbing: set-up, row exchanges, parameter sync, traffic counters."""
from . import traffic
from .context import comm_device, finalize, init, rank, world_size
from .exchange import CollectiveError, PendingRows, all_to_all_rows, exchange_sizes, ring_exchange
from .params import all_reduce_gradients, sync_params

__all__ = ["CollectiveError", "PendingRows", "all_reduce_gradients", "all_to_all_rows", "comm_device",
           "exchange_sizes", "finalize", "init", "rank", "ring_exchange", "sync_params",
           "traffic", "world_size"]
