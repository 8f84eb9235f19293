"""One measured training run: single-process DGL, or one torchrun worker of sarlite.

    python -m benchmarks.worker --mode dgl --graph G.dgl --result-dir DIR [options]
    python -m benchmarks.worker --mode dgl --dataset NAME --data-dir D --result-dir DIR
    torchrun --nproc_per_node=N -m benchmarks.worker --mode sar --config P.json --result-dir DIR

Not meant to be run by hand: :mod:`benchmarks.run` and :mod:`benchmarks.largest` launch it.
Each process trains the model for ``--warmup`` epochs, then ``--epochs`` timed epochs, and
writes ``rank<r>.json`` into ``--result-dir`` with:

* ``epoch_times``: wall time of each timed epoch (forward, loss, backward, gradient
  all-reduce, optimizer step), seconds;
* ``epoch_cpu_s``: the CPU time this process (all its threads) spent in each timed epoch,
  seconds: work, as against the wall time, which also holds waiting for other ranks and,
  where workers outnumber cores, for a core;
* ``rss_before_mib``: RSS after the warm-up, just before the timed epochs;
* ``hwm_setup_mib``: RSS high-water mark from process start to the end of the warm-up
  (loading, sparse formats, optimizer state, the first epoch);
* ``peak_rss_mib``: RSS high-water mark during the timed epochs; ``growth_mib`` is that
  minus ``rss_before_mib``: the transient memory of a training step;
* ``allocator_peak_mib`` / ``allocator_growth_mib``: the CUDA caching allocator's peak
  bytes in use during the timed epochs (``torch.cuda.max_memory_allocated``) and that minus
  the bytes in use before them; ``null`` on CPU, where torch exposes no allocator counter
  and the RSS is the measure;
* ``traffic_per_epoch``: ``{kind: {"sent", "received"}}`` bytes per timed epoch from
  :mod:`sarlite.comm.traffic`;
* ``process``: the threads and allocator setting this process ran with
  (:func:`benchmarks.records.process_facts`);
* ``memory_plan``: with ``--memory-budget``, the plan (budget, estimate, each layer's
  choice, every rank's measurements), made by a calibration pass before the warm-up, as
  ``sarlite train`` makes it; else ``null``.

Runs start in the environment their launcher gives them (:func:`benchmarks.common.user_env`
by default, no allocator variables): sarlite's workers then fix glibc's mmap threshold in
``sarlite.init`` so that freed tensors leave the RSS, and single-process DGL runs with
glibc's defaults, as its users do. ``--threads`` (default 1) sets the torch threads: the
suite gives single-process DGL as many as sarlite's workers use cores.
"""
from __future__ import annotations

import argparse
import os

from . import common, records

MODES = ("dgl", "sar", "sa", "one-shot")


def _device(name: str):
    """``cpu``, or this worker's GPU (``LOCAL_RANK`` modulo the GPU count) for ``cuda``."""
    import torch
    if name == "cpu":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device("cuda", local % torch.cuda.device_count())


class _Probe:
    """RSS (and, on CUDA, allocator) readings around the timed epochs."""

    def __init__(self, device):
        self.device = device

    def start(self) -> dict:
        import torch
        reading = {"hwm_setup_mib": common.peak_rss_mib(), "rss_before_mib": common.rss_mib()}
        common.reset_peak_rss()
        self._ticks = common.cpu_ticks()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._allocated = torch.cuda.memory_allocated(self.device)
        return reading

    def stop(self, before: dict) -> dict:
        import torch
        peak = common.peak_rss_mib()
        steal, total = (b - a for a, b in zip(self._ticks, common.cpu_ticks()))
        out = dict(before, peak_rss_mib=peak, growth_mib=peak - before["rss_before_mib"],
                   allocator_peak_mib=None, allocator_growth_mib=None,
                   cpu_steal_pct=100.0 * steal / max(total, 1))
        if self.device.type == "cuda":
            top = torch.cuda.max_memory_allocated(self.device)
            out.update(allocator_peak_mib=top / 2**20,
                       allocator_growth_mib=(top - self._allocated) / 2**20)
        return out


def _loss(model, graph, feats: dict, num_train: float):
    """The training loss of one full-graph forward (``graph``: one, or one per layer)."""
    import torch.nn.functional as F
    out = model(graph, feats["feat"])
    mask = feats["train_mask"]
    return F.cross_entropy(out[mask], feats["label"][mask], reduction="sum") / num_train


def _planned(graph, feats: dict, model, budget: str, num_train: float):
    """engine.memory_budget as ``sarlite train`` applies it: the plan's graphs, one per
    layer, and the plan's record. Collective."""
    from sarlite.core.budget import plan_memory

    def calibration(graphs):
        _loss(model, graphs, feats, num_train).backward()
        model.zero_grad(set_to_none=True)
    plan = plan_memory(graph, list(model.layers), calibration, model, budget)
    return plan.graphs(graph), plan.record()


def _train(graph, feats: dict, model, optimizer, args, num_train: float, sync,
           device) -> dict:
    """``args.warmup`` + ``args.epochs`` epochs of full-graph Adam; measured timed epochs.
    ``feats``: ``feat``, ``label`` and a boolean ``train_mask`` on ``device``."""
    import torch

    from sarlite.comm import traffic

    probe = _Probe(device)
    times, cpu = [], []
    for epoch in range(args.warmup + args.epochs):
        if epoch == args.warmup:
            traffic.reset()
            before = probe.start()
        start = common.clock()
        loss = _loss(model, graph, feats, num_train)
        optimizer.zero_grad()
        loss.backward()
        sync(model)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        end = common.clock()
        times.append(end[0] - start[0])
        cpu.append(end[1] - start[1])
        del loss
    result = probe.stop(before)
    result["epoch_times"] = times[args.warmup:]
    result["epoch_cpu_s"] = cpu[args.warmup:]
    result["traffic_per_epoch"] = {
        kind: {k: v / args.epochs for k, v in counts.items()}
        for kind, counts in traffic.snapshot().items()}
    return result


def run(args) -> None:
    """Load the graph (or this worker's partition), train, write this process's JSON."""
    import dgl
    import torch

    import sarlite

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = _device(args.device)
    if args.mode == "dgl":
        if args.graph:
            graph = dgl.load_graphs(args.graph)[0][0]
        else:
            from sarlite.data import load_graph
            graph = load_graph(args.dataset, args.data_dir)
        feats = graph.ndata
        graph = graph.to(device)
        rank, sync, num_train = 0, (lambda m: None), float(feats["train_mask"].sum())
    else:
        rank, _ = sarlite.init(backend="gloo")
        sarlite.install_dgl_dispatch()          # the GAT case's edge_softmax
        data = sarlite.load_partition_data(args.config)
        feats = data.node_features
        graph = sarlite.construct_full_graph(data, mode=args.mode,
                                             pipeline_depth=args.pipeline_depth, device=device,
                                             halo_dtype=args.halo_dtype,
                                             max_rows_per_step=args.max_rows_per_step,
                                             kernels=args.kernels)
        del data        # as sarlite.train does: the graph keeps what it needs
        count = sarlite.comm.all_reduce(feats["train_mask"].sum().float().reshape(1), "sum",
                                        kind="benchmark")
        sync, num_train = sarlite.all_reduce_gradients, float(count)
    norm = None
    if args.batch_norm:
        norm = torch.nn.BatchNorm1d if args.mode == "dgl" else sarlite.DistributedBatchNorm1d
    model = common.build_model(args.model, feats["feat"].shape[1], args.hidden,
                               args.num_classes, heads=args.heads, norm=norm).to(device)
    if args.mode != "dgl":
        sarlite.sync_params(model)
    inputs = {"feat": feats["feat"].to(device), "label": feats["label"].to(device),
              "train_mask": feats["train_mask"].bool().to(device)}
    plan = None
    # before planning, as sarlite train does: the first optimizer imports modules worth
    # tens of MiB that the plan's calibration must see
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    if args.memory_budget is not None:
        graph, plan = _planned(graph, inputs, model, args.memory_budget, num_train)
    result = _train(graph, inputs, model, optimizer, args, num_train, sync, device)
    result.update(rank=rank, device=str(device), memory_plan=plan,
                  process=records.process_facts())
    common.write_result(args.result_dir, rank, result)
    if args.mode != "dgl":
        sarlite.finalize()


def _step_size(text: str):
    """``--max-rows-per-step``: an integer, or the names ``auto`` and ``whole``."""
    return text if text in ("auto", "whole") else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--graph", help="saved unpartitioned graph (mode dgl)")
    parser.add_argument("--dataset", help="or a dataset read with sarlite.data.load_graph "
                                          "from --data-dir (mode dgl)")
    parser.add_argument("--data-dir")
    parser.add_argument("--config", help="partition config JSON (sarlite modes)")
    parser.add_argument("--result-dir", required=True)
    parser.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    parser.add_argument("--hidden", type=int, default=256, help="hidden width (per head, GAT)")
    parser.add_argument("--heads", type=int, default=4, help="GAT heads of hidden layers")
    parser.add_argument("--num-classes", type=int, default=8)
    parser.add_argument("--batch-norm", action="store_true",
                        help="batch norm after each hidden layer (as in SAR's papers100M runs)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pipeline-depth", type=int, default=1)
    parser.add_argument("--halo-dtype", default="float32",
                        choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--max-rows-per-step", type=_step_size, default=None,
                        help="engine.max_rows_per_step (sarlite modes): rows, 'auto' (the "
                             "default) or 'whole' (a whole shard per ring round)")
    parser.add_argument("--memory-budget", default=None,
                        help="engine.memory_budget (mode sar; bytes or a size such as 1GiB): "
                             "each layer's graph from the plan, made before the warm-up")
    parser.add_argument("--kernels", default="auto", choices=("auto", "dgl", "torch"),
                        help="engine.kernels (sarlite modes): DGL's or sarlite's torch "
                             "message-passing kernels (auto: DGL's on CPU)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of this process (torch.set_num_threads; the "
                             "launcher sets OMP_NUM_THREADS to match); default 1")
    args = parser.parse_args()
    whole = args.graph is not None or args.dataset is not None
    if (args.mode == "dgl") != whole or (args.mode != "dgl") != (args.config is not None):
        parser.error("mode dgl needs --graph or --dataset (and no --config); sarlite modes "
                     "need --config")
    if args.epochs < 1 or args.warmup < 0:
        parser.error("need --epochs >= 1 and --warmup >= 0")
    if args.memory_budget is not None and (args.mode != "sar" or args.max_rows_per_step
                                           not in (None, "auto")):
        parser.error("--memory-budget plans sar and one-shot layers itself: mode sar, "
                     "without --max-rows-per-step")
    run(args)


if __name__ == "__main__":
    main()
    # as sarlite train's workers: the record is written; skip Python's 1.5-2 s teardown
    from sarlite.runtime.health import exit_now
    exit_now(0)
