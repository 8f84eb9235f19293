"""GraphShardManager: a DGLGraph stand-in that passes messages shard by shard."""
from __future__ import annotations

import dgl
import torch

from ..comm import agree_row_shapes
from .local_blocks import resolve
from .options import EngineOptions, OptionsSource, current
from .graph_view import ShardedGraphBase
from .message import (check_all_edges, check_layer, declared_parameters, is_udf,
                      message_inputs, reducer_name)
from .sar_op import Message, ShardSet, run_sequential
from .shards import GraphShard, RingPlan


class GraphShardManager(ShardedGraphBase):
    """This worker's N graph shards, behaving like a ``DGLGraph`` for ``dgl.nn`` layers.

    Its nodes are the owned nodes and its edges the owned edges (those into owned nodes),
    in shard order. ``update_all`` and ``apply_edges`` run sequential aggregation: shard by
    shard, remote source rows are fetched, used and freed. In ``mode="sar"`` the backward
    pass refetches and recomputes each shard (rematerialization); in ``mode="sa"`` the
    forward's autograd graph is kept.

    Build it with :func:`sarlite.construct_full_graph`, not directly.

    **Collectives.** ``update_all`` and ``apply_edges`` (and their backward passes) are
    collectives: every rank must call them in the same order with the same message function
    and fields, also ranks that own no edges.

    Example
    -------
    >>> data = sarlite.load_partition_data("parts/graph.json")
    >>> g = sarlite.construct_full_graph(data)
    >>> conv = dgl.nn.SAGEConv(16, 8, "mean")
    >>> h = conv(g, data.node_features["feat"])      # (num_owned_nodes, 8), exact
    """

    def __init__(self, shards: list[GraphShard], plan: RingPlan, num_src: int, num_dst: int,
                 in_degrees: torch.Tensor, out_degrees: torch.Tensor,
                 edata: dict[str, torch.Tensor], is_block: bool = False,
                 node_ranges: torch.Tensor | None = None,
                 edge_ids: torch.Tensor | None = None,
                 global_counts: tuple[int, int] | None = None,
                 input_nodes: torch.Tensor | None = None,
                 output_nodes: torch.Tensor | None = None, *,
                 options: OptionsSource = EngineOptions(),
                 relation: tuple[str, str, str] | None = None):
        super().__init__(num_src, num_dst, in_degrees, out_degrees, self._shard_destinations,
                         edata, is_block, global_counts, relation,
                         num_edges=sum(s.num_edges for s in shards))
        self._options = options
        self.engine_options()                   # check now, not at the first layer
        self.shards = shards
        self.plan = plan
        self._node_ranges = node_ranges
        self._edge_ids = edge_ids
        self.input_nodes, self.output_nodes = input_nodes, output_nodes
        self._sampling_graph = self._merged = None

    def _shard_destinations(self) -> torch.Tensor:
        """``(num_edges,)``: every edge's destination, in shard order (built when asked;
        the shards hold it)."""
        if not self.shards:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        return torch.cat([s.index.dst for s in self.shards])

    def engine_options(self) -> EngineOptions:
        """The options the next ``update_all``/``apply_edges`` runs with (asked of the
        options callable, when the graph was built with one, at every call).

        Raises ``ValueError`` when they name mode ``"one-shot"``: a manager runs ``sar``
        or ``sa``; one-shot graphs are :class:`DistributedBlock`.
        """
        options = current(self._options)
        if options.mode not in ("sar", "sa"):
            raise ValueError(f"GraphShardManager runs mode 'sar' or 'sa', got "
                             f"{options.mode!r} (one-shot graphs are DistributedBlock: "
                             f"g.get_full_partition_graph())")
        return options

    def with_options(self, options: EngineOptions) -> "GraphShardManager":
        """A view of this graph that runs with ``options`` (``sar`` or ``sa``): it shares
        the shards, structure and tensors; its field changes stay its own, as with
        :meth:`local_var`. For per-layer settings (e.g. rows per step). Local.

        Raises ``ValueError`` for mode ``"one-shot"``
        (use :meth:`get_full_partition_graph`)."""
        view = self.local_var()
        view._options = options
        view.engine_options()
        return view

    @property
    def mode(self) -> str:
        return self.engine_options().mode

    @property
    def pipeline_depth(self) -> int:
        return self.engine_options().pipeline_depth

    def _to(self, device) -> None:
        if self.input_nodes is not None:
            self.input_nodes = self.input_nodes.to(device)
            self.output_nodes = self.output_nodes.to(device)
        self.shards = [shard.to(device) for shard in self.shards]
        self.plan = self.plan.to(device)
        self._sampling_graph = self._merged = None

    def _shard_set(self, options: EngineOptions) -> ShardSet:
        if not self.shards and self.plan.size:
            raise RuntimeError("this GraphShardManager gave its shards to "
                               "get_full_partition_graph(); use the DistributedBlock")
        return ShardSet(tuple(self.shards), self.plan, self.in_degrees(), options,
                        resolve(options.kernels, self.device))

    def _run(self, func, reducer=None, msg_field=None, out_field=None) -> dict:
        check_layer(func, self.plan.size)
        src, dst, edge = message_inputs(func, self.srcdata.keys(), self.dstdata.keys(),
                                        self.edata.keys())
        message = Message(func, tuple(src), tuple(dst), tuple(edge), is_udf(func), reducer,
                          msg_field, out_field)
        values = ([self.srcdata[n] for n in src] + [self.dstdata[n] for n in dst] +
                  [self.edata[n] for n in edge])
        # every rank must fetch rows of the same width: agree first (one small collective)
        agree_row_shapes("update_all" if reducer else "apply_edges",
                         {n: self.srcdata[n] for n in src})
        options = self.engine_options()
        return run_sequential(self._shard_set(options), message, values,
                              declared_parameters(func), keep_graph=options.mode == "sa")

    def update_all(self, message_func, reduce_func, apply_node_func=None, etype=None):
        """Send messages along all owned edges and reduce them at owned nodes.

        ``reduce_func`` must be DGL's ``sum``, ``mean``, ``max`` or ``min`` (they fold
        shard by shard); the result lands in ``dstdata[reduce_func.out_field]``. Nodes
        without in-edges get 0, as in DGL. Python message functions may use parameters
        and other tensors freely: they are found automatically and receive their
        gradients through autograd (see :mod:`sarlite.core.capture`). Collective.

        Raises
        ------
        NotImplementedError
            For any other reducer (use one-shot mode) or an ``apply_node_func``.
        """
        name = reducer_name(reduce_func)
        if apply_node_func is not None:
            raise NotImplementedError("apply_node_func is not supported: apply it to "
                                      "g.dstdata after update_all")
        out = self._run(message_func, name, reduce_func.msg_field, reduce_func.out_field)
        self.dstdata.update(out)

    def apply_edges(self, func, edges="__ALL__", etype=None):
        """Compute per-edge values on all owned edges; results land in ``edata``.

        ``func`` is a DGL builtin (``u_add_v``, ``copy_u``, ...) or a Python function of
        ``edges`` (``edges.src``, ``edges.dst``, ``edges.data``). Collective.

        Raises
        ------
        NotImplementedError
            For a subset of edges (see :func:`sarlite.core.message.check_all_edges`).
        """
        check_all_edges(edges)
        self.edata.update(self._run(func))

    @property
    def sampling_graph(self) -> dgl.DGLGraph:
        """A non-compacted graph of the owned edges for sampling, over global node ids.

        It has every node of the whole graph (``num_nodes`` = the global count, so its
        node ids are the global ids) and the owned edges, i.e. all in-edges of the owned
        nodes, in shard order (the order of ``edata``), with ``edata[dgl.EID]`` their
        global edge ids. Sampling in-edges of owned nodes on it is exact; message passing
        on it needs a feature row for every node of the graph, so it is for sampling only.
        Built once, then cached; not a collective.

        Raises
        ------
        RuntimeError
            On a message-flow graph, a manager built without global ids (use
            :func:`sarlite.construct_full_graph`), or one whose shards were deleted.
        """
        if self._sampling_graph is None:
            if self.is_block or self._node_ranges is None or not self.shards:
                raise RuntimeError("sampling_graph needs a full graph from "
                                   "sarlite.construct_full_graph that still holds its "
                                   "shards (not a message-flow graph, nor one emptied by "
                                   "get_full_partition_graph)")
            me = self.plan.me
            src, dst = [], []
            for shard in self.shards:
                block_src, block_dst = shard.index.src.long(), shard.index.dst.long()
                rows = block_src if shard.src_part == me else shard.rows[block_src]
                src.append(rows + self._node_ranges[shard.src_part, 0])
                dst.append(block_dst + self._node_ranges[me, 0])
            graph = dgl.graph((torch.cat(src), torch.cat(dst)),
                              num_nodes=int(self._node_ranges[-1, 1]))
            graph.edata[dgl.EID] = self._edge_ids.to(graph.device, torch.int64)
            self._sampling_graph = graph
        return self._sampling_graph

    def reverse(self):
        """The reversed graph, as ``dgl.reverse`` gives (after
        :func:`sarlite.install_dgl_dispatch`): it sums along edges backwards, at the
        sources, through one exchange of per-source sums (see :mod:`sarlite.core.reverse`).
        Collective when used."""
        if self._merged is None:        # the structure only, built once
            from .distributed_block import DistributedBlock
            self._merged = DistributedBlock.from_shards(
                self._shard_set(self.engine_options()).shards, self.plan, self.num_src_nodes(),
                self.num_dst_nodes(), self.in_degrees(), self.out_degrees(), {},
                self.is_block, self._global_counts, options=self._options,
                relation=self.relation)
        return self._merged.reverse()

    def get_full_partition_graph(self, delete_shard_data: bool = True):
        """All owned in-edges as one :class:`DistributedBlock` (one-shot mode).

        Its ``update_all``/``apply_edges`` fetch every remote row in one collective
        exchange (differentiable) and accept any DGL reducer; faster, more memory.
        ``delete_shard_data`` drops this manager's shards (it is unusable afterwards).
        """
        from .distributed_block import DistributedBlock
        block = DistributedBlock.from_manager(self)
        if delete_shard_data:
            self.shards, self._merged = [], None
        return block
