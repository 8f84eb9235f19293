"""Find the tensors a message function closes over.

A Python message or edge function may use tensors that are not graph fields: an
``nn.Linear`` inside ``RelGraphConv``'s or ``EGNNConv``'s message, a weight a user's closure
captured, a tensor computed earlier in the layer. Sequential aggregation runs the function
shard by shard outside autograd's view, so those tensors must become explicit inputs of the
aggregation's autograd function: then their gradients flow like any other input's (through
``backward()`` and ``torch.autograd.grad``, also when no graph field needs a gradient).

Two sound detectors, used together while each shard's function runs with gradients on:

* :class:`Captures` is a ``TorchFunctionMode``: every torch call's tensor arguments pass
  through it. A tensor that requires a gradient and is not a graph field the engine handed
  over is captured if it is a leaf, or if its autograd node is older than the call (it was
  computed outside). Tensors computed inside the call are newer and are skipped.
* :func:`reached_leaves` walks the autograd graph of the shard's result and returns the
  leaves it reaches: this finds parameters handed straight to a custom autograd function
  (``Function.apply`` bypasses the mode; ``RelGraphConv``'s ``gather_mm`` does this). A
  tensor computed outside the call and handed straight to a custom autograd function would
  be invisible to both, so reaching an older node that no captured tensor owns is refused.

``message_has_parameters`` declarations are added to what is found (a hint, no longer
needed). DGL's builtin message functions read graph fields only and skip all this.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten


class Captures(TorchFunctionMode):
    """Records, in first-use order, the outside tensors a function uses (see module doc).

    ``found`` starts with ``declared`` (e.g. :func:`message_has_parameters`'s parameters).
    Enter it per call with :meth:`active`, naming the graph fields handed to the call.
    """

    def __init__(self, declared=()):
        super().__init__()
        self.found: list[torch.Tensor] = []
        self._ids: set[int] = set()
        self._own: set[int] = set()
        self._own_nodes: set = set()
        self._start = 0
        for tensor in declared:
            self.add(tensor)

    def add(self, tensor: torch.Tensor) -> None:
        if id(tensor) not in self._ids:
            self._ids.add(id(tensor))
            self.found.append(tensor)

    @contextmanager
    def active(self, own=()):
        """Record during one call whose graph fields are ``own``."""
        self._own = {id(t) for t in own}
        self._own_nodes = {t.grad_fn for t in own if t.grad_fn is not None}
        self._start = _next_sequence_nr()
        with self:
            yield self

    def _is_external(self, value: torch.Tensor) -> bool:
        if value.grad_fn is None:              # a leaf (a view without a graph is not one)
            return value._base is None
        return value.grad_fn._sequence_nr() < self._start   # made before this call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for value in tree_flatten((args, kwargs or {}))[0]:
            if (isinstance(value, torch.Tensor) and value.requires_grad
                    and id(value) not in self._own and id(value) not in self._ids
                    and self._is_external(value)):
                self.add(value)
        return func(*args, **(kwargs or {}))

    def add_reached(self, outputs) -> None:
        """Add the leaves the autograd graph of ``outputs`` reaches (see module doc).

        Raises
        ------
        RuntimeError
            The graph reaches a tensor computed outside the call that was not recorded.
        """
        owners = {t.grad_fn for t in self.found if t.grad_fn is not None} | self._own_nodes
        for leaf in reached_leaves(outputs, self._start, owners):
            if id(leaf) not in self._own:
                self.add(leaf)


def reached_leaves(outputs, start: int, owners) -> list[torch.Tensor]:
    """Leaves reached from ``outputs``; the walk stops at nodes older than ``start``.

    ``owners`` are the autograd nodes of recorded outside tensors and of the graph fields
    (e.g. slices the engine made); reaching any other old node raises ``RuntimeError``.
    """
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    seen, leaves = set(), []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):                 # AccumulateGrad: a leaf
            leaves.append(node.variable)
            continue
        if node._sequence_nr() < start:
            if node not in owners:
                raise RuntimeError(_HIDDEN)
            continue
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return leaves


_HIDDEN = ("sarlite: a message function hands a tensor computed outside it straight to a "
           "custom autograd function, where sarlite cannot see it. Compute that tensor "
           "inside the message function, or use one-shot mode (g.get_full_partition_graph()).")


def _next_sequence_nr() -> int:
    """The sequence number the next autograd node of this thread will get (or more)."""
    with torch.enable_grad():
        probe = torch.zeros((), requires_grad=True).view(())
    return probe.grad_fn._sequence_nr() + 1
