"""SAR's ``sar.core.graphshard`` names, on sarlite's engine.

``HeteroGraphShardManager`` is sarlite's graph of several node or edge types, which
``sar.construct_full_graph``/``sar.construct_mfgs`` return for a heterogeneous partition:
``g[etype]`` is a relation's :class:`GraphShardManager`, and it answers SAR's types,
per-type sizes, ``srcnodes(ntype)``/``dstnodes(ntype)``, degrees, data and
``local_scope``. As in DGL, a graph of one node type and one edge type is the plain
:class:`GraphShardManager`, which ``construct_full_graph`` returns for a homogeneous
partition (SAR wrapped it in a ``HeteroGraphShardManager`` of one relation; see
``docs/from-sar.md``).
"""
from ...core import GraphShard, GraphShardManager, HeteroGraphShardManager

__all__ = ["GraphShard", "GraphShardManager", "HeteroGraphShardManager"]
