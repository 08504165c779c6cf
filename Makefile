# segfactory: `make demo` runs the main job on the demo profile, `make test` runs everything.
# Both do their own set-up: .venv, Python dependencies, system packages (apt, as root), dockerd.

PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
PACKAGES := cli segfactory synthetic vision analysis gate runner sandbox audit agents console controls
DEMO_HOME ?= $(or $(SEGFACTORY_HOME),$(or $(XDG_DATA_HOME),$(HOME)/.local/share)/segfactory-demo)
PYTEST_FAST := -m "not slow"

.PHONY: demo test test-fast lint lock setup system venv clean bench gpu-check

demo: setup
	$(BIN)/segfactory init --profile demo --home "$(DEMO_HOME)"
	$(BIN)/segfactory run --profile demo --home "$(DEMO_HOME)"

# Two workers, one test file each at a time (module fixtures stay in one process): most of the
# suite waits on subprocesses, sandboxes and the gate, so two share the cores well. Tests that
# assert wall-clock timings, or need the Docker engine to themselves (`serial`), run afterwards
# with nothing else running.
test: setup lint
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not serial" --durations=25
	$(BIN)/pytest -q -m serial

test-fast: venv
	$(BIN)/pytest -q $(PYTEST_FAST)

# ruff (rules and formatting), mypy, the import layers of docs/architecture.md (.importlinter),
# first-party imports at the top of each module (scripts/check_imports.py), untyped results
# across packages only where scripts/boundaries-allowed.txt lists them (scripts/check_boundaries.py)
# and deptry (every imported distribution declared, nothing declared unused).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_imports.py
	$(BIN)/python scripts/check_boundaries.py
	$(BIN)/deptry .

setup: system venv

system:
	@bash scripts/setup-system.sh

venv: $(STAMP)

# torch is pinned first and explicitly: on these machines the pinned wheels lie on local disk,
# and a bare `torch` requirement would pull a multi-GB build from the index. Then the exact
# versions of requirements.lock (gate verdicts depend on numpy, scipy and onnxruntime), then the
# package itself, whose declared ranges the lock already satisfies. Our own packages are compiled
# to bytecode once: a sandbox mounts them read-only, where a fresh worker could never cache them.
$(STAMP): pyproject.toml requirements.lock
	@bash scripts/check-disk.sh $(VENV)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q -e '.[dev]'
	bash scripts/pick-onnxruntime.sh $(VENV)
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES) >/dev/null
	touch $(STAMP)

# Re-resolve requirements.lock after a change to pyproject.toml (nothing is installed).
lock: venv
	bash scripts/lock.sh $(VENV)

bench: venv
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

# On a machine with an NVIDIA GPU: set-up, GPU tests, sandbox verify, a short default run, bench_gpu.
gpu-check:
	bash scripts/gpu-check.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
