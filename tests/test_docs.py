"""The documentation is tested like the code, so that it cannot drift from it.

* Every fenced ```` ```python ```` block of README.md and of the guide (``docs/``) runs: a
  page's blocks run in order, in one fresh folder (a block may use the files an earlier
  block of its page wrote). A block whose first line names ``sarlite run --nproc N`` runs
  under that launcher with N workers; any other runs in one Python process. (A snippet
  that is not meant to run is written with MyST's ```` ```{code-block} python ````.)
* Every public name of ``sarlite``, ``sarlite.distributed`` and ``sarlite.sar`` has an entry
  in the API reference (``docs/api/``).
* README is a front door: at most about 10 KB, and its relative links lead to files.

The site itself is built with warnings as errors and its links checked by ``make docs``.
"""
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import SARLITE

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = re.compile(r"sarlite run --nproc (\d+)")
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "_build" not in p.parts)


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text())


def run_block(code: str, folder: Path, index: int) -> subprocess.CompletedProcess:
    script = folder / f"block{index}.py"
    script.write_text(code)
    launch = LAUNCH.search(code.splitlines()[0])
    command = ([str(SARLITE), "run", "--nproc", launch.group(1), script.name] if launch
               else [sys.executable, script.name])
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_example_of_the_page_runs(page, tmp_path):
    for index, code in enumerate(python_blocks(page)):
        result = run_block(code, tmp_path, index)
        assert result.returncode == 0, (f"{page.name}, example {index + 1}:\n{code}\n"
                                        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def api_entries() -> set[str]:
    text = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    directives = re.findall(r"^(?:\.\. \w+::|```\{py:\w+\}) ([\w.]+)", text, re.M)
    listed = re.findall(r"^- `([\w.]+)`:", text, re.M)          # same objects, listed
    return set(directives) | set(listed)


@pytest.mark.parametrize("module", ["sarlite", "sarlite.distributed", "sarlite.sar"])
def test_every_public_name_has_an_api_entry(module):
    public = {f"{module}.{name}" for name in importlib.import_module(module).__all__}
    assert not public - api_entries()


def test_readme_is_at_most_about_ten_kilobytes():
    assert len((ROOT / "README.md").read_bytes()) <= 10_500


def test_readme_links_lead_to_files():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [t for t in targets if not re.match(r"\w+://", t)]
    assert local and not [t for t in local if not (ROOT / t).exists()]
