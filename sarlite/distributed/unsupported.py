"""The public names of ``dgl.distributed`` (DGL 2.1) that :mod:`sarlite.distributed` does
not provide, and why. Asking the facade for one raises :class:`UnsupportedError`."""
from __future__ import annotations

_SERVERS = ("sarlite has no servers and no RPC: every process is a torchrun trainer that "
            "owns one partition, and every distributed operation is a collective over "
            "torch.distributed")
_SHARED_MEMORY = ("sarlite shares nothing between processes through shared memory: each "
                  "trainer holds its own partition")
_INTERNAL = ("it is a module or helper internal to DGL's implementation, not part of the "
             "facade; use the names sarlite.distributed exports")

_RPC_NAMES = (
    "DistConnectError", "DistGraphServer", "KVClient", "KVServer", "Request", "Response",
    "SERVER_EXIT", "ServerState", "client_barrier", "connect_receiver", "connect_to_server",
    "create_receiver", "create_sender", "fast_pull", "finalize_receiver", "finalize_sender",
    "get_group_id", "get_machine_id", "get_num_client", "get_num_machines",
    "read_ip_config", "recv_request", "recv_response", "register_service", "remote_call",
    "remote_call_to_machine", "role", "rpc", "rpc_client", "rpc_server",
    "send_request", "send_request_to_machine", "send_response", "server_state",
    "set_machine_id", "set_num_client", "set_num_machines", "set_rank", "kvstore",
    "standalone_kvstore", "start_server", "wait_for_senders")
_INTERNAL_NAMES = (
    "backend_name", "constants", "dist_context", "dist_dataloader", "dist_graph",
    "dist_tensor", "expand_as_pair", "graph_partition_book", "graph_services", "id_map",
    "importlib", "os", "partition", "pytorch", "sparse_emb", "sys", "utils")

#: name -> why sarlite does not provide it
UNSUPPORTED: dict[str, str] = {
    **{name: _SERVERS for name in _RPC_NAMES},
    **{name: _INTERNAL for name in _INTERNAL_NAMES},
    "get_rank": _SERVERS + "; this trainer's rank is torch.distributed.get_rank() or "
                           "g.rank()",
    "copy_data_to_shared_memory": _SHARED_MEMORY,
    "shared_mem_utils": _SHARED_MEMORY,
    "dgl_partition_to_graphbolt": (
        "sarlite neither writes nor reads GraphBolt partitions; its partitions are DGL's "
        "format, so dgl.distributed.dgl_partition_to_graphbolt itself converts them"),
}


class UnsupportedError(NotImplementedError):
    """A ``dgl.distributed`` name that sarlite does not provide (the message says why)."""


def unsupported(module: str, name: str) -> UnsupportedError:
    """The error for ``module.name`` when ``name`` is in :data:`UNSUPPORTED`."""
    return UnsupportedError(f"{module}.{name} is dgl.distributed.{name}, which sarlite does "
                            f"not provide: {UNSUPPORTED[name]}")
