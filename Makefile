# Two commands on a fresh machine: `make demo` and `make test` (both run `make setup`).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export DGLBACKEND := pytorch
export OMP_NUM_THREADS ?= 1

.PHONY: setup test demo bench clean

setup: $(STAMP)

# Re-install only when the package metadata changed; sources are installed editable.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q --durations=15

# The synthetic default on 2 torchrun workers in sar mode, then an MLP baseline.
demo: setup
	$(PY) -m sarlite.cli train --config configs/demo.yaml --nproc 2
	$(PY) -m sarlite.cli train --config configs/demo.yaml --nproc 2 \
		--set model.type=mlp train.out_dir=out/demo/mlp

# The quick benchmark suite (under 10 min on 2 cores): DGL vs sarlite sar/sa/one-shot,
# N=1,2,4; table and plots in benchmarks/results/quick/. Full suite: see benchmarks/run.py.
bench: setup
	$(PY) -m benchmarks.run --suite quick --fresh

clean:
	rm -rf out $(VENV)
