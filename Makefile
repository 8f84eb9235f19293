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
	$(PY) -m pytest -q

demo: setup
	$(PY) -m sarlite.cli partition --dataset synthetic --num-nodes 20000 --num-parts 2 \
		--out out/demo/partitions

clean:
	rm -rf out $(VENV)
