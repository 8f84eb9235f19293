"""Graph shards and the ring schedule that feeds them.

Worker ``i`` holds ``N`` shards: shard ``j`` is a block whose source nodes are the
distinct rows of partition ``j`` that have an edge into partition ``i`` (compacted) and
whose destination nodes are the local destination nodes. In ring round ``r`` worker ``i``
aggregates shard ``(i - r) % N`` and serves the rows that worker ``(i + r) % N`` needs.
With a bound on the rows per step a round is several steps, each moving one chunk of the
shard's rows (:meth:`RingPlan.steps`, :meth:`GraphShard.chunks`).
"""
from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from ..comm import (all_gather_object, all_to_all_rows, comm_device, rank, ring_exchange,
                    world_size)
from .local_blocks import BlockCache
from .kernels import FUSED_DTYPES, EdgeIndex, add_product, edge_matrix, narrow
from .step_buffers import Rotation


#: Above this many edges per destination a chunk's ``copy_u`` + ``sum`` runs as an
#: aggregate per destination (DGL's kernel, each destination's row written once) instead
#: of along its edges (each edge a read-modify-write of a destination row).
EDGES_PER_DST_ALONG_EDGES = 3.0


class GraphShard:
    """The edges from partition ``src_part`` into the local partition.

    Attributes
    ----------
    src_part:
        Partition that owns the source nodes.
    rows:
        ``(U_j,)`` int64, the distinct source rows needed, as local ids of ``src_part``
        (ascending); block source ``k`` is row ``rows[k]`` of that partition.
    index:
        The shard's edges (:class:`~sarlite.core.kernels.EdgeIndex`): ``U_j`` source nodes
        and all local destination nodes. :meth:`block` builds the block that runs them.
    edge_slice:
        ``(start, end)`` of this shard's edges in the manager's ``edata`` (shard order).
    edge_index, dst_index:
        ``None`` for a whole shard. For a chunk (see :meth:`chunks`): ``(E_c,)`` int64, the
        positions of the chunk's edges among the shard's edges, so that block edge ``e``
        is shard edge ``edge_index[e]`` (ordered by destination, each destination's edges
        in shard order); and ``(D_c,)`` int64, the destination
        nodes the chunk's edges reach (ascending), so that block destination ``d`` is
        destination ``dst_index[d]`` of the shard.
    """

    def __init__(self, src_part: int, rows: torch.Tensor, index: EdgeIndex,
                 edge_slice: tuple[int, int], edge_index: torch.Tensor | None = None,
                 dst_index: torch.Tensor | None = None):
        self.src_part = src_part
        self.rows = rows
        self.index = index
        self.edge_slice = edge_slice
        self.edge_index = edge_index
        self.dst_index = dst_index
        self._blocks = BlockCache(index)
        self._has_in_edges = None
        self._chunks = {}
        self._matrix = None

    @property
    def num_edges(self) -> int:
        return self.index.num_edges

    @property
    def device(self) -> torch.device:
        return self.index.src.device

    def block(self, kernels: str = "dgl"):
        """The block that runs this shard on ``kernels`` (``"dgl"``: a DGL block;
        ``"torch"``: a :class:`~sarlite.core.torch_block.TorchBlock`), built once."""
        return self._blocks.get(kernels)

    def has_in_edges(self) -> torch.Tensor:
        """``(num_dst,)`` bool: destination nodes with at least one edge in this shard."""
        if self._has_in_edges is None:
            self._has_in_edges = self.index.in_degrees() > 0
        return self._has_in_edges

    def update_all(self, kernels: str, message_func, reduce_func) -> None:
        """``update_all`` on :meth:`block` for ``kernels``, whose fields the caller set
        (``BlockCache.update_all``: on DGL's kernels ``u_mul_e`` + ``sum`` runs as
        sparse products)."""
        self._blocks.update_all(kernels, message_func, reduce_func)

    def sum_back(self, kernels: str, grad: torch.Tensor) -> torch.Tensor:
        """``(num_src, ...)``: ``grad`` ``(num_dst, ...)`` summed back along the edges to
        their sources (the source gradient of ``copy_u`` + ``sum``), on the formats of
        the forward block (``BlockCache.sum_back``): no second graph."""
        return self._blocks.sum_back(kernels, grad)

    def product_back(self, kernels: str, grad: torch.Tensor, x: torch.Tensor,
                     w: torch.Tensor, need_x: bool, need_w: bool):
        """``u_mul_e`` + ``sum``'s gradients ``(dx, dw)`` on this piece, on ``kernels``, from
        the output gradient ``grad`` ``(num_dst of the piece, ...)``, the source rows ``x``
        and the piece's edge values ``w`` (``BlockCache.product_back``)."""
        return self._blocks.product_back(kernels, grad, x, w, need_x, need_w)

    def add_back(self, kernels: str, grad: torch.Tensor, x_shape: tuple, y_shape: tuple,
                 need_x: bool, need_y: bool):
        """``u_add_v``'s gradients ``(dx, dy)`` on this piece, on ``kernels``: the piece's
        edge gradient ``grad`` summed at each edge's source row and at its destination
        (``BlockCache.add_back``); ``x_shape``/``y_shape``: the inputs' row shapes."""
        return self._blocks.add_back(kernels, grad, x_shape, y_shape, need_x, need_y)

    def add_copied(self, out: torch.Tensor, rows: torch.Tensor) -> bool:
        """``out[d] += rows[s]`` for every edge ``s -> d`` of this piece, in place, where
        ``out`` ``(num_dst of the shard, *F)`` is indexed by the shard's destinations (a
        chunk's ``dst_index`` is applied) and ``rows`` ``(num_src, *F)`` are the piece's
        source rows: ``copy_u`` + ``sum`` folded straight into the shard's accumulator,
        at a cost that follows the piece's edges (:func:`~sarlite.core.kernels.add_product`
        of :meth:`edge_matrix`). ``False`` (nothing done) for dtypes it does not take, and
        for a piece with more than :data:`EDGES_PER_DST_ALONG_EDGES` edges per destination
        it reaches, where an aggregate per destination (DGL's kernel on the piece's block)
        costs less."""
        return rows.dtype in FUSED_DTYPES and self._along_edges() and \
            add_product(out, self.edge_matrix(rows.dtype, out.shape[0]), rows)

    def copied_back(self, grad: torch.Tensor, buffer=None) -> torch.Tensor | None:
        """``(num_src, *F)``: ``grad`` ``(num_dst of the shard, *F)`` summed back along
        this piece's edges to its sources (the source gradient of :meth:`add_copied`);
        ``None`` for dtypes :meth:`add_copied` does not take. ``buffer(rows)``, if
        given, returns the ``(rows, *F)`` tensor of ``grad``'s dtype to write it into
        (a reused one; its contents are overwritten), else a new one is made.

        Also for a piece with many edges per destination, where :meth:`add_copied`
        declines: here each edge adds into one of the piece's source rows (a step's
        worth, which stays in cache), and the other way, DGL's kernel on the piece's
        block, would first gather the output gradient of every destination the piece
        reaches (on a power-law graph's dense chunks, 10 MiB more at the peak of a
        backward pass, and no faster)."""
        if grad.dtype not in FUSED_DTYPES:
            return None
        rows = self.index.num_src
        out = grad.new_zeros((rows,) + tuple(grad.shape[1:])) if buffer is None \
            else buffer(rows).zero_()
        add_product(out, self.edge_matrix(grad.dtype, grad.shape[0]).t(), grad.contiguous())
        return out

    def edge_matrix(self, dtype: torch.dtype, num_dst: int) -> torch.Tensor:
        """The ``(num_dst, num_src)`` sparse matrix of this piece's edges
        (:func:`~sarlite.core.kernels.edge_matrix`) in ``dtype``, whose rows are the
        ``num_dst`` destinations of the whole shard (a chunk's ``dst_index`` applied):
        :meth:`add_copied` adds its product and :meth:`copied_back` its transpose's.

        A chunk, which a pass runs at every one of its steps, keeps it (20 bytes per
        edge, for one dtype at a time): building it at each step cost about a third of
        the step's product. A whole shard, run once per ring round, makes it per call
        (it keeps DGL's formats for its other kernels)."""
        matrix = self._matrix
        if matrix is None or matrix.dtype != dtype or matrix.shape[0] != num_dst:
            dst = self.index.dst if self.dst_index is None else \
                self.dst_index.index_select(0, self.index.dst.long())
            matrix = edge_matrix(dst, self.index.src, num_dst, self.index.num_src, dtype)
            if self.dst_index is not None:
                self._matrix = matrix
        return matrix

    def _along_edges(self) -> bool:
        """Whether adding along the edges is the cheaper way for this piece: at most
        :data:`EDGES_PER_DST_ALONG_EDGES` edges per destination it reaches."""
        reached = self.index.num_dst if self.dst_index is None else self.dst_index.numel()
        return self.num_edges <= EDGES_PER_DST_ALONG_EDGES * max(1, reached)

    def chunks(self, max_rows: int, count: int) -> tuple["GraphShard", ...]:
        """The shard split by source row into ``count`` chunks (built once per size).

        Chunk ``c`` holds the edges whose source is one of rows ``[c * max_rows,
        (c + 1) * max_rows)`` of the shard, renumbered from 0, and as destinations only
        the nodes those edges reach (``dst_index``), so that a chunk's aggregate is no
        larger than its edges need; its ``edge_index`` says where its edges sit in the
        shard. A chunk's edges are ordered by destination, and each destination keeps its
        edges in shard order, so its messages are reduced in the same order as in the
        whole shard. Chunks past the shard's rows are empty (other ranks
        may need more chunks in the same ring round). ``count == 1`` gives the shard
        itself.
        """
        if count == 1:
            return (self,)
        key = (max_rows, count)
        if key not in self._chunks:
            self._chunks[key] = self._split(max_rows, count)
        return self._chunks[key]

    def _split(self, max_rows: int, count: int) -> tuple["GraphShard", ...]:
        src, dst = self.index.src, self.index.dst
        which = torch.div(src, max_rows, rounding_mode="floor")
        # one stable sort by (chunk, destination): within a chunk each destination's edges
        # stay in shard order, so it sums them in the order one DGL graph does, and the
        # chunk's fold walks the output rows upwards (no random read-modify-write)
        key = which.long() * self.index.num_dst + dst.long()
        order = torch.sort(key, stable=True).indices
        bounds = [0] + torch.bincount(which, minlength=count).cumsum(0).tolist()
        num_rows = self.index.num_src
        pieces = []
        for c in range(count):
            eids = order[bounds[c]:bounds[c + 1]]
            lo, hi = min(c * max_rows, num_rows), min((c + 1) * max_rows, num_rows)
            reached, compact = torch.unique(dst[eids], return_inverse=True)
            index = EdgeIndex(src[eids] - lo, compact.to(dst.dtype), hi - lo,
                              reached.numel())
            pieces.append(GraphShard(self.src_part, self.rows[lo:hi], index,
                                     self.edge_slice, eids, reached.long()))
        return tuple(pieces)

    def to(self, device) -> "GraphShard":
        return GraphShard(self.src_part, self.rows.to(device), self.index.to(device),
                          self.edge_slice)

    def run(self, fn, kernels: str, *args):
        """Call ``fn(block, *args)`` on the block for ``kernels``, silencing DGL's warning
        for UDFs on empty shards."""
        block = self.block(kernels)
        if self.num_edges:
            return fn(block, *args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(block, *args)


class _Restored:
    """Pending rows that travel in a narrower dtype; ``wait()`` casts them back."""

    def __init__(self, pending, dtype: torch.dtype):
        self._pending, self._dtype = pending, dtype

    def wait(self) -> torch.Tensor:
        return self._pending.wait().to(self._dtype)


def _narrowed(rows: torch.Tensor, remote: bool, wire: torch.dtype | None) -> bool:
    """Whether ``rows`` travel in ``wire``: they go to another rank, and are floating
    point of another type."""
    return remote and wire is not None and rows.is_floating_point() and rows.dtype != wire


def _send(exchange, rows: torch.Tensor, remote: bool, wire: torch.dtype | None):
    """``exchange(rows)``, the rows in ``wire`` when :func:`_narrowed`; the received rows
    come back in ``rows``' dtype."""
    if not _narrowed(rows, remote, wire):
        return exchange(rows)
    return _Restored(exchange(rows.to(wire)), rows.dtype)


class RingPlan:
    """Who sends which rows to whom, agreed once by all ranks.

    ``send_idx[k]`` are the rows of our source tensors that worker ``k``'s shard from us
    needs; ``send_idx[me]`` is ``None``: the local shard reads our tensors in place.
    ``num_recv[j]`` is the number of rows we receive from ``j``. ``counts[i][k]`` is the
    number of rows rank ``i`` sends to rank ``k`` (every rank's, so that all ranks agree
    on how many calls a round split by ``max_rows`` takes, without asking each other).
    ``dst_counts[i]``: the destination rows of rank ``i``'s graph (the same on every
    rank: the automatic step size is computed from them).
    """

    def __init__(self, send_idx: list[torch.Tensor], num_recv: list[int],
                 counts: Sequence[Sequence[int]], dst_counts: Sequence[int] = ()):
        self.send_idx = send_idx
        self.num_recv = num_recv
        self.counts = tuple(tuple(row) for row in counts)
        self.dst_counts = tuple(dst_counts)
        self.me = rank()
        self.size = world_size()
        self._steps = {}

    def peers(self, round_: int) -> tuple[int, int]:
        """``(send_to, recv_from)`` of ring round ``round_``."""
        return (self.me + round_) % self.size, (self.me - round_) % self.size

    def to(self, device) -> "RingPlan":
        return RingPlan([None if idx is None else idx.to(device) for idx in self.send_idx],
                        self.num_recv, self.counts, self.dst_counts)

    def steps(self, step_rows: int | None) -> tuple["Step", ...]:
        """The exchange steps of one pass, in order (the same number on every rank).

        Without ``step_rows`` a step is a ring round. With it, round ``r > 0`` is split
        into as many steps as its largest pair needs (``ceil(rows / step_rows)`` over the
        rows any rank sends in that round): step ``c`` moves rows ``[c * step_rows,
        (c + 1) * step_rows)`` of every pair. Round 0 (the local shard, read in place)
        stays one step.
        """
        if step_rows not in self._steps:
            self._steps[step_rows] = self._make_steps(step_rows)
        return self._steps[step_rows]

    def _make_steps(self, step_rows: int | None) -> tuple["Step", ...]:
        steps = []
        for round_ in range(self.size):
            largest = self._largest(round_)
            count = 1 if step_rows is None or round_ == 0 else max(1, -(-largest // step_rows))
            send_to, recv_from = self.peers(round_)
            sent, received = self.counts[self.me][send_to], self.num_recv[recv_from]
            for c in range(count):
                span = step_rows if count > 1 else max(sent, received, largest)
                steps.append(Step(len(steps), round_, recv_from, c, count,
                                  _span(c, span, sent), _span(c, span, received),
                                  min(span, max(0, largest - c * span))))
        return tuple(steps)

    def _largest(self, round_: int) -> int:
        """The most rows any rank sends in round ``round_``."""
        return max(self.counts[i][(i + round_) % self.size] for i in range(self.size))

    @staticmethod
    def calls(step: "Step", max_rows: int | None) -> int:
        """Collective calls of at most ``max_rows`` rows that ``step`` takes on every rank
        (1 without a bound): enough for the largest pair of the step."""
        if max_rows is None:
            return 1
        return max(1, -(-step.largest // max_rows))

    def fetch(self, tensor: torch.Tensor, step: "Step", kind: str,
              max_rows: int | None = None, wire: torch.dtype | None = None,
              buffers: StepBuffers | None = None):
        """Post ``step`` of fetching rows of ``tensor``: returns a pending handle.
        ``wire``: the dtype floating-point rows travel in (see :class:`EngineOptions
        <sarlite.core.options.EngineOptions>`' ``halo_dtype``). ``buffers``: where the
        rows sent and received go (reused; see :meth:`fetched`), else new tensors."""
        send_to, recv_from = self.peers(step.round_)
        idx = self.send_idx[send_to]
        rows = tensor if idx is None else _gathered(tensor, idx[step.send[0]:step.send[1]],
                                                    buffers)
        num_recv = step.recv[1] - step.recv[0]
        out = _receive_buffer(None if buffers is None else buffers.received, num_recv,
                              tensor, send_to != self.me, wire)
        return _send(lambda payload: ring_exchange(
            payload, send_to, num_recv, recv_from, kind, max_rows=max_rows,
            calls=self.calls(step, max_rows), out=out), rows, send_to != self.me, wire)

    def return_grad(self, grad_rows: torch.Tensor, step: "Step", kind: str,
                    max_rows: int | None = None, wire: torch.dtype | None = None,
                    received: Rotation | None = None):
        """Post ``step`` of sending gradients of fetched rows back to their owner.

        The reverse of :meth:`fetch` (the same pairs, so the same number of calls): the
        result holds the gradients of the rows we sent in that step, from the worker we
        served. ``received``: where those arrive (reused buffers), else a new tensor.
        """
        send_to, recv_from = self.peers(step.round_)
        idx = self.send_idx[send_to]
        num_recv = grad_rows.shape[0] if idx is None else step.send[1] - step.send[0]
        out = _receive_buffer(received, num_recv, grad_rows, send_to != self.me, wire)
        return _send(lambda payload: ring_exchange(
            payload, recv_from, num_recv, send_to, kind, max_rows=max_rows,
            calls=self.calls(step, max_rows), out=out), grad_rows, send_to != self.me, wire)

    def largest_step(self, steps: Sequence["Step"]) -> int:
        """The most rows this rank sends or receives in one remote step of ``steps``
        (the size a reused step buffer needs)."""
        return max((max(s.send[1] - s.send[0], s.recv[1] - s.recv[0]) for s in steps
                    if s.round_ > 0), default=0)

    def add_returned(self, total: torch.Tensor, grad_rows: torch.Tensor, step: "Step") -> None:
        """Add gradients returned in ``step`` into ``total`` at the rows we served."""
        idx = self.send_idx[self.peers(step.round_)[0]]
        if idx is None:
            total.add_(grad_rows)
        else:
            total.index_add_(0, idx[step.send[0]:step.send[1]], grad_rows)

    def fetched(self, tensors: Sequence[torch.Tensor], steps: Sequence["Step"], depth: int,
                kind: str, max_rows: int | None = None, wire: torch.dtype | None = None,
                reuse: bool = False) -> Iterator[tuple["Step", list[torch.Tensor]]]:
        """Fetch ``tensors`` step by step, ``depth`` steps ahead.

        Yields ``(step, fetched)`` where ``fetched[f]`` holds the rows of ``tensors[f]``
        that the step's chunk of shard ``step.shard`` reads. Collective: every rank must
        consume the whole generator, with the same ``steps`` and ``max_rows``.

        With ``reuse`` the rows sent and received move through ``depth + 1`` buffers per
        tensor, of the pass's largest step, taken in turn (:mod:`~sarlite.core.step_buffers`):
        the caller must be done with a step's ``fetched`` rows when it asks for the next
        step, for they are overwritten after that.
        """
        capacity = self.largest_step(steps)
        buffers = [StepBuffers(Rotation(depth + 1, capacity), Rotation(depth + 1, capacity))
                   if reuse else None for _ in tensors]
        pending = deque()
        posted = 0
        for step in steps:
            while posted < len(steps) and posted <= step.index + depth:
                pending.append([self.fetch(t, steps[posted], kind, max_rows, wire, b)
                                for t, b in zip(tensors, buffers)])
                posted += 1
            handles = pending.popleft()
            yield step, [h.wait() for h in handles]


@dataclass(frozen=True)
class StepBuffers:
    """Where one tensor's rows are sent from and received into, step after step."""

    sent: Rotation
    received: Rotation


def _gathered(tensor: torch.Tensor, index: torch.Tensor,
              buffers: StepBuffers | None) -> torch.Tensor:
    """``tensor[index]``, into the next send buffer when there are ``buffers``."""
    if buffers is None:
        return tensor.index_select(0, index)
    out = buffers.sent.take(index.numel(), tensor.shape[1:], tensor.dtype, tensor.device)
    return torch.index_select(tensor, 0, index, out=out)


def _receive_buffer(received: Rotation | None, rows: int, like: torch.Tensor,
                    remote: bool, wire: torch.dtype | None) -> torch.Tensor | None:
    """The next buffer of ``received`` for ``rows`` rows like ``like``'s, where one is used:
    not for the local shard (no exchange), rows that travel in ``wire``, or rows whose
    exchange runs on another device (``comm_device``)."""
    if (received is None or not remote or _narrowed(like, remote, wire)
            or like.device != comm_device()):
        return None
    return received.take(rows, like.shape[1:], like.dtype, like.device)


def _span(chunk: int, rows: int, count: int) -> tuple[int, int]:
    """Rows ``[chunk * rows, (chunk + 1) * rows)`` of ``count``, clipped."""
    return min(chunk * rows, count), min((chunk + 1) * rows, count)


@dataclass(frozen=True)
class Step:
    """One exchange step of a sequential pass.

    ``index``: position in the pass; ``round_``: the ring round; ``shard``: the shard
    aggregated (the rank we receive from); ``chunk`` of ``chunks``: which piece of that
    shard (see :meth:`GraphShard.chunks`); ``send`` / ``recv``: ``(start, stop)`` of the
    rows we send (of ``send_idx[peer]``) and receive (of the shard's rows); ``largest``:
    the most rows any rank sends in this step.
    """

    index: int
    round_: int
    shard: int
    chunk: int
    chunks: int
    send: tuple[int, int]
    recv: tuple[int, int]
    largest: int


def build_shards(shard_edges: list[tuple[torch.Tensor, torch.Tensor]],
                 node_ranges: torch.Tensor, num_dst: int, serve, device
                 ) -> tuple[list[GraphShard], RingPlan]:
    """Build the local shards and agree on the ring plan with every other rank.

    ``shard_edges[j]`` is ``(src, dst)``: global source ids (owned by partition ``j``) and
    destination indices in ``[0, num_dst)``. ``serve(requested)`` receives, for every rank
    ``k``, the owned nodes (local ids) that ``k`` asks for, and returns their rows in this
    rank's source tensors together with the number of those rows (for a full graph: the
    local ids themselves, and the number of owned nodes). The local shard addresses this
    rank's source tensor directly, so its rows are never copied. Collective: one exchange
    of the requested rows (:func:`request_rows`), then :func:`assemble_shards`.
    """
    uniques, requested = request_rows(shard_edges, node_ranges)
    positions, num_src = serve(requested)
    return assemble_shards(shard_edges, uniques, positions, num_src, num_dst, device)


def request_rows(shard_edges: list[tuple[torch.Tensor, torch.Tensor]],
                 node_ranges: torch.Tensor) -> tuple[list, list[torch.Tensor]]:
    """Tell every partition which of its rows this rank's edges read.

    Returns ``(uniques, requested)``: ``uniques[j]`` is ``(rows, inverse)`` of the distinct
    local ids of partition ``j`` that ``shard_edges[j]`` reads; ``requested[k]`` the local
    ids of this rank's nodes that rank ``k`` reads. Collective (one exchange).
    """
    uniques = [torch.unique(src - node_ranges[j, 0], return_inverse=True)
               for j, (src, _) in enumerate(shard_edges)]
    requested = [rows[:, 0] for rows in
                 all_to_all_rows([rows.unsqueeze(1) for rows, _ in uniques], kind="setup")]
    return uniques, requested


def assemble_shards(shard_edges: list[tuple[torch.Tensor, torch.Tensor]], uniques: list,
                    positions: list[torch.Tensor], num_src: int, num_dst: int, device
                    ) -> tuple[list[GraphShard], RingPlan]:
    """The shards and ring plan once every rank knows where the rows it serves are:
    ``positions[k]`` are the rows of this rank's source tensors that rank ``k`` reads
    (``num_src`` rows in all). Collective (one gather of the send and destination
    counts)."""
    me = rank()
    shards, offset = [], 0
    for j, ((_, dst), (rows, compact)) in enumerate(zip(shard_edges, uniques)):
        if j == me:       # sources are rows of our own source tensor, used in place
            src, num_rows = positions[me][compact], num_src
        else:
            src, num_rows = compact, rows.numel()
        bounds = (num_rows, num_dst, dst.numel())
        index = EdgeIndex(narrow(src, *bounds), narrow(dst, *bounds), num_rows,
                          num_dst).to(device)
        shards.append(GraphShard(j, rows, index, (offset, offset + dst.numel())))
        offset += dst.numel()
    send_idx = [None if k == me else rows.contiguous().to(device)
                for k, rows in enumerate(positions)]
    gathered = all_gather_object(([0 if idx is None else idx.numel() for idx in send_idx],
                                  num_dst), kind="setup")
    return shards, RingPlan(send_idx, [shard.index.num_src for shard in shards],
                            [sent for sent, _ in gathered], [dst for _, dst in gathered])


def global_out_degrees(shard_src: list[torch.Tensor], node_ranges: torch.Tensor
                       ) -> torch.Tensor:
    """``(num_owned,)`` out-degree of every owned node over the whole graph.

    ``shard_src[j]`` holds the global sources (owned by ``j``) of this rank's owned edges.
    Collective: every rank reports edge counts to the sources' owners.
    """
    counts = []
    for j, src in enumerate(shard_src):
        rows, per_row = torch.unique(src - node_ranges[j, 0], return_counts=True)
        counts.append(torch.stack([rows, per_row], 1))
    me = rank()
    out = torch.zeros(int(node_ranges[me, 1] - node_ranges[me, 0]), dtype=torch.int64)
    for rows_counts in all_to_all_rows(counts, kind="setup"):
        out.index_add_(0, rows_counts[:, 0], rows_counts[:, 1])
    return out
