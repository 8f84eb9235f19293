"""The training run every torchrun worker executes."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import comm
from ..runtime import allocator, health
from ..core import construct_full_graph, construct_mfgs, install_dgl_dispatch
from ..runtime.resident import peak_resident_bytes, reset_peak
from ..partition import PartitionData, load_partition_data
from ..partition.atomic import remove_stale_temporaries
from . import checkpoint
from .config import Config, ConfigError
from .models import (HeteroClassifier, OwnedEmbeddings, SampledEmbeddings, build_model,
                     graphs_needed, replicated)
from .memory import check_budget, planned_graphs
from .nonfinite import check_features, check_step
from .outputs import MetricsLog, on_rank0, plot_curves, write_summary
from .partitions import prepare_partitions
from .progress import epoch_progress
from .labels import checked_labels
from .sampled import sampled_loader

SPLITS = ("train", "val", "test")

log = logging.getLogger("sarlite.train")


@dataclass
class Batch:
    """What one pass reads: graphs, input rows, labels and masks of its outputs, and
    (heterogeneous graphs, on message-flow graphs or sampled blocks) the input nodes
    ``{ntype: ids}`` whose learned rows the featureless types feed in."""

    graphs: list
    x: torch.Tensor | dict
    labels: torch.Tensor
    masks: dict[str, torch.Tensor]
    rows: dict | None = None


def _forward(model, batch: Batch) -> torch.Tensor:
    return model(batch.graphs, batch.x) if batch.rows is None else \
        model(batch.graphs, batch.x, rows=batch.rows)


def _global(values: list[float]) -> torch.Tensor:
    """Element-wise sum over ranks of a small vector (collective)."""
    return comm.all_reduce(torch.tensor(values, dtype=torch.float64), "sum", kind="metrics")


def _gather(value: float) -> list[float]:
    """``value`` of every rank, in rank order (collective)."""
    return comm.all_gather_object(value, "metrics")


def _target(cfg: Config, data: PartitionData) -> str:
    """The labelled node type, whose nodes are classified: the one type of a homogeneous
    graph; of a heterogeneous one, the one type with ``label``.

    Raises ``ConfigError`` when no type, or several, have labels or the split masks."""
    frames = data.node_frames
    if data.is_homogeneous:
        for key in ("feat", "label", *(f"{s}_mask" for s in SPLITS)):
            if key not in frames[data.ntypes[0]]:
                raise ConfigError(f"dataset {cfg.dataset.name!r} has no node field {key!r}")
        return data.ntypes[0]
    labelled = sorted(t for t, frame in frames.items() if "label" in frame)
    if len(labelled) != 1:
        raise ConfigError(f"dataset {cfg.dataset.name!r} must have node field 'label' on "
                          f"exactly one node type (the one classified); it has it on "
                          f"{labelled}")
    for split in SPLITS:
        if f"{split}_mask" not in frames[labelled[0]]:
            raise ConfigError(f"dataset {cfg.dataset.name!r} has no node field "
                              f"'{split}_mask' on its labelled type {labelled[0]!r}")
    return labelled[0]


def _build_batch(cfg: Config, data: PartitionData) -> tuple[Batch, str, int]:
    """The full-graph batch of this rank's partition ``data`` (its feature tensors, not
    copies, where the dtypes already fit): inputs ``feat`` of every node type that has
    it, labels and masks of the labelled type (the target). A homogeneous graph's inputs
    are its one tensor, as DGL gives ``g.ndata``. Collective (graph construction).

    Returns ``(batch, target, num_classes)``.

    Raises
    ------
    ConfigError
        A node field the training needs is missing, or labels or masks are unusable (on
        every rank, see :func:`~sarlite.train.labels.checked_labels`).
    NonFiniteError
        The input features of this rank hold inf or nan (unless train.allow_nonfinite);
        raised before any collective, on this rank only.
    """
    target, homogeneous = _target(cfg, data), data.is_homogeneous
    frames = data.node_frames
    x = {t: frame["feat"].float() for t, frame in frames.items() if "feat" in frame}
    if not cfg.train.allow_nonfinite:
        for t, v in x.items():
            check_features(v, "feat" if homogeneous else f"{t}/feat", data.rank,
                           data.range_of(t)[0])
    labels, masks, num_classes = checked_labels(
        cfg, frames[target]["label"], {s: frames[target][f"{s}_mask"] for s in SPLITS},
        data.rank, data.range_of(target)[0], None if homogeneous else target)
    if cfg.train.ignore_label is not None:        # sampled training's seeds leave them too
        frames[target].update({f"{s}_mask": m for s, m in masks.items()})
    options = cfg.engine.options()
    if cfg.model.label_only:
        seeds = torch.nonzero(masks["train"] | masks["val"] | masks["test"]).squeeze(1)
        mfgs = construct_mfgs(data, {target: seeds}, graphs_needed(cfg.model),
                              options=options)
        inputs, out = mfgs[0].input_nodes, mfgs[-1].output_nodes
        if homogeneous:
            inputs, out = {target: inputs}, {target: out}
        batch = Batch(mfgs, {t: v[inputs[t]] for t, v in x.items()}, labels[out[target]],
                      {s: m[out[target]] for s, m in masks.items()},
                      rows=None if homogeneous else inputs)
    else:
        g = construct_full_graph(data, options=options)
        batch = Batch([g] * graphs_needed(cfg.model), x, labels, masks)
    return (replace(batch, x=batch.x[target]) if homogeneous else batch), target, \
        num_classes


HETERO_MODELS = ("rgcn", "mlp")


def _check_hetero(cfg: Config, hetero: bool) -> None:
    """Refuse what heterogeneous datasets do not support yet (and rgcn without one)."""
    name = cfg.dataset.name
    if not hetero:
        if cfg.model.type == "rgcn":
            raise ConfigError(f"model.type=rgcn needs a heterogeneous dataset (e.g. "
                              f"mag_like); {name!r} is homogeneous")
        return
    limits = {f"model.type={cfg.model.type}": cfg.model.type not in HETERO_MODELS,
              "model.label_only with model.type=mlp (it reads no graph)":
                  cfg.model.label_only and cfg.model.type == "mlp"}
    refused = [setting for setting, on in limits.items() if on]
    if refused:
        raise ConfigError(f"dataset {name!r} is heterogeneous: {', '.join(refused)} "
                          f"{'is' if len(refused) == 1 else 'are'} not supported for "
                          f"heterogeneous graphs (use model.type rgcn, or mlp without "
                          f"label_only)")


def _model(cfg: Config, data: PartitionData, batch: Batch, target: str, num_classes: int,
           loader=None) -> torch.nn.Module:
    """The model: :func:`build_model` on a homogeneous graph; on a heterogeneous one the
    classifier, with learned input rows for the node types without features (R-GCN
    only): this worker's own rows in full-graph training, DistEmbeddings over the
    loader's graph in sampled training (collective then)."""
    if data.is_homogeneous:
        return build_model(cfg.model, batch.x.shape[1], num_classes)
    featureless = [t for t in data.ntypes if t not in batch.x]
    embeddings = None
    if featureless and cfg.model.type == "rgcn" and loader is not None:
        embeddings = SampledEmbeddings(loader.g, featureless, cfg.model.hidden,
                                       cfg.train.seed, cfg.optim.lr)
    elif featureless and cfg.model.type == "rgcn":
        book = data.partition_book
        embeddings = OwnedEmbeddings({t: data.range_of(t) for t in featureless},
                                     {t: book._num_nodes(t) for t in featureless},
                                     cfg.model.hidden, cfg.train.seed)
    return HeteroClassifier(cfg.model, {t: v.shape[1] for t, v in batch.x.items()},
                            num_classes, data.canonical_etypes, target, embeddings)


def _loss(model, batch: Batch, num_train: float) -> torch.Tensor:
    """This rank's share of the training loss (train mode): the summed cross-entropy of its
    training nodes over ``num_train``, the global count. Collective through the model."""
    model.train()
    logits = _forward(model, batch)
    mask = batch.masks["train"]
    return F.cross_entropy(logits[mask], batch.labels[mask], reduction="sum") / num_train


def _train_step(model, optimizer, batch: Batch, num_train: float, epoch: int | None,
                step: int | None = None, sparse=None) -> float:
    """One optimizer step; the global loss. Collective. ``epoch`` (and ``step``) name the
    step in the error a non-finite loss or gradient raises on every rank before the update
    (``epoch=None``: no check, train.allow_nonfinite). ``sparse``: learned rows outside
    the model's parameters (:class:`SampledEmbeddings`), stepped after the optimizer."""
    loss = _loss(model, batch, num_train)
    optimizer.zero_grad()
    loss.backward()
    comm.all_reduce_gradients(replicated(model))
    value = float(_global([loss.item()])[0])
    if epoch is not None:
        check_step(value, model, epoch, step)
    optimizer.step()
    if sparse is not None:
        sparse.step()
    return value


def _calibration_pass(model, batch: Batch, num_train: float) -> None:
    """One training pass whose gradients are dropped: engine.memory_budget's measurement.
    Collective."""
    _loss(model, batch, num_train).backward()
    model.zero_grad(set_to_none=True)


def _sampled_epoch(model, optimizer, loader, epoch: int | None, target: str,
                   sparse=None) -> float:
    """One pass over the sampled batches (a step each); the mean of the steps' global
    losses. ``target``: the labelled node type. Collective: every
    rank gets the same number of batches from the loader."""
    losses = []
    for step, (input_nodes, output_nodes, blocks) in enumerate(loader):
        batch = _sampled_batch(input_nodes, blocks, target)
        count = float(_global([float(batch.labels.numel())])[0])
        losses.append(_train_step(model, optimizer, batch, count, epoch, step, sparse))
    return sum(losses) / len(losses)


def _sampled_batch(input_nodes, blocks: list, target: str) -> Batch:
    """The training batch of one sampled mini-batch: every output node is a training
    node; inputs ``feat`` of the types that have it, one tensor when the loader gives
    homogeneous blocks (``input_nodes`` a tensor, as DGL's loaders give them)."""
    first, last = blocks[0], blocks[-1]
    x = {t: first.srcnodes[t].data["feat"].float() for t in first.srctypes
         if "feat" in first.srcnodes[t].data}
    labels = last.dstnodes[last.dsttypes[0] if len(last.dsttypes) == 1 else target] \
        .data["label"].long()
    masks = {"train": torch.ones(labels.numel(), dtype=torch.bool)}
    if isinstance(input_nodes, dict):
        return Batch(blocks, x, labels, masks, rows=input_nodes)
    return Batch(blocks, next(iter(x.values())), labels, masks)


@torch.no_grad()
def _evaluate(model, batch: Batch) -> dict:
    """Global loss and accuracy of each split from one full-graph pass (collective)."""
    model.eval()
    logits = _forward(model, batch)
    values = []
    for split in SPLITS:
        mask = batch.masks[split]
        values += [F.cross_entropy(logits[mask], batch.labels[mask], reduction="sum").item()
                   if mask.any() else 0.0,
                   float((logits[mask].argmax(1) == batch.labels[mask]).sum()),
                   float(mask.sum())]
    totals = _global(values).tolist()
    out = {}
    for i, split in enumerate(SPLITS):
        loss, correct, count = totals[3 * i:3 * i + 3]
        out[f"{split}_loss"] = loss / max(count, 1)
        out[f"{split}_acc"] = correct / max(count, 1)
    return out


def _make_optimizer(cfg: Config, model) -> torch.optim.Optimizer:
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "sgd": torch.optim.SGD}[cfg.optim.name]
    return cls(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)


def _restart_peak() -> int | None:
    """The peak resident bytes so far, restarting the peak from now; ``None`` where the
    kernel offers no peak to restart (then only the process's peak is reported)."""
    try:
        peak = peak_resident_bytes()
        reset_peak()
    except OSError:
        return None
    return peak


def _peaks(setup_peak: int | None) -> dict:
    """Every rank's peak resident MiB: of the process (``peak_rss_mib``) and since the
    start of training (``training_peak_rss_mib``; ``None`` where no peak was restarted).
    Collective (one gather)."""
    if setup_peak is None:
        import resource
        local = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, None)
    else:
        training = peak_resident_bytes()
        local = (max(setup_peak, training) / 2**20, training / 2**20)
    ranks = _gather(local)
    return {"peak_rss_mib": [p for p, _ in ranks],
            "training_peak_rss_mib": [t for _, t in ranks]}


def _prepare_out_dir(cfg: Config) -> None:
    """Rank 0, at the start: create ``out_dir``, remove the temporary files killed runs
    left there and in the partition cache, settle what a killed train.overwrite run left
    aside (:func:`checkpoint.settle_previous`), and refuse (or, with train.overwrite, move
    aside) an earlier run's checkpoint and outputs when not resuming.

    Raises
    ------
    ConfigError
        A fresh run's ``out_dir`` holds a checkpoint and train.overwrite is not set.
    """
    out_dir = Path(cfg.train.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = [*remove_stale_temporaries(out_dir),
             *remove_stale_temporaries(cfg.partition.cache_dir)]
    if stale:
        log.warning("removed %d temporary file(s) left by a killed run: %s", len(stale),
                    ", ".join(map(str, stale)))
    _settle_previous(out_dir, "an earlier train.overwrite run stopped before its first "
                              "checkpoint")
    if not cfg.train.resume:
        aside = checkpoint.start_fresh(out_dir, cfg.train.overwrite)
        if aside is not None:
            log.warning("train.overwrite: moved the earlier run's %s into %s; they are "
                        "removed once this run writes its first checkpoint (or ends), and "
                        "moved back if it stops before", ", ".join(
                            p.name for p in sorted(aside.iterdir())), aside)


def _settle_previous(out_dir: Path, why: str) -> None:
    """Rank 0: :func:`checkpoint.settle_previous`, saying what it moved back."""
    done, paths = checkpoint.settle_previous(out_dir)
    if done == "restored" and paths:
        log.warning("%s: moved the earlier run's %s back into %s", why,
                    ", ".join(p.name for p in paths), out_dir)


def run(cfg: Config) -> dict:
    """Train as configured on this worker; rank 0 writes the outputs. Collective.

    Returns the summary (on every rank). With train.overwrite, the earlier run's files,
    moved aside at the start, are removed once this run has a checkpoint or has ended, and
    moved back by rank 0 when it fails before (see :func:`checkpoint.settle_previous`).

    Raises
    ------
    As :func:`_train`, and ``ConfigError`` for a fresh run in an ``out_dir`` that holds a
    checkpoint without train.overwrite (on every rank).
    """
    # sampled steps allocate batch-sized buffers every step: sampling keeps freed memory
    # in the process for the next step instead of page-faulting it anew
    # (sarlite.runtime.allocator; SARLITE_MMAP_THRESHOLD still overrides)
    rank, world = comm.init(mmap_threshold="auto" if cfg.train.sampling is None else
                            allocator.mini_batch_setting())
    out_dir = Path(cfg.train.out_dir)
    on_rank0(lambda: _prepare_out_dir(cfg), rank, "prepare_out_dir")
    try:
        summary = _train(cfg, rank, world)
    except BaseException:
        if rank == 0:
            try:
                _settle_previous(out_dir, "this run stopped before its first checkpoint")
            except OSError as err:          # the run's own error is the one to report
                log.warning("could not settle %s/.previous-*: %s", out_dir, err)
        raise
    if rank == 0:
        checkpoint.discard_previous(out_dir)
    return summary


def _train(cfg: Config, rank: int, world: int) -> dict:
    """:func:`run` after the start: load, train, write the outputs. Collective.

    Raises
    ------
    ConfigError
        Unusable settings or dataset, e.g. labels outside the classes (on every rank).
    NonFiniteError
        Input features (on the rank that holds them), the loss or a gradient (on every
        rank) hold inf or nan, unless train.allow_nonfinite.
    ValueError
        On resume, metrics.jsonl has an unparseable line before the last (every rank).
    OSError
        An output cannot be written; a full disk is errno ENOSPC, "no space left on device
        while writing <path>" (every rank at the start and for checkpoints; rank 0 for
        metrics.jsonl, summary.json and curves.png).
    """
    out_dir = Path(cfg.train.out_dir)
    part_config = prepare_partitions(cfg, rank, world)
    with health.busy("loading its partition"):   # DGL's readers hold Python's lock
        data = load_partition_data(part_config)    # read once: evaluation and sampling
    _check_hetero(cfg, not data.is_homogeneous)
    check_budget(cfg)
    batch, target, num_classes = _build_batch(cfg, data)
    num_train = float(_global([float(batch.masks["train"].sum())])[0])
    if num_train == 0:
        raise ConfigError(f"dataset {cfg.dataset.name!r} has no training nodes")

    loader = sampled_loader(cfg, data, rank, target) if cfg.train.sampling else None
    torch.manual_seed(cfg.train.seed)
    install_dgl_dispatch()          # attention layers' edge_softmax on sarlite graphs
    model = _model(cfg, data, batch, target, num_classes, loader)
    sparse = model.embeddings if isinstance(getattr(model, "embeddings", None),
                                            SampledEmbeddings) else None
    del data          # the batch and the loader's DistGraph keep the tensors they need
    comm.sync_params(replicated(model))
    optimizer = _make_optimizer(cfg, model)
    start, best = 0, {"val_acc": -1.0, "test_acc": None, "epoch": None}
    if cfg.train.resume:
        start, best = checkpoint.load(out_dir, cfg, model, optimizer, rank, world, sparse)
    else:
        torch.manual_seed(cfg.train.seed * 1000 + rank)   # this rank's dropout stream
    metrics = on_rank0(lambda: MetricsLog(out_dir, start), rank, "open_metrics")
    plan = None
    if cfg.engine.memory_budget is not None:
        graphs, plan = planned_graphs(cfg, model, batch.graphs[0],
                                      lambda gs: _calibration_pass(model, replace(
                                          batch, graphs=gs), num_train), rank)
        batch = replace(batch, graphs=graphs)
    setup_peak = _restart_peak()     # training_peak_rss_mib counts from here

    begin = time.time()
    progress = epoch_progress(start, cfg.train.epochs, show=rank == 0)   # bar or lines
    for epoch in range(start, cfg.train.epochs):
        sent_before = comm.traffic.total()["sent"]
        tick = time.perf_counter()
        guard = None if cfg.train.allow_nonfinite else epoch     # names a non-finite step
        # "loss": the training pass (dropout on, before the step); evaluation adds
        # "{split}_loss" / "{split}_acc" from a separate pass after the step
        row = {"epoch": epoch,
               "loss": _sampled_epoch(model, optimizer, loader, guard, target, sparse)
               if loader is not None
               else _train_step(model, optimizer, batch, num_train, guard),
               "train_time": time.perf_counter() - tick}       # without the evaluation
        if (epoch + 1) % cfg.train.eval_every == 0 or epoch + 1 == cfg.train.epochs:
            row.update(_evaluate(model, batch))
            if row["val_acc"] > best["val_acc"]:
                best = {"val_acc": row["val_acc"], "test_acc": row["test_acc"],
                        "epoch": epoch}
        row["epoch_time"] = time.perf_counter() - tick
        row["bytes_sent"] = float(_global([comm.traffic.total()["sent"] - sent_before])[0])
        row.update(_peaks(setup_peak))
        if rank == 0:
            metrics.append(row)
            progress.update(epoch, row)
        if cfg.train.checkpoint_every and (epoch + 1) % cfg.train.checkpoint_every == 0:
            checkpoint.save(out_dir, cfg, epoch + 1, model, optimizer, best, rank, sparse)
    progress.close()
    summary = {"best_val_acc": best["val_acc"], "test_acc_at_best_val": best["test_acc"],
               "best_epoch": best["epoch"], "num_classes": num_classes,
               "total_time_s": time.time() - begin, "world_size": world,
               "config": cfg.model_dump()}
    if plan is not None:
        summary["memory_plan"] = plan.record()
    if rank == 0:
        write_summary(out_dir, summary)
        if metrics.rows:
            plot_curves(out_dir, metrics.rows)
        print(f"{cfg.model.type}: test accuracy {best['test_acc']:.4f} at the best "
              f"validation epoch {best['epoch']} (chance {1 / num_classes:.3f}); outputs in "
              f"{out_dir}/ (metrics.jsonl, summary.json, curves.png)", flush=True)
    return summary
