"""DGL distributed scripts with no edit: ``sarlite run`` / ``python -m sarlite.run`` make
every import form of ``dgl.distributed`` sarlite's, in the script and its modules, and
nothing else; standalone and one-worker runs need no process group; a script that mixes
DGL's own distributed objects with sarlite's gets one error naming the line.

The scripts are in ``tests/dropin/``: ``dgl_script.py`` is written as DGL's examples are
(``import dgl``, ``from dgl.distributed import DistEmbedding``, a helper module with its
own ``import dgl``, ``init_process_group`` unless ``--standalone``)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sarlite
from conftest import random_graph
from harness import free_port

SCRIPTS = Path(__file__).with_name("dropin")
TIMEOUT = 300


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """``{n: partition config}`` of one random graph in 1 and 2 parts."""
    root = tmp_path_factory.mktemp("dropin")
    g = random_graph(80, 400, seed=5)
    g.ndata["label"] = g.ndata["label"] % 3
    g.ndata["train_mask"] = (g.ndata["label"] >= 0) & (g.nodes() % 2 == 0)
    for n in (1, 2):
        sarlite.partition_graph(g, "toy", n, root / f"p{n}")
    return {n: str(root / f"p{n}" / "toy.json") for n in (1, 2)}


def _hetero_graph():
    import dgl
    import torch
    gen = torch.Generator().manual_seed(6)
    g = dgl.heterograph({("a", "r1", "b"): (torch.randint(0, 40, (120,), generator=gen),
                                            torch.randint(0, 30, (120,), generator=gen)),
                         ("b", "r2", "a"): (torch.randint(0, 30, (90,), generator=gen),
                                            torch.randint(0, 40, (90,), generator=gen))},
                        {"a": 40, "b": 30})
    g.nodes["a"].data["feat"] = torch.randn(40, 3, generator=gen)
    return g


def _run(command: list[str], cwd=SCRIPTS, env=None) -> subprocess.CompletedProcess:
    full = dict(os.environ, OMP_NUM_THREADS="1", DGLBACKEND="pytorch", **(env or {}))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        full.pop(name, None)
    return subprocess.run(command, cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _records(out: str) -> list[dict]:
    return sorted((json.loads(line) for line in out.splitlines() if line.startswith("{")),
                  key=lambda r: r.get("rank", 0))


def _script_args(config: str, *extra: str) -> list[str]:
    return ["dgl_script.py", "--graph_name", "toy", "--ip_config", "ip_config.txt",
            "--part_config", config, *extra]


def test_every_import_form_of_dgl_distributed_is_sarlite_s():
    done = _run([sys.executable, "-m", "sarlite.run", "import_forms.py"])
    assert done.returncode == 0, done.stderr
    forms, = _records(done.stdout)
    dgl_side = {"NeighborSampler", "dgl.nn", "dgl.function", "dgl.DGLGraph",
                "dgl.__version__"}
    for form, module in forms.items():
        if form not in dgl_side:
            assert module.startswith("sarlite."), (form, module)
    assert forms["dgl.nn"].startswith("dgl.nn") and forms["dgl.function"] == "dgl.function"
    assert forms["dgl.DGLGraph"].startswith("dgl.") and forms["dgl.__version__"] == "2.1.0"
    assert forms["NeighborSampler"].startswith("dgl.dataloading")


def test_a_process_not_started_through_sarlite_run_keeps_dgl_s_own():
    done = _run([sys.executable, "import_forms.py"])
    assert done.returncode == 0, done.stderr
    forms, = _records(done.stdout)
    assert forms["dgl.distributed"] == "dgl.distributed"
    assert forms["DistGraph"].startswith("dgl.distributed")


def test_sarlite_run_trains_an_unmodified_dgl_script_on_two_workers(parts):
    done = _run([sys.executable, "-m", "sarlite.cli", "run", "--nproc", "2",
                 *_script_args(parts[2])])
    assert done.returncode == 0, done.stderr[-3000:]
    records = _records(done.stdout)
    assert [r["rank"] for r in records] == [0, 1]
    assert all(r["distgraph"] == "sarlite.distributed.graph" and r["batches"] > 0
               for r in records)


def test_a_rank_that_finished_its_script_still_answers_reads_of_its_tensors(parts):
    done = _run([sys.executable, "-m", "sarlite.cli", "run", "--nproc", "2",
                 "late_reader.py", "--part_config", parts[2]])
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = _records(done.stdout)
    assert record["rows"] == [[79.0, 79.0]]


def test_sarlite_run_takes_dgl_launch_py_s_line(parts, tmp_path):
    (tmp_path / "ip_config.txt").write_text("127.0.0.1\n")
    done = _run([sys.executable, "-m", "sarlite.cli", "run", "--workspace", str(SCRIPTS),
                 "--num_trainers", "2", "--num_samplers", "0", "--num_servers", "1",
                 "--ip_config", str(tmp_path / "ip_config.txt"), "--part_config", parts[2],
                 "--num_omp_threads", "1", "--extra_envs", "SARLITE_DROPIN_TEST=1",
                 "python3 " + " ".join(_script_args(parts[2]))], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ignored, no servers or samplers: --num_samplers, --num_servers, --part_config, " \
        "--ip_config" in done.stdout
    assert [r["rank"] for r in _records(done.stdout)] == [0, 1]


def test_torchrun_module_form_runs_the_same_script(parts):
    done = _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                 "--master_port", str(free_port()), "-m", "sarlite.run",
                 *_script_args(parts[2])])
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["rank"] for r in _records(done.stdout)] == [0, 1]


def test_standalone_run_needs_no_process_group(parts):
    done = _run([sys.executable, "-m", "sarlite.run", *_script_args(parts[1], "--standalone")])
    assert done.returncode == 0, done.stderr[-3000:]
    record, = _records(done.stdout)
    assert record["rank"] == 0 and record["batches"] > 0


@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous"])
def test_standalone_every_loader_and_store_works_without_a_process_group(kind, parts,
                                                                         tmp_path):
    if kind == "homogeneous":
        config, name, ntype = parts[1], "toy", "_N"
    else:
        g = _hetero_graph()
        sarlite.partition_graph(g, "typed", 1, tmp_path)
        config, name, ntype = str(tmp_path / "typed.json"), "typed", "a"
    done = _run([sys.executable, "-m", "sarlite.run", "every_loader.py", config, name, ntype])
    assert done.returncode == 0, done.stderr[-3000:]
    record, = _records(done.stdout)
    assert record["group"] is False and record["rank"] == 0
    assert record["node_split"] > 0 and record["sample_neighbors"] > 0
    assert record["sample_etype_neighbors"] > 0
    assert record["node_loader"] > 0 and record["edge_loader"] > 0
    assert record["dataloader"] == 5 and record["embedding_moved"]
    assert record["tensor"] == 8.0


def test_one_worker_run_joins_a_group_of_one(parts):
    done = _run([sys.executable, "-m", "sarlite.cli", "run", "--nproc", "1",
                 *_script_args(parts[1])])
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["rank"] for r in _records(done.stdout)] == [0]


def test_a_part_count_other_than_the_workers_is_one_error(parts):
    done = _run([sys.executable, "-m", "sarlite.run", *_script_args(parts[2], "--standalone")])
    assert done.returncode == 2
    line, = [l for l in done.stderr.splitlines() if "error" in l.lower()]
    assert line.startswith("sarlite run: error (rank 0): ") and "2" in line, done.stderr


def test_a_missing_partition_is_one_line_from_one_rank(tmp_path):
    done = _run([sys.executable, "-m", "sarlite.cli", "run", "--nproc", "2",
                 *_script_args(str(tmp_path / "none.json"))])
    assert done.returncode == 2
    lines = [l for l in done.stderr.splitlines() if "error" in l.lower()]
    assert len(lines) == 1 and lines[0].startswith("sarlite run: error (rank "), \
        done.stderr[-2000:]


def test_a_from_import_of_dgl_s_own_distributed_names_the_line():
    done = _run([sys.executable, "mixed_script.py"])
    assert done.returncode != 0
    assert "MixedDGLError: mixed_script.py:3: 'from dgl.distributed import DistEmbedding'" \
        in done.stderr
    assert "'from sarlite.distributed import DistEmbedding'" in done.stderr
    assert "Distributed module is not initialized" not in done.stderr


def test_a_helper_module_with_dgl_s_own_import_names_its_line():
    done = _run([sys.executable, "mixed_helper_script.py"])
    assert done.returncode != 0
    assert "dropin_helper.py:2: 'import dgl' binds 'dgl' to DGL's own package" in done.stderr
    assert "dgl.dataloading.DistNodeDataLoader" in done.stderr
    assert "'import sarlite.dgl as dgl'" in done.stderr


def test_sarlite_run_without_a_script_is_one_error():
    done = _run([sys.executable, "-m", "sarlite.cli", "run", "--nproc", "2", "nothing.py"])
    assert done.returncode == 2
    assert done.stderr.strip() == ("sarlite run: error: no script 'nothing.py' (expected "
                                   "the path of a Python file)")


@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous"])
def test_sar_convert_dist_graph_takes_dgl_s_own_dist_graph(kind, parts, tmp_path):
    if kind == "homogeneous":
        config, name = parts[1], "toy"
    else:
        sarlite.partition_graph(_hetero_graph(), "typed", 1, tmp_path)
        config, name = str(tmp_path / "typed.json"), "typed"
    done = _run([sys.executable, "convert_dgl_graph.py", config, name])
    assert done.returncode == 0, done.stderr[-3000:]
    record, = _records(done.stdout)
    assert record["type"].startswith("dgl.distributed") and record["sar"] == record["dgl"]
