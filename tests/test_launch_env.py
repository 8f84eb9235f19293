"""Launcher environments (torchrun, Open MPI, PMI, Slurm) and the interface to rank 0."""
import ipaddress
import os
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from harness import free_port
from sarlite.runtime.launchenv import LaunchEnv, read_launch_env, route_interface

MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}


@pytest.mark.parametrize("environ, expected", [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", **MASTER},
     LaunchEnv(3, 4, 1, "10.0.0.1", 1234, "torchrun")),
    ({"RANK": "0", "WORLD_SIZE": "2", **MASTER},
     LaunchEnv(0, 2, 0, "10.0.0.1", 1234, "torchrun")),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", **MASTER},
     LaunchEnv(5, 8, 1, "10.0.0.1", 1234, "Open MPI")),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "PMI_LOCAL_RANK": "1",
      "MASTER_ADDR": "head"},
     LaunchEnv(2, 4, 0, "head", 29500, "PMI")),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "PMI_LOCAL_RANK": "1", "MASTER_ADDR": "head"},
     LaunchEnv(2, 4, 1, "head", 29500, "PMI")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MASTER_ADDR": "head"},
     LaunchEnv(1, 2, 0, "head", 29500, "PMI")),
    ({"SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3", **MASTER},
     LaunchEnv(7, 8, 3, "10.0.0.1", 1234, "Slurm")),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},                  # one rank: no rendezvous
     LaunchEnv(0, 1, 0, "127.0.0.1", 29500, "Slurm")),
])
def test_each_launcher_gives_its_rank_and_rendezvous(environ, expected):
    assert read_launch_env(environ) == expected


def test_launchers_are_read_in_order_torchrun_mpi_pmi_slurm():
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", **MASTER}
    pmi = {"PMI_RANK": "2", "PMI_SIZE": "4", **slurm}
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", **pmi}
    torchrun = {"RANK": "0", "WORLD_SIZE": "4", **ompi}
    assert [read_launch_env(env).source for env in (torchrun, ompi, pmi, slurm)] == \
        ["torchrun", "Open MPI", "PMI", "Slurm"]
    assert read_launch_env({"RANK": "0", **slurm}).source == "Slurm"   # RANK alone is not


def test_missing_master_addr_under_slurm_says_how_to_set_it():
    with pytest.raises(RuntimeError) as info:
        read_launch_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"})
    assert str(info.value) == (
        "launched by Slurm (SLURM_PROCID=1) but MASTER_ADDR is not set: export "
        "MASTER_ADDR=<host of rank 0> (and MASTER_PORT, default 29500)")


def test_no_launcher_lists_what_was_looked_for():
    with pytest.raises(RuntimeError, match="launch with torchrun, mpirun or srun, or set "
                       "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT") as info:
        read_launch_env({"PATH": "/bin", "RANK": "1"})
    for name in ("RANK/WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                 "RANK is set but WORLD_SIZE is not"):
        assert name in str(info.value)


@pytest.mark.parametrize("change, message", [
    ({"RANK": "one"}, "RANK='one' (set by torchrun) is not an integer"),
    ({"WORLD_SIZE": "2.0"}, "WORLD_SIZE='2.0' (set by torchrun) is not an integer"),
    ({"RANK": "2"}, "RANK='2' (set by torchrun) is out of range: WORLD_SIZE=2 allows 0..1"),
    ({"RANK": "-1"}, "RANK='-1' (set by torchrun) is out of range"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' (set by torchrun) must be at least 1"),
    ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x' (set by torchrun) is not an integer"),
    ({"LOCAL_RANK": "5"}, "LOCAL_RANK='5' (set by torchrun) is out of range 0..1"),
    ({"MASTER_PORT": "http"}, "MASTER_PORT='http' (set by torchrun) is not an integer"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000' is not a port (1..65535)"),
    ({"MASTER_PORT": "0"}, "MASTER_PORT='0' is not a port"),
])
def test_malformed_values_name_the_variable_and_value(change, message):
    environ = {"RANK": "1", "WORLD_SIZE": "2", **MASTER, **change}
    with pytest.raises(ValueError) as info:
        read_launch_env(environ)
    assert message in str(info.value)


def test_malformed_slurm_rank_names_slurm_variable():
    with pytest.raises(ValueError, match="SLURM_PROCID='4' \\(set by Slurm\\) is out of "
                       "range: SLURM_NTASKS=4"):
        read_launch_env({"SLURM_PROCID": "4", "SLURM_NTASKS": "4", **MASTER})


@pytest.mark.parametrize("addr", ["127.0.0.1", "localhost", "127.0.1.1", "::1", "0.0.0.0"])
def test_loopback_master_needs_no_interface(addr):
    assert route_interface(addr) is None


def test_unresolvable_master_gives_none():
    assert route_interface("no-such-host.invalid") is None


def _non_loopback_ipv4() -> tuple[str, str]:
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        for addr in addrs:
            if addr.family == socket.AF_INET and \
                    not ipaddress.ip_address(addr.address).is_loopback:
                return name, addr.address
    pytest.skip("this machine has no non-loopback IPv4 interface")


def test_address_of_a_local_interface_routes_through_that_interface():
    name, address = _non_loopback_ipv4()
    assert route_interface(address) == name


# --- a process group from each HPC launcher's variables ---------------------------------

_WORKER = textwrap.dedent("""
    import torch
    import sarlite
    from sarlite import comm
    rank, world = sarlite.init(timeout=60)
    total = comm.all_reduce(torch.tensor([rank + 1.0]), kind="test")
    print(f"rank {rank} of {world}: {total.item():g}", flush=True)
    sarlite.finalize()
""")
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
_HPC_VARS = {"Open MPI": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
             "PMI": ("PMI_RANK", "PMI_SIZE"),
             "Slurm": ("SLURM_PROCID", "SLURM_NTASKS")}


def _launcher_env(launcher: str, rank: int, world: int, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    rank_var, size_var = _HPC_VARS[launcher]
    env.update({rank_var: str(rank), size_var: str(world)}, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    return env


@pytest.mark.parametrize("launcher", sorted(_HPC_VARS))
def test_sarlite_init_joins_a_group_from_hpc_launcher_variables_alone(launcher):
    port, world, timeout = free_port(), 2, 120
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER],
                              env=_launcher_env(launcher, rank, world, port),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(world)]
    deadline = time.monotonic() + timeout
    try:
        outputs = [proc.communicate(timeout=max(deadline - time.monotonic(), 1))[0]
                   for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, output
        assert f"rank {rank} of 2: 3" in output, output
