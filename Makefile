# Two commands on a fresh machine: `make demo` and `make test` (both run `make setup`);
# `make docs` builds the documentation site.
#
# Stacks: each is a lock in locks/ (exact versions, with hashes; bash locks/compile.sh
# regenerates them from pyproject.toml's ranges) installed into a venv of its own:
#   newest (default)  .venv         torch 2.13.0+cpu, numpy 2   every target
#   oldest            .venv-oldest  torch 2.2.1, numpy 1.24     STACK=oldest, test-oldest
# A venv is made again only when its lock or pyproject.toml changes (the stamp's name is
# their hash); sarlite itself is installed editable, so edits to sources need no install.
PYTHON ?= python3.11
STACK  ?= newest
VENV   := $(if $(filter newest,$(STACK)),.venv,.venv-$(STACK))
LOCK   := locks/$(STACK).txt
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat $(LOCK) pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)

# What the oldest stack runs (make test-oldest): the exactness matrices on DGL's and the
# torch kernels, the partition interop with DGL, the stack's own checks, and the demo.
OLDEST_TESTS := tests/test_exactness.py tests/test_hetero_exactness.py \
                tests/test_torch_kernels.py tests/test_partition_interop.py \
                tests/test_stack.py tests/test_demo.py \
                tests/test_hostile_service.py tests/test_hostile_store.py \
                tests/test_ogb_reddit_loaders.py

export DGLBACKEND := pytorch
export OMP_NUM_THREADS ?= 1

.PHONY: setup test test-oldest demo bench docs clean

setup: $(STAMP)

$(STAMP):
	@test -f $(LOCK) || { echo "no lock $(LOCK): STACK is newest or oldest"; exit 2; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-deps --only-binary :all: --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q --durations=15

test-oldest:
	$(MAKE) --no-print-directory STACK=oldest setup
	.venv-oldest/bin/python -m pytest -q --durations=10 $(OLDEST_TESTS)

# The synthetic default on 2 torchrun workers in sar mode, then an MLP baseline.
demo: setup
	$(VENV)/bin/sarlite train --config demo --nproc 2
	$(VENV)/bin/sarlite train --config demo --nproc 2 \
		--set model.type=mlp train.out_dir=out/demo/mlp

# The quick benchmark suite (under 10 min on 2 cores): DGL vs sarlite sar/sa/one-shot,
# N=1,2,4; table and plots in benchmarks/results/quick/. Full suite: see benchmarks/run.py.
bench: setup
	$(PY) -m benchmarks.run --suite quick --fresh

# The documentation site from docs/ (Sphinx + MyST, API pages from the docstrings), with
# warnings as errors and unresolved cross-references reported (-n), then every internal
# link and anchor of the built pages checked. Open docs/_build/html/index.html.
docs: setup
	rm -rf docs/_build
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	$(PY) docs/check_links.py docs/_build/html
	@echo "site: docs/_build/html/index.html"

clean:
	rm -rf out .venv .venv-oldest docs/_build
