"""The key-value store: named row-sharded tensors, one shard per rank.

There are no servers: every rank is a torchrun worker that owns one partition and keeps
the rows of every tensor that its partition owns (in CPU memory). Writes by global id are
collective exchanges (:mod:`sarlite.kv.routing`); so are reads, unless the store was made
with ``one_sided_reads=True`` (:mod:`sarlite.kv.one_sided`, as the DGL facade's
``DistGraph`` makes it): then a rank reads alone and the owners' serving threads answer.

The **default store** is the one :class:`~sarlite.kv.DistTensor` and
:class:`~sarlite.kv.DistEmbedding` use. There is at most one per process, as DGL has one
KV client per process:

* :class:`~sarlite.sampling.DistGraph` reuses the default store when it is over an equal
  partitioning (:func:`same_partitioning`), creates and registers one when there is none,
  and refuses (``ValueError``) to replace one over a different partitioning unless asked
  to (``replace_kvstore=True``).
* :func:`init_kvstore` creates a store and makes it the default, replacing any earlier
  one: the explicit way to start over (DistTensors made before keep their old store).

:func:`get_kvstore` raises ``RuntimeError`` while there is none; :func:`current_kvstore`
returns ``None`` then.
"""
from __future__ import annotations

import inspect
from datetime import timedelta
from types import MappingProxyType
from typing import Callable, Mapping

import torch

from ..comm import barrier, rank, world_size
from ..partition import EdgePartitionPolicy, NodePartitionPolicy, RangePartitionBook
from .one_sided import OneSidedReader, name_code
from .protocol import KVCall, agree, validated
from .routing import (Policy, checked_ids, last_occurrence, pull_rows, push_rows, take_rows,
                      sum_duplicates)

InitFunc = Callable[..., torch.Tensor]


def _check_book(book: RangePartitionBook) -> None:
    if not isinstance(book, RangePartitionBook):
        raise TypeError(f"need a RangePartitionBook, got {type(book).__name__}")
    if book.num_partitions() != world_size() or book.partid != rank():
        raise ValueError(f"the partition book has {book.num_partitions()} partitions and "
                         f"belongs to partition {book.partid}, but this is rank {rank()} of "
                         f"{world_size()}: sarlite needs one partition per rank, partition "
                         f"r on rank r")


def _check_shape(shape, dtype) -> tuple[int, ...]:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) else (shape,)
    if not shape or any(not isinstance(d, int) or d < 0 for d in shape):
        raise ValueError(f"shape must be a non-empty tuple of non-negative ints, got {shape}")
    return shape


def _shard_ids(policy: Policy) -> torch.Tensor:
    """Ids of the rows this rank owns under ``policy``, ascending: homogeneous ids for the
    homogeneous types, type-wise ids for a real type."""
    start, end = policy.ranges[policy.part_id].tolist()
    return torch.arange(start, end, dtype=torch.int64)


def _takes_ids(init_func: InitFunc) -> bool:
    try:
        inspect.signature(init_func).bind(None, None, None)
    except (TypeError, ValueError):
        return False
    return True


def _initial_shard(init_func: InitFunc | None, policy: Policy, shape: tuple[int, ...],
                   dtype: torch.dtype) -> torch.Tensor:
    """This rank's rows: zeros, or what ``init_func`` returns (see :class:`DistTensor`)."""
    local_shape = (policy.get_part_size(),) + shape[1:]
    if init_func is None:
        return torch.zeros(local_shape, dtype=dtype)
    args = (local_shape, dtype, _shard_ids(policy)) if _takes_ids(init_func) else \
        (local_shape, dtype)
    data = init_func(*args)
    if not isinstance(data, torch.Tensor) or tuple(data.shape) != local_shape or \
            data.dtype != dtype:
        got = (f"shape {tuple(data.shape)}, dtype {data.dtype}"
               if isinstance(data, torch.Tensor) else type(data).__name__)
        raise ValueError(f"init_func must return a tensor of shape {local_shape} and dtype "
                         f"{dtype} (this rank's rows), got {got}")
    return data.detach().cpu().contiguous()


class KVStore:
    """Named tensors sharded by rows over the ranks, read and written by global id.

    Parameters
    ----------
    partition_book:
        The :class:`~sarlite.partition.RangePartitionBook` of this rank (partition ``r``
        on rank ``r``, as many partitions as ranks). It gives the store, as DGL's
        ``all_possible_part_policy``, one node policy per node type and one edge policy
        per canonical edge type: ``"node~_N"`` and ``"edge~_N:_E:_N"`` for a homogeneous
        graph; ``"node~<ntype>"`` and ``"edge~<src:rel:dst>"`` (type-wise ids) for a
        heterogeneous one. Tensors may also use other policies over books with the same
        number of partitions.
    one_sided_reads:
        Keyword-only. ``False`` (default, sarlite's own code): :meth:`pull` is a
        collective like everything else. ``True`` (what the DGL facade's ``DistGraph``
        asks for): :meth:`pull` is **one-sided**, as a read from DGL's KV servers: any
        subset of ranks may call it, at any time, and the owners of the rows answer from
        a serving thread while their main thread does anything else (also wait in
        another collective, such as ``torch.distributed.barrier()``). Every rank must
        pass the same value. Writes (:meth:`push`) stay collective either way, unlike
        DGL's: every rank calls them. A one-sided read sees another rank's write once
        both have passed a barrier after it (as in DGL).
    read_timeout:
        Keyword-only. Bounds each wait of a one-sided read for an owner (default the
        process group's timeout, :func:`sarlite.comm.settings`: ``SARLITE_TIMEOUT``
        seconds, 600, unless :func:`sarlite.init` was given another); a dead owner fails
        at once.

    Notes
    -----
    Creating a store is a collective (every rank, same book; with ``one_sided_reads``
    it also opens this rank's listening socket and serving threads and exchanges the
    addresses, see :mod:`sarlite.kv.service`; at exit each rank then waits until the
    others have finished too); so are :meth:`init_data`, :meth:`push`,
    :meth:`barrier` and, in a store without ``one_sided_reads``, :meth:`pull`, which
    every rank must call in the same order, also with no ids. They block until every
    rank has joined and fail with :class:`~sarlite.comm.CollectiveError` after the
    process group's timeout when one does not. :meth:`delete_data` and the metadata
    queries are local.

    Raises
    ------
    ValueError
        The book does not have one partition per rank, or the ranks' books (their node and
        edge types, the ranges of each type, or ``one_sided_reads``) differ.
    """

    def __init__(self, partition_book: RangePartitionBook, *, one_sided_reads: bool = False,
                 read_timeout: timedelta | None = None):
        error = None
        try:
            _check_book(partition_book)
            record = (_layout(partition_book), bool(one_sided_reads))
        except (TypeError, ValueError) as err:
            error, record = err, None
        agree("creating a KVStore", record, error)
        self._book = partition_book
        policies = [NodePartitionPolicy(partition_book, t) for t in partition_book.ntypes] + \
            [EdgePartitionPolicy(partition_book, c) for c in partition_book.canonical_etypes]
        self._policies = {p.policy_str: p for p in policies}
        self._shards: dict[str, torch.Tensor] = {}
        self._meta: dict[str, tuple[torch.dtype, tuple[int, ...], Policy]] = {}
        self._added: set[str] = set()     # names from add_data: the store owns their data
        self._codes: dict[int, str] = {}  # name_code(name) -> name, for the serving thread
        self._anonymous = 0
        self._reader: OneSidedReader | None = None
        if one_sided_reads:
            self._reader = OneSidedReader(self._by_code, read_timeout)

    def enable_one_sided_reads(self, read_timeout: timedelta | None = None) -> None:
        """Make :meth:`pull` one-sided from now on (see the class docstring), as if the
        store had been made with ``one_sided_reads=True``; nothing when it is already.

        Collective and blocking where it is not on yet (every rank calls it: one
        agreement and one address exchange).

        Raises
        ------
        CollectiveError
            A rank did not join in time.
        """
        if self._reader is not None:
            return
        agree("enabling one-sided reads", True)
        self._reader = OneSidedReader(self._by_code, read_timeout)

    @property
    def one_sided_reads(self) -> bool:
        """Whether :meth:`pull` is one-sided (not a collective). Local."""
        return self._reader is not None

    def _by_code(self, code: int) -> tuple[torch.Tensor, Policy] | None:
        """``(shard, policy)`` of the tensor whose name has ``code``, or ``None``.
        Called by the serving thread: every read here is a single dict lookup."""
        name = self._codes.get(code)
        shard = self._shards.get(name) if name is not None else None
        meta = self._meta.get(name) if name is not None else None
        return None if shard is None or meta is None else (shard, meta[2])

    # -- metadata (local) --------------------------------------------------------
    @property
    def partition_book(self) -> RangePartitionBook:
        return self._book

    @property
    def all_possible_part_policy(self) -> dict[str, Policy]:
        """``{policy_str: policy}`` of the store's policies: one per node type, then one
        per canonical edge type, in type-id order (see the ``partition_book`` parameter).
        Local."""
        return dict(self._policies)

    def find_policy(self, num_rows: int) -> Policy:
        """The one policy of :attr:`all_possible_part_policy` whose id space has
        ``num_rows`` ids (the number of nodes or edges of its type). Local.

        Raises
        ------
        ValueError
            Several policies match (as many nodes as edges, or two types of one size:
            the message lists them) or none does.
        """
        policies = self._policies.values()
        matches = [p for p in policies if p.get_size() == num_rows]
        homogeneous = not self._book.has_named_types
        if len(matches) > 1 and homogeneous:
            raise ValueError(f"shape[0] = {num_rows} is both the number of nodes and the "
                             f"number of edges, so the partition policy is ambiguous; pass "
                             f"part_policy explicitly")
        if len(matches) > 1:
            raise ValueError(f"shape[0] = {num_rows} is the size of each of the partition "
                             f"policies {[p.policy_str for p in matches]}, so the partition "
                             f"policy is ambiguous; pass part_policy explicitly (e.g. "
                             f"NodePartitionPolicy(book, ntype))")
        if not matches and homogeneous:
            sizes = " nor ".join(f"{p.get_size()} ({p.kind}s)" for p in policies)
            raise ValueError(f"shape[0] = {num_rows} matches neither {sizes} of the partition "
                             f"book; pass part_policy or fix the shape")
        if not matches:
            sizes = ", ".join(f"{p.policy_str}: {p.get_size()}" for p in policies)
            raise ValueError(f"shape[0] = {num_rows} is the size of none of the partition "
                             f"policies ({sizes}); pass part_policy or fix the shape")
        return matches[0]

    def __contains__(self, name: str) -> bool:
        return name in self._meta

    def data_name_list(self) -> list[str]:
        """Names of all tensors in the store."""
        return list(self._meta)

    def get_data_meta(self, name: str) -> tuple[torch.dtype, tuple[int, ...], Policy]:
        """``(dtype, global shape, partition policy)`` of tensor ``name``."""
        return self._meta[self._known(name)]

    @property
    def data_store(self) -> Mapping[str, torch.Tensor]:
        """``{name: this rank's shard}`` (read-only mapping; the shards are the storage)."""
        return MappingProxyType(self._shards)

    def get_partid(self, name: str, id_tensor) -> torch.Tensor:
        """Owner rank of each global id of tensor ``name`` (local, no communication)."""
        return self._meta[self._known(name)][2].to_partid(id_tensor)

    def delete_data(self, name: str) -> None:
        """Drop tensor ``name`` and free this rank's shard (local; call it on every rank).

        Raises ``KeyError`` for an unknown name.
        """
        del self._meta[self._known(name)], self._shards[name]
        self._codes.pop(name_code(name), None)
        self._added.discard(name)

    def _known(self, name: str) -> str:
        if name not in self._meta:
            raise KeyError(f"no tensor named {name!r} in the KVStore (it has "
                           f"{sorted(self._meta)})")
        return name

    # -- creation (collective) ---------------------------------------------------
    def anonymous_name(self) -> str:
        """A fresh name for an unnamed tensor; the same on every rank if every rank
        creates its tensors in the same order (which creation being collective needs)."""
        self._anonymous += 1
        return f"anonymous-{self._anonymous - 1}"

    def init_data(self, name: str, shape, dtype: torch.dtype,
                  part_policy: Policy | None = None, init_func: InitFunc | None = None) -> None:
        """Create tensor ``name`` of global ``shape`` and ``dtype``, sharded by
        ``part_policy`` (default: inferred from ``shape[0]`` by :meth:`find_policy`).

        ``init_func`` fills this rank's rows, as for :class:`~sarlite.kv.DistTensor`.
        Collective and blocking; every rank must ask for the same name, shape, dtype and
        policy.

        Raises
        ------
        ValueError
            ``name`` exists already, the shape or policy is invalid, or the ranks disagree.
        """
        self.open(name, shape, dtype, part_policy, init_func, may_exist=False)

    def add_data(self, name: str, rows: torch.Tensor, part_policy: Policy) -> None:
        """Keep ``rows``, this rank's ``(part_policy.get_part_size(), ...)`` rows, as tensor
        ``name`` (the whole key, e.g. ``"node~_N:feat"``), as DGL's ``KVClient.add_data``.

        The shard *is* ``rows`` (no copy) when ``rows`` is a contiguous CPU tensor, so
        writes through the store show in ``rows`` and the other way round; otherwise it is
        a contiguous CPU copy. The store owns the data: it stays until
        :meth:`delete_data`, whatever :class:`~sarlite.kv.DistTensor` objects refer to it
        (they are never its owners). Adding a name added before replaces that tensor's
        rows (same shape and dtype required): DistTensors referring to it then read the
        new rows, as in DGL, where a process holds one graph's data.

        Collective and blocking: every rank adds the same name, row shape, dtype and
        policy.

        Raises
        ------
        ValueError
            ``rows`` does not have one row per id the policy gives this rank, the policy's
            book does not have one partition per rank, ``name`` was created by a
            DistTensor (not added), or was added with another shape or dtype; or the ranks
            disagree.
        TypeError
            ``rows`` is not a tensor.
        """
        shard, record, error = None, None, None
        try:
            shard, record = self._added_shard(name, rows, part_policy)
        except Exception as err:  # every rank must learn of it, see protocol.agree
            error = err
        undo = None if error is not None else \
            self._enter(name, shard, (rows.dtype, record[1], part_policy))
        try:
            agree(f"adding tensor {name!r}", record, error)
        except BaseException:
            if undo is not None:
                undo()
            raise
        self._added.add(name)

    def _enter(self, name: str, shard: torch.Tensor, meta: tuple) -> Callable[[], None]:
        """Register tensor ``name`` (shard, metadata, name code); return what undoes it.

        Creation enters a tensor *before* the ranks' agreement on it completes: once any
        rank leaves the agreement, every rank has entered it, so a one-sided read that
        follows at once finds it on every owner.
        """
        old = (self._shards.get(name), self._meta.get(name))
        self._shards[name], self._meta[name] = shard, meta
        self._codes[name_code(name)] = name

        def undo() -> None:
            if old[0] is not None:
                self._shards[name], self._meta[name] = old
                return
            self._shards.pop(name, None)
            self._meta.pop(name, None)
            self._codes.pop(name_code(name), None)
        return undo

    def _added_shard(self, name: str, rows, policy: Policy) -> tuple[torch.Tensor, tuple]:
        """This rank's checked shard for :meth:`add_data` and what the ranks agree on."""
        if not isinstance(rows, torch.Tensor):
            raise TypeError(f"data for {name!r} must be a tensor, got {type(rows).__name__}")
        _check_book(policy.partition_book)
        if rows.dim() == 0 or rows.shape[0] != policy.get_part_size():
            raise ValueError(f"data for {name!r} must have {policy.get_part_size()} rows "
                             f"(the ids {policy.policy_str} gives rank {rank()}), got shape "
                             f"{tuple(rows.shape)}")
        shape = (policy.get_size(),) + tuple(rows.shape[1:])
        if name in self._meta:
            old_dtype, old_shape, _ = self._meta[name]
            if name not in self._added:
                raise ValueError(f"tensor {name!r} exists already and was created by a "
                                 f"DistTensor; delete it before adding data under its name")
            if (old_dtype, old_shape) != (rows.dtype, shape):
                raise ValueError(f"tensor {name!r} was added with shape {old_shape} and "
                                 f"dtype {old_dtype}; cannot replace it with shape {shape} "
                                 f"and dtype {rows.dtype}")
        return (rows.detach().cpu().contiguous(),
                (name, shape, str(rows.dtype), policy.policy_str))

    def open(self, name: str | None, shape, dtype: torch.dtype, part_policy: Policy | None,
             init_func: InitFunc | None, may_exist: bool,
             prefix_policy: bool = False) -> tuple[str, bool]:
        """Create tensor ``name``, or with ``may_exist`` also refer to an existing one.

        ``name=None`` picks an :meth:`anonymous_name`. With ``prefix_policy`` the key is
        ``"<policy_str>:<name>"`` (as DGL names graph data). Collective and blocking.
        Returns ``(key, created)``.

        Raises
        ------
        ValueError
            An existing tensor has a different shape or dtype (or ``may_exist`` is
            false), the shape does not fit the policy, or the ranks asked for different
            things.
        TypeError
            ``dtype`` is not a torch dtype.
        """
        key, shard, record, error = name, None, None, None
        try:
            shape = _check_shape(shape, dtype)
            policy = part_policy if part_policy is not None else self.find_policy(shape[0])
            _check_book(policy.partition_book)
            if policy.get_size() != shape[0]:
                raise ValueError(f"shape[0] = {shape[0]} but the partition policy "
                                 f"{policy.policy_str} covers {policy.get_size()} ids")
            key = self.anonymous_name() if name is None else name
            key = f"{policy.policy_str}:{key}" if prefix_policy else key
            record = (key, shape, str(dtype), policy.policy_str)
            if key in self._meta:
                old_dtype, old_shape, _ = self._meta[key]
                if not may_exist or (old_dtype, old_shape) != (dtype, shape):
                    raise ValueError(f"tensor {key!r} already exists with shape {old_shape} "
                                     f"and dtype {old_dtype}; asked to create it with "
                                     f"shape {shape} and dtype {dtype}")
            else:
                shard = _initial_shard(init_func, policy, shape, dtype)
        except Exception as err:  # every rank must learn of it, see protocol.agree
            error = err
        undo = self._enter(key, shard, (dtype, shape, policy)) if shard is not None else None
        try:
            agree(f"creating tensor {key!r}", record, error)
        except BaseException:
            if undo is not None:
                undo()
            raise
        return key, shard is not None

    # -- rows (collective) -------------------------------------------------------
    def pull(self, name: str, id_tensor) -> torch.Tensor:
        """Rows ``id_tensor`` (global ids; tensor, list, array or slice) of tensor
        ``name``, in the order asked, duplicates allowed.

        Returns a CPU tensor of shape ``(len(id_tensor), *shape[1:])``. Blocking.

        * Without ``one_sided_reads`` (default): **collective**: every rank calls it,
          possibly with no ids.
        * With ``one_sided_reads``: **one-sided**: only the ranks that read call it; the
          owners of the rows answer from their serving threads (rows this rank owns
          are read locally, without any message). The rows are those a collective pull
          would return.

        Raises
        ------
        KeyError, TypeError, IndexError
            On the rank whose name or ids are invalid (an id outside ``[0, shape[0])``).
        CollectiveError
            Collective: on the other ranks in that case, or when a rank calls a different
            operation, or when a rank does not call it within the timeout. One-sided: an
            owner died, did not answer within ``read_timeout``, or has no tensor
            ``name``.
        """
        if self._reader is not None:
            _, shape, policy = self._meta[self._known(name)]
            ids = checked_ids(id_tensor, shape[0], repr(name))
            return self._reader.pull(name, self._shards[name], policy, ids)
        call = KVCall(f"pull of {name!r}", "kv_pull")
        shard, policy, ids = validated(call, lambda: self._entry_and_ids(name, id_tensor))
        return pull_rows(ids, policy, lambda local: take_rows(shard, local), call)

    def push(self, name: str, id_tensor, data_tensor: torch.Tensor,
             accumulate: bool = False) -> None:
        """Write ``data_tensor[i]`` to row ``id_tensor[i]`` of tensor ``name``, or add it
        with ``accumulate=True``.

        Deterministic: when several writes target one row, the last in **(source rank,
        position)** order wins (a higher rank's write beats a lower rank's; within a rank
        a later position beats an earlier one). Additions are summed per source rank in
        position order, then added to the row in source rank order. Collective and
        blocking: every rank calls it, possibly with no ids; when any rank's input is
        invalid, no rank changes any data.

        Raises
        ------
        KeyError, TypeError, IndexError, ValueError
            On the rank whose input is invalid: unknown name, ids out of range,
            ``data_tensor`` not of the tensor's dtype (``TypeError``) or not of shape
            ``(len(id_tensor), *shape[1:])`` (``ValueError``), ``accumulate`` on a bool
            tensor.
        CollectiveError
            On the other ranks in that case, or as for :meth:`pull`.
        """
        call = KVCall(f"{'accumulating ' if accumulate else ''}push to {name!r}", "kv_push")

        def check():
            shard, policy, ids = self._entry_and_ids(name, id_tensor)
            _check_rows(data_tensor, ids.numel(), shard, name)
            if accumulate and shard.dtype == torch.bool:
                raise TypeError(f"tensor {name!r} is bool and cannot be accumulated into")
            return shard, policy, ids, data_tensor.detach().cpu()

        shard, policy, ids, rows = validated(call, check)
        if accumulate:
            ids, rows, _ = sum_duplicates(ids, rows)
            local_ids, rows = push_rows(ids, rows, policy, call)
            shard.index_add_(0, local_ids, rows)
        else:
            ids, last = last_occurrence(ids)
            local_ids, rows = push_rows(ids, rows[last], policy, call)
            local_ids, last = last_occurrence(local_ids)
            shard[local_ids] = rows[last]

    def _entry_and_ids(self, name: str, id_tensor):
        dtype, shape, policy = self._meta[self._known(name)]
        return self._shards[name], policy, checked_ids(id_tensor, shape[0], repr(name))

    def barrier(self) -> None:
        """Block until every rank has called it. Collective.

        Raises :class:`~sarlite.comm.CollectiveError` when a rank does not join in time.
        """
        barrier("KVStore.barrier")


def _check_rows(rows, num_ids: int, shard: torch.Tensor, name: str) -> None:
    if not isinstance(rows, torch.Tensor):
        raise TypeError(f"data for {name!r} must be a tensor, got {type(rows).__name__}")
    if rows.dtype != shard.dtype:
        raise TypeError(f"data for {name!r} has dtype {rows.dtype} but the tensor has "
                        f"dtype {shard.dtype}")
    expected = (num_ids,) + tuple(shard.shape[1:])
    if tuple(rows.shape) != expected:
        raise ValueError(f"data for {name!r} must have shape {expected} (one row per id), "
                         f"got {tuple(rows.shape)}")


_default: KVStore | None = None


def _layout(book: RangePartitionBook) -> tuple:
    """What makes a partitioning, as plain lists: the node types and canonical edge types
    in type-id order, and the homogeneous ranges of each type in each partition (which
    give the homogeneous and the type-wise ranges). Local."""
    return (book.num_partitions(), book.ntypes, book.canonical_etypes,
            [book.typed_node_ranges(t).tolist() for t in book.ntypes],
            [book.typed_edge_ranges(c).tolist() for c in book.canonical_etypes])


def same_partitioning(a: RangePartitionBook, b: RangePartitionBook) -> bool:
    """Whether two partition books describe the same partitioning for the same partition:
    number of partitions, this partition, node and edge types (names and type ids) and
    the ranges of every type. Two books with equal homogeneous ranges but other types
    differ. Local."""
    return a.partid == b.partid and _layout(a) == _layout(b)


def init_kvstore(partition_book: RangePartitionBook, *, one_sided_reads: bool = False,
                 read_timeout: timedelta | None = None) -> KVStore:
    """Create a :class:`KVStore` over ``partition_book`` and make it the default store,
    **replacing** any earlier default store.

    Collective (see :class:`KVStore`, also for ``one_sided_reads`` and ``read_timeout``).
    Call it to use :class:`~sarlite.kv.DistTensor` without a graph, or to start over with
    a new store; DistTensors made before keep using the store they were made in.
    :class:`~sarlite.sampling.DistGraph` calls it only when there is no default store (or
    when told to replace it).
    """
    global _default
    _default = KVStore(partition_book, one_sided_reads=one_sided_reads,
                       read_timeout=read_timeout)
    return _default


def current_kvstore() -> KVStore | None:
    """The default store, or ``None`` while there is none. Local."""
    return _default


def get_kvstore() -> KVStore:
    """The default store.

    Raises
    ------
    RuntimeError
        There is none yet: create a ``DistGraph`` (or call :func:`init_kvstore`) after
        ``sarlite.init()`` first.
    """
    if _default is None:
        raise RuntimeError("no KVStore: create a sarlite.DistGraph(graph_name, "
                           "part_config=...) (or call sarlite.kv.init_kvstore("
                           "partition_book)) after sarlite.init() before creating "
                           "DistTensors or DistEmbeddings")
    return _default
