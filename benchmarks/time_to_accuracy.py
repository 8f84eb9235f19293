"""Time to accuracy: DGL and sarlite, full-graph and sampled, trained to one target.

    python -m benchmarks.time_to_accuracy [--datasets facebook tolokers synthetic]
        [--systems dgl-full dgl-sampled sar-full-N2 sar-full-N4 sar-sampled-N2]
        [--data-dir ../shared/data] [--epochs-scale 1.0] [--set KEY=VALUE ...]
        [--out benchmarks/results] [--reuse]

Five systems train the same model on each dataset: single-process DGL on the whole graph
(``dgl-full``) and on sampled mini-batches (``dgl.dataloading.DataLoader`` with a
``NeighborSampler``, ``dgl-sampled``), and ``sarlite train`` on the whole graph at N=2
and N=4 workers (``sar-full-N2``, ``sar-full-N4``) and sampled at N=2
(``sar-sampled-N2``). Every system reads the dataset, builds the model and the optimizer
from the same packaged config (:data:`CASES`) through sarlite's own config, dataset and
model code, so model, optimizer, learning rate, dropout, loss (mean cross-entropy over the
step's training nodes) and seeds (parameters ``train.seed``, dropout and sampling
``train.seed * 1000 + rank``) are the same; a DGL sampled step takes as many seeds as all
sarlite workers' steps together. Each epoch is followed by one exact full-graph evaluation
(DGL: a forward of the whole graph; sarlite: its full-graph SAR pass) that is not timed:
``train_time`` in ``metrics.jsonl`` counts the training only.

Resources: the DGL runs get ``min(max N, cores)`` torch threads, as many cores as
sarlite's workers (one thread each) can use together on this machine; both keep their
own allocator default (DGL: glibc's; sarlite: what ``sarlite train`` sets, see the
record). Target: one validation accuracy per dataset, ``GAIN_FRACTION`` of the way from
the majority class's validation accuracy (a model that learned nothing) to the lowest best
validation accuracy among the systems, so that every system reaches it and the target
means learning also on an imbalanced dataset (tolokers: 78% majority); the time to
``BEST_FRACTION`` of that lowest best accuracy is reported too. Reported per run:
training seconds and epochs to the targets, test accuracy there, at the best validation
epoch and at the last epoch; per run its facts (commit, date, machine, threads,
allocator: :mod:`benchmarks.records`) and settings line. Writes
``OUT/time_to_accuracy.{md,json,png}`` (the plot: validation accuracy against training
time; ``--cache`` keeps the runs' metrics and partitions). ``--reuse`` re-renders them
from the metrics of the last runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import common, records

GAIN_FRACTION = 0.95
BEST_FRACTION = 0.99
OUT = common.RESULTS
DATA_DIR = common.ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class Case:
    """One dataset: a packaged config, the overrides every system takes, the epochs of
    full-graph and of sampled training, and the sampling of one sarlite worker's step
    (``{fanouts, batch_size}``, YAML)."""

    config: str
    sets: tuple[str, ...]
    full_epochs: int
    sampled_epochs: int
    sampling: str
    real: bool = True


CASES = {
    "facebook": Case("facebook_sage", (), 15, 15, "{fanouts: [10, 10], batch_size: 32}"),
    "tolokers": Case("tolokers_sage", ("train.eval_every=1",), 40, 12,
                     "{fanouts: [10, 10, 10], batch_size: 1024}"),
    "synthetic": Case("synthetic_sage_sampled",
                      ("dataset.num_nodes=100000", "dataset.avg_degree=20",
                       "dataset.feat_dim=128", "train.eval_every=1"), 25, 4,
                      "{fanouts: [10, 10], batch_size: 1000}", real=False),
}


@dataclass(frozen=True)
class System:
    """How one run trains: ``dgl`` (one process) or ``sar`` (``sarlite train`` on
    ``nproc`` workers), on the whole graph or ``sampled``."""

    name: str
    kind: str
    sampled: bool
    nproc: int = 1


SYSTEMS = {s.name: s for s in (
    System("dgl-full", "dgl", False), System("dgl-sampled", "dgl", True),
    System("sar-full-N2", "sar", False, 2), System("sar-full-N4", "sar", False, 4),
    System("sar-sampled-N2", "sar", True, 2))}


@dataclass
class Plan:
    """What ``main`` was asked for, shared by every run of one invocation."""

    datasets: list[str]
    systems: list[str]
    data_dir: Path
    out: Path
    cache: Path
    epochs_scale: float = 1.0
    extra: list[str] = field(default_factory=list)
    timeout: float = 900.0

    def sampled_workers(self) -> int:
        """The workers of the sarlite sampled run: a DGL sampled step takes their seeds."""
        return max((SYSTEMS[s].nproc for s in self.systems
                    if SYSTEMS[s].kind == "sar" and SYSTEMS[s].sampled), default=2)

    def dgl_threads(self) -> int:
        """As many threads as the sarlite workers (one thread each) use cores together."""
        workers = max((SYSTEMS[s].nproc for s in self.systems if SYSTEMS[s].kind == "sar"),
                      default=2)
        return max(1, min(workers, os.cpu_count() or 1))


def overrides(plan: Plan, dataset: str, system: System, run_dir: Path) -> list[str]:
    """The ``--set`` overrides of one run: the case's, the sampling (or none), the epochs,
    the output and partition folders, and ``plan.extra`` last."""
    case = CASES[dataset]
    epochs = case.sampled_epochs if system.sampled else case.full_epochs
    sets = [*case.sets, f"train.epochs={max(1, round(epochs * plan.epochs_scale))}",
            f"train.sampling={case.sampling if system.sampled else 'null'}",
            f"train.out_dir={_rel(run_dir)}", "train.overwrite=true",
            f"partition.cache_dir={_rel(plan.cache / f'{dataset}_p{system.nproc}')}"]
    if case.real:
        sets.append(f"dataset.data_dir={_rel(plan.data_dir)}")
    return sets + plan.extra


def _rel(path: Path) -> str:
    """``path`` relative to the checkout, where the runs start (records hold no machine
    paths)."""
    return os.path.relpath(path, common.ROOT)


def launch(plan: Plan, dataset: str, system: System) -> Path:
    """Train one system on one dataset in its own process(es); the folder of its
    ``metrics.jsonl`` and ``run.json`` (the run's facts, :func:`records.run_facts`, and
    the settings line ``sarlite train`` printed). Prints one progress line before and
    after."""
    run_dir = plan.cache / dataset / system.name
    sets = overrides(plan, dataset, system, run_dir)
    config = CASES[dataset].config
    # sarlite's workers as its launcher starts them (huge pages on), DGL as installed
    if system.kind == "sar":
        threads, env = 1, common.suite_env(1)
        cmd = [sys.executable, "-m", "sarlite.cli", "train", "--config", config,
               "--nproc", str(system.nproc), "--set", *sets]
    else:
        threads = plan.dgl_threads()         # also OMP_NUM_THREADS, for DGL's kernels
        env = common.suite_env(threads, sarlite=False)
        cmd = [sys.executable, "-m", "benchmarks.time_to_accuracy", "--dgl-worker",
               "--config", config, "--threads", str(threads),
               "--seeds-per-step-of", str(plan.sampled_workers()), "--set", *sets]
    facts = records.run_facts(processes=system.nproc, torch_threads=threads, env=env,
                              sarlite_init=system.kind == "sar",     # as `sarlite train`
                              mini_batch=system.sampled)
    print(f"[{dataset} {system.name}] starting (load {os.getloadavg()[0]:.2f})", flush=True)
    start = time.time()
    done = subprocess.run(cmd, env=env, cwd=common.ROOT, text=True, capture_output=True,
                          timeout=plan.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    settings = next((line for line in done.stdout.splitlines()
                     if line.startswith("launching")),
                    f"DGL: 1 process, {threads} torch threads, glibc's allocator")
    wall = time.time() - start
    (run_dir / "run.json").write_text(json.dumps(
        {"facts": facts, "launch": settings, "wall_s": wall}, indent=1))
    print(f"[{dataset} {system.name}] done in {wall:.0f} s", flush=True)
    return run_dir


# ------------------------------------------------------------------ the DGL runs

def dgl_worker(args: argparse.Namespace) -> None:
    """Train as ``sarlite train`` would with ``args.config`` and ``args.set``, in this one
    process with DGL alone; write ``metrics.jsonl`` rows as its (``epoch``, ``loss``,
    ``train_time``, ``{split}_loss``, ``{split}_acc``) into ``train.out_dir``."""
    import dgl
    import torch

    from sarlite.train.config import load_config
    from sarlite.train.models import build_model
    from sarlite.train.partitions import dataset_graph

    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.set)
    g = dataset_graph(cfg)
    g.create_formats_()                     # built once, before the clock, as sarlite's
    labels, x = g.ndata["label"].long(), g.ndata["feat"].float()
    masks = {s: g.ndata[f"{s}_mask"].bool() for s in ("train", "val", "test")}
    num_classes = _num_classes(cfg, labels, masks)
    torch.manual_seed(cfg.train.seed)       # the parameters sarlite's rank 0 draws
    model = build_model(cfg.model, x.shape[1], num_classes)
    optimizer = _optimizer(cfg, model)
    torch.manual_seed(cfg.train.seed * 1000)          # rank 0's dropout stream
    loader = None
    if cfg.train.sampling is not None:
        dgl.seed(cfg.train.seed * 1000)
        sampler = dgl.dataloading.NeighborSampler(
            cfg.train.sampling.fanouts, prefetch_node_feats=["feat"],
            prefetch_labels=["label"])
        loader = dgl.dataloading.DataLoader(
            g, torch.nonzero(masks["train"]).squeeze(1), sampler, shuffle=True,
            batch_size=cfg.train.sampling.batch_size * args.seeds_per_step_of)
    graphs = [g] * cfg.model.layers
    out_dir = Path(cfg.train.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "metrics.jsonl", "w") as log:
        for epoch in range(cfg.train.epochs):
            tick = time.perf_counter()
            loss = _sampled_epoch(model, optimizer, loader) if loader is not None else \
                _step(model, optimizer, graphs, x, labels, masks["train"])
            row = {"epoch": epoch, "loss": loss, "train_time": time.perf_counter() - tick}
            row.update(_evaluate(model, graphs, x, labels, masks))
            log.write(json.dumps(row) + "\n")
            log.flush()


def _num_classes(cfg, labels, masks) -> int:
    """As ``sarlite train`` counts them: the declared classes of a synthetic dataset (or a
    real one whose config sets them), else the largest label in a split + 1."""
    from sarlite.data import SYNTHETIC_DATASETS
    if cfg.dataset.name.lower() in SYNTHETIC_DATASETS or \
            "num_classes" in cfg.dataset.model_fields_set:
        return cfg.dataset.num_classes
    used = masks["train"] | masks["val"] | masks["test"]
    return int(labels[used].max()) + 1


def _optimizer(cfg, model):
    import torch
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "sgd": torch.optim.SGD}[cfg.optim.name]
    return cls(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)


def _step(model, optimizer, graphs, x, labels, train_mask) -> float:
    """One optimizer step on the mean cross-entropy of the ``train_mask`` rows of a
    forward over ``graphs`` (one per layer: the whole graph, or sampled blocks)."""
    import torch.nn.functional as F
    model.train()
    logits = model(graphs, x)
    loss = F.cross_entropy(logits[train_mask], labels[train_mask])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _sampled_epoch(model, optimizer, loader) -> float:
    """One pass over the loader's batches, a step each; the mean of their losses."""
    import torch
    losses = []
    for _, _, blocks in loader:
        labels = blocks[-1].dstdata["label"].long()
        losses.append(_step(model, optimizer, blocks, blocks[0].srcdata["feat"].float(),
                            labels, torch.ones_like(labels, dtype=torch.bool)))
    return sum(losses) / len(losses)


def _evaluate(model, graphs, x, labels, masks) -> dict:
    """Loss and accuracy of each split from one whole-graph forward in eval mode."""
    import torch
    import torch.nn.functional as F
    model.eval()
    with torch.no_grad():
        logits = model(graphs, x)
    out = {}
    for split, mask in masks.items():
        out[f"{split}_loss"] = F.cross_entropy(logits[mask], labels[mask]).item()
        out[f"{split}_acc"] = (logits[mask].argmax(1) == labels[mask]).double().mean().item()
    return out


# ------------------------------------------------------------------ the report

def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of a run's ``metrics.jsonl``, one per epoch (``train_time``; ``val_acc``
    and ``test_acc`` where it was evaluated)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def time_to(rows: list[dict], target: float, key: str = "val_acc") -> dict | None:
    """Epochs, cumulative training seconds and test accuracy when ``key`` first reaches
    ``target`` (at least ``target`` for an accuracy, at most for a ``*_loss``); ``None``
    if it never does."""
    sign = -1.0 if key.endswith("_loss") else 1.0
    elapsed = 0.0
    for row in rows:
        elapsed += row["train_time"]
        if key in row and sign * row[key] >= sign * target:
            return {"epochs": row["epoch"] + 1, "train_time_s": elapsed,
                    "test_acc": row["test_acc"]}
    return None


def summarize(rows: list[dict], targets: dict[str, tuple[str, float]]) -> dict:
    """One run's figures against each of ``targets`` (``name: (key, value)``, see
    :func:`time_to`)."""
    evaluated = [r for r in rows if "val_acc" in r]
    best = max(evaluated, key=lambda r: r["val_acc"])
    return {"epochs": len(rows),
            "median_epoch_s": statistics.median(r["train_time"] for r in rows),
            "total_train_s": sum(r["train_time"] for r in rows),
            "best_val_acc": best["val_acc"], "best_epoch": best["epoch"] + 1,
            "test_acc_at_best_val": best["test_acc"],
            "final_test_acc": evaluated[-1]["test_acc"],
            "to": {name: time_to(rows, t, key) for name, (key, t) in targets.items()}}


def dataset_result(runs: dict[str, list[dict]], majority: float) -> dict:
    """The targets of one dataset's runs (``majority``: the majority class's validation
    accuracy) and each run's summary against them: ``gain``, ``GAIN_FRACTION`` of the way
    from ``majority`` to the lowest best validation accuracy of the runs; ``best``,
    ``BEST_FRACTION`` of that accuracy; ``loss``, the highest lowest validation loss of
    the runs times ``2 - BEST_FRACTION`` (where accuracy hardly moves, as on tolokers,
    the loss still shows learning)."""
    def best(key, pick):
        return [pick(r[key] for r in rows if key in r) for rows in runs.values()]
    lowest = min(best("val_acc", max))
    targets = {"gain": ("val_acc", majority + GAIN_FRACTION * (lowest - majority)),
               "best": ("val_acc", BEST_FRACTION * lowest),
               "loss": ("val_loss", (2 - BEST_FRACTION) * max(best("val_loss", min)))}
    return {"majority_val_acc": majority, "targets": targets,
            "runs": {name: summarize(rows, targets) for name, rows in runs.items()}}


def majority_val_acc(plan: Plan, dataset: str) -> float:
    """The validation accuracy of always answering the most frequent training class;
    computed once per dataset and its settings, and kept in the cache."""
    from sarlite.train.config import load_config
    sets = overrides(plan, dataset, SYSTEMS["dgl-full"], plan.cache)
    if CASES[dataset].real:                     # from any working directory
        sets.append(f"dataset.data_dir={plan.data_dir}")
    cfg = load_config(CASES[dataset].config, sets)
    path = plan.cache / dataset / f"majority_{cfg.digest('dataset')}.json"
    if not path.exists():
        import torch

        from sarlite.train.partitions import dataset_graph
        g = dataset_graph(cfg)
        labels = g.ndata["label"]
        top = torch.mode(labels[g.ndata["train_mask"].bool()]).values
        share = float((labels[g.ndata["val_mask"].bool()] == top).double().mean())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"majority_val_acc": share}))
    return json.loads(path.read_text())["majority_val_acc"]


def _cell(to: dict | None) -> str:
    """``seconds (epochs)`` to a target, or that it was not reached."""
    return "not reached" if to is None else f"{to['train_time_s']:.2f} ({to['epochs']})"


def table(results: dict, meta: dict, machine: list[str]) -> str:
    """The markdown report: setting (``machine``: :func:`records.header`'s lines), one row
    per dataset and system, and the plot."""
    load = meta["load_average_before_after"]
    lines = [
        "# Time to accuracy: DGL and sarlite, full-graph and sampled",
        "",
        f"`{meta['command'].strip()}`; one run per system, load average {load[0]:.2f} "
        f"before, {load[1]:.2f} after.",
        "",
        *machine,
        "",
        f"**DGL: 1 process, {meta['dgl_torch_threads']} torch threads; sarlite: N workers "
        f"x 1 thread, on the same {meta['cores']} cores.** Allocators: each its own "
        f"default (DGL: glibc's; sarlite: its launch line, per run in the JSON). Per "
        f"dataset every system has the same config (model, Adam, learning rate, dropout, "
        f"seeds); a DGL sampled step takes the seeds of all sarlite workers' steps. "
        f"Evaluation (one exact full-graph pass after every epoch) is not timed. "
        f"**Target** (per dataset, below): {GAIN_FRACTION:.0%} of the way from the "
        f"majority class's validation accuracy to the lowest best validation accuracy of "
        f"the systems; also {BEST_FRACTION:.0%} of that best, and a validation loss "
        f"{2 - BEST_FRACTION:.2f}x the highest lowest one. Times: training seconds "
        f"(epochs) until the target is first reached.",
        ""]
    for dataset, res in results.items():
        t = res["targets"]
        lines.append(f"* {dataset}: majority class {res['majority_val_acc']:.4f}; target "
                     f"val acc {t['gain'][1]:.4f}; {BEST_FRACTION:.0%} of best "
                     f"{t['best'][1]:.4f}; val loss {t['loss'][1]:.4f}")
    lines += [
        "",
        "| dataset | system | s / epoch | **s to target acc** | test acc there | "
        f"s to {BEST_FRACTION:.0%} best | s to val loss | best val acc (epoch) | "
        "test acc at best val | final test acc (epochs) |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for dataset, res in results.items():
        for name, run in res["runs"].items():
            to = run["to"]
            lines.append(
                f"| {dataset} | {name} | {run['median_epoch_s']:.3f} | "
                f"**{_cell(to['gain'])}** | "
                f"{'-' if to['gain'] is None else format(to['gain']['test_acc'], '.4f')} | "
                f"{_cell(to['best'])} | {_cell(to['loss'])} | {run['best_val_acc']:.4f} "
                f"({run['best_epoch']}) | {run['test_acc_at_best_val']:.4f} | "
                f"{run['final_test_acc']:.4f} ({run['epochs']}) |")
    lines += ["", "![validation accuracy against training time](time_to_accuracy.png)", ""]
    return "\n".join(lines)


def plot(runs: dict[str, dict[str, list[dict]]], results: dict, path: Path) -> bool:
    """Validation accuracy against cumulative training seconds, one panel per dataset,
    the target dashed; ``False`` (and no file) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), squeeze=False)
    for ax, (dataset, by_system) in zip(axes[0], runs.items()):
        for name, rows in by_system.items():
            clock, points = 0.0, []
            for row in rows:
                clock += row["train_time"]
                if "val_acc" in row:
                    points.append((clock, row["val_acc"]))
            ax.plot(*zip(*points), label=name, marker="." if len(points) < 30 else None)
        ax.axhline(results[dataset]["targets"]["gain"][1], color="grey", linestyle="--",
                   linewidth=1)
        ax.set(title=dataset, xlabel="training time (s)", ylabel="validation accuracy",
               xscale="log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def markdown(data: dict) -> str:
    """The table of a committed record (``time_to_accuracy.json``)."""
    all_facts = [run["facts"] for result in data["datasets"].values()
                 for run in result["runs"].values()]
    return table(data["datasets"], data["meta"], records.header(all_facts))


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.dgl_worker:
        dgl_worker(args)
        return 0
    plan = Plan(args.datasets, args.systems, Path(args.data_dir).resolve(),
                Path(args.out).resolve(), Path(args.cache).resolve(), args.epochs_scale,
                args.set, args.timeout)
    load_before = os.getloadavg()[0]
    runs, facts = {}, {}
    for dataset in plan.datasets:
        runs[dataset], facts[dataset] = {}, {}
        for name in plan.systems:
            run_dir = plan.cache / dataset / name
            if not args.reuse:
                launch(plan, dataset, SYSTEMS[name])
            runs[dataset][name] = read_metrics(run_dir)
            facts[dataset][name] = json.loads((run_dir / "run.json").read_text())
    results = {d: dataset_result(r, majority_val_acc(plan, d)) for d, r in runs.items()}
    for dataset, by_system in facts.items():
        for name, run in by_system.items():
            results[dataset]["runs"][name].update(run)
    meta = {"command": common.command_line("benchmarks.time_to_accuracy", argv or None),
            "load_average_before_after": [load_before, os.getloadavg()[0]],
            "dgl_torch_threads": plan.dgl_threads(), "cores": os.cpu_count(),
            "gain_fraction": GAIN_FRACTION, "best_fraction": BEST_FRACTION,
            "epochs_scale": plan.epochs_scale, "extra_overrides": plan.extra}
    plan.out.mkdir(parents=True, exist_ok=True)
    stem = plan.out / "time_to_accuracy"
    plot(runs, results, stem.with_suffix(".png"))
    data = {"meta": meta, "datasets": results}
    text = markdown(data)
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1))
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--data-dir", default=str(DATA_DIR),
                   help="the real datasets (default: ../shared/data beside the checkout)")
    p.add_argument("--epochs-scale", type=float, default=1.0,
                   help="multiply every case's epochs (tests: fewer)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="config overrides for every run (after the case's own)")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--cache", default=str(common.CACHE / "time_to_accuracy"),
                   help="runs' outputs and partitions (not committed)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--reuse", action="store_true",
                   help="report on the metrics of the last runs, without training")
    worker = p.add_argument_group("internal: one DGL run")
    worker.add_argument("--dgl-worker", action="store_true")
    worker.add_argument("--config")
    worker.add_argument("--threads", type=int, default=1)
    worker.add_argument("--seeds-per-step-of", type=int, default=1,
                        help="a sampled step takes this many sarlite workers' seeds")
    return p


if __name__ == "__main__":
    sys.exit(main())
