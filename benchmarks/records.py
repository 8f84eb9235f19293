"""What every benchmark record stores about the run that made it, and the sections a
summary groups records into.

    from benchmarks.records import run_facts
    record["facts"] = run_facts(processes=4, torch_threads=1, env=common.user_env())

:func:`run_facts` is called by the process that launches a measured run (it reads the
checkout, the machine and the environment the run gets); :func:`process_facts` by each
measured process itself (the threads and allocator setting it really had). A summary
puts records under one header only when :func:`section_key` is equal for them: same
machine, same software, same allocator policy (:func:`split`).
"""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    """``git args`` in the checkout, stripped; ``""`` where git or the checkout is missing."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> dict:
    """``{"sha": full hash or None, "dirty": whether tracked files differ from it}``. The
    committed results under ``benchmarks/results`` are not counted: a run writes (and
    ``--fresh`` first removes) its own records there, which would mark every run of a
    suite that updates its committed results as dirty."""
    sha = _git("rev-parse", "HEAD") or None
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".",
                      ":(exclude)benchmarks/results")) if sha else None
    return {"sha": sha, "dirty": dirty}


def machine_facts() -> dict:
    """CPU model (``/proc/cpuinfo``), logical cores, physical memory (GiB, 1 decimal)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines
                if line.startswith("model name")), platform.processor() or "unknown")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu_model": cpu, "cores": os.cpu_count(), "memory_gib": round(memory, 1)}


def software_facts() -> dict:
    """Versions of Python, torch, dgl and numpy as this interpreter imports them."""
    import dgl
    import numpy
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__,
            "dgl": dgl.__version__, "numpy": numpy.__version__}


def allocator_facts(env: Mapping[str, str], sarlite_init: bool,
                    mini_batch: bool = False) -> dict:
    """The allocator policy a process started with ``env`` runs under: glibc's
    ``MALLOC_*`` variables it sees, the mmap threshold ``sarlite.init`` applies in it
    (bytes, ``"retain"``, or ``None``: glibc's own setting; always ``None`` for a process
    that does not call ``sarlite.init``) and whether torch asks for huge pages
    (:func:`sarlite.runtime.allocator.huge_pages`). ``mini_batch``: the process trains on
    mini-batches and passes :func:`sarlite.runtime.allocator.mini_batch_setting` to
    ``sarlite.init``, as ``sarlite train`` with sampling does; else it takes ``init``'s
    default (the fixed threshold)."""
    from sarlite.runtime.allocator import huge_pages, mini_batch_setting
    from sarlite.runtime.settings import read_settings
    applied = None if not sarlite_init else \
        mini_batch_setting(env) if mini_batch else read_settings(env).mmap_threshold
    return {"malloc_env": {k: v for k, v in sorted(env.items()) if k.startswith("MALLOC_")},
            "sarlite_mmap_threshold": applied, "huge_pages": huge_pages(env)}


def run_facts(processes: int = 1, torch_threads: int = 1,
              env: Mapping[str, str] | None = None, sarlite_init: bool = True,
              mini_batch: bool = False) -> dict:
    """The facts one benchmark record stores about its run: ``commit``, ``date`` (UTC,
    ISO 8601), ``load_average`` (1, 5, 15 minutes, when the run starts), ``machine``,
    ``software``, ``threads`` (torch threads per process,
    ``OMP_NUM_THREADS`` as the run sees it, number of processes) and ``allocator``
    (:func:`allocator_facts`). ``env``: the environment the run's processes get
    (``os.environ`` if ``None``); ``sarlite_init``: whether they call ``sarlite.init``
    (sarlite's workers) or not (single-process DGL); ``mini_batch``: as
    :func:`allocator_facts`. Local; runs ``git`` twice."""
    env = os.environ if env is None else env
    return {"commit": commit(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "machine": machine_facts(), "software": software_facts(),
            "threads": {"torch_per_process": torch_threads,
                        "omp_num_threads": env.get("OMP_NUM_THREADS"),
                        "processes": processes},
            "allocator": allocator_facts(env, sarlite_init, mini_batch)}


def process_facts() -> dict:
    """What the calling process really runs with: ``torch.get_num_threads()``,
    ``OMP_NUM_THREADS``, its ``MALLOC_*`` variables and the mmap threshold sarlite
    applied in it (:func:`sarlite.runtime.allocator.applied`)."""
    import torch

    from sarlite.runtime import allocator
    return {"torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "malloc_env": {k: v for k, v in sorted(os.environ.items())
                           if k.startswith("MALLOC_")},
            "sarlite_mmap_threshold": allocator.applied(),
            "huge_pages": allocator.huge_pages()}


def section_key(facts: dict | None, policy: str | None = None) -> tuple:
    """What records under one summary header must share: machine, software and the
    allocator ``policy`` (a label the benchmark chose for both sides). ``()`` for a
    record without facts (its section says that nothing was recorded)."""
    if not facts:
        return ()
    m, s = facts["machine"], facts["software"]
    return (m["cpu_model"], m["cores"], m["memory_gib"], s["python"], s["torch"], s["dgl"],
            s["numpy"], policy)


def split(records: list[dict], facts=lambda r: r.get("facts"),
          policy=lambda r: r.get("allocator_policy")) -> list[list[dict]]:
    """``records`` in sections of equal :func:`section_key`, in order of first appearance;
    each section keeps the records' order."""
    sections: dict[tuple, list[dict]] = {}
    for record in records:
        sections.setdefault(section_key(facts(record), policy(record)), []).append(record)
    return list(sections.values())


def header(facts: list[dict]) -> list[str]:
    """Markdown lines naming what a section's records share (machine, software) and what
    they span (commits, dates); ``facts`` from records of one :func:`section_key`."""
    if not facts:
        return ["Machine, software and settings: **not recorded** (records older than "
                "run facts)."]
    m, s = facts[0]["machine"], facts[0]["software"]
    commits = sorted({f["commit"]["sha"][:10] + ("+dirty" if f["commit"]["dirty"] else "")
                      for f in facts if f["commit"]["sha"]})
    dates = sorted(f["date"] for f in facts)
    loads = [f["load_average"][0] for f in facts if "load_average" in f]
    load = f" Load average (1 min) at the runs' starts: {min(loads):.1f} to {max(loads):.1f}." \
        if loads else ""
    return [f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['memory_gib']:g} GiB. "
            f"Software: Python {s['python']}, torch {s['torch']}, dgl {s['dgl']}, "
            f"numpy {s['numpy']}.",
            f"Runs from {dates[0]} to {dates[-1]} (UTC), commit(s) "
            f"{', '.join(commits) or 'unknown'}.{load}"]


def describe_allocator(allocator: dict) -> str:
    """One phrase for :func:`allocator_facts`' result."""
    env = ", ".join(f"{k}={v}" for k, v in allocator["malloc_env"].items())
    own = allocator["sarlite_mmap_threshold"]
    parts = [env or "no MALLOC_* variables"]
    if own == "retain":
        parts.append("sarlite.init keeps freed memory in the process for reuse (retain)")
    elif own is not None:
        parts.append(f"sarlite.init sets the mmap threshold to {own} bytes")
    elif not env:
        parts.append("glibc's defaults")
    if "huge_pages" in allocator:
        parts.append(f"torch huge pages {allocator['huge_pages']}")
    return "; ".join(parts)


def cpu_per_epoch(workers: list[dict], epochs: int) -> float:
    """The median over ``epochs`` timed epochs of the CPU time all workers spent in one."""
    return statistics.median(sum(w["epoch_cpu_s"][i] for w in workers) for i in range(epochs))


def first_run(record: dict) -> tuple[float, float | None]:
    """A suite record's first run: its median epoch time and :func:`cpu_per_epoch`
    (``None`` for workers that recorded no CPU time)."""
    epochs = record["epoch_times"]
    workers = record.get("workers", [])
    cpu = cpu_per_epoch(workers, len(epochs)) if workers and all(
        "epoch_cpu_s" in w for w in workers) else None
    return statistics.median(epochs), cpu


def run_medians(record: dict) -> list[float]:
    """Each run's own median epoch time: a suite record's first run, then its repeats."""
    return [first_run(record)[0]] + [r["median_epoch_s"] for r in record.get("repeats", [])]
