# The two commands of the README:
#   make quickstart   set up .venv (once) and run the quickstart pipeline (`dvc repro`)
#   make test         set up .venv (once) and run the test suite
# Both create or reuse the virtual environment in $(VENV); it is rebuilt when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
# CPU PyTorch: the exact pin takes the CPU build where one is provided (see README, "Install").
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export GX_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export MLFLOW_DISABLE_TELEMETRY ?= true

.PHONY: quickstart test setup clean-venv mutation

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (set PYTHON=python3.11)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

quickstart: setup
	dvc repro

test: setup
	pytest $(PYTEST_ARGS)

# Mutation testing of the modules that decide correctness (not in CI: about an hour on 2 cores).
# Results: the per-module table printed at the end, bench/results/mutation.json, bench/results/mutation_survivors.md.
mutation: setup
	python bench/mutation.py run --json bench/results/mutation.json --survivors bench/results/mutation_survivors.md

clean-venv:
	rm -rf $(VENV)
