"""Training progress outside a terminal (sarlite.train.progress): plain lines, no carriage
returns, at most one per PLAIN_INTERVAL seconds besides the first and the last epoch."""
import io
import os
import re
import subprocess
import time

from harness import SARLITE
from sarlite.train.progress import (PLAIN_INTERVAL, BarProgress, PlainProgress,
                                    epoch_progress)

ROW = {"loss": 0.5, "epoch_time": 0.25}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _plain(total: int, clock: Clock, start: int = 0) -> tuple[PlainProgress, io.StringIO]:
    out = io.StringIO()
    return PlainProgress(start, total, out, clock=clock), out


def _run(progress: PlainProgress, clock: Clock, epochs: range, seconds: float) -> None:
    for epoch in epochs:
        clock.now += seconds
        progress.update(epoch, ROW)


def test_plain_lines_hold_no_carriage_return():
    clock = Clock()
    progress, out = _plain(50, clock)
    _run(progress, clock, range(50), PLAIN_INTERVAL)          # a line every epoch
    assert "\r" not in out.getvalue()
    assert len(out.getvalue().splitlines()) == 50


def test_plain_lines_come_at_most_once_per_interval():
    clock = Clock()
    progress, out = _plain(100, clock)
    _run(progress, clock, range(99), 1.0)       # 99 s, last epoch not yet
    epochs = [int(re.search(r"epoch (\d+)/", line)[1]) for line in out.getvalue().splitlines()]
    assert epochs == [1, 6, 11, 16, 21, 26, 31, 36, 41, 46, 51, 56, 61, 66, 71, 76, 81, 86,
                      91, 96]


def test_the_last_epoch_is_always_written():
    clock = Clock()
    progress, out = _plain(3, clock)
    _run(progress, clock, range(3), 0.01)
    assert [line.split()[2] for line in out.getvalue().splitlines()] == ["1/3", "3/3"]


def test_a_resumed_run_writes_its_first_epoch():
    clock = Clock()
    progress, out = _plain(10, clock, start=4)
    _run(progress, clock, range(4, 6), 0.01)
    assert out.getvalue() == "train: epoch 5/10 loss=0.5000 epoch_s=0.25\n"


def test_val_accuracy_appears_where_the_epoch_evaluated():
    progress, out = _plain(10, Clock())
    progress.update(0, {**ROW, "val_acc": 0.875})
    assert out.getvalue() == "train: epoch 1/10 loss=0.5000 val_acc=0.875 epoch_s=0.25\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_bar_and_anything_else_plain_lines():
    terminal = epoch_progress(0, 5, show=True, stream=_Terminal())
    terminal.close()
    assert isinstance(terminal, BarProgress)
    assert isinstance(epoch_progress(0, 5, show=True, stream=io.StringIO()), PlainProgress)


def test_sarlite_train_into_a_file_writes_a_few_plain_progress_lines(tmp_path):
    log = tmp_path / "log.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    start = time.monotonic()
    with open(log, "w") as out:
        result = subprocess.run([str(SARLITE), "train", "--config", "demo", "--nproc", "2",
                                 "--set", "train.epochs=30"], cwd=tmp_path, env=env,
                                stdout=out, stderr=subprocess.STDOUT, timeout=300)
    wall = time.monotonic() - start
    text = log.read_text()
    assert result.returncode == 0, text[-3000:]
    assert "\r" not in text
    lines = [line for line in text.splitlines() if line.startswith("train: epoch ")]
    assert lines[0].startswith("train: epoch 1/30 ") and \
        lines[-1].startswith("train: epoch 30/30 "), lines
    assert 2 <= len(lines) <= 2 + wall / PLAIN_INTERVAL, (wall, lines)
