"""Where a model's memory goes, layer by layer, in each engine mode.

    python -m benchmarks.layer_memory [--model gat] [--world-size 4] [--num-nodes 100000]
        [--modes one-shot sar sar-chunked] [--out benchmarks/results/layer_memory]

On the suite's homophilous synthetic graph (average degree 20, 128 features; the model of
:func:`benchmarks.common.build_model`: 3 layers, GAT 4 heads x 64, SAGE/GCN 256 wide) each
mode runs one warm-up epoch, one epoch whose peak above the resident size before it is
the suite's growth, and one epoch in which hooks around every layer record, on every
worker (``--world-size`` workers, the users' environment):

* **forward peak**: the resident peak while the layer's forward runs, above the resident
  size when it started (what its exchange and computation hold at once);
* **kept for backward**: bytes of the tensors autograd saved during the layer's forward
  (distinct storages, parameters and the layer's input excluded), which stay until its
  backward; sar's own rows are not among them (it refetches);
* **backward peak**: the resident peak from the moment the layer's output gradient is
  ready until the next layer down's is (the last layer's window also holds the loss;
  the first layer's ends with ``backward()``), above the resident size when it started;

The report gives the largest worker's figures. ``sar-chunked`` is sar with ``max_rows_per_step`` of
:data:`benchmarks.cases.CHUNK_ROWS`. Writes ``OUT/summary.md`` and ``OUT/summary.json``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import common, records
from .cases import CHUNK_ROWS

MiB = 2**20
HIDDEN = {"gat": 64, "sage": 256, "gcn": 256}


class LayerMeter:
    """Forward/backward peaks and saved bytes of each of ``layers`` (hooks, removed by
    :meth:`close`)."""

    def __init__(self, layers, params):
        import torch
        from sarlite.runtime.resident import peak_resident_bytes, reset_peak, resident_bytes
        self._now, self._peak, self._reset = resident_bytes, peak_resident_bytes, reset_peak
        self._params = {p.untyped_storage().data_ptr() for p in params}
        self.rows = [{"forward_peak": 0, "kept": 0, "backward_peak": 0} for _ in layers]
        self._start, self._saved, self._scope, self._open = 0, {}, None, None
        self._handles = []
        for i, layer in enumerate(layers):
            self._handles += [
                layer.register_forward_pre_hook(lambda m, args, i=i: self._enter(i, args)),
                layer.register_forward_hook(lambda m, args, out, i=i: self._leave(i, out))]
        self._torch = torch

    def _mark(self):
        self._start = self._now()
        self._reset()

    def _enter(self, i, args):
        self._mark()
        inputs = {a.untyped_storage().data_ptr() for a in args
                  if isinstance(a, self._torch.Tensor)}
        self._saved = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self._params and ptr not in inputs:
                self._saved[ptr] = t.untyped_storage().nbytes()
            return t

        self._scope = self._torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._scope.__enter__()

    def _leave(self, i, out):
        self._scope.__exit__(None, None, None)
        self.rows[i]["forward_peak"] = self._peak() - self._start
        self.rows[i]["kept"] = sum(self._saved.values())
        if out.requires_grad:            # its gradient is the start of its backward
            out.register_hook(lambda grad, i=i: self._backward_from(i))

    def _backward_from(self, i):
        """Close the backward window that is open (the layer after ``i``) and open
        ``i``'s: the backward pass, cut where each layer's output gradient is ready."""
        self.finish()
        self._open = i
        self._mark()

    def finish(self):
        """Close the open backward window (call after ``backward()``)."""
        if self._open is not None:
            self.rows[self._open]["backward_peak"] = self._peak() - self._start
            self._open = None

    def close(self):
        for handle in self._handles:
            handle.remove()


def worker(args) -> None:
    """One torchrun worker: a warm-up epoch, then the measured one; writes its JSON."""
    import torch
    import torch.nn.functional as F

    import sarlite
    from sarlite.runtime.resident import peak_resident_bytes, reset_peak, resident_bytes

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank, _ = sarlite.init(backend="gloo")
    sarlite.install_dgl_dispatch()
    data = sarlite.load_partition_data(args.config)
    feats = data.node_features
    rows = CHUNK_ROWS if args.mode == "sar-chunked" else None
    graph = sarlite.construct_full_graph(data, mode="sar" if rows else args.mode,
                                         max_rows_per_step=rows)
    del data
    model = common.build_model(args.model, feats["feat"].shape[1], HIDDEN[args.model], 8)
    sarlite.sync_params(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y, mask = feats["feat"], feats["label"], feats["train_mask"]

    def epoch(meter=None):
        loss = F.cross_entropy(model(graph, x)[mask], y[mask])
        optimizer.zero_grad()
        loss.backward()
        if meter is not None:
            meter.finish()
        sarlite.all_reduce_gradients(model)
        optimizer.step()

    epoch()                                     # warm-up: caches, optimizer state
    before = resident_bytes()
    reset_peak()
    epoch()
    growth = peak_resident_bytes() - before
    meter = LayerMeter(list(model.layers), list(model.parameters()))
    epoch(meter)                                # the hooks restart the peak: a third epoch
    meter.close()
    common.write_result(args.result_dir, rank, {"layers": meter.rows, "growth": growth})
    sarlite.finalize()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layer_memory",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(HIDDEN), default="gat")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--num-nodes", type=int, default=100_000)
    parser.add_argument("--modes", nargs="+", default=["one-shot", "sar", "sar-chunked"],
                        choices=("one-shot", "sar", "sa", "sar-chunked"))
    parser.add_argument("--out", type=Path, default=common.RESULTS / "layer_memory")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    _, config = common.cached_partition(args.num_nodes, 20.0, 128, args.world_size)
    results = {}
    for mode in args.modes:
        print(f"{mode} N={args.world_size} ...", end=" ", flush=True)
        ranks = common.run_json(common.torchrun(
            args.world_size, "benchmarks.layer_memory",
            ["--worker", "--mode", mode, "--config", str(config), "--model", args.model]),
            timeout=1800, num_procs=args.world_size)
        results[mode] = {
            "growth_mib": max(r["growth"] for r in ranks) / MiB,
            "layers": [{key: max(r["layers"][i][key] for r in ranks) / MiB
                        for key in ranks[0]["layers"][i]}
                       for i in range(len(ranks[0]["layers"]))]}
        print(f"growth {results[mode]['growth_mib']:.0f} MiB", flush=True)
    data = {"model": args.model, "world_size": args.world_size,
            "num_nodes": args.num_nodes, "modes": results,
            "command": common.command_line("benchmarks.layer_memory", argv),
            "facts": records.run_facts(processes=args.world_size, env=common.user_env())}
    common.write_summary(args.out, data, report(data))
    return 0


def report(data: dict) -> str:
    """``summary.md``: a function of the record ``data`` (summary.json) alone."""
    results = data["modes"]
    lines = [f"# Memory per layer: {data['model']}, {data['num_nodes']} nodes, "
             f"N={data['world_size']}", "", *records.header([data["facts"]]),
             f"Allocator: {records.describe_allocator(data['facts']['allocator'])}.", "",
             f"`{data['command']}`", "",
             "MiB, the largest worker's. Epoch growth: the measured epoch's peak above the "
             "resident size before it.", "",
             "| mode | epoch growth | layer | forward peak | kept for backward | "
             "backward peak |", "|---|---|---|---|---|---|"]
    for mode, r in results.items():
        for i, layer in enumerate(r["layers"]):
            lines.append(f"| {mode} | {r['growth_mib']:.0f} | {i} | "
                         f"{layer['forward_peak']:.0f} | {layer['kept']:.0f} | "
                         f"{layer['backward_peak']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
