"""Record what OGB's own reader returns for the loaders' fixtures: ``ogb_reader.json``.

Run once, by hand, whenever ``tests/ogb_layout.py``'s fixture builders change; never in
CI (``ogb`` is not installed there, and must not be: see ``ogb_reference.py``). Install
OGB in a throwaway environment (``OGBVENV``, any folder outside the repo) that sees the
project's own packages; from the repository root::

    python=.venv/bin/python                    # the project's environment
    OGBVENV=../ogbvenv
    $python -m venv $OGBVENV
    site=$($python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "import site; site.addsitedir('$site')" \\
        > $OGBVENV/lib/python3.11/site-packages/zz_project.pth
    $OGBVENV/bin/pip install ogb==1.3.6        # torch, numpy, pandas: the project's
    $OGBVENV/bin/pip uninstall -y outdated     # no PyPI version check at import
    $OGBVENV/bin/python tests/reference/record_ogb.py

The same environment runs the live comparison: ``$OGBVENV/bin/python -m pytest
tests/test_ogb_reddit_loaders.py`` (without ``ogb`` those tests skip and the comparison
with this record runs alone).
"""
from __future__ import annotations

import json
import platform
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import numpy as np  # noqa: E402

import ogb_layout as layout  # noqa: E402
import ogb_reference as ref  # noqa: E402


def record() -> dict:
    import pandas

    with tempfile.TemporaryDirectory() as tmp:
        read = ref.read_with_ogb(layout.write_fixtures(Path(tmp)))
    datasets = {}
    for name, got in read.items():
        datasets[name] = {
            "meta": got["meta"], "num_nodes": got["num_nodes"],
            "ogb": {k: ref.digest(v) for k, v in sorted(got["ogb"].items())},
            "views": {k: ref.digest(v) for k, v in
                      sorted(ref.views(name, got["ogb"], got["num_nodes"]).items())}}
    return {"recorded_with": {"ogb": ref.ogb_version(), "python": platform.python_version(),
                              "numpy": np.__version__, "pandas": pandas.__version__,
                              "reader": "ogb.nodeproppred.NodePropPredDataset(name)[0] and "
                                        ".get_idx_split()"},
            "fixture": ref.fixture_digests(), "datasets": datasets}


def dumps(data: dict) -> str:
    """JSON with one line per array digest."""
    leaves = {}

    def mark(node):
        if isinstance(node, dict) and "sha256" in node:
            leaves[key := f"@{len(leaves)}@"] = json.dumps(node, sort_keys=True)
            return key
        return {k: mark(v) for k, v in node.items()} if isinstance(node, dict) else node
    text = json.dumps(mark(data), indent=1, sort_keys=True)
    for key, leaf in leaves.items():
        text = text.replace(json.dumps(key), leaf)
    return text + "\n"


if __name__ == "__main__":
    ref.RECORD.write_text(dumps(record()))
    print(f"wrote {ref.RECORD}")
