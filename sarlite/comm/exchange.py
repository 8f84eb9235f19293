"""Row exchanges between ranks on top of ``all_to_all_single`` and point-to-point pairs.

gloo has ``all_to_all_single`` with split sizes but not the list form of ``all_to_all``, so
an exchange with every rank is one ``all_to_all_single`` (plus one small header exchange of
sizes, row widths and dtypes when the receiver cannot know them). A ring exchange, where
each rank talks to one peer each way, is one send and one receive (``isend``/``irecv``,
grouped by ``batch_isend_irecv`` on NCCL): a rank then waits only for the rank it
receives from, not for every rank, at each of the many steps of a sequential pass. All
functions are **collectives**: every rank must call them in the same order, also with
nothing to send.
"""
from __future__ import annotations

import math
import zlib
from typing import Sequence

import torch
import torch.distributed as dist

from . import traffic
from .group import comm_device, rank, world_size
from .errors import disagreement, guarded


def _as_rows(tensor: torch.Tensor) -> torch.Tensor:
    """View ``tensor`` as a 2-D ``(rows, row_numel)`` tensor."""
    return tensor.reshape(tensor.shape[0], math.prod(tensor.shape[1:]))


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _receive_buffer(out: torch.Tensor | None, rows: int, like: torch.Tensor,
                    what: str) -> torch.Tensor:
    """A ``(rows, width)`` receive buffer of ``like``'s width, dtype and device: ``out``
    viewed as rows when the caller gives one (checked), else a new tensor.

    Raises ``ValueError`` (before anything is sent) when ``out`` does not fit."""
    if out is None:
        return like.new_empty((rows, like.shape[1]))
    flat = _as_rows(out)
    if flat.shape != (rows, like.shape[1]) or flat.dtype != like.dtype or \
            flat.device != like.device or not flat.is_contiguous():
        raise ValueError(f"{what}: a receive buffer of {rows} rows of width {like.shape[1]} "
                         f"({like.dtype}, {like.device}) is needed, got {tuple(flat.shape)} "
                         f"({flat.dtype}, {flat.device})")
    return flat


def _packed(chunks: list[torch.Tensor]) -> torch.Tensor:
    """The chunks' rows, in order, as one contiguous ``(rows, width)`` tensor: a view when
    they already lie back to back in one contiguous tensor (as the pieces of
    ``tensor.split(counts)`` do), else a copy. The chunks have one trailing shape and
    dtype."""
    rows = [_as_rows(c) for c in chunks]
    first, width = rows[0], rows[0].shape[1]
    at = first.storage_offset()
    for piece in rows:
        if not piece.is_contiguous() or piece.storage_offset() != at or \
                piece.untyped_storage().data_ptr() != first.untyped_storage().data_ptr():
            return torch.cat(rows)
        at += piece.numel()
    total = sum(piece.shape[0] for piece in rows)
    return first.as_strided((total, width), (width, 1), first.storage_offset())


class PendingRows:
    """Rows arriving from an asynchronous exchange; ``wait()`` returns them.

    The receive buffer has shape ``(rows, *row_shape)`` on the caller's device; ``works``
    are the collective calls filling it (several when the exchange is split).
    """

    def __init__(self, works: list, buffer: torch.Tensor, row_shape: torch.Size,
                 device: torch.device, kind: str = ""):
        self._kind = kind
        self._works = works
        self._buffer = buffer
        self._row_shape = row_shape
        self._device = device

    def wait(self) -> torch.Tensor:
        if self._works:
            works, self._works = self._works, []
            guarded(self._kind, lambda: [work.wait() for work in works])
        rows = self._buffer.shape[0]
        return self._buffer.reshape((rows,) + tuple(self._row_shape)).to(self._device)


def _pieces(count: int, calls: int, max_rows: int | None) -> list[tuple[int, int]]:
    """``calls`` consecutive ``(start, rows)`` pieces of ``count`` rows, at most
    ``max_rows`` each (all in the first piece when ``max_rows`` is None)."""
    if max_rows is None:
        return [(0, count)] + [(count, 0)] * (calls - 1)
    return [(min(i * max_rows, count), max(0, min(max_rows, count - i * max_rows)))
            for i in range(calls)]


def _post(send: torch.Tensor | None, send_to: int, recv: torch.Tensor | None,
          recv_from: int) -> list:
    """Post sending ``send`` to ``send_to`` and receiving into ``recv`` from ``recv_from``
    (either may be ``None``); the works. NCCL must have the two grouped
    (``batch_isend_irecv``), or two ranks that send to each other first block each other;
    gloo does not group them, and there ``batch_isend_irecv`` only posts them one by one,
    as here, for about 20 us more Python per call (measured: 60 against 44 us)."""
    ops = [(post, tensor, peer) for post, tensor, peer in
           ((dist.isend, send, send_to), (dist.irecv, recv, recv_from)) if tensor is not None]
    if ops[0][1].is_cuda:
        return dist.batch_isend_irecv([dist.P2POp(*op) for op in ops])
    return [post(tensor, peer) for post, tensor, peer in ops]


def ring_exchange(rows: torch.Tensor, send_to: int, num_recv: int, recv_from: int,
                  kind: str, async_op: bool = True, max_rows: int | None = None,
                  calls: int = 1, out: torch.Tensor | None = None) -> PendingRows:
    """Send ``rows`` to rank ``send_to`` and receive ``num_recv`` rows from ``recv_from``.

    One round of a ring schedule: in round ``r`` rank ``i`` sends to ``(i + r) % N`` and
    receives from ``(i - r) % N``, so every rank talks to a different peer. The received rows
    have the same trailing shape and dtype as ``rows``. Collective: all ranks call it in the
    same round. With ``async_op`` it returns at once; ``wait()`` on the result blocks
    until our rows are sent and the peer's have arrived (the process group's timeout
    applies). Messages between two ranks are matched in the order they are posted.

    With ``max_rows`` the exchange is ``calls`` collective calls, each moving at most
    ``max_rows`` rows each way; every rank must pass the same ``calls``, at least
    ``ceil(largest count of any rank in this round / max_rows)``. A call's piece of no
    rows posts no message (its peer, whose count is the same, expects none), so an empty
    side costs nothing: a rank with nothing to send or receive in a step returns at once.

    ``out``: a contiguous tensor of ``num_recv`` rows of ``rows``' row size and dtype on
    the communication device to receive into (a reused step buffer), instead of a new
    one; ``wait()`` then returns a view of it.
    """
    me = rank()
    row_shape = rows.shape[1:]
    device = rows.device
    if send_to == me:
        assert recv_from == me and num_recv == rows.shape[0]
        return PendingRows([], rows, row_shape, device)
    if max_rows is not None and max(rows.shape[0], num_recv) > calls * max_rows:
        raise ValueError(f"ring_exchange {kind!r}: {max(rows.shape[0], num_recv)} rows do "
                         f"not fit in {calls} calls of {max_rows}")
    flat = _as_rows(rows).to(comm_device()).contiguous()
    out = _receive_buffer(out, num_recv, flat, f"ring_exchange {kind!r}")
    works = []
    for (s_start, s_rows), (r_start, r_rows) in zip(_pieces(flat.shape[0], calls, max_rows),
                                                    _pieces(num_recv, calls, max_rows)):
        # a side of no rows posts nothing: its peer expects none
        send = flat.narrow(0, s_start, s_rows) if s_rows else None
        recv = out.narrow(0, r_start, r_rows) if r_rows else None
        if s_rows or r_rows:
            works += guarded(kind, lambda: _post(send, send_to, recv, recv_from))
    traffic.record(kind, _nbytes(flat), _nbytes(out))
    pending = PendingRows(works, out, row_shape, device, kind)
    if not async_op:
        pending.wait()            # completed here; wait() on the result returns the rows
    return pending


def exchange_sizes(counts: list[int] | torch.Tensor) -> list[int]:
    """Tell every rank ``k`` the number ``counts[k]``; return what each rank told us.

    Collective. ``counts`` has one entry per rank; in a world of one (also without a
    process group) it is returned as it is.
    """
    send = torch.as_tensor(counts, dtype=torch.int64, device=comm_device()).reshape(-1)
    if send.numel() != world_size():
        raise ValueError(f"need one count per rank ({world_size()}), got {send.numel()}")
    if world_size() == 1:
        return send.tolist()
    recv = torch.empty_like(send)
    guarded("exchange_sizes", lambda: dist.all_to_all_single(recv, send))
    return recv.tolist()


def _dtype_code(dtype: torch.dtype) -> int:
    return zlib.crc32(str(dtype).encode())


def _dtype_name(code: int) -> str:
    names = {_dtype_code(d): str(d) for d in vars(torch).values() if isinstance(d, torch.dtype)}
    return names.get(code, f"<dtype code {code}>")


_MIXED = (-1, -1)


def _row_kind(chunks: list[torch.Tensor]) -> tuple[int, int]:
    """``(row numel, dtype code)`` of this rank's chunks; ``_MIXED`` when they differ."""
    kinds = {(tuple(c.shape[1:]), c.dtype) for c in chunks}
    if len(kinds) > 1:
        return _MIXED
    row_shape, dtype = kinds.pop()
    return math.prod(row_shape), _dtype_code(dtype)


def _describe_rows(row_kind: tuple[int, int]) -> str:
    if row_kind == _MIXED:
        return "chunks of different trailing shapes or dtypes"
    width, code = row_kind
    return f"width {width} ({_dtype_name(code)})"


def _exchange_headers(chunks: list[torch.Tensor], kind: str) -> list[int]:
    """Send every rank ``[rows for it, row numel, dtype code]``; return the row counts
    each rank will send here.

    Raises ``ValueError`` on every rank, before any row moves, when the ranks' row widths
    or dtypes differ (gloo would abort the process on mismatched buffers).
    """
    width, code = _row_kind(chunks)
    send = torch.tensor([[c.shape[0], width, code] for c in chunks], dtype=torch.int64,
                        device=comm_device())
    recv = torch.empty_like(send)
    guarded(kind, lambda: dist.all_to_all_single(recv, send))
    headers = recv.cpu().tolist()
    differ = disagreement([(w, c) for _, w, c in headers], _describe_rows)
    if differ:
        raise ValueError(f"all_to_all_rows {kind!r}: the ranks send rows of {differ}: every "
                         f"rank must send rows of the same width and dtype (no rows were "
                         f"exchanged)")
    return [count for count, _, _ in headers]


def _global_calls(counts: list[int], max_rows: int, kind: str) -> int:
    """The number of calls of at most ``max_rows`` rows that every rank's largest count
    needs: ``ceil(max / max_rows)`` over all ranks (one small all-reduce)."""
    largest = torch.tensor([max(counts, default=0)], dtype=torch.int64, device=comm_device())
    guarded(kind, lambda: dist.all_reduce(largest, op=dist.ReduceOp.MAX))
    return max(1, -(-int(largest.item()) // max_rows))


def all_to_all_rows(chunks: list[torch.Tensor], kind: str,
                    max_rows: int | None = None) -> list[torch.Tensor]:
    """Send ``chunks[k]`` to rank ``k``; return the list of chunks received from each rank.

    Sizes may differ per pair; the trailing shape and dtype must be the same for every
    chunk on every rank. Collective and blocking: one header exchange (row counts, row
    width and dtype), then one payload exchange; with ``max_rows`` (the same on every
    rank) the payload moves in as many calls as the largest pair needs, each carrying at
    most ``max_rows`` rows per pair (one more small all-reduce agrees on that number).

    Raises
    ------
    ValueError
        ``chunks`` does not hold one chunk per rank (on this rank only), or, on every rank,
        the ranks' row widths or dtypes differ (the message names ``kind``, both widths
        and dtypes and the ranks that sent them).
    CollectiveError
        An exchange failed (a rank died, or did not call it within the timeout).
    """
    size = world_size()
    if len(chunks) != size:
        raise ValueError(f"need one chunk per rank ({size}), got {len(chunks)}")
    if size == 1:
        return [chunks[0]]
    recv_counts = _exchange_headers(chunks, kind)
    rows = _send_rows(chunks, recv_counts, kind, max_rows, async_op=False).wait()
    return list(rows.split(recv_counts))


def _send_rows(chunks: list[torch.Tensor], recv_counts: list[int], kind: str,
               max_rows: int | None, async_op: bool,
               out: torch.Tensor | None = None) -> PendingRows:
    """The payload of an exchange whose receive counts are known: ``chunks[k]`` to rank
    ``k``, ``recv_counts[k]`` rows from it, in one ``all_to_all_single`` (asynchronous
    with ``async_op``), or with ``max_rows`` in as many synchronous calls as the largest
    pair needs; received into ``out`` when given (see :func:`_receive_buffer`). Chunks
    that lie back to back in one tensor are sent from it without a copy. Counts the
    bytes in :mod:`~sarlite.comm.traffic`."""
    send_counts = [c.shape[0] for c in chunks]
    flat = _packed(chunks).to(comm_device()).contiguous()
    out = _receive_buffer(out, sum(recv_counts), flat, f"all_to_all {kind!r}")
    works = []
    if max_rows is None:
        work = guarded(kind, lambda: dist.all_to_all_single(
            out, flat, recv_counts, send_counts, async_op=async_op))
        works = [work] if async_op else []
    else:
        _split_all_to_all(out, flat, recv_counts, send_counts,
                          _global_calls(send_counts + recv_counts, max_rows, kind),
                          max_rows, kind)
    me = rank()
    traffic.record(kind, _nbytes(flat) - _nbytes(_as_rows(chunks[me])),
                   out.shape[1] * out.element_size() * (sum(recv_counts) - recv_counts[me]))
    return PendingRows(works, out, chunks[0].shape[1:], chunks[0].device, kind)


def _split_all_to_all(out: torch.Tensor, flat: torch.Tensor, recv_counts: list[int],
                      send_counts: list[int], calls: int, max_rows: int, kind: str) -> None:
    """``all_to_all_single(out, flat, recv_counts, send_counts)`` as ``calls`` calls of
    at most ``max_rows`` rows per pair, through contiguous staging buffers."""
    send_at = [0] + torch.tensor(send_counts).cumsum(0).tolist()[:-1]
    recv_at = [0] + torch.tensor(recv_counts).cumsum(0).tolist()[:-1]
    for call in range(calls):
        send_p = [_pieces(n, calls, max_rows)[call] for n in send_counts]
        recv_p = [_pieces(n, calls, max_rows)[call] for n in recv_counts]
        send = torch.cat([flat.narrow(0, at + start, rows)
                          for at, (start, rows) in zip(send_at, send_p)])
        recv = flat.new_empty((sum(rows for _, rows in recv_p), flat.shape[1]))
        guarded(kind, lambda: dist.all_to_all_single(
            recv, send, [rows for _, rows in recv_p], [rows for _, rows in send_p]))
        for at, (start, rows), piece in zip(recv_at, recv_p,
                                            recv.split([rows for _, rows in recv_p])):
            out.narrow(0, at + start, rows).copy_(piece)


def start_known_rows(chunks: list[torch.Tensor], recv_counts: Sequence[int],
                     kind: str, max_rows: int | None = None,
                     out: torch.Tensor | None = None) -> PendingRows:
    """Start sending ``chunks[k]`` to rank ``k`` when this rank already knows how many rows
    each rank sends it (``recv_counts[k]``): one asynchronous ``all_to_all_single``, no
    header exchange. ``wait()`` on the result gives the received rows, rank 0's first.
    Chunks that lie back to back in one tensor (the pieces of ``rows.split(counts)``) go
    out without a copy: that tensor must not be written to before ``wait()``.

    ``max_rows`` (the same on every rank): the rows move in as many synchronous calls as
    the largest pair needs, at most ``max_rows`` rows per pair each, and the exchange is
    complete when this returns. ``out``: a contiguous tensor of ``sum(recv_counts)`` rows of
    the chunks' row size and dtype on the communication device to receive into, instead of
    a new one; ``wait()`` then returns a view of it (``ValueError`` before anything is sent
    when it does not fit).

    For exchanges whose sizes were settled by an earlier one, such as the answers to a
    pull, whose rows have the shape and dtype the ranks agreed on when the tensor was
    created. Collective: every rank calls it in the same order; the chunks' trailing shape
    and dtype must be the same on every rank and ``recv_counts`` must equal what the
    others send (gloo aborts on a mismatch, so callers derive both from an exchange they
    already checked). Returns at once; local work can run until ``wait()``.
    """
    size, recv_counts = world_size(), list(recv_counts)
    if len(chunks) != size or len(recv_counts) != size:
        raise ValueError(f"need one chunk and one count per rank ({size}), got "
                         f"{len(chunks)} and {len(recv_counts)}")
    if size == 1:
        rows = chunks[0]
        if out is not None:
            out = _receive_buffer(out, recv_counts[0], _as_rows(rows), f"all_to_all {kind!r}")
            rows = out.copy_(_as_rows(rows)).view(rows.shape)
        return PendingRows([], rows, rows.shape[1:], rows.device)
    return _send_rows(chunks, recv_counts, kind, max_rows, async_op=max_rows is None,
                      out=out)
