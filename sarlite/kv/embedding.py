"""DistEmbedding: learnable rows of a DistTensor, updated by the sparse optimizers."""
from __future__ import annotations

import torch

from .dist_tensor import DistTensor
from .routing import Policy, checked_ids
from .store import InitFunc, KVStore


class DistEmbedding:
    """A ``(num_embeddings, embedding_dim)`` float32 embedding table sharded like node or
    edge data, trained by :class:`~sarlite.kv.SparseAdagrad` or
    :class:`~sarlite.kv.SparseAdam` (not by ``torch.optim``).

    ``emb(ids)`` pulls the rows ``ids`` (like ``DistTensor`` indexing: a collective, or
    one-sided in a store with one-sided reads, such as the DGL facade's). When
    autograd is recording, the returned tensor requires grad and ``(ids, rows)`` is
    remembered; the optimizer's ``step()`` sends the gradients of those rows to their
    owners and clears the record. Call ``step()`` after every recorded forward pass, or
    the records pile up.

    Parameters are those of DGL: ``num_embeddings`` must be the number of nodes or edges
    of the policy (of its type, for the policy of one type of a heterogeneous graph,
    whose rows are then looked up by type-wise id), ``name`` names the underlying :class:`DistTensor` (``None``:
    anonymous), ``init_func`` fills the rows as for :class:`DistTensor` (default zeros),
    ``part_policy`` defaults to the one inferred from ``num_embeddings`` (DGL 2.1's
    parameters, in its order). Creating one is collective: every rank calls it, with the
    same arguments, after the :class:`~sarlite.sampling.DistGraph` that set up the
    default KV store.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, name: str | None = None,
                 init_func: InitFunc | None = None, part_policy: Policy | None = None):
        self._tensor = DistTensor((num_embeddings, embedding_dim), torch.float32, name,
                                  init_func=init_func, part_policy=part_policy)
        self._trace: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, idx, device: torch.device | str = "cpu") -> torch.Tensor:
        """Rows ``idx`` (global ids), ``(len(idx), embedding_dim)`` on ``device``.

        Collective (every rank calls it, possibly with no ids), or one-sided in a store
        with one-sided reads. Raises as :meth:`KVStore.pull <sarlite.kv.KVStore.pull>`.
        """
        rows = self._tensor[idx].to(device)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append((checked_ids(idx, self.num_embeddings, self.name), rows))
        return rows

    def reset_trace(self) -> None:
        """Forget the rows recorded since the last optimizer step."""
        self._trace = []

    def take_gradients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The recorded ids ``(n,)`` and their gradients ``(n, embedding_dim)`` (CPU), in
        recording order, skipping rows that got no gradient; clears the record."""
        used = [(ids, rows.grad.detach().cpu()) for ids, rows in self._trace
                if rows.grad is not None]
        self.reset_trace()
        if not used:
            return (torch.zeros(0, dtype=torch.int64),
                    torch.zeros(0, self.embedding_dim, dtype=torch.float32))
        return torch.cat([ids for ids, _ in used]), torch.cat([grad for _, grad in used])

    def zero_grad(self) -> None:
        """Drop the gradients of the recorded rows (the records stay)."""
        for _, rows in self._trace:
            rows.grad = None

    @property
    def name(self) -> str:
        """The name given to the constructor (or the generated one)."""
        return self._tensor.tensor_name

    @property
    def data_name(self) -> str:
        """The store key of the underlying tensor."""
        return self._tensor.name

    @property
    def weight(self) -> DistTensor:
        """The underlying :class:`DistTensor`."""
        return self._tensor

    @property
    def part_policy(self) -> Policy:
        return self._tensor.part_policy

    @property
    def kvstore(self) -> KVStore:
        return self._tensor.kvstore

    @property
    def num_embeddings(self) -> int:
        return self._tensor.shape[0]

    @property
    def embedding_dim(self) -> int:
        return self._tensor.shape[1]

    def __repr__(self) -> str:
        return (f"DistEmbedding({self.num_embeddings}, {self.embedding_dim}, "
                f"name={self.name!r})")
