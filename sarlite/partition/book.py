"""Range partition book and partition policies, with DGL's names and semantics.

After reshuffling, partition ``p`` owns the contiguous node ids ``[node_map[p, 0],
node_map[p, 1])`` and edge ids ``[edge_map[p, 0], edge_map[p, 1])``. Mapping a global id
to its owner is therefore a binary search over the range ends, and mapping it to a local
id is a subtraction. Only homogeneous graphs (one node type ``_N`` and one edge type
``_N:_E:_N``) are supported.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

DEFAULT_NTYPE = "_N"
DEFAULT_ETYPE = ("_N", "_E", "_N")
DEFAULT_ETYPE_STR = ":".join(DEFAULT_ETYPE)

IdLike = torch.Tensor | np.ndarray | Sequence[int] | int


def as_id_tensor(ids: IdLike) -> torch.Tensor:
    """Return ``ids`` (tensor, numpy array, list or int) as a 1-D int64 tensor."""
    if isinstance(ids, torch.Tensor):
        tensor = ids
    else:
        tensor = torch.as_tensor(np.asarray(ids))
    if tensor.dtype.is_floating_point or tensor.dtype == torch.bool:
        raise TypeError(f"ids must be integers, got dtype {tensor.dtype}")
    return tensor.reshape(-1).to(torch.int64)


_HOMOGENEOUS = ("sarlite supports homogeneous graphs only (one node type '_N', one edge "
                "type ('_N', '_E', '_N')); use DGL for heterogeneous graphs")


def check_ntype(ntype) -> str:
    """``"_N"`` if ``ntype`` names sarlite's one node type, else ``NotImplementedError``."""
    if ntype != DEFAULT_NTYPE:
        raise NotImplementedError(f"node type {ntype!r}: {_HOMOGENEOUS}")
    return DEFAULT_NTYPE


def check_etype(etype) -> tuple[str, str, str]:
    """The canonical edge type if ``etype`` names sarlite's one edge type (``"_E"``,
    ``"_N:_E:_N"`` or ``("_N", "_E", "_N")``), else ``NotImplementedError``."""
    if etype in (DEFAULT_ETYPE[1], DEFAULT_ETYPE_STR) or \
            (isinstance(etype, (tuple, list)) and tuple(etype) == DEFAULT_ETYPE):
        return DEFAULT_ETYPE
    raise NotImplementedError(f"edge type {etype!r}: {_HOMOGENEOUS}")


def _as_ranges(id_map, what: str) -> torch.Tensor:
    """Normalise a range map to an int64 tensor of shape ``(num_parts, 2)``.

    Accepts ``{type: ranges}`` with a single type, an ``(P, 2)`` array of ``[start, end)``
    pairs, or a list of ``P`` boundaries (the exclusive end of each part, as old DGL wrote).
    """
    if isinstance(id_map, dict):
        if len(id_map) != 1:
            raise ValueError(f"only homogeneous graphs are supported: {what} map has "
                             f"types {sorted(id_map)}")
        id_map = next(iter(id_map.values()))
    ranges = torch.as_tensor(np.asarray(id_map), dtype=torch.int64)
    if ranges.dim() == 1:
        ends = ranges
        ranges = torch.stack([torch.cat([ends.new_zeros(1), ends[:-1]]), ends], 1)
    if ranges.dim() != 2 or ranges.shape[1] != 2 or ranges.shape[0] == 0:
        raise ValueError(f"{what} map must have shape (num_parts, 2), got "
                         f"{tuple(ranges.shape)}")
    if ranges[0, 0] != 0 or not torch.equal(ranges[1:, 0], ranges[:-1, 1]) or \
            bool((ranges[:, 1] < ranges[:, 0]).any()):
        raise ValueError(f"{what} map must be contiguous ranges starting at 0, got "
                         f"{ranges.tolist()}")
    return ranges


class RangePartitionBook:
    """Which partition owns which node and edge ids, for range-partitioned graphs.

    Parameters
    ----------
    part_id:
        The partition this process is responsible for.
    num_parts:
        Number of partitions ``P``.
    node_map, edge_map:
        ``[start, end)`` id range of each partition: a ``(P, 2)`` tensor, numpy array or
        nested list, or a ``{"_N": ...}`` / ``{"_N:_E:_N": ...}`` dict holding one.
    ntypes, etypes:
        Optional ``{name: type_id}`` dicts as stored in the partition JSON.

    Example
    -------
    >>> gpb = RangePartitionBook(0, 2, [[0, 3], [3, 5]], [[0, 7], [7, 9]])
    >>> gpb.nid2partid([0, 4])
    tensor([0, 1])
    """

    def __init__(self, part_id: int, num_parts: int, node_map, edge_map,
                 ntypes: dict | None = None, etypes: dict | None = None):
        self._node_ranges = _as_ranges(node_map, "node")
        self._edge_ranges = _as_ranges(edge_map, "edge")
        for what, ranges in (("node", self._node_ranges), ("edge", self._edge_ranges)):
            if ranges.shape[0] != num_parts:
                raise ValueError(f"{what} map has {ranges.shape[0]} ranges but num_parts "
                                 f"is {num_parts}")
        if not 0 <= part_id < num_parts:
            raise ValueError(f"part_id {part_id} is out of range [0, {num_parts})")
        self._part_id = int(part_id)
        self._num_parts = int(num_parts)
        self.ntypes = list(ntypes or {DEFAULT_NTYPE: 0})
        self.canonical_etypes = [DEFAULT_ETYPE]
        self.etypes = [DEFAULT_ETYPE[1]]

    # -- sizes -----------------------------------------------------------------------
    @property
    def partid(self) -> int:
        """The partition id of this process."""
        return self._part_id

    def num_partitions(self) -> int:
        return self._num_parts

    def shared_memory(self, graph_name: str) -> None:
        """DGL moves its book into shared memory for its servers; sarlite has no servers,
        so this raises ``NotImplementedError``."""
        raise NotImplementedError("RangePartitionBook.shared_memory: sarlite has no "
                                  "servers to share the partition book with; each trainer "
                                  "loads its own (load_partition_book)")

    @property
    def is_homogeneous(self) -> bool:
        """Always ``True``: sarlite's graphs have one node and one edge type."""
        return True

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        """``("_N", "_E", "_N")`` for the one edge type; ``NotImplementedError`` else."""
        return check_etype(etype)

    def _num_nodes(self, ntype: str = DEFAULT_NTYPE) -> int:
        return int(self._node_ranges[-1, 1])

    def _num_edges(self, etype=DEFAULT_ETYPE) -> int:
        return int(self._edge_ranges[-1, 1])

    @property
    def node_ranges(self) -> torch.Tensor:
        """``(P, 2)`` int64 tensor of ``[start, end)`` node ids per partition."""
        return self._node_ranges.clone()

    @property
    def edge_ranges(self) -> torch.Tensor:
        """``(P, 2)`` int64 tensor of ``[start, end)`` edge ids per partition."""
        return self._edge_ranges.clone()

    def metadata(self) -> list[dict]:
        """Per partition: ``{"machine_id", "num_nodes", "num_edges"}`` as in DGL."""
        nodes = self._node_ranges[:, 1] - self._node_ranges[:, 0]
        edges = self._edge_ranges[:, 1] - self._edge_ranges[:, 0]
        return [{"machine_id": p, "num_nodes": int(nodes[p]), "num_edges": int(edges[p])}
                for p in range(self._num_parts)]

    # -- id maps ---------------------------------------------------------------------
    @staticmethod
    def _owner(ranges: torch.Tensor, ids: IdLike, what: str) -> torch.Tensor:
        ids = as_id_tensor(ids)
        total = int(ranges[-1, 1])
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= total):
            raise IndexError(f"{what} ids must be in [0, {total}), got values in "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        return torch.searchsorted(ranges[:, 1].contiguous().to(ids.device), ids, right=True)

    def nid2partid(self, nids: IdLike, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        """Partition id of each global node id (int64 tensor, same length)."""
        check_ntype(ntype)
        return self._owner(self._node_ranges, nids, "node")

    def eid2partid(self, eids: IdLike, etype=DEFAULT_ETYPE) -> torch.Tensor:
        """Partition id of each global edge id (int64 tensor, same length)."""
        check_etype(etype)
        return self._owner(self._edge_ranges, eids, "edge")

    def _check_part(self, partid: int) -> int:
        if not 0 <= partid < self._num_parts:
            raise ValueError(f"partid {partid} is out of range [0, {self._num_parts})")
        return int(partid)

    def partid2nids(self, partid: int, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        """All global node ids owned by ``partid``, ascending."""
        check_ntype(ntype)
        start, end = self._node_ranges[self._check_part(partid)].tolist()
        return torch.arange(start, end, dtype=torch.int64)

    def partid2eids(self, partid: int, etype=DEFAULT_ETYPE) -> torch.Tensor:
        """All global edge ids owned by ``partid``, ascending."""
        check_etype(etype)
        start, end = self._edge_ranges[self._check_part(partid)].tolist()
        return torch.arange(start, end, dtype=torch.int64)

    def _to_local(self, ranges: torch.Tensor, ids: IdLike, partid: int | None,
                  what: str) -> torch.Tensor:
        ids = as_id_tensor(ids)
        partid = self._part_id if partid is None else self._check_part(partid)
        start, end = ranges[partid].tolist()
        if ids.numel() and (int(ids.min()) < start or int(ids.max()) >= end):
            raise IndexError(f"{what} ids are not all owned by partition {partid} "
                             f"(its range is [{start}, {end}))")
        return ids - start

    def nid2localnid(self, nids: IdLike, partid: int | None = None,
                     ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        """Local ids of global node ids that ``partid`` (default: this one) owns."""
        check_ntype(ntype)
        return self._to_local(self._node_ranges, nids, partid, "node")

    def eid2localeid(self, eids: IdLike, partid: int | None = None,
                     etype=DEFAULT_ETYPE) -> torch.Tensor:
        """Local ids of global edge ids that ``partid`` (default: this one) owns."""
        check_etype(etype)
        return self._to_local(self._edge_ranges, eids, partid, "edge")

    # -- typed and homogeneous ids (one type: the identity) ----------------------------
    def map_to_per_ntype(self, ids: IdLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node type ids, per-type ids)`` of homogeneous node ids: zeros and ``ids``."""
        ids = as_id_tensor(ids)
        return torch.zeros_like(ids), ids

    def map_to_per_etype(self, ids: IdLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(edge type ids, per-type ids)`` of homogeneous edge ids: zeros and ``ids``."""
        ids = as_id_tensor(ids)
        return torch.zeros_like(ids), ids

    def map_to_homo_nid(self, ids: IdLike, ntype: str) -> torch.Tensor:
        """Homogeneous ids of per-type node ids: ``ids`` for the one node type."""
        check_ntype(ntype)
        return as_id_tensor(ids)

    def map_to_homo_eid(self, ids: IdLike, etype) -> torch.Tensor:
        """Homogeneous ids of per-type edge ids: ``ids`` for the one edge type."""
        check_etype(etype)
        return as_id_tensor(ids)

    def __repr__(self) -> str:
        return (f"RangePartitionBook(partid={self._part_id}, num_parts={self._num_parts}, "
                f"num_nodes={self._num_nodes()}, num_edges={self._num_edges()})")


class PartitionPolicy:
    """Row partitioning of node or edge data by a partition book, as DGL's class.

    ``policy_str`` is ``"node~_N"`` or ``"edge~_N:_E:_N"`` (``"node"``, ``"edge"`` and
    ``"edge~_E"`` are read as those); :class:`NodePartitionPolicy` and
    :class:`EdgePartitionPolicy` build them from a type.

    Raises
    ------
    ValueError
        ``policy_str`` starts with neither ``node`` nor ``edge``.
    NotImplementedError
        It names a type other than the homogeneous graph's.
    """

    def __init__(self, policy_str: str, partition_book: RangePartitionBook):
        kind, _, type_name = str(policy_str).partition("~")
        if kind == "node":
            self.type_name = check_ntype(type_name or DEFAULT_NTYPE)
        elif kind == "edge":
            self.type_name = check_etype(type_name or DEFAULT_ETYPE_STR)
        else:
            raise ValueError(f"policy_str must start with 'node' or 'edge', got "
                             f"{policy_str!r}")
        self.kind = kind
        self._partition_book = partition_book

    @property
    def is_node(self) -> bool:
        """Whether this policy partitions node data."""
        return self.kind == "node"

    @property
    def partition_book(self) -> RangePartitionBook:
        return self._partition_book

    @property
    def part_id(self) -> int:
        return self._partition_book.partid

    @property
    def policy_str(self) -> str:
        """``"node~_N"`` or ``"edge~_N:_E:_N"``, as DGL names policies."""
        name = self.type_name if isinstance(self.type_name, str) else ":".join(self.type_name)
        return f"{self.kind}~{name}"

    def _ranges(self) -> torch.Tensor:
        book = self._partition_book
        return book.node_ranges if self.kind == "node" else book.edge_ranges

    def to_local(self, id_tensor: IdLike) -> torch.Tensor:
        """Global ids owned by this partition to local ids."""
        book = self._partition_book
        if self.kind == "node":
            return book.nid2localnid(id_tensor, book.partid)
        return book.eid2localeid(id_tensor, book.partid)

    def to_partid(self, id_tensor: IdLike) -> torch.Tensor:
        """Owner partition of each global id."""
        book = self._partition_book
        if self.kind == "node":
            return book.nid2partid(id_tensor)
        return book.eid2partid(id_tensor)

    def get_part_size(self) -> int:
        """Number of ids this partition owns."""
        start, end = self._ranges()[self.part_id].tolist()
        return end - start

    def get_size(self) -> int:
        """Number of ids in the whole graph."""
        return int(self._ranges()[-1, 1])


class NodePartitionPolicy(PartitionPolicy):
    """Row partitioning of node data by the owner of each node id.

    ``ntype`` must be ``"_N"`` (``NotImplementedError`` otherwise)."""

    def __init__(self, partition_book: RangePartitionBook, ntype: str = DEFAULT_NTYPE):
        super().__init__(f"node~{check_ntype(ntype)}", partition_book)


class EdgePartitionPolicy(PartitionPolicy):
    """Row partitioning of edge data by the owner (destination's partition) of each edge.

    ``etype`` must name the one edge type (``NotImplementedError`` otherwise)."""

    def __init__(self, partition_book: RangePartitionBook, etype=DEFAULT_ETYPE):
        super().__init__("edge~" + ":".join(check_etype(etype)), partition_book)
