"""Faults, measured as a user meets them: hangs at exit, and seconds to exit after kills.

    python tests/faults.py [--runs 50] [--out benchmarks/results/faults]

1. ``--runs`` tiny ``sarlite train`` runs (2 workers, 3 epochs) one after another; a run
   that has not exited 60 s after it started counts as a hang (its processes are killed).
2. ``--kills`` runs in which a random worker gets ``kill -9`` at a random moment of
   training (checkpoints included): processes left, tracebacks, lines printed.
3. For each way of stopping a run (SIGTERM, SIGINT and ``kill -9`` to ``sarlite
   train``; ``kill -9`` to a plain torchrun's process group; ``kill -9`` and SIGSTOP to
   one worker), the seconds from the signal until no process of the run is left.

Writes ``faults.json`` and ``faults.md`` under ``--out``. The same helpers drive the
tests in ``tests/test_faults.py``, ``tests/test_hostile_store.py`` and
``tests/test_many_hosts.py`` (which import it as ``faults``); it lives with them, and runs
as a script from the checkout's root for the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
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
    """A tiny training config in ``directory`` (outputs in ``directory/run``, where an
    earlier run's metrics are removed: :func:`wait_training` waits for this run's)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run" / "metrics.jsonl").unlink(missing_ok=True)
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


def error_lines(err: str) -> list[str]:
    """The lines of a run's stderr that report a failure (an error or a killed worker)."""
    return [line for line in err.splitlines() if "error" in line or "killed" in line]


# How long the stops below wait for a run's processes to be gone: far above the 0.1-1.5 s
# they take (benchmarks/results/faults), far below sarlite's 600 s collective timeout.
GONE_WAIT_S = 90.0


def seconds_until_gone(run: Run, since: float,
                       timeout: float = GONE_WAIT_S) -> float | None:
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
            _, err = run.proc.communicate(timeout=limit)
            code = run.proc.returncode
            status = "ok" if code == 0 else f"failed ({code}): {err[-2000:]}"
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


def random_kills(directory: Path, kills: int, seed: int = 0) -> dict:
    """``kills`` runs (checkpointing every 5 epochs), each with ``kill -9`` of a random
    worker at a random moment of training; what the user saw each time."""
    rng = random.Random(seed)
    seconds, tracebacks, not_one_line = [], 0, 0
    for i in range(kills):
        config = write_config(directory, epochs=100_000)
        config.write_text(config.read_text().replace("eval_every: 1", "eval_every: 1, "
                                                     "checkpoint_every: 5, overwrite: true"))
        run = start_train(config)
        try:
            wait_training(run, directory / "run" / "metrics.jsonl", 2)
            time.sleep(rng.uniform(0, 2))
            since = time.monotonic()
            workers(run)[rng.randrange(2)].send_signal(signal.SIGKILL)
            gone = seconds_until_gone(run, since)
            _, err = run.output() if gone is not None else ("", "")
        finally:
            run.kill_all()
        seconds.append(gone)
        lines = error_lines(err)
        tracebacks += "Traceback" in err
        not_one_line += len(lines) != 1
        print(f"  kill {i + 1}/{kills}: {gone if gone is None else round(gone, 1)} s, "
              f"{len(lines)} line(s){', traceback' if 'Traceback' in err else ''}",
              flush=True)
    done = [s for s in seconds if s is not None]
    return {"kills": kills, "left_alive": kills - len(done), "tracebacks": tracebacks,
            "not_one_line": not_one_line, "max_s": max(done) if done else None}


def stops(work: Path) -> dict:
    """Seconds until no process is left, for each way of stopping a run."""
    result = {}
    for how in ("SIGTERM", "SIGINT", "SIGKILL"):
        result[f"{how} to sarlite train"] = stop_launcher(work / how, how)
    result["kill -9 to torchrun's process group"] = kill_torchrun_group(work / "torchrun")
    result["kill -9 to worker rank 1"] = stop_worker(work / "kill-worker", signal.SIGKILL)[0]
    result["SIGSTOP to worker rank 1 (heartbeat 10 s)"] = stop_worker(
        work / "stop-worker", signal.SIGSTOP)[0]
    return result


def report(result: dict) -> str:
    """``faults.md``: the figures of ``result``, under the facts of the runs that measured
    them (machine, software, commits, dates; ``benchmarks.records.header``)."""
    from benchmarks.records import header
    facts = list(result.get("facts", {}).values())
    lines = [f"# Faults ({result['date']}, {result['cores']} cores)", "",
             *header(facts), ""]
    if "command" in result:
        lines += [f"Command: `{result['command']}` (each part below keeps the facts of "
                  f"the run that measured it: `--runs 0` or `--kills 0` keeps the last "
                  f"result of that part).", ""]
    if "exit" in result:
        e = result["exit"]
        lines += [f"Exit test: {e['hangs']} hangs and {e['failures']} failures in "
                  f"{e['runs']} tiny 2-worker runs (median {e['median_s']:.1f} s, max "
                  f"{e['max_s']:.1f} s from start to exit).", ""]
    if "kills" in result:
        k = result["kills"]
        lines += [f"Random kills: `kill -9` of a random worker at a random moment of "
                  f"training, {k['kills']} times: {k['left_alive']} runs left a process "
                  f"alive, {k['tracebacks']} printed a traceback, {k['not_one_line']} did "
                  f"not print exactly one line; the slowest ended {k['max_s']:.1f} s after "
                  f"the kill.", ""]
    if "seconds_to_exit" in result:
        lines += ["| how the run was stopped | seconds until no process is left |",
                  "|---|---|"]
        lines += [f"| {k} | {'still alive' if v is None else f'{v:.1f}'} |"
                  for k, v in result["seconds_to_exit"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/faults.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50,
                        help="tiny runs for the exit test (0: keep the last result)")
    parser.add_argument("--kills", type=int, default=16,
                        help="runs killed at random moments (0: keep the last result)")
    parser.add_argument("--out", default="benchmarks/results/faults",
                        help="directory of faults.json and faults.md")
    parser.add_argument("--work", default="out/faults", help="scratch directory")
    args = parser.parse_args(argv)
    work, out = Path(args.work), Path(args.out)
    path = out / "faults.json"
    result = json.loads(path.read_text()) if path.is_file() else {}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # benchmarks.records
    from benchmarks.records import run_facts
    facts = result.setdefault("facts", {})
    if args.runs:
        print(f"{args.runs} tiny runs ...", flush=True)
        facts["exit"] = run_facts(processes=2, env=env())
        result["exit"] = exit_runs(work / "exit", args.runs)
    if args.kills:
        print(f"{args.kills} random kills ...", flush=True)
        facts["kills"] = run_facts(processes=2, env=env())
        result["kills"] = random_kills(work / "kills", args.kills)
    print("stopping runs each way ...", flush=True)
    facts["seconds_to_exit"] = run_facts(processes=2, env=env())
    result["seconds_to_exit"] = stops(work)
    result["command"] = " ".join(["python tests/faults.py", *(argv if argv is not None
                                                              else sys.argv[1:])])
    result.update(date=time.strftime("%Y-%m-%d"), cores=os.cpu_count())
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    (out / "faults.md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
