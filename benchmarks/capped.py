"""Run a command under a memory cap enforced by polling the RSS of its process tree.

``ulimit -v`` is no use for torch processes (they reserve far more address space than
they touch), and cgroups need privileges, so the cap is watched from outside: every
``poll_s`` seconds the RSS of the command and of all its descendants is read with psutil,
and the whole process group is killed as soon as one process passes ``per_process_mib`` or
the tree passes ``total_mib``. An allocation burst shorter than ``poll_s`` can slip past
the watcher; callers compare the processes' own high-water marks with the cap afterwards.
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

import psutil


@dataclass
class CappedRun:
    """How a capped command ended.

    ``status`` is ``"ok"``, ``"exceeded cap"`` (one process), ``"exceeded machine cap"``
    (the tree), ``"timeout"`` or ``"failed"`` (non-zero exit); peaks are the largest RSS
    seen by the watcher, MiB.
    """

    status: str
    peak_process_mib: float
    peak_total_mib: float
    seconds: float
    output_tail: str


def _tree_rss_mib(root: psutil.Process) -> list[float]:
    """RSS of ``root`` and its descendants, MiB (processes that just ended are skipped)."""
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    rss = []
    for proc in procs:
        try:
            rss.append(proc.memory_info().rss / 2**20)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return rss


def _kill_tree(root: psutil.Process, group: int) -> None:
    """Kill ``root``'s process group and every descendant (torchrun's workers may run in
    sessions of their own)."""
    try:
        procs = root.children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    os.killpg(group, signal.SIGKILL)
    for child in procs:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def run_capped(cmd: list[str], per_process_mib: float, total_mib: float, timeout: float,
               env: dict[str, str] | None = None, poll_s: float = 0.2,
               cwd: str | os.PathLike | None = None) -> CappedRun:
    """Run ``cmd`` (its own process group) and kill the group at the first cap crossed.

    Blocks until the command ends or is killed; never raises for the command's failure.
    """
    start = time.perf_counter()
    peak_proc = peak_total = 0.0
    status = None
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=cwd, start_new_session=True)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            rss = _tree_rss_mib(root)
            peak_proc = max([peak_proc] + rss)
            peak_total = max(peak_total, sum(rss))
            if peak_proc > per_process_mib:
                status = "exceeded cap"
            elif peak_total > total_mib:
                status = "exceeded machine cap"
            elif time.perf_counter() - start > timeout:
                status = "timeout"
            if status is not None:
                _kill_tree(root, proc.pid)
                proc.wait()
                break
            time.sleep(poll_s)
        if status is None:
            status = "ok" if proc.returncode == 0 else "failed"
        log.seek(0)
        tail = log.read()[-3000:]
    return CappedRun(status, peak_proc, peak_total, time.perf_counter() - start, tail)
