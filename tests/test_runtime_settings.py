"""The settings read from the environment (``sarlite.runtime.settings``), read once by
``sarlite.init`` and never when a module is imported; and the layering of the packages."""
import ast
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import sarlite
from harness import spawn
from sarlite import comm
from sarlite.kv.service import RequestService
from sarlite.runtime import RuntimeSettings, read_settings
from sarlite.runtime.allocator import DEFAULT_THRESHOLD, RETAIN

SARLITE = Path(__file__).resolve().parents[1] / "sarlite"


def test_defaults_without_variables():
    assert read_settings({}) == RuntimeSettings(timedelta(seconds=600), 60.0,
                                                DEFAULT_THRESHOLD)
    assert read_settings({}, mmap_default=RETAIN).mmap_threshold == RETAIN


def test_variables_set_each_value():
    settings = read_settings({"SARLITE_TIMEOUT": "30", "SARLITE_HEARTBEAT_TIMEOUT": "0",
                              "SARLITE_MMAP_THRESHOLD": "65536"})
    assert settings == RuntimeSettings(timedelta(seconds=30), 0.0, 65536)
    assert settings.describe() == ("timeout 30 s, heartbeat check off, mmap threshold "
                                   "65536 bytes")
    assert read_settings({"MALLOC_MMAP_THRESHOLD_": "1"}).mmap_threshold is None


@pytest.mark.parametrize("name, value, wanted", [
    ("SARLITE_TIMEOUT", "ten", "SARLITE_TIMEOUT must be a positive number of seconds, "
                               "got 'ten'"),
    ("SARLITE_TIMEOUT", "0", "SARLITE_TIMEOUT must be a positive number of seconds, got '0'"),
    ("SARLITE_HEARTBEAT_TIMEOUT", "-1", "SARLITE_HEARTBEAT_TIMEOUT must be a non-negative "
                                        "number of seconds, got '-1'"),
    ("SARLITE_HEARTBEAT_TIMEOUT", "nan", "SARLITE_HEARTBEAT_TIMEOUT must be a non-negative "
                                         "number of seconds, got 'nan'"),
    ("SARLITE_MMAP_THRESHOLD", "lots", "SARLITE_MMAP_THRESHOLD must be a number of bytes, "
                                       "'retain' or 'off', got 'lots'"),
])
def test_a_malformed_variable_is_one_error_naming_it_and_its_value(name, value, wanted):
    with pytest.raises(ValueError) as err:
        read_settings({name: value})
    assert str(err.value) == wanted


def test_before_init_the_settings_are_the_environments_read_when_asked(monkeypatch):
    monkeypatch.setenv("SARLITE_TIMEOUT", "12")
    assert comm.settings().timeout == timedelta(seconds=12)
    monkeypatch.setenv("SARLITE_TIMEOUT", "13")
    assert comm.settings().timeout == timedelta(seconds=13)


def _settings_of_init(rank, world):
    os.environ.update(SARLITE_TIMEOUT="45", SARLITE_HEARTBEAT_TIMEOUT="7",
                      SARLITE_MMAP_THRESHOLD="retain")
    sarlite.init(heartbeat_timeout=9)              # an argument wins over its variable
    os.environ["SARLITE_TIMEOUT"] = "later"        # read once, by init
    recorded = comm.settings()
    service = RequestService(lambda *_: (0, None), "test")
    return recorded, service.timeout


def test_init_reads_the_variables_once_and_records_them_with_its_arguments():
    for recorded, service_timeout in spawn(_settings_of_init, 2, init=False, timeout=120):
        assert recorded == RuntimeSettings(timedelta(seconds=45), 9.0, RETAIN)
        assert service_timeout == timedelta(seconds=45)


def test_importing_sarlite_reads_no_setting():
    env = dict(os.environ, SARLITE_TIMEOUT="x", SARLITE_HEARTBEAT_TIMEOUT="x",
               SARLITE_MMAP_THRESHOLD="x")
    done = subprocess.run([sys.executable, "-c", "import sarlite, sarlite.sar, sarlite.dgl, "
                           "sarlite.distributed, sarlite.train, sarlite.kv.service"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def _imports() -> dict[str, set[str]]:
    """Module -> the sarlite modules it imports (anywhere in it, also in functions)."""
    modules = {}
    for path in SARLITE.rglob("*.py"):
        parts = ("sarlite",) + path.relative_to(SARLITE).with_suffix("").parts
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    graph = {}
    for name, (path, package) in modules.items():
        here = name.split(".") if package else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] +
                                ([node.module] if node.module else [])) if node.level \
                    else node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in modules else base)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_import_cycle_and_runtime_imports_nothing_above_it():
    graph = _imports()
    for name, targets in graph.items():
        if name.startswith("sarlite.runtime"):
            assert all(t.startswith("sarlite.runtime") for t in targets), (name, targets)
    state: dict[str, int] = {}

    def visit(name, path):
        state[name] = 1
        for target in sorted(graph[name]):
            assert state.get(target) != 1, f"import cycle: {' -> '.join(path + [target])}"
            if target not in state:
                visit(target, path + [target])
        state[name] = 2
    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
