"""Range partition book and partition policies, with DGL's names and semantics.

Id spaces
---------
DGL's partitioner renumbers the nodes of a graph so that they are sorted by partition
and, inside a partition, by node type id. That numbering is the *homogeneous* node id
space ``[0, num_nodes)``. Partition ``p`` owns one contiguous block of it, and inside
that block each node type it holds has one contiguous run. The partition JSON stores
those runs: ``node_map[ntype][p] = [start, end)`` in homogeneous ids, and ``ntypes``
gives each type its id. Edges are laid out the same way, keyed by canonical edge type
strings ``"src:rel:dst"`` (``edge_map`` and ``etypes``).

Each type also has its own *type-wise* id space ``[0, number of nodes of the type)``:
type-wise ids number the type's runs one partition after the other, so partition ``p``
owns the type-wise ids from the size of the type's runs in partitions ``0..p-1`` on.
The *local* id of an owned type-wise id is its offset from the first type-wise id of
its type in the owning partition.

The methods of :class:`RangePartitionBook` take homogeneous ids when the type is the
homogeneous one (``"_N"`` for nodes; ``"_E"``, ``"_N:_E:_N"`` or ``("_N", "_E", "_N")``
for edges, the defaults) and type-wise ids for any real type. Looking up an owner is a
binary search over range ends; mapping to local ids is a subtraction. A homogeneous
graph is the special case of the one node type ``_N`` and the one edge type
``_N:_E:_N``, where both id spaces coincide.
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


def _is_default_etype(etype) -> bool:
    """Whether ``etype`` names the homogeneous edge type in any of its three forms."""
    if isinstance(etype, (tuple, list)):
        return tuple(etype) == DEFAULT_ETYPE
    return etype in (DEFAULT_ETYPE[1], DEFAULT_ETYPE_STR)


# -- reading node_map/edge_map and ntypes/etypes ----------------------------------------
def _ntype_key(ntype) -> str:
    """A node type name as a key of ``ntypes``/``node_map``: it must be a string."""
    if not isinstance(ntype, str):
        raise ValueError(f"node type names must be strings, got {ntype!r}")
    return ntype


def _etype_key(etype) -> tuple[str, str, str]:
    """An ``etypes``/``edge_map`` key as a canonical tuple: it may be a ``"src:rel:dst"``
    string, a 3-tuple or list of strings, or ``"_E"`` (the homogeneous edge type)."""
    if etype == DEFAULT_ETYPE[1]:
        return DEFAULT_ETYPE
    if isinstance(etype, str):
        parts = tuple(etype.split(":"))
    else:
        parts = tuple(etype) if isinstance(etype, (tuple, list)) else ()
    if len(parts) != 3 or not all(isinstance(part, str) for part in parts):
        raise ValueError(f"edge type {etype!r} is not canonical: write it as "
                         f"'src:rel:dst' or ('src', 'rel', 'dst')")
    return parts


def _label(name) -> str:
    """A type name for messages: node types as they are, edge types as ``src:rel:dst``."""
    return name if isinstance(name, str) else ":".join(name)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _type_names(what: str, types, id_map, key, default) -> list:
    """The type names of ``types`` (``{name: type_id}``), normalised by ``key``, in type-id
    order. Without ``types``: the keys of ``id_map`` in order if it is a dict, else the
    one homogeneous type ``default``."""
    if types is None:
        types = {name: i for i, name in enumerate(id_map)} if isinstance(id_map, dict) \
            else {default: 0}
    if not isinstance(types, dict) or not types:
        raise ValueError(f"{what} types must be a non-empty {{name: type_id}} dict, got "
                         f"{types!r}")
    ids = {}
    for name, type_id in types.items():
        if key(name) in ids:
            raise ValueError(f"{what} type {_label(key(name))!r} is given twice")
        ids[key(name)] = type_id
    values = list(ids.values())
    if not all(map(_is_int, values)) or sorted(values) != list(range(len(values))):
        raise ValueError(f"{what} type ids must be 0..{len(values) - 1}, each once, got "
                         f"{types}")
    return sorted(ids, key=lambda name: int(ids[name]))


def _type_rows(what: str, name: str, value, num_parts: int, single: bool) -> torch.Tensor:
    """One type's ``(num_parts, 2)`` int64 ranges from a list, array or tensor; with a
    single type, a 1-D list of each partition's end (old DGL's form) is accepted too."""
    try:
        array = np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value)
    except ValueError as err:
        raise ValueError(f"{what} map of {name!r} is not a rectangular array: {err}") \
            from None
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what} map of {name!r} must hold integers, got {array.dtype}")
    rows = torch.as_tensor(array.astype(np.int64))
    if rows.dim() == 1 and single:
        rows = torch.stack([torch.cat([rows.new_zeros(1), rows[:-1]]), rows], 1)
    if rows.dim() != 2 or rows.shape[1] != 2 or rows.shape[0] == 0:
        raise ValueError(f"{what} map of {name!r} must have shape (num_parts, 2), got "
                         f"{tuple(rows.shape)}")
    if rows.shape[0] != num_parts:
        raise ValueError(f"{what} map of {name!r} has {rows.shape[0]} ranges but num_parts "
                         f"is {num_parts}")
    if bool((rows[:, 1] < rows[:, 0]).any()):
        raise ValueError(f"{what} map of {name!r} has a range that ends before it starts: "
                         f"{rows.tolist()}")
    return rows


def _check_tiling(what: str, ranges: torch.Tensor, names: list) -> None:
    """Raise unless, partition after partition, the non-empty ranges of all types tile
    ``[0, total)``: each partition's are one gap-free block right after the previous."""
    start = 0
    for part in range(ranges.shape[1]):
        rows = ranges[:, part]
        rows = rows[rows[:, 1] > rows[:, 0]]
        rows = rows[torch.argsort(rows[:, 0])]
        expected = torch.cat([torch.tensor([start]), rows[:-1, 1]])[:len(rows)]
        if not torch.equal(rows[:, 0], expected):
            raise ValueError(
                f"{what} map is not contiguous: the ranges of partition {part} "
                f"({dict(zip(map(_label, names), ranges[:, part].tolist()))}) must "
                f"together form one gap-free block starting at {start}, where the "
                f"partitions before it end")
        start = int(rows[-1, 1]) if len(rows) else start


def _read_map(what: str, id_map, names: list, num_parts: int, key) -> torch.Tensor:
    """``node_map``/``edge_map`` as a ``(num_types, num_parts, 2)`` int64 tensor in type-id
    order; a bare array (not a dict) is the ranges of the one type ``names[0]``."""
    if not isinstance(id_map, dict):
        if len(names) != 1:
            raise ValueError(f"{what}_map must be a {{type: ranges}} dict for the "
                             f"{len(names)} {what} types {list(map(_label, names))}")
        id_map = {names[0]: id_map}
    rows = {}
    for name, value in id_map.items():
        name = key(name)
        if name not in names or name in rows:
            problem = "is given twice" if name in rows else "is not among the types"
            raise ValueError(f"{what}_map key {_label(name)!r} {problem} "
                             f"{list(map(_label, names))}")
        rows[name] = _type_rows(what, _label(name), value, num_parts, len(names) == 1)
    missing = [_label(name) for name in names if name not in rows]
    if missing:
        raise ValueError(f"{what}_map has no ranges for the {what} type(s) {missing}")
    ranges = torch.stack([rows[name] for name in names])
    _check_tiling(what, ranges, names)
    return ranges


def _typewise(ranges: torch.Tensor) -> torch.Tensor:
    """``(P, 2)`` ``[start, end)`` of a type's type-wise ids in each partition, from the
    homogeneous ranges of that type (``RangePartitionBook.typed_node_ranges``): its runs
    numbered one partition after the other."""
    sizes = ranges[:, 1] - ranges[:, 0]
    ends = sizes.cumsum(0)
    return torch.stack([ends - sizes, ends], 1)


class _IdSpace:
    """Id lookups for the nodes (or the edges) of a range-partitioned graph.

    ``ranges[t, p]`` is the homogeneous ``[start, end)`` of type ``t`` in partition ``p``.
    Methods take a type index ``t``, or ``None`` for homogeneous ids.
    """

    def __init__(self, what: str, ranges: torch.Tensor, names: list):
        self.what, self.ranges, self.names = what, ranges, names
        self.counts = ranges[..., 1] - ranges[..., 0]
        self.typed_ends = self.counts.cumsum(1)
        sizes = self.counts.sum(0)
        self.homo = torch.stack([sizes.cumsum(0) - sizes, sizes.cumsum(0)], 1)
        # the non-empty runs of all types, by homogeneous start: start, type, type-wise id
        keep = self.counts.flatten() > 0
        starts = ranges[..., 0].flatten()[keep]
        order = torch.argsort(starts)
        types = torch.arange(len(names)).repeat_interleave(ranges.shape[1])
        self.runs = (starts[order], types[keep][order],
                     (self.typed_ends - self.counts).flatten()[keep][order])

    def bounds(self, t: int | None) -> torch.Tensor:
        """``(P, 2)`` ``[start, end)`` of type ``t``'s ids (type-wise) in each partition."""
        return self.homo if t is None else _typewise(self.ranges[t])

    def size(self, t: int | None) -> int:
        return int(self.bounds(t)[-1, 1])

    def _name(self, t: int | None) -> str:
        return self.what if t is None else f"{_label(self.names[t])!r} {self.what}"

    def checked(self, ids: IdLike, t: int | None) -> torch.Tensor:
        ids, total = as_id_tensor(ids), self.size(t)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= total):
            raise IndexError(f"{self._name(t)} ids must be in [0, {total}), got values in "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        return ids

    def owner(self, ids: IdLike, t: int | None) -> torch.Tensor:
        ids = self.checked(ids, t)
        ends = self.bounds(t)[:, 1].contiguous().to(ids.device)
        return torch.searchsorted(ends, ids, right=True)

    def owned(self, part: int, t: int | None) -> torch.Tensor:
        start, end = self.bounds(t)[part].tolist()
        return torch.arange(start, end, dtype=torch.int64)

    def to_local(self, ids: IdLike, part: int, t: int | None) -> torch.Tensor:
        ids = as_id_tensor(ids)
        start, end = self.bounds(t)[part].tolist()
        if ids.numel() and (int(ids.min()) < start or int(ids.max()) >= end):
            raise IndexError(f"{self._name(t)} ids are not all owned by partition {part} "
                             f"(its range is [{start}, {end}))")
        return ids - start

    def per_type(self, ids: IdLike) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.checked(ids, None)
        starts, types, typed = (x.to(ids.device) for x in self.runs)
        run = torch.searchsorted(starts, ids, right=True) - 1
        return types[run], ids - starts[run] + typed[run]

    def to_homo(self, ids: IdLike, t: int | None) -> torch.Tensor:
        ids = self.checked(ids, t)
        if t is None:
            return ids
        shift = self.ranges[t, :, 0] - (self.typed_ends[t] - self.counts[t])
        return ids + shift.to(ids.device)[self.owner(ids, t)]

    def local_offset(self, part: int) -> list[int]:
        return [0] + self.counts[:, part].cumsum(0).tolist()


class RangePartitionBook:
    """Which partition owns which node and edge ids, for range-partitioned graphs.

    See the module docstring for the homogeneous and type-wise id spaces. Methods that
    take a node type use homogeneous ids for ``"_N"`` (the default) and type-wise ids for
    a real type; methods that take an edge type likewise, with ``"_E"``, ``"_N:_E:_N"``
    or ``("_N", "_E", "_N")`` (the default) for homogeneous ids and, for a real type, its
    relation name (when only one canonical type has it), ``"src:rel:dst"`` or
    ``(src, rel, dst)``. All ids returned are 1-D int64 tensors.

    Parameters
    ----------
    part_id:
        The partition this process is responsible for.
    num_parts:
        Number of partitions ``P``.
    node_map, edge_map:
        ``{type: ranges}`` as in the partition JSON, where ``ranges`` (list, numpy array
        or tensor of shape ``(P, 2)``) holds the homogeneous ``[start, end)`` of the type
        in each partition; ``edge_map`` is keyed by ``"src:rel:dst"`` strings or tuples.
        With a single type, the bare ranges are accepted too, as is a list of the ``P``
        range ends (old DGL's form).
    ntypes, etypes:
        ``{name: type_id}`` dicts as in the partition JSON (``etypes`` keyed by
        ``"src:rel:dst"`` or tuples), type ids ``0..T-1``. Without them, the keys of a
        ``node_map``/``edge_map`` dict in order, else the homogeneous types.

    Raises
    ------
    ValueError
        Type ids that are not ``0..T-1``, a map key that is not a type (or a type with no
        map key), ranges not of shape ``(P, 2)``, or ranges that do not, partition by
        partition, form one gap-free block after the previous partition's.

    Example
    -------
    >>> gpb = RangePartitionBook(0, 2, [[0, 3], [3, 5]], [[0, 7], [7, 9]])
    >>> gpb.nid2partid([0, 4])
    tensor([0, 1])
    >>> gpb = RangePartitionBook(0, 2, {"a": [[0, 2], [3, 4]], "b": [[2, 3], [4, 6]]},
    ...                          {"a:r:b": [[0, 1], [1, 3]]}, {"a": 0, "b": 1},
    ...                          {"a:r:b": 0})
    >>> gpb.nid2partid([0, 1, 2], "b"), gpb.map_to_homo_nid([0, 1, 2], "b")
    (tensor([0, 1, 1]), tensor([2, 4, 5]))
    """

    def __init__(self, part_id: int, num_parts: int, node_map, edge_map,
                 ntypes: dict | None = None, etypes: dict | None = None):
        self._ntypes = _type_names("node", ntypes, node_map, _ntype_key, DEFAULT_NTYPE)
        self._canonical = _type_names("edge", etypes, edge_map, _etype_key, DEFAULT_ETYPE)
        if not _is_int(num_parts) or num_parts < 1:
            raise ValueError(f"num_parts must be a positive integer, got {num_parts!r}")
        self._nodes = _IdSpace("node", _read_map("node", node_map, self._ntypes,
                                                 num_parts, _ntype_key), self._ntypes)
        self._edges = _IdSpace("edge", _read_map("edge", edge_map, self._canonical,
                                                 num_parts, _etype_key), self._canonical)
        if not 0 <= part_id < num_parts:
            raise ValueError(f"part_id {part_id} is out of range [0, {num_parts})")
        self._part_id = int(part_id)
        self._num_parts = int(num_parts)
        self._ntype_ids = {name: i for i, name in enumerate(self._ntypes)}
        self._etype_ids = {name: i for i, name in enumerate(self._canonical)}
        self._by_rel: dict[str, list] = {}
        for c_etype in self._canonical:
            self._by_rel.setdefault(c_etype[1], []).append(c_etype)

    # -- partitions and types --------------------------------------------------------
    @property
    def partid(self) -> int:
        """The partition id of this process."""
        return self._part_id

    def num_partitions(self) -> int:
        """The number of partitions."""
        return self._num_parts

    def shared_memory(self, graph_name: str) -> None:
        """DGL moves its book into shared memory for its servers; sarlite has no servers,
        so this raises ``NotImplementedError``."""
        raise NotImplementedError("RangePartitionBook.shared_memory: sarlite has no "
                                  "servers to share the partition book with; each trainer "
                                  "loads its own (load_partition_book)")

    @property
    def ntypes(self) -> list[str]:
        """Node type names, in type-id order."""
        return list(self._ntypes)

    @property
    def etypes(self) -> list[str]:
        """Edge relation names (the middle of each canonical type), in type-id order."""
        return [c_etype[1] for c_etype in self._canonical]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        """Canonical edge types ``(src, rel, dst)``, in type-id order."""
        return list(self._canonical)

    @property
    def is_homogeneous(self) -> bool:
        """Whether the graph has one node type and one edge type (as DGL: also when they
        are named, e.g. ``user`` and ``user:follows:user``)."""
        return len(self._ntypes) == 1 and len(self._canonical) == 1

    @property
    def has_named_types(self) -> bool:
        """Whether the node or edge types are named (not just ``"_N"`` and
        ``("_N", "_E", "_N")``): ids are then type-wise and queries take types."""
        return not self._default_types

    @property
    def _default_types(self) -> bool:
        """Whether the types are the unnamed ``_N`` and ``_N:_E:_N`` of a homogeneous
        graph (then any other type name is refused as :func:`check_ntype` does)."""
        return self._ntypes == [DEFAULT_NTYPE] and self._canonical == [DEFAULT_ETYPE]

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        """The canonical ``(src, rel, dst)`` of an edge type given as a relation name,
        ``"src:rel:dst"`` or a tuple.

        Raises
        ------
        ValueError
            Heterogeneous book: ``etype`` is unknown, or is a relation name that several
            canonical types share (DGL raises ``DGLError`` for both).
        NotImplementedError
            Homogeneous book: ``etype`` is not the one edge type (as :func:`check_etype`).
        """
        found = self._find_etype(etype)
        if len(found) == 1:
            return found[0]
        if found:
            raise ValueError(f"edge type {etype!r} is ambiguous: it is the relation of "
                             f"{found}; name it as 'src:rel:dst' or (src, rel, dst)")
        if self._default_types:
            return check_etype(etype)
        raise ValueError(f"unknown edge type {etype!r}; the canonical edge types are "
                         f"{self._canonical}")

    def _find_etype(self, etype) -> list:
        """The canonical types that ``etype`` may name (none, one, or several)."""
        if isinstance(etype, (tuple, list)):
            key = tuple(etype)
        elif isinstance(etype, str) and etype.count(":") == 2:
            key = tuple(etype.split(":"))
        else:
            return list(self._by_rel.get(etype, [])) if isinstance(etype, str) else []
        return [key] if key in self._etype_ids else []

    def _ntype_index(self, ntype) -> int | None:
        """Index of node type ``ntype``; ``None`` for ``"_N"`` (homogeneous ids).

        Unknown types raise ``ValueError`` naming the known ones (``NotImplementedError``
        from :func:`check_ntype` for a homogeneous book)."""
        if ntype == DEFAULT_NTYPE:
            return None
        if isinstance(ntype, str) and ntype in self._ntype_ids:
            return self._ntype_ids[ntype]
        if self._default_types:
            check_ntype(ntype)
        raise ValueError(f"unknown node type {ntype!r}; the node types are {self._ntypes}")

    def _etype_index(self, etype) -> int | None:
        """Index of edge type ``etype``; ``None`` for the homogeneous edge type."""
        if _is_default_etype(etype):
            return None
        return self._etype_ids[self.to_canonical_etype(etype)]

    def _check_part(self, partid: int) -> int:
        if not 0 <= partid < self._num_parts:
            raise ValueError(f"partid {partid} is out of range [0, {self._num_parts})")
        return int(partid)

    # -- sizes and ranges ------------------------------------------------------------
    def _num_nodes(self, ntype: str = DEFAULT_NTYPE) -> int:
        """Number of nodes of ``ntype``; of all types for ``"_N"``."""
        return self._nodes.size(self._ntype_index(ntype))

    def _num_edges(self, etype=DEFAULT_ETYPE) -> int:
        """Number of edges of ``etype``; of all types for the homogeneous edge type."""
        return self._edges.size(self._etype_index(etype))

    @property
    def node_ranges(self) -> torch.Tensor:
        """``(P, 2)`` int64 tensor of the homogeneous ``[start, end)`` node ids (all types)
        of each partition."""
        return self._nodes.homo.clone()

    @property
    def edge_ranges(self) -> torch.Tensor:
        """``(P, 2)`` int64 tensor of the homogeneous ``[start, end)`` edge ids (all types)
        of each partition."""
        return self._edges.homo.clone()

    def typed_node_ranges(self, ntype: str) -> torch.Tensor:
        """``(P, 2)`` int64 tensor of the homogeneous ``[start, end)`` of node type
        ``ntype`` in each partition, as stored in ``node_map`` (:attr:`node_ranges` for
        ``"_N"``)."""
        index = self._ntype_index(ntype)
        return self.node_ranges if index is None else self._nodes.ranges[index].clone()

    def typed_edge_ranges(self, etype) -> torch.Tensor:
        """``(P, 2)`` int64 tensor of the homogeneous ``[start, end)`` of edge type
        ``etype`` in each partition, as stored in ``edge_map`` (:attr:`edge_ranges` for
        the homogeneous edge type)."""
        index = self._etype_index(etype)
        return self.edge_ranges if index is None else self._edges.ranges[index].clone()

    @property
    def local_ntype_offset(self) -> list[int]:
        """Where each node type starts among this partition's nodes, in type-id order,
        then their total: ``T + 1`` ints."""
        return self._nodes.local_offset(self._part_id)

    @property
    def local_etype_offset(self) -> list[int]:
        """Where each edge type starts among this partition's edges, in type-id order,
        then their total: ``T + 1`` ints."""
        return self._edges.local_offset(self._part_id)

    def metadata(self) -> list[dict]:
        """Per partition: ``{"machine_id", "num_nodes", "num_edges"}`` as in DGL, counting
        the nodes and edges of all types."""
        nodes = self._nodes.homo[:, 1] - self._nodes.homo[:, 0]
        edges = self._edges.homo[:, 1] - self._edges.homo[:, 0]
        return [{"machine_id": p, "num_nodes": int(nodes[p]), "num_edges": int(edges[p])}
                for p in range(self._num_parts)]

    # -- id maps ---------------------------------------------------------------------
    def nid2partid(self, nids: IdLike, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        """Owner partition of each node id (homogeneous for ``"_N"``, else type-wise).
        ``IndexError`` for ids out of range."""
        return self._nodes.owner(nids, self._ntype_index(ntype))

    def eid2partid(self, eids: IdLike, etype=DEFAULT_ETYPE) -> torch.Tensor:
        """Owner partition of each edge id (homogeneous for the homogeneous edge type,
        else type-wise). ``IndexError`` for ids out of range."""
        return self._edges.owner(eids, self._etype_index(etype))

    def partid2nids(self, partid: int, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        """The node ids ``partid`` owns, ascending: homogeneous for ``"_N"``, else the
        type-wise ids of ``ntype``."""
        index = self._ntype_index(ntype)
        return self._nodes.owned(self._check_part(partid), index)

    def partid2eids(self, partid: int, etype=DEFAULT_ETYPE) -> torch.Tensor:
        """The edge ids ``partid`` owns, ascending: homogeneous for the homogeneous edge
        type, else the type-wise ids of ``etype``."""
        index = self._etype_index(etype)
        return self._edges.owned(self._check_part(partid), index)

    def nid2localnid(self, nids: IdLike, partid: int | None = None,
                     ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        """Local ids of node ids that ``partid`` (default: this one; unlike DGL, any
        partition) owns: homogeneous ids minus the partition's first, or for a real
        ``ntype`` type-wise ids minus the type's first in the partition. ``IndexError``
        for ids the partition does not own."""
        index = self._ntype_index(ntype)
        partid = self._part_id if partid is None else self._check_part(partid)
        return self._nodes.to_local(nids, partid, index)

    def eid2localeid(self, eids: IdLike, partid: int | None = None,
                     etype=DEFAULT_ETYPE) -> torch.Tensor:
        """Local ids of edge ids that ``partid`` (default: this one; any partition)
        owns, homogeneous or type-wise as for :meth:`nid2localnid`."""
        index = self._etype_index(etype)
        partid = self._part_id if partid is None else self._check_part(partid)
        return self._edges.to_local(eids, partid, index)

    def map_to_per_ntype(self, ids: IdLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node type ids, type-wise ids)`` of homogeneous node ids."""
        return self._nodes.per_type(ids)

    def map_to_per_etype(self, ids: IdLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(edge type ids, type-wise ids)`` of homogeneous edge ids."""
        return self._edges.per_type(ids)

    def map_to_homo_nid(self, ids: IdLike, ntype: str) -> torch.Tensor:
        """Homogeneous ids of type-wise node ids of ``ntype`` (``"_N"``: the ids)."""
        return self._nodes.to_homo(ids, self._ntype_index(ntype))

    def map_to_homo_eid(self, ids: IdLike, etype) -> torch.Tensor:
        """Homogeneous ids of type-wise edge ids of ``etype`` (the homogeneous edge type:
        the ids)."""
        return self._edges.to_homo(ids, self._etype_index(etype))

    def __repr__(self) -> str:
        types = "" if self._default_types else \
            f", ntypes={self._ntypes}, etypes={list(map(_label, self._canonical))}"
        return (f"RangePartitionBook(partid={self._part_id}, num_parts={self._num_parts}, "
                f"num_nodes={self._num_nodes()}, num_edges={self._num_edges()}{types})")


class PartitionPolicy:
    """Row partitioning of node or edge data by a partition book, as DGL's class.

    ``policy_str`` is ``"node~<ntype>"`` or ``"edge~<src:rel:dst>"`` (DGL 2.x's strings;
    ``"edge~<rel>"`` is read too when the relation name is unambiguous). ``"node"``,
    ``"node~_N"``, ``"edge"``, ``"edge~_E"`` and ``"edge~_N:_E:_N"`` partition
    homogeneous ids; a real type partitions its type-wise ids.
    :class:`NodePartitionPolicy` and :class:`EdgePartitionPolicy` build them from a type.

    Raises
    ------
    ValueError
        ``policy_str`` starts with neither ``node`` nor ``edge``, or names a type the
        book does not have (an ambiguous relation name included).
    NotImplementedError
        The book is homogeneous and ``policy_str`` names another type.
    """

    def __init__(self, policy_str: str, partition_book: RangePartitionBook):
        kind, _, type_name = str(policy_str).partition("~")
        if kind == "node":
            type_name = type_name or DEFAULT_NTYPE
            partition_book._ntype_index(type_name)
        elif kind == "edge":
            type_name = type_name or DEFAULT_ETYPE_STR
            type_name = DEFAULT_ETYPE if _is_default_etype(type_name) else \
                partition_book.to_canonical_etype(type_name)
        else:
            raise ValueError(f"policy_str must start with 'node' or 'edge', got "
                             f"{policy_str!r}")
        self.kind = kind
        self.type_name = type_name
        self._partition_book = partition_book

    @property
    def is_node(self) -> bool:
        """Whether this policy partitions node data."""
        return self.kind == "node"

    @property
    def partition_book(self) -> RangePartitionBook:
        """The partition book the policy maps ids with."""
        return self._partition_book

    @property
    def part_id(self) -> int:
        """The partition id of this process."""
        return self._partition_book.partid

    @property
    def policy_str(self) -> str:
        """``"node~<ntype>"`` or ``"edge~<src:rel:dst>"``, as DGL names policies."""
        return f"{self.kind}~{_label(self.type_name)}"

    @property
    def ranges(self) -> torch.Tensor:
        """``(P, 2)`` int64 ``[start, end)`` of the ids each partition owns, in the
        policy's id space: homogeneous ids (all types) for ``"node~_N"`` and the
        homogeneous edge type, type-wise ids of the type otherwise (a partition that owns
        none of the type has an empty range where the previous one ends). Local."""
        book = self._partition_book
        if self.kind == "node":
            return book._nodes.bounds(book._ntype_index(self.type_name)).clone()
        return book._edges.bounds(book._etype_index(self.type_name)).clone()

    def to_local(self, id_tensor: IdLike) -> torch.Tensor:
        """Ids (type-wise for a real type) owned by this partition to local ids."""
        book = self._partition_book
        if self.kind == "node":
            return book.nid2localnid(id_tensor, book.partid, self.type_name)
        return book.eid2localeid(id_tensor, book.partid, self.type_name)

    def to_partid(self, id_tensor: IdLike) -> torch.Tensor:
        """Owner partition of each id (type-wise for a real type)."""
        book = self._partition_book
        if self.kind == "node":
            return book.nid2partid(id_tensor, self.type_name)
        return book.eid2partid(id_tensor, self.type_name)

    def get_part_size(self) -> int:
        """Number of ids (of the policy's type) this partition owns."""
        start, end = self.ranges[self.part_id].tolist()
        return end - start

    def get_size(self) -> int:
        """Number of ids (of the policy's type) in the whole graph."""
        book = self._partition_book
        if self.kind == "node":
            return book._num_nodes(self.type_name)
        return book._num_edges(self.type_name)


class NodePartitionPolicy(PartitionPolicy):
    """Row partitioning of node data of ``ntype`` (``"_N"``: homogeneous ids, the
    default) by the owner of each node id."""

    def __init__(self, partition_book: RangePartitionBook, ntype: str = DEFAULT_NTYPE):
        partition_book._ntype_index(ntype)
        super().__init__(f"node~{ntype}", partition_book)


class EdgePartitionPolicy(PartitionPolicy):
    """Row partitioning of edge data of ``etype`` (a relation name, ``"src:rel:dst"`` or
    tuple; the homogeneous edge type is the default) by the owner of each edge id."""

    def __init__(self, partition_book: RangePartitionBook, etype=DEFAULT_ETYPE):
        canonical = DEFAULT_ETYPE if _is_default_etype(etype) else \
            partition_book.to_canonical_etype(etype)
        super().__init__("edge~" + ":".join(canonical), partition_book)
