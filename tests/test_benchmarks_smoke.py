"""The benchmark harness on a tiny graph: well-formed results, counters equal to the bound.

Timings and memory targets are never asserted here (they are the suite's report); this
keeps the benchmark code from rotting and checks that the traffic it reports is the
traffic the analytic model of each mode predicts, byte for byte.
"""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import run
from benchmarks.common import cached_partition, run_json
from benchmarks.bound import LayerExchange, layer_exchanges
from benchmarks.capped import run_capped
from sarlite.partition.report import partition_report

CASES = ["sage-homophilous-100k", "gat-homophilous-100k"]
NUM_NODES, HIDDEN, WORLD = 1500, 128, 2
DGL = f"dgl T={min(WORLD, os.cpu_count())}"         # DGL on the cores the workers use
RUNS = [DGL, f"sar N={WORLD}", f"one-shot N={WORLD}", f"sar-torch N={WORLD}"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """One tiny run of the harness: two cases x (DGL, sar, one-shot, sar on the torch
    kernels and the memory-budget run on 2 workers)."""
    out = tmp_path_factory.mktemp("bench")
    status = run.main(["--suite", "full", "--cases", *CASES, "--num-nodes", str(NUM_NODES),
                       "--avg-degree", "5", "--hidden", str(HIDDEN), "--world-sizes",
                       str(WORLD), "--modes", "dgl", "sar", "one-shot", "sar-torch",
                       "budget",
                       "--no-extras", "--time-runs", "1",
                       "--timeout", "120",
                       "--out", str(out), "--cache", str(out / "cache")])
    assert status == 0
    return out


def _records(out):
    sections = json.loads((out / "summary.json").read_text())["sections"]
    return {(r["case"], r["run"]): r for s in sections for r in s["runs"]}


def _tiny(case):
    return case.replace("100k", str(NUM_NODES))


def test_layer_exchanges_follow_what_each_dgl_layer_aggregates():
    # SAGE 128 -> 256 -> 256 -> 8: raw features (no gradient), then 256, then projected to 8
    assert layer_exchanges("sage", 128, 256, 8) == [
        LayerExchange(128, False), LayerExchange(256, True), LayerExchange(8, True)]
    # GAT 4 heads x 64: projected features plus one attention logit per head, all learned;
    # sar refetches the features in backward (u_mul_e's edge gradient reads them)
    assert layer_exchanges("gat", 128, 64, 8, heads=4) == [
        LayerExchange(260, True, 256), LayerExchange(260, True, 256),
        LayerExchange(9, True, 8)]


def test_every_run_writes_a_record_with_one_entry_per_worker(suite):
    for case in CASES:
        for run_name in RUNS:
            path = suite / "runs" / _tiny(case) / (
                run_name.replace(" ", "_").replace("=", "") + ".json")
            record = json.loads(path.read_text())
            assert "error" not in record
            assert len(record["workers"]) == (1 if run_name == DGL else WORLD)
            assert record["facts"]["threads"]["processes"] == len(record["workers"])
            threads = record["facts"]["threads"]["torch_per_process"]
            assert [w["process"]["torch_threads"] for w in record["workers"]] == \
                [threads] * len(record["workers"])
            assert len(record["epoch_times"]) == 3
            assert all(t > 0 for t in record["epoch_times"])
            assert record["peak_rss_mib"] >= max(w["rss_before_mib"] for w in record["workers"])
            assert record["allocator_peak_mib"] is None        # CPU: RSS is the measure


def test_a_budget_run_plans_every_layer_within_a_budget_from_the_sar_and_one_shot_peaks(
        suite):
    from benchmarks.cases import BUDGET_MARGIN
    records = _records(suite)
    for case in CASES:
        record = records[(_tiny(case), f"budget N={WORLD}")]
        assert "error" not in record and record["mode"] == "budget"
        peak = max(records[(_tiny(case), f"{m} N={WORLD}")]["peak_rss_mib"]
                   for m in ("sar", "one-shot"))
        assert record["memory_budget"] == int(BUDGET_MARGIN * peak * 2**20)
        plan = record["memory_plan"]
        assert plan["budget_bytes"] == record["memory_budget"] and len(plan["layers"]) == 3
        assert len(plan["measured"]) == WORLD


def test_halo_bytes_equal_the_bound_computed_from_the_partition(suite):
    records = _records(suite)
    for case in CASES:
        model = case.split("-")[0]
        widths = layer_exchanges(model, 128, HIDDEN, 8)
        per_node = sum(e.width * (1 + e.needs_grad) for e in widths) * 4
        for run_name in RUNS[1:]:
            record = records[(_tiny(case), run_name)]
            _, config = cached_partition(NUM_NODES, 5, 128, WORLD, cache=suite / "cache")
            halo = partition_report(config).halo_nodes
            assert record["halo_nodes"] == halo and sum(halo) > 0
            assert record["bound_bytes"] == sum(halo) * per_node
            # sar on GAT refetches ft in backward (u_mul_e's edge gradient reads it)
            mode = run_name.split()[0].removesuffix("-torch")
            refetched = sum(e.refetched for e in widths) * 4 if mode == "sar" else 0
            assert record["halo_bytes_per_epoch"] == sum(halo) * (per_node + refetched)
            assert record["expected_bytes"] == record["halo_bytes_per_epoch"]


def test_summary_table_lists_every_run_and_every_target(suite):
    text = (suite / "summary.md").read_text()
    for case in CASES:
        for run_name in RUNS + [f"budget N={WORLD}"]:
            assert f"| {_tiny(case)} | {run_name} |" in text
    targets = [t for s in json.loads((suite / "summary.json").read_text())["sections"]
               for t in s["targets"]]
    assert len(targets) == (4 + 2) * len(CASES)        # the budget run's two included
    for target in targets:
        assert f"| {target['target']} | {target['case']} |" in text
        assert target["status"] in ("PASS", "FAIL", "not measured")
    halo = [t for t in targets if t["target"].startswith("halo bytes")]
    assert [t["status"] for t in halo] == ["PASS", "PASS"]


def test_torch_kernel_runs_record_their_kernels_and_are_set_against_dgls(suite):
    records = _records(suite)
    text = (suite / "summary.md").read_text()
    for case in CASES:
        assert records[(_tiny(case), f"sar-torch N={WORLD}")]["kernels"] == "torch"
        assert records[(_tiny(case), f"sar N={WORLD}")]["kernels"] == "auto"
        assert f"| {_tiny(case)} | sar N={WORLD} |" in text.split("## Torch kernels")[1]


def test_plots_are_png_images_of_three_panels(suite):
    import matplotlib.image

    for case in CASES:
        path = suite / "plots" / f"{_tiny(case)}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = matplotlib.image.imread(path).shape
        assert width > 2 * height > 0


def test_memory_cap_kills_a_process_that_grows_past_it():
    # The event: the watcher killed the process while it held 400 MiB ("exceeded cap" is
    # set only then). It would hold them 600 s, so its only other end is run_capped's
    # own timeout, the generous bound (60 s, status "timeout"): a missed cap fails.
    grow = "import time; x = bytearray(400 * 2**20); x[::4096] = b'1' * len(x[::4096]); " \
           "time.sleep(600)"
    result = run_capped([sys.executable, "-c", grow], per_process_mib=200, total_mib=10**6,
                        timeout=60)
    assert result.status == "exceeded cap", result
    assert result.peak_process_mib > 200


def test_memory_cap_lets_a_small_process_finish():
    result = run_capped([sys.executable, "-c", "print('fine')"], per_process_mib=500,
                        total_mib=10**6, timeout=60)
    assert (result.status, result.output_tail.strip()) == ("ok", "fine")
    assert result.peak_process_mib < 500


_WRITE_THEN_HANG = ("import pathlib, sys, time; pathlib.Path(sys.argv[-1], 'rank0.json')"
                    ".write_text('{\"ok\": 1}') if sys.argv[1] == 'write' else None; "
                    "time.sleep(60)")


def test_a_run_that_hangs_after_writing_its_results_keeps_them():
    assert run_json([sys.executable, "-c", _WRITE_THEN_HANG, "write"], timeout=5) == \
        [{"ok": 1}]


def test_a_run_that_hangs_before_writing_its_results_times_out():
    with pytest.raises(subprocess.TimeoutExpired):
        run_json([sys.executable, "-c", _WRITE_THEN_HANG, "nothing"], timeout=5)


def test_the_run_plan_adds_the_suite_extras_once_after_the_selected_runs():
    from benchmarks.cases import EXTRAS
    case = run.SUITES["full"][0]
    extras = EXTRAS["full"][case.name]
    plan = run.run_plan(case, ["dgl", "sar"], [2, 8], extras, cores=2)
    assert plan[:3] == [("dgl", 2), ("sar", 2), ("sar", 8)]
    assert len(plan) == len(set(plan))                 # sar N=8 is not run twice
    assert ("sar-chunked", 4) in plan and ("sar-fp16", 2) in plan
    assert run.run_plan(case, ["dgl", "sar"], [2], cores=2) == [("dgl", 2), ("sar", 2)]


def test_the_run_plan_gives_dgl_one_run_per_thread_count_min_of_n_and_cores():
    case = run.SUITES["quick"][0]
    plan = run.run_plan(case, ["dgl", "sar"], [1, 2, 4, 8], cores=2)
    assert [p for p in plan if p[0] == "dgl"] == [("dgl", 1), ("dgl", 2)]
    plan = run.run_plan(case, ["dgl", "sar"], [1, 2, 4], cores=16)
    assert [p for p in plan if p[0] == "dgl"] == [("dgl", 1), ("dgl", 2), ("dgl", 4)]


def test_the_timed_runs_are_both_runs_of_each_pair_a_time_target_compares():
    case = run.SUITES["full"][0]
    plan = run.run_plan(case, ["dgl", "sar", "sa", "one-shot"], [1, 2, 4],
                        run.EXTRAS["full"][case.name], cores=2)
    assert run.timed_runs(plan, cores=2) == [
        ("dgl", 2), ("sar", 2), ("one-shot", 2), ("sar", 4), ("sar-whole", 2),
        ("sar-whole", 4), ("sar-chunked", 2)]
    assert run.timed_runs([("dgl", 2), ("sar", 2), ("sar", 4)], cores=2) == [
        ("dgl", 2), ("sar", 2)]                         # sar N=4 alone has no time target


def test_repeated_runs_give_a_record_the_median_epoch_of_its_runs_and_the_first_runs_memory(
        tmp_path, monkeypatch):
    # dgl, sar; then the second round in reverse (sar, dgl) and the third forward
    epochs = iter([1.0, 4.0, 2.0, 9.0, 3.0, 8.0])
    def fake(case, mode, world, args, runs_dir, env):
        t = next(epochs)
        workers = [{"epoch_cpu_s": [t, t, t]}]
        return {"run": run._label(mode, world), "epoch_times": [t] * 3,
                "median_epoch_s": t, "cpu_s_per_epoch": t, "peak_rss_mib": 100 * t,
                "growth_mib": 10 * t, "bound_bytes": 0, "halo_bytes_per_epoch": 0,
                "cpu_steal_pct": 0, "workers": workers}
    monkeypatch.setattr(run, "_measure", fake)
    args = run._parser().parse_args(["--time-runs", "3"])
    case = run.SUITES["quick"][0]
    assert run.run_case(case, [("dgl", 2), ("sar", 2)], args, tmp_path, [0], 6)
    sar = json.loads((tmp_path / "runs" / case.name / "sar_N2.json").read_text())
    assert [r["median_epoch_s"] for r in sar["repeats"]] == [2.0, 8.0]
    assert sar["median_epoch_s"] == 4.0 and sar["cpu_s_per_epoch"] == 4.0
    assert sar["growth_mib"] == 40.0 and sar["epoch_times"] == [4.0] * 3
    assert all("commit" in r["facts"] for r in sar["repeats"])
    dgl = json.loads((tmp_path / "runs" / case.name / "dgl_T2.json").read_text())
    assert [r["median_epoch_s"] for r in dgl["repeats"]] == [9.0, 3.0]
    assert dgl["median_epoch_s"] == 3.0


def test_a_budget_run_comes_after_the_sar_and_one_shot_runs_its_budget_comes_from():
    from benchmarks.cases import BUDGET_RUNS
    plan = run.run_plan(run.SUITES["full"][0], ["dgl", "budget", "sar"], [4], cores=4)
    assert plan == [("dgl", 4), ("sar", 4), ("one-shot", 4), ("budget", 4)]
    plan = run.run_plan(run.SUITES["full"][0], ["dgl"], [2], BUDGET_RUNS, cores=4)
    assert plan == [("dgl", 4), ("sar", 4), ("one-shot", 4), ("budget", 4)]


def test_a_budget_is_resolved_from_the_larger_peak_of_sar_and_one_shot(tmp_path):
    from benchmarks.cases import BUDGET_MARGIN
    for name, peak in (("sar_N4", 900.0), ("one-shot_N4", 1000.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"peak_rss_mib": peak}))
    settings = run._settings("budget", 4, tmp_path)
    assert settings == {"memory_budget": int(BUDGET_MARGIN * 1000 * 2**20)}
    with pytest.raises(RuntimeError, match="needs a finished sar N=2 run"):
        run._settings("budget", 2, tmp_path)


def test_a_variant_runs_its_base_mode_with_its_engine_settings():
    from benchmarks.cases import CHUNK_ROWS, base_mode
    assert base_mode("sar-chunked") == "sar" and base_mode("one-shot") == "one-shot"
    args = run._parser().parse_args([])
    chunked = run._settings("sar-chunked", 2, None)
    assert run._engine_fields(chunked, args) == {
        "halo_dtype": "float32", "max_rows_per_step": CHUNK_ROWS, "memory_budget": None,
        "kernels": "auto"}
    assert run._engine_fields(run._settings("sar-bf16", 2, None), args)["halo_dtype"] == \
        "bfloat16"
    assert base_mode("one-shot-torch") == "one-shot"
    assert run._flags(run._settings("one-shot-torch", 2, None)) == ["--kernels", "torch"]
    assert run._flags(chunked) == ["--max-rows-per-step", str(CHUNK_ROWS)]


def test_auto_budgets_run_from_every_layer_one_shot_down_to_the_most_frugal_plan():
    from benchmarks.budget import auto_budgets
    from sarlite.core.budget import LADDER, RankCosts, choose
    measured = [{"rank": 0, "resident": 500 * 2**20, "pass_growth": 100 * 2**20,
                 "optimizer": 2**20, "row_bytes": [512, 1024, 40], "owned": 25_000,
                 "halo": 40_000, "remote_edges": 120_000, "largest_shard": 15_000,
                 "edges": 500_000, "depth": 1}]
    budgets = auto_budgets(measured)
    assert budgets[:-1] == sorted(budgets[:-1], reverse=True) and len(budgets) >= 3
    costs = [RankCosts(**{**measured[0], "row_bytes": (512, 1024, 40)})]
    plans = [choose(costs, b).layers for b in budgets]      # every budget has a plan
    assert plans[0] == (LADDER[0],) * 3 and plans[-1] != plans[0]


def test_the_sampled_comparison_times_both_sides_and_reports_their_ratio(tmp_path):
    from benchmarks import sampled
    assert sampled.main(["--num-nodes", "2000", "--epochs", "2", "--batch-size", "200",
                         "--out", str(tmp_path / "sampled"), "--cache",
                         str(tmp_path / "cache"), "--timeout", "120"]) == 0
    result = json.loads((tmp_path / "sampled" / "summary.json").read_text())
    for side in ("dgl", "sarlite"):
        assert result[side]["epoch_s"] > 0 and result[side]["loader_s"] > 0
        assert result[side]["input_rows"] > 0
    assert result["ratios"] == [result["ratio"]]          # one pair of runs
    assert result["ratio"] == result["sarlite"]["epoch_s"] / result["dgl"]["epoch_s"]
    assert "| sarlite, N=2 |" in (tmp_path / "sampled" / "summary.md").read_text()


def test_targets_include_the_sampled_goal_and_every_largest_graph_search():
    from benchmarks.report import targets
    largest = [{"budget_gib": 3, "ratios": {"sar4": 3.75}, "max_rows_per_step": 2048},
               {"budget_gib": 2.4, "ratios": {"sar8": 7.0}, "max_rows_per_step": 2048}]
    sampled = {"world_size": 2, "num_nodes": 100000, "ratio": 1.8}
    checks = {t.target.split(" (")[0]: t for t in targets([], largest, sampled)}
    assert checks["largest graph, sarlite N=4 sar / DGL >= 3.5x"].status == "PASS"
    n8 = checks["largest graph, sarlite N=8 sar / DGL >= 6x"]
    assert n8.status == "PASS" and n8.case.startswith("2.4 GiB per process, 2048-row steps")
    assert "the goal is set at 3 GiB" in n8.case
    sampled_check = next(t for name, t in checks.items() if name.startswith("sampled"))
    assert sampled_check.status == "FAIL" and sampled_check.measured == 1.8
