# powerfleet: `make run` (main job) and `make test` (suite) do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION := 1

.PHONY: run test test-fast lint format bench clean data

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch first: any looser pin pulls several GB of CUDA packages.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[dev,train]'
	touch $@

$(VENV): $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/powerfleet data prepare
	$(VENV)/bin/powerfleet simulate

# Three workers: most of the suite waits on real processes (Flower daemons, paced boards), and
# no verdict depends on how fast a test runs, so tests may share the cores.
test: $(VENV)/.installed
	$(PY) -m pytest -q -n 3

# The fast tier, for every change: the method's kernel, core, config, CLI refusals and the agent
# protocol on replay; no test marked `slow` or `integration` (pyproject's markers).
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 -m "not slow and not integration"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/vermin -q --no-tips --violations -t=3.6- fleet/agent fleet/method
	$(VENV)/bin/mypy

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

data: $(VENV)/.installed
	$(VENV)/bin/powerfleet data prepare

bench: $(VENV)/.installed
	$(PY) benchmarks/selection.py

clean:
	rm -rf $(VENV) build *.egg-info
