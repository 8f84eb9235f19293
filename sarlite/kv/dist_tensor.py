"""DistTensor: a tensor sharded by rows over the ranks, indexed by global id."""
from __future__ import annotations

import torch

from ..comm import all_reduce
from .routing import Policy
from .store import InitFunc, KVStore, get_kvstore


class DistTensor:
    """A tensor whose rows are sharded over the ranks by a node or edge partition policy.

    Rank ``r`` stores the rows of the ids that partition ``r`` owns (a contiguous range).
    The ids are those of the policy: homogeneous node (edge) ids for ``"node~_N"`` (the
    homogeneous edge type), the *type-wise* ids of the type for the policy of one node or
    edge type of a heterogeneous graph (``NodePartitionPolicy(book, "author")``: ids
    ``0 .. number of authors - 1``, owned by the partition that owns that author).
    ``t[ids]`` pulls rows by global id and ``t[ids] = v`` pushes them; ``t.scatter_add(ids,
    v)`` adds to them. There are no servers. Writes are **collectives** that every rank
    calls in the same order, possibly with empty ids; they block until every rank has
    joined (failing with :class:`~sarlite.comm.CollectiveError` after the process group's
    timeout when one does not). Reads depend on the tensor's store:

    * a store made without ``one_sided_reads`` (sarlite's own code): ``t[ids]`` is a
      collective too, like the writes;
    * a store made with ``one_sided_reads=True`` (the one the DGL facade's
      ``sarlite.distributed.DistGraph`` makes): ``t[ids]`` is **one-sided**, as in DGL:
      any subset of ranks reads, at any time, and the owners of the rows answer from a
      serving thread (see :class:`~sarlite.kv.KVStore`). Writes stay collective, unlike
      DGL's, where a trainer writes alone. A read sees another rank's write once both
      have passed a barrier after it.

    Parameters
    ----------
    shape:
        Global shape; ``shape[0]`` is the number of ids of the policy (the number of
        nodes or edges of its type).
    dtype:
        A torch dtype.
    name:
        Name in the :class:`~sarlite.kv.KVStore`; the store key is
        ``"<policy_str>:<name>"`` (e.g. ``"node~_N:feat"``), as DGL names graph data.
        If a tensor of that key exists, this object refers to it (same shape and dtype
        required). ``None`` creates an anonymous tensor.
    init_func:
        Fills this rank's rows: ``init_func(shape, dtype)`` as in DGL, where ``shape`` is
        the local shard's shape ``(rows owned here, *shape[1:])``, or ``init_func(shape,
        dtype, ids)``, which also receives the ``(rows owned here,)`` ids of those rows,
        ascending, in the policy's id space (type-wise for a type's policy; handy for
        values that must not depend on the number of ranks). It must return a tensor of
        exactly that shape and dtype. Default: zeros.
    part_policy:
        A :class:`~sarlite.partition.NodePartitionPolicy` or
        :class:`~sarlite.partition.EdgePartitionPolicy`. Default: the policy of the
        default store whose id count equals ``shape[0]`` (one per node type and one per
        canonical edge type, see :meth:`KVStore.find_policy
        <sarlite.kv.KVStore.find_policy>`); it is an error when several match (e.g. as
        many nodes as edges) or none does.
    persistent:
        Keep the data in the store when this object is garbage-collected (otherwise the
        object that created the tensor deletes it then). Anonymous tensors cannot be
        persistent.
    is_gdata:
        Ignored. In DGL it registers the tensor as graph data; in sarlite a tensor is
        graph data (visible in ``g.ndata``/``g.edata``) only once assigned there
        (``g.ndata[name] = tensor``).
    attach:
        Ignored. DGL adds its client-group id to the name to keep names of separate
        client groups apart; sarlite has one group of trainers.

    Notes
    -----
    The parameters are ``dgl.distributed.DistTensor``'s (DGL 2.1), in its order.

    Creating one is collective: every rank must ask for the same shape, dtype, name and
    policy, and gets a ``ValueError`` (or, where another rank failed, a
    ``CollectiveError``) otherwise. The default store is set up by
    :class:`~sarlite.sampling.DistGraph` or :func:`~sarlite.kv.init_kvstore`; without one
    the constructor raises ``RuntimeError``.

    Example
    -------
    >>> g = sarlite.DistGraph("g", part_config="out/g.json")
    >>> h = sarlite.DistTensor((g.num_nodes(), 16), torch.float32, "h")
    >>> h[torch.tensor([0, 5, 5])] = torch.ones(3, 16)   # every rank calls it
    >>> h[torch.tensor([5])].sum()
    tensor(16.)
    """

    def __init__(self, shape, dtype: torch.dtype, name: str | None = None,
                 init_func: InitFunc | None = None, part_policy: Policy | None = None,
                 persistent: bool = False, is_gdata: bool = True, attach: bool = True):
        if persistent and name is None:
            raise ValueError("an anonymous DistTensor cannot be persistent; give it a name")
        self._store: KVStore = get_kvstore()
        self._tensor_name = name
        self._name, self._owner = self._store.open(name, shape, dtype, part_policy,
                                                   init_func, may_exist=True,
                                                   prefix_policy=True)
        self._dtype, self._shape, self._policy = self._store.get_data_meta(self._name)
        self._persistent = persistent

    def __del__(self):
        store = getattr(self, "_store", None)
        if getattr(self, "_owner", False) and not self._persistent and self._name in store:
            store.delete_data(self._name)

    # -- rows --------------------------------------------------------------------
    def __getitem__(self, ids) -> torch.Tensor:
        """Rows ``ids`` (global ids: tensor, list, array or slice), in that order,
        duplicates allowed: a CPU tensor of shape ``(len(ids), *shape[1:])``.
        Collective, or one-sided in a store with one-sided reads; see
        :meth:`KVStore.pull <sarlite.kv.KVStore.pull>`."""
        return self._store.pull(self._name, ids)

    def __reduce_ex__(self, protocol):
        """Pickling (``torch.save(t, f)``) saves **the rows** exactly as a plain tensor is
        saved: unpickling gives a ``torch.Tensor`` of shape :attr:`shape` (DGL pickles the
        client handle, which is of no use outside the job), and ``torch.load`` reads the
        file with its default ``weights_only=True`` (torch >= 2.6). It reads every row, so
        it works only in a store with one-sided reads (the DGL facade's), on any rank
        alone.

        Raises
        ------
        TypeError
            The store's reads are collective: read the rows on every rank
            (``t[0:len(t)]``) and save that tensor instead.
        """
        if not self._store.one_sided_reads:
            raise TypeError(f"cannot pickle {self!r}: its store's reads are collective, "
                            f"so saving its rows would need every rank; read them on "
                            f"every rank (t[0:len(t)]) and save that tensor instead")
        return self[0:len(self)].__reduce_ex__(protocol)

    def __setitem__(self, ids, values: torch.Tensor) -> None:
        """Write ``values[i]`` to row ``ids[i]``; ``values`` must have this tensor's dtype
        and shape ``(len(ids), *shape[1:])``. Of several writes to one row, the last in
        (source rank, position) order wins. Collective; see :meth:`KVStore.push
        <sarlite.kv.KVStore.push>`."""
        self._store.push(self._name, ids, values)

    def scatter_add(self, ids, values: torch.Tensor) -> None:
        """Add ``values[i]`` to row ``ids[i]`` (duplicates add up; summed per source rank
        in position order, then in source rank order). Collective; see
        :meth:`KVStore.push <sarlite.kv.KVStore.push>`."""
        self._store.push(self._name, ids, values, accumulate=True)

    def count_nonzero(self) -> int:
        """Number of non-zero elements of the whole tensor, as DGL's method.

        Collective and blocking: every rank calls it (one ``all_reduce`` of the shards'
        counts); :class:`~sarlite.comm.CollectiveError` when a rank does not join.
        """
        local = torch.count_nonzero(self.local_partition).reshape(1).to(torch.int64)
        return int(all_reduce(local, "sum", kind="kv_count")[0])

    # -- metadata ----------------------------------------------------------------
    def __len__(self) -> int:
        return self._shape[0]

    @property
    def shape(self) -> tuple[int, ...]:
        """Global shape."""
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def name(self) -> str:
        """The store key, ``"<policy_str>:<name>"``."""
        return self._name

    @property
    def kvstore_key(self) -> str:
        """The store key (DGL's name for it); the same as :attr:`name`."""
        return self._name

    @property
    def tensor_name(self) -> str:
        """The name given to the constructor (the generated one for anonymous tensors)."""
        return self._name[len(self._policy.policy_str) + 1:]

    @property
    def part_policy(self) -> Policy:
        return self._policy

    @property
    def kvstore(self) -> KVStore:
        return self._store

    @property
    def local_partition(self) -> torch.Tensor:
        """This rank's shard, shape ``(rows owned here, *shape[1:])``, in ascending global
        id order. It is the storage itself: writing to it changes the tensor."""
        return self._store.data_store[self._name]

    def __repr__(self) -> str:
        return (f"DistTensor(name={self._name!r}, shape={self._shape}, dtype={self._dtype}, "
                f"part_policy={self._policy.policy_str!r})")
