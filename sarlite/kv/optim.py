"""Sparse optimizers for DistEmbedding: only the rows a step touched change.

``step()`` sends every recorded ``(id, gradient)`` pair to the rank that owns the id (one
:func:`~sarlite.kv.routing.push_rows`); each owner then updates its own rows of the
embedding and of the optimizer state in place. The state lives in :class:`DistTensor`
shards sharded like the embedding, so :meth:`save` / :meth:`load` can re-shard it.

**Duplicate ids are averaged**, as DGL does: when a step records the same id several
times (on one rank or on several), the row is updated once with the mean of its
gradients. (``torch.optim.SparseAdam`` on a sparse ``nn.Embedding`` would use their sum;
multiply by the count yourself if you need that.) The mean is taken over the gradients
in (source rank, position) order, so the result does not depend on timing.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Iterable

import torch

from .checkpoint import load_dist_tensors, save_dist_tensors
from .dist_tensor import DistTensor
from .embedding import DistEmbedding
from .protocol import KVCall
from .routing import push_rows, sum_duplicates


class SparseOptimizer(ABC):
    """The shared part of :class:`SparseAdagrad` and :class:`SparseAdam`.

    Subclasses list their per-embedding state in ``STATES`` as ``(suffix, per_row)``
    (state ``<emb name>_<suffix>``: shape ``(num_embeddings,)`` when ``per_row``, else
    that of the embedding; float32, zeros), store hyper-parameters in ``self._hyper`` and
    implement :meth:`update_local`. Creating one is collective (it creates the state
    tensors).
    """

    STATES: tuple[tuple[str, bool], ...] = ()

    def __init__(self, params: Iterable[DistEmbedding], lr: float):
        self._params = list(params)
        names = [emb.name for emb in self._params if isinstance(emb, DistEmbedding)]
        if len(names) != len(self._params):
            raise TypeError(f"{type(self).__name__} optimizes DistEmbedding objects only")
        if len(set(names)) != len(names):
            raise ValueError(f"{type(self).__name__} got the same embedding twice: {names}")
        self._hyper: dict[str, float] = {"lr": float(lr)}
        self._state = {emb.name: {suffix: DistTensor(
            (emb.num_embeddings,) if per_row else (emb.num_embeddings, emb.embedding_dim),
            torch.float32, f"{emb.name}_{suffix}", part_policy=emb.part_policy)
            for suffix, per_row in self.STATES} for emb in self._params}

    def step(self) -> None:
        """Apply the recorded gradients of every embedding, then clear the records.

        Collective and blocking: every rank calls it, also when its embeddings recorded
        nothing (other ranks may send it gradients of rows it owns). Raises
        :class:`~sarlite.comm.CollectiveError` when a rank does not join.
        """
        with torch.no_grad():
            for emb in self._params:
                ids, grads = emb.take_gradients()
                call = KVCall(f"{type(self).__name__}.step on {emb.name!r}", "kv_optim")
                local_ids, grads = push_rows(ids, grads, emb.part_policy, call)
                rows, grad_sums, counts = sum_duplicates(local_ids, grads)
                self.update_local(emb, rows, grad_sums / counts.unsqueeze(1))

    def zero_grad(self) -> None:
        """Drop the gradients recorded so far (as ``torch.optim.Optimizer.zero_grad``)."""
        for emb in self._params:
            emb.zero_grad()

    @abstractmethod
    def update_local(self, emb: DistEmbedding, rows: torch.Tensor,
                     grad: torch.Tensor) -> None:
        """Update the local ``rows`` (``(k,)`` distinct local ids) of ``emb`` and of its
        state with the averaged gradient ``grad`` (``(k, embedding_dim)``). Local.

        This is sarlite's hook; DGL's ``update(idx, grad, emb)`` (global ids) is not
        called, and a subclass that defines ``update`` is refused with ``TypeError``."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "update" in vars(cls):
            raise TypeError(f"{cls.__name__} defines update(); sarlite's sparse optimizers "
                            f"call update_local(emb, rows, grad) with this rank's local "
                            f"rows instead of DGL's update(idx, grad, emb): override "
                            f"update_local")

    def local_state(self, emb: DistEmbedding) -> dict[str, torch.Tensor]:
        """``{suffix: this rank's shard}`` of the state of ``emb`` (the storage itself)."""
        return {suffix: t.local_partition for suffix, t in self._state[emb.name].items()}

    @property
    def state(self) -> dict[str, dict[str, DistTensor]]:
        """``{embedding name: {suffix: DistTensor}}``."""
        return self._state

    def save(self, f: str | os.PathLike) -> None:
        """Save the state and hyper-parameters to the directory ``f`` (DGL's name for the
        argument; DGL writes one file per rank, sarlite one directory for all ranks).

        Collective. The state is stored in the id order of each embedding's policy
        (type-wise for an embedding of one node or edge type;
        :func:`~sarlite.kv.checkpoint.save_dist_tensors`), so :meth:`load` works with any
        number of ranks, as long as the embeddings keep their ids.
        """
        save_dist_tensors(f, self._state_tensors(),
                          {"optimizer": type(self).__name__, "hyper": self._hyper})

    def load(self, f: str | os.PathLike) -> None:
        """Load the state and the hyper-parameters saved by :meth:`save` (as
        ``torch.optim`` restores its ``param_groups``). Collective.

        Raises ``ValueError`` when the checkpoint is of another optimizer class or lacks
        an embedding, ``FileNotFoundError`` when it is missing.
        """
        meta = load_dist_tensors(f, self._state_tensors(),
                                 {"optimizer": type(self).__name__})
        self._hyper.update(meta["hyper"])

    def _state_tensors(self) -> dict[str, DistTensor]:
        return {t.name: t for per_emb in self._state.values() for t in per_emb.values()}


class SparseAdagrad(SparseOptimizer):
    r"""Adagrad on the touched rows of :class:`DistEmbedding` objects.

    For each touched row ``i`` with averaged gradient ``g`` (see the module notes on
    duplicates), element-wise as DGL 2.x does:

    .. math::
        G_i \leftarrow G_i + g^2, \qquad w_i \leftarrow w_i - lr \cdot g / (\sqrt{G_i} + eps)

    (Older DGL releases kept one averaged ``G`` per row instead.) The state is
    ``<name>_sum``. Creating it and :meth:`step` are collectives.
    """

    STATES = (("sum", False),)

    def __init__(self, params: Iterable[DistEmbedding], lr: float, eps: float = 1e-10):
        super().__init__(params, lr)
        self._hyper["eps"] = float(eps)

    def update_local(self, emb: DistEmbedding, rows: torch.Tensor,
                     grad: torch.Tensor) -> None:
        total = self.local_state(emb)["sum"]
        weight = emb.weight.local_partition
        summed = total[rows] + grad * grad
        total[rows] = summed
        weight[rows] -= self._hyper["lr"] * grad / (summed.sqrt() + self._hyper["eps"])


class SparseAdam(SparseOptimizer):
    r"""Adam on the touched rows of :class:`DistEmbedding` objects.

    Each row counts its own steps ``t_i`` (only steps that touched it), as DGL does. For
    each touched row with averaged gradient ``g``:

    .. math::
        t_i \leftarrow t_i + 1,\quad m_i \leftarrow \beta_1 m_i + (1-\beta_1) g,\quad
        v_i \leftarrow \beta_2 v_i + (1-\beta_2) g^2,

        w_i \leftarrow w_i - lr \cdot \frac{m_i / (1-\beta_1^{t_i})}
        {\sqrt{v_i / (1-\beta_2^{t_i})} + eps}

    The states are ``<name>_step`` (per row), ``<name>_mem`` (``m``) and
    ``<name>_power`` (``v``). Creating it and :meth:`step` are collectives.
    """

    STATES = (("step", True), ("mem", False), ("power", False))

    def __init__(self, params: Iterable[DistEmbedding], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr)
        self._hyper.update(beta1=float(betas[0]), beta2=float(betas[1]), eps=float(eps))

    def update_local(self, emb: DistEmbedding, rows: torch.Tensor,
                     grad: torch.Tensor) -> None:
        state = self.local_state(emb)
        beta1, beta2 = self._hyper["beta1"], self._hyper["beta2"]
        steps = state["step"][rows] + 1
        mem = beta1 * state["mem"][rows] + (1 - beta1) * grad
        power = beta2 * state["power"][rows] + (1 - beta2) * grad * grad
        state["step"][rows], state["mem"][rows], state["power"][rows] = steps, mem, power
        mem_hat = mem / (1 - beta1 ** steps).unsqueeze(1)
        power_hat = power / (1 - beta2 ** steps).unsqueeze(1)
        emb.weight.local_partition[rows] -= \
            self._hyper["lr"] * mem_hat / (power_hat.sqrt() + self._hyper["eps"])
