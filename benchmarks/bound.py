"""The analytic lower bound on halo traffic for exact training, and what each mode sends.

In every layer, each partition must receive one row per halo node (a remote source of an
edge it owns) of the tensor the layer aggregates, and, where that tensor depends on
parameters, send one gradient row per halo node back. So per epoch

    bound = sum_p halo_p * sum_l width_l * (1 + needs_grad_l) * 4 bytes   (fp32)

where ``width_l`` is the width of what layer ``l`` really moves across the cut, which is
not always its input width: DGL's ``SAGEConv`` and ``GraphConv`` project *before*
aggregating when ``in > out`` (so the last layer moves ``num_classes`` wide rows), and
``GATConv`` projects first and moves the projected features ``ft`` (heads x out) plus the
source attention logits ``el`` (heads). Layer 1 of SAGE and GCN aggregates the raw input
features, which need no gradient, so it has no backward term ("less what layer 1 does not
need"); GAT's layer 1 moves ``fc(x)``, which does.

What the engine sends (``sarlite/core/sar_op.py``, ``distributed_block.py``):

* one-shot: one halo exchange per source field in forward, one gradient exchange in
  backward: exactly the bound;
* sa: the forward fetches each shard's rows once and keeps the autograd graph; backward
  only returns gradients: exactly the bound;
* sar: ``copy_u`` with ``sum``/``mean`` (SAGE, GCN) back-propagates by the transposed
  aggregation, and GAT's ``u_add_v`` by sums of the edge gradient: no refetch. GAT's
  ``u_mul_e`` refetches the rows it aggregates (``ft``) in backward, where its edge
  gradient reads them: one more transfer of ``ft`` per layer, a little under 1.5x the
  bound. (Before the engine summed ``u_add_v``'s gradients directly it refetched ``el``
  too: exactly 1.5x; each record stores the bytes its own commit expected.)
"""
from __future__ import annotations

from dataclasses import dataclass

BYTES_PER_VALUE = 4
# models whose layers aggregate with copy_u + sum/mean (projecting first when in > out)
COPY_SRC_MODELS = ("sage", "gcn")


@dataclass(frozen=True)
class LayerExchange:
    """What one layer moves per halo node: ``width`` values, and a gradient if needed;
    ``refetched``: the values of those a sar backward fetches again."""

    width: int
    needs_grad: bool
    refetched: int = 0


def layer_exchanges(model: str, feat_dim: int, hidden: int, num_classes: int,
                    num_layers: int = 3, heads: int = 4) -> list[LayerExchange]:
    """Per layer of :func:`benchmarks.common.build_model`, the rows it moves across the cut.

    ``hidden`` is the width per head for ``gat`` (hidden layers have ``heads`` heads, the
    output layer one).

    Raises
    ------
    ValueError
        Unknown model.
    """
    out = []
    for i in range(num_layers):
        last = i == num_layers - 1
        width_in = feat_dim if i == 0 else hidden * (heads if model == "gat" else 1)
        width_out = num_classes if last else hidden
        if model in COPY_SRC_MODELS:
            project_first = width_in > width_out
            out.append(LayerExchange(width_out if project_first else width_in,
                                     needs_grad=i > 0 or project_first))
        elif model == "gat":
            h = 1 if last else heads
            # ft and el; sar's backward refetches ft (u_mul_e's edge gradient reads it)
            out.append(LayerExchange(h * width_out + h, needs_grad=True,
                                     refetched=h * width_out))
        else:
            raise ValueError(f"unknown model {model!r}")
    return out


def halo_bytes(halo_nodes: list[int], exchanges: list[LayerExchange],
               refetch: bool | list[bool] = False) -> int:
    """Bytes per epoch over all partitions; ``refetch`` (for every layer, or one flag per
    layer) adds sar's backward refetch."""
    flags = refetch if isinstance(refetch, list) else [refetch] * len(exchanges)
    per_node = sum(e.width * (1 + e.needs_grad) + e.refetched * (again and e.needs_grad)
                   for e, again in zip(exchanges, flags, strict=True))
    return sum(halo_nodes) * per_node * BYTES_PER_VALUE


def lower_bound(halo_nodes: list[int], exchanges: list[LayerExchange]) -> int:
    """The analytic lower bound on halo bytes per epoch (all partitions together)."""
    return halo_bytes(halo_nodes, exchanges)


def expected_bytes(halo_nodes: list[int], exchanges: list[LayerExchange],
                   mode: str | list[str]) -> int:
    """Halo bytes per epoch that ``mode`` sends by construction (see the module text);
    ``mode`` may name each layer's (a memory-budget plan's)."""
    modes = mode if isinstance(mode, list) else [mode] * len(exchanges)
    return halo_bytes(halo_nodes, exchanges, refetch=[m == "sar" for m in modes])
