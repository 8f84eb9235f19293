"""Two hosts simulated on one machine: Linux network namespaces joined by a veth pair.

Each "host" is a namespace with one private address (10.231.0.1 and 10.231.0.2, made and
removed by the test; no other address is contacted) and its own partition cache, so no
filesystem is shared by the two ranks' partitions. One worker per host trains the tiny
config to the same metrics as two workers on one host, through ``sarlite train
--nnodes 2``, torchrun's static rendezvous and torchrun's c10d rendezvous.

Skips, saying why, where namespaces cannot be made (not root, no ``ip``).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from faults import env, write_config

ADDRESSES = ("10.231.0.1", "10.231.0.2")
PORT = 29517
TIMEOUT = 240


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def hosts():
    """Two namespaces joined by a veth pair; removed afterwards."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2's ip")
    tag = os.getpid() % 100000
    names = (f"slh0-{tag}", f"slh1-{tag}")
    try:
        for name in names:
            _ip("netns", "add", name)
        _ip("link", "add", f"slv0-{tag}", "type", "veth", "peer", "name", f"slv1-{tag}")
    except subprocess.CalledProcessError as err:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {err.stderr.strip()}")
    try:
        for i, (name, address) in enumerate(zip(names, ADDRESSES)):
            _ip("link", "set", f"slv{i}-{tag}", "netns", name)
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", f"slv{i}-{tag}")
            _ip("-n", name, "link", "set", f"slv{i}-{tag}", "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _on_both(hosts, command) -> list[subprocess.CompletedProcess]:
    """Run ``command(node_rank)`` in each namespace at once; both results."""
    procs = [subprocess.Popen(["ip", "netns", "exec", name, *command(node)], env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
             for node, name in enumerate(hosts)]
    try:
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return [subprocess.CompletedProcess(p.args, p.returncode, *out)
            for p, out in zip(procs, outs)]


def _losses(out_dir) -> list[tuple]:
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["epoch"], r["loss"], r["val_acc"], r["test_acc"]) for r in rows]


@pytest.fixture(scope="module")
def one_host(tmp_path_factory):
    """The reference: the same config on two workers of one host."""
    work = tmp_path_factory.mktemp("one-host")
    config = write_config(work, epochs=4)
    done = subprocess.run([sys.executable, "-m", "sarlite.cli", "train", "--config",
                           str(config), "--nproc", "2"], env=env(), capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return _losses(work / "run")


def _per_host(tmp_path, node: int) -> list[str]:
    """Each host's own partition cache (no shared filesystem) and out_dir."""
    return ["--set", f"partition.cache_dir={tmp_path}/host{node}/parts",
            f"train.out_dir={tmp_path}/host{node}/run"]


def _check(results, tmp_path, one_host) -> None:
    for node, done in enumerate(results):
        assert done.returncode == 0, f"host {node}: {done.stderr[-3000:]}"
    assert _losses(tmp_path / "host0" / "run") == one_host
    assert (tmp_path / "host1" / "parts" / "part1" / "graph.dgl").is_file()
    assert not (tmp_path / "host1" / "parts" / "part0").exists()


def test_sarlite_train_on_two_hosts_equals_one_host(hosts, tmp_path, one_host):
    config = write_config(tmp_path, epochs=4)
    results = _on_both(hosts, lambda node: [
        sys.executable, "-m", "sarlite.cli", "train", "--config", str(config),
        "--nproc", "1", "--nnodes", "2", "--node-rank", str(node),
        "--master-addr", ADDRESSES[0], "--master-port", str(PORT),
        *_per_host(tmp_path, node)])
    _check(results, tmp_path, one_host)


def test_torchrun_static_rendezvous_on_two_hosts_equals_one_host(hosts, tmp_path, one_host):
    config = write_config(tmp_path, epochs=4)
    results = _on_both(hosts, lambda node: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
        str(node), "--nproc-per-node", "1", "--master-addr", ADDRESSES[0],
        "--master-port", str(PORT + 1), "-m", "sarlite.train", "--config", str(config),
        *_per_host(tmp_path, node)])
    _check(results, tmp_path, one_host)


def test_torchrun_c10d_rendezvous_on_two_hosts_equals_one_host(hosts, tmp_path, one_host):
    # torchrun's c10d rendezvous decides who hosts its store, and advertises rank 0, by
    # host name, which both namespaces share: is_host and --local-addr say it instead
    # (docs/guide/operating.md, "Several machines")
    config = write_config(tmp_path, epochs=4)
    results = _on_both(hosts, lambda node: [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
        "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{ADDRESSES[0]}:{PORT + 2}",
        "--rdzv-id", "two-hosts", "--rdzv-conf", f"is_host={int(node == 0)}",
        "--local-addr", ADDRESSES[node], "-m", "sarlite.train",
        "--config", str(config), *_per_host(tmp_path, node)])
    # c10d may give either host rank 0; the outputs are wherever rank 0 ran
    for node, done in enumerate(results):
        assert done.returncode == 0, f"host {node}: {done.stderr[-3000:]}"
    rank0 = [n for n in (0, 1) if (tmp_path / f"host{n}" / "run" / "metrics.jsonl").is_file()]
    assert len(rank0) == 1 and _losses(tmp_path / f"host{rank0[0]}" / "run") == one_host
