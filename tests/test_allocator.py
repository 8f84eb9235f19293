"""sarlite.init fixes glibc's mmap threshold so that freed shard buffers leave the process,
or, for mini-batch training, keeps freed memory in the process for the next step."""
import subprocess
import sys

import pytest

from sarlite.runtime import allocator

# A 16 MiB tensor freed (glibc then raises its threshold to 16 MiB), then four 4 MiB
# tensors freed: the MiB still resident afterwards.
RETAINED = """
import sys, torch
from sarlite.runtime import allocator
if sys.argv[1] == "fixed":
    assert allocator.fix_mmap_threshold(allocator.DEFAULT_THRESHOLD)
if sys.argv[1] == "retain":
    assert allocator.retain_freed_memory()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
big = torch.ones(4 * 2**20)
del big
before = rss()
buffers = [torch.ones(2**20) for _ in range(4)]
del buffers
print((rss() - before) / 2**20)
"""


def _retained_mib(mode: str) -> float:
    return _run(RETAINED, mode)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_buffers_stay_resident_by_default_and_leave_with_the_threshold_fixed():
    assert _retained_mib("default") >= 12
    assert _retained_mib("fixed") <= 2


# A training step's buffers, 64 and 16 MiB, made and freed twelve times: the MiB of pages
# the kernel had to map afresh (minor faults) in the last six steps.
REFAULTED = """
import resource, sys, torch
from sarlite.runtime import allocator
if sys.argv[1] == "retain":
    assert allocator.retain_freed_memory()
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x, y = torch.ones(2**24), torch.ones(2**22)
    del x, y
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[6:]) * 4096 / 2**20)
"""


def _run(script: str, mode: str) -> float:
    result = subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                            text=True, timeout=120,
                            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return float(result.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_retain_reuses_freed_pages_where_the_default_maps_them_again():
    assert _run(REFAULTED, "default") >= 6 * 64       # the 64 MiB buffer mapped every step
    assert _run(REFAULTED, "retain") <= 16


def test_a_bad_setting_is_one_clear_error():
    with pytest.raises(ValueError, match="mmap_threshold must be a positive number of "
                                         "bytes, 'retain'"):
        allocator.configure("keep")


def test_the_threshold_comes_from_the_environment():
    assert allocator.threshold_from_env({}) == allocator.DEFAULT_THRESHOLD
    assert allocator.threshold_from_env({"SARLITE_MMAP_THRESHOLD": "65536"}) == 65536
    assert allocator.threshold_from_env({"SARLITE_MMAP_THRESHOLD": "off"}) is None
    assert allocator.threshold_from_env({"SARLITE_MMAP_THRESHOLD": "retain"}) == "retain"
    # sampled training's default, which the variable still overrides
    assert allocator.mini_batch_setting({}) == "retain"
    assert allocator.mini_batch_setting({"SARLITE_MMAP_THRESHOLD": "off"}) is None
    assert allocator.threshold_from_env({"MALLOC_MMAP_THRESHOLD_": "1"}) is None


def test_a_malformed_threshold_is_one_clear_error():
    with pytest.raises(ValueError, match="SARLITE_MMAP_THRESHOLD must be a number of "
                                         "bytes, 'retain' or 'off'"):
        allocator.threshold_from_env({"SARLITE_MMAP_THRESHOLD": "lots"})


def test_the_launcher_starts_workers_with_torch_huge_pages_unless_the_user_chose():
    from sarlite.launch import LaunchSpec, worker_env
    spec = LaunchSpec(nproc=1, nnodes=1, node_rank=0, master_addr="127.0.0.1",
                      master_port=29500)
    assert worker_env(spec, 0, 29500, {}, None)["THP_MEM_ALLOC_ENABLE"] == "1"
    off = {"THP_MEM_ALLOC_ENABLE": "0"}
    assert worker_env(spec, 0, 29500, off, None)["THP_MEM_ALLOC_ENABLE"] == "0"
    assert allocator.huge_pages({}).startswith("off")
    assert allocator.huge_pages({"THP_MEM_ALLOC_ENABLE": "1"}).startswith("on")
