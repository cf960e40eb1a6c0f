# The two commands of the README:
#   make quickstart   set up .venv (once) and run the quickstart pipeline (`dvc repro`)
#   make test         set up .venv (once) and run the test suite
#   make e2e          ... and the slow and end-to-end tests (real DVC, Prefect and MLflow servers, every deployment's
#                     flow on a fresh project); CI runs both
# Both create or reuse the virtual environment in $(VENV), installed from the hashed lock $(LOCK); it is
# reinstalled when the content of the lock, requirements/pip.txt or pyproject.toml changes (not their dates: a
# fresh checkout, or a venv restored from CI's cache, dates every file anew). `make lock` refreshes the locks
# (requirements/README.md).

PYTHON ?= python3
VENV ?= .venv
LOCK ?= requirements/cpu.txt
# The lock pins PyTorch's CPU build (requirements/cpu.in), which PyPI does not carry: pip looks for it here too.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PYTEST_ARGS ?=
# `make test` runs the suite in one pytest worker per core (pytest-xdist), each test file on one worker so its
# module-scoped fixtures are built once; TEST_WORKERS=0 runs it in this process (pdb, -x).
TEST_WORKERS ?= auto

BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export GX_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export MLFLOW_DISABLE_TELEMETRY ?= true

.PHONY: quickstart test e2e setup lock clean-venv mutation fuzz FORCE

SETUP_INPUTS := $(LOCK) requirements/pip.txt pyproject.toml

setup: $(VENV)/.installed

# The inputs' sha256, rewritten only when it changes: make then compares the stamp with this file's date.
$(VENV)/.inputs.sha256: FORCE
	@mkdir -p $(VENV)
	@new=$$(cat $(SETUP_INPUTS) | $(PYTHON) -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'); \
	test "$$new" = "$$(cat $@ 2>/dev/null)" || echo "$$new" > $@

$(VENV)/.installed: $(VENV)/.inputs.sha256
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "the lock $(LOCK) is for Python 3.11: set PYTHON=python3.11 (docs/install.md)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
# pip first, pinned and hashed (requirements/pip.txt says why: an older pip cannot install the lock).
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements/pip.txt
# Add PyTorch's CPU index unless pip's own sources (a local wheel in find-links, say) already hold the locked
# torch: an index that cannot be reached costs pip seconds for each of the ~280 packages. Then BioCheck itself.
	torch=$$(grep -oE '^torch==[^ ]+' $(LOCK)); \
	if $(BIN)/python -m pip install --quiet --dry-run --no-deps --ignore-installed "$$torch" >/dev/null 2>&1; \
	then index=; else index="--extra-index-url $(TORCH_INDEX)"; fi; \
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes $$index -r $(LOCK)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

# Refresh requirements/cpu.txt and requirements/gpu.txt from pyproject.toml (needs PyPI; pins move only where
# pyproject no longer allows them; `make lock LOCK_ARGS=--upgrade` moves every pin to the newest release).
lock: setup
	python requirements/lock.py $(LOCK_ARGS)

quickstart: setup
	dvc repro

test: setup
	pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Every deployment's entry flow (prefect.yaml) with its default parameters on a fresh, small project, under a
# local Prefect API: what the weekly schedule and a user's `prefect deployment run` do (tests/orchestration/test_flows_e2e.py).
e2e: setup
	pytest -m 'e2e or slow' $(PYTEST_ARGS)

# The fuzz suite (tests/fuzz/) with many more examples than `make test` runs (HYPOTHESIS_PROFILE=ci: 60 each);
# a failure prints the example and how to replay it. About 10 minutes on 2 cores.
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz pytest tests/fuzz $(PYTEST_ARGS)

# Mutation testing of the modules that decide correctness (not in CI: about an hour on 2 cores).
# Results: the per-module table printed at the end, bench/results/mutation.json, bench/results/mutation_survivors.md.
mutation: setup
	python bench/mutation.py run --json bench/results/mutation.json --survivors bench/results/mutation_survivors.md

clean-venv:
	rm -rf $(VENV)
