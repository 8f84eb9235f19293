"""Faults, measured as a user meets them: hangs at exit, and seconds to exit after kills.

    python -m benchmarks.faults [--runs 50] [--out benchmarks/results/faults]

1. ``--runs`` tiny ``sarlite train`` runs (2 workers, 3 epochs) one after another; a run
   that has not exited 60 s after it started counts as a hang (its processes are killed).
2. For each way of stopping a run (SIGTERM, SIGINT and ``kill -9`` to ``sarlite
   train``; ``kill -9`` to a plain torchrun's process group; ``kill -9`` and SIGSTOP to
   one worker), the seconds from the signal until no process of the run is left.

Writes ``faults.json`` and ``faults.md`` under ``--out``. The same helpers drive the
tests in ``tests/test_faults.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

TINY = """\
dataset: {{name: synthetic, num_nodes: 400, avg_degree: 5, num_classes: 4, feat_dim: 8}}
partition: {{cache_dir: {parts}}}
model: {{type: gcn, hidden: 8, dropout: 0.0}}
train: {{epochs: {epochs}, eval_every: 1, out_dir: {out}}}
"""


def write_config(directory: Path, epochs: int, parts: Path | None = None) -> Path:
    """A tiny training config in ``directory`` (outputs in ``directory/run``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tiny.yaml"
    path.write_text(TINY.format(parts=parts or directory / "parts", epochs=epochs,
                                out=directory / "run"))
    return path


@dataclass
class Run:
    """One launched run: the launcher's process and what it printed."""

    proc: subprocess.Popen
    started: float
    known: set = field(default_factory=set)          # pids seen in the run's tree

    def tree(self) -> list[psutil.Process]:
        """The launcher and its live descendants (also remembered in ``known``)."""
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        self.known |= {p.pid for p in procs}
        return procs

    def survivors(self) -> list[int]:
        """Pids of the run (ever seen) still alive, zombies excluded."""
        alive = []
        for pid in self.known:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive

    def output(self) -> tuple[str, str]:
        out, err = self.proc.communicate(timeout=30)
        return out, err

    def kill_all(self) -> None:
        for pid in self.survivors():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "DGLBACKEND": "pytorch"}


def start_train(config: Path, nproc: int = 2, extra: list[str] = (),
                environ: dict | None = None) -> Run:
    """``sarlite train --config config --nproc nproc`` in a session of its own."""
    cmd = [sys.executable, "-m", "sarlite.cli", "train", "--config", str(config),
           "--nproc", str(nproc), *extra]
    return Run(subprocess.Popen(cmd, env=environ or env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True),
               time.monotonic())


def start_torchrun(config: Path, nproc: int = 2) -> Run:
    """Plain ``torchrun --standalone -m sarlite.train`` in a session of its own."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "-m", "sarlite.train", "--config", str(config)]
    return Run(subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True),
               time.monotonic())


def wait_training(run: Run, metrics: Path, nproc: int, timeout: float = 120) -> None:
    """Block until the run has written an epoch and all its workers are visible."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if metrics.is_file() and metrics.read_text().count("\n") >= 1 and \
                len(workers(run)) >= nproc:
            return
        if run.proc.poll() is not None:
            raise RuntimeError(f"the run ended early: {run.output()}")
        time.sleep(0.1)
    raise TimeoutError("the run did not start training in time")


def workers(run: Run) -> list[psutil.Process]:
    """The run's worker processes (``python -m sarlite.train``), by rank."""
    found = [p for p in run.tree() if "sarlite.train" in _cmdline(p)
             and "torch.distributed.run" not in _cmdline(p)]
    return sorted(found, key=lambda p: int(p.environ().get("RANK", "0")))


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def seconds_until_gone(run: Run, since: float, timeout: float = 90) -> float | None:
    """Seconds from ``since`` until no process of the run is alive (``None``: still
    alive after ``timeout``)."""
    while time.monotonic() - since < timeout:
        if not run.survivors():
            return time.monotonic() - since
        time.sleep(0.05)
    return None


# -- the measurements --------------------------------------------------------------------

def exit_runs(directory: Path, runs: int, limit: float = 60) -> dict:
    """``runs`` tiny runs in a row; hangs and seconds per run."""
    config = write_config(directory, epochs=3)
    seconds, hangs, failures = [], 0, 0
    for i in range(runs):
        run = start_train(config)
        try:
            code = run.proc.wait(timeout=limit)
            status = "ok" if code == 0 else f"failed ({code})"
            failures += code != 0
            seconds.append(time.monotonic() - run.started)
        except subprocess.TimeoutExpired:
            status, hangs = "hang", hangs + 1
            run.tree()
            run.kill_all()
        print(f"  run {i + 1}/{runs}: {status}", flush=True)
    return {"runs": runs, "hangs": hangs, "failures": failures,
            "median_s": sorted(seconds)[len(seconds) // 2] if seconds else None,
            "max_s": max(seconds) if seconds else None}


def stop_launcher(directory: Path, how: str) -> float | None:
    """Seconds until no process is left after ``how`` ("SIGTERM", "SIGINT", "SIGKILL")
    reaches ``sarlite train``."""
    config = write_config(directory, epochs=100_000)
    run = start_train(config)
    try:
        wait_training(run, directory / "run" / "metrics.jsonl", 2)
        since = time.monotonic()
        os.kill(run.proc.pid, getattr(signal, how))
        return seconds_until_gone(run, since)
    finally:
        run.kill_all()


def kill_torchrun_group(directory: Path) -> float | None:
    """Seconds until no process is left after ``kill -9`` of a torchrun's process group."""
    config = write_config(directory, epochs=100_000)
    run = start_torchrun(config)
    try:
        wait_training(run, directory / "run" / "metrics.jsonl", 2)
        since = time.monotonic()
        os.killpg(run.proc.pid, signal.SIGKILL)
        return seconds_until_gone(run, since)
    finally:
        run.kill_all()


def stop_worker(directory: Path, sig: int, heartbeat: float = 10) -> tuple[float | None,
                                                                              str, int]:
    """Send ``sig`` to rank 1 of a 2-worker ``sarlite train``; seconds until no process is
    left, what the user saw on stderr, and the exit status."""
    config = write_config(directory, epochs=100_000)
    run = start_train(config, environ={**env(), "SARLITE_HEARTBEAT_TIMEOUT": str(heartbeat)})
    try:
        wait_training(run, directory / "run" / "metrics.jsonl", 2)
        since = time.monotonic()
        workers(run)[1].send_signal(sig)
        gone = seconds_until_gone(run, since)
        _, err = run.output() if gone is not None else ("", "")
        return gone, err, run.proc.returncode
    finally:
        run.kill_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="tiny runs for the exit test")
    parser.add_argument("--out", default="benchmarks/results/faults",
                        help="directory of faults.json and faults.md")
    parser.add_argument("--work", default="out/faults", help="scratch directory")
    args = parser.parse_args(argv)
    work = Path(args.work)
    print(f"{args.runs} tiny runs ...", flush=True)
    result = {"exit": exit_runs(work / "exit", args.runs)}
    stops = {}
    for how in ("SIGTERM", "SIGINT", "SIGKILL"):
        stops[f"{how} to sarlite train"] = stop_launcher(work / how, how)
    stops["kill -9 to torchrun's process group"] = kill_torchrun_group(work / "torchrun")
    for name, sig in (("kill -9 to worker rank 1", signal.SIGKILL),
                      ("SIGSTOP to worker rank 1 (heartbeat 10 s)", signal.SIGSTOP)):
        stops[name] = stop_worker(work / name.split()[0], sig)[0]
    result["seconds_to_exit"] = stops
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.json").write_text(json.dumps(result, indent=2))
    lines = [f"# Faults ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)", "",
             f"Exit test: {result['exit']['hangs']} hangs and {result['exit']['failures']} "
             f"failures in {args.runs} tiny 2-worker runs (median "
             f"{result['exit']['median_s']:.1f} s, max {result['exit']['max_s']:.1f} s).",
             "", "| how the run was stopped | seconds until no process is left |",
             "|---|---|"]
    lines += [f"| {k} | {'still alive' if v is None else f'{v:.1f}'} |"
              for k, v in stops.items()]
    (out / "faults.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
