"""Row buffers reused from step to step of one sequential pass.

A pass split into steps moves a few step-sized row buffers per step (the rows sent, the
rows received, the gradients sent back). Made afresh, each is a new mapping whose pages
fault in one by one (4 KiB each: below 2 MiB torch asks for no huge pages, and
:mod:`sarlite.runtime.allocator` has every buffer above 128 KiB mapped and unmapped), at a
cost that grows with the number of steps. A :class:`Rotation` holds ``count`` buffers
of the pass's largest step and hands them out in turn, so a pass maps each once.

The caller owns the rule that makes this safe: a buffer handed out is overwritten
``count`` requests later, so whatever was in it must be used up by then (sent, received
and consumed). The engine uses rotations only where the rows of a step die with the step.
"""
from __future__ import annotations

import math

import torch


class Rotation:
    """``count`` flat buffers, each of at least ``capacity_rows`` rows, handed out in turn.

    :meth:`take` returns a ``(rows, *row_shape)`` view of the next buffer: the one taken
    ``count`` calls earlier, whose contents must be dead by then. A buffer is made on
    first use, and made again only for a larger request or another dtype or device.

    Example
    -------
    >>> r = Rotation(2, capacity_rows=2)
    >>> a, b, c = r.take(2, (4,), torch.float32), r.take(1, (4,), torch.float32), \\
    ...     r.take(2, (3,), torch.float32)
    >>> a.data_ptr() == c.data_ptr(), a.data_ptr() == b.data_ptr()
    (True, False)
    """

    def __init__(self, count: int, capacity_rows: int = 0):
        if count < 1:
            raise ValueError(f"a rotation needs at least one buffer, got {count}")
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._capacity_rows = capacity_rows
        self._next = 0

    def take(self, rows: int, row_shape, dtype: torch.dtype,
             device: torch.device | str = "cpu") -> torch.Tensor:
        """The next buffer as an uninitialised ``(rows, *row_shape)`` tensor."""
        row_shape = tuple(row_shape)
        numel = rows * math.prod(row_shape)
        i, self._next = self._next, (self._next + 1) % len(self._buffers)
        buffer = self._buffers[i]
        if (buffer is None or buffer.numel() < numel or buffer.dtype != dtype
                or buffer.device != torch.device(device)):
            buffer = torch.empty(max(rows, self._capacity_rows) * math.prod(row_shape),
                                 dtype=dtype, device=device)
            self._buffers[i] = buffer
        return buffer[:numel].view((rows,) + row_shape)
