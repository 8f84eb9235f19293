"""Progress of the epoch loop as rank 0 shows it: a tqdm bar in a terminal, plain lines
anywhere else.

tqdm redraws its bar in place with carriage returns. A terminal shows one line that
changes; a log file, a pipe (``| tee``), CI or a batch scheduler's output file keeps every
redraw, all on one line of several KB. So where the stream is not a terminal
(``stream.isatty()`` is false), progress is one plain line at most every
:data:`PLAIN_INTERVAL` seconds, and always after the run's first and last epoch::

    train: epoch 1/100 loss=2.0794 val_acc=0.412 epoch_s=0.05
    train: epoch 64/100 loss=0.3127 val_acc=0.968 epoch_s=0.08
    train: epoch 100/100 loss=0.2214 val_acc=0.971 epoch_s=0.07

(``val_acc`` only on epochs that evaluated). The stream is standard error, where tqdm
writes. Workers write to the streams their launcher gave them: ``sarlite train``'s
launcher (:mod:`sarlite.launch`) and torchrun, without its ``--redirects`` / ``--tee``,
hand them their own standard output and error, not pipes, so a worker's ``isatty()`` is
that of the user's terminal or file.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from tqdm import tqdm

#: the fewest seconds between two plain progress lines (first and last epoch aside)
PLAIN_INTERVAL = 5.0


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or fileless stream is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _number(value, digits: int) -> str:
    return "nan" if value is None else f"{value:.{digits}f}"


class PlainProgress:
    """Progress as plain lines on ``stream``, no carriage returns: after epoch ``start``
    (the run's first), after the last (``total - 1``), and between them after an epoch
    that ends at least ``interval`` seconds of ``clock`` after the last line written."""

    def __init__(self, start: int, total: int, stream: TextIO,
                 clock: Callable[[], float] = time.monotonic,
                 interval: float = PLAIN_INTERVAL, desc: str = "train"):
        self.start, self.total, self.stream = start, total, stream
        self.clock, self.interval, self.desc = clock, interval, desc
        self._last: float | None = None          # clock time of the last line

    def update(self, epoch: int, row: dict) -> None:
        """Epoch ``epoch`` (from 0) ended with the metrics ``row`` (``loss``,
        ``epoch_time``, and ``val_acc`` where it evaluated)."""
        now = self.clock()
        if not (epoch == self.start or epoch + 1 >= self.total or self._last is None
                or now - self._last >= self.interval):
            return
        self._last = now
        parts = [f"{self.desc}: epoch {epoch + 1}/{self.total}",
                 f"loss={_number(row.get('loss'), 4)}"]
        if "val_acc" in row:
            parts.append(f"val_acc={_number(row['val_acc'], 3)}")
        parts.append(f"epoch_s={_number(row.get('epoch_time'), 2)}")
        print(" ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        pass


class BarProgress:
    """Progress as tqdm's bar on ``stream`` (a terminal), with loss, val_acc and epoch
    seconds after it."""

    def __init__(self, start: int, total: int, stream: TextIO, desc: str = "train"):
        self._bar = tqdm(total=total, initial=start, desc=desc, dynamic_ncols=True,
                         file=stream)

    def update(self, epoch: int, row: dict) -> None:
        self._bar.set_postfix(loss=_number(row.get("loss"), 4),
                              val_acc=_number(row.get("val_acc", float("nan")), 3),
                              epoch_s=_number(row.get("epoch_time"), 2), refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


class NoProgress:
    """No progress at all (every rank but 0)."""

    def update(self, epoch: int, row: dict) -> None:
        pass

    def close(self) -> None:
        pass


def epoch_progress(start: int, total: int, show: bool, stream: TextIO | None = None):
    """The progress of epochs ``start`` to ``total - 1`` on ``stream`` (default: standard
    error): :class:`BarProgress` where ``stream`` is a terminal, else
    :class:`PlainProgress`; :class:`NoProgress` unless ``show``. Each has
    ``update(epoch, row)``, called after every epoch, and ``close()``."""
    if not show:
        return NoProgress()
    stream = sys.stderr if stream is None else stream
    if is_terminal(stream):
        return BarProgress(start, total, stream)
    return PlainProgress(start, total, stream)
