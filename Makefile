# The two commands a fresh machine needs: `make serve` and `make test`.
# Both create ./.venv and install what they need into it (and npm packages into
# tests/conformance/node_modules and tests/emulators/node_modules); nothing has to be
# installed by hand first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 4437
DATA   ?= ./data
SCALE  ?= small
WORKERS ?= 3
SERIAL_WORKERS ?= 1
FAULT_WORKERS ?= 2

.PHONY: serve test install install-test lint docs unit conformance bench bench-server bench-spark bench-render bench-scale bench-cluster clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.server-installed: $(BIN)/python setup.py
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@

# tests/delta_spark/site: delta-spark's Python package for tests/notebooks/test_delta_extra.py
# only, beside the venv (installed into it, its pyspark<=4.2.0 would replace the tests' PySpark).
$(VENV)/.test-installed: $(BIN)/python setup.py tests/conformance/package-lock.json tests/emulators/package-lock.json
	$(BIN)/python -m pip install --quiet -e '.[test]'
	cd tests/conformance && npm ci --no-audit --no-fund --loglevel=error
	cd tests/emulators && npm ci --no-audit --no-fund --loglevel=error
	$(BIN)/python -m pip install --quiet --no-deps --upgrade --target tests/delta_spark/site \
		'delta-spark==4.4.1' 'importlib_metadata==8.7.1' 'zipp==3.23.0'
	touch $@ $(VENV)/.server-installed

install: $(VENV)/.server-installed

# Debian's headless Chromium for the status page's browser tests (tests/ui_browser.py), where missing.
install-test: $(VENV)/.test-installed
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

serve: install
	$(BIN)/durable-streams-server --host $(HOST) --port $(PORT) --data-dir $(DATA)

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (docs/, mkdocs.yml): a dead link, a missing page or an unknown anchor fails.
docs: install-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

# The tests marked `serial` (the conformance runs: Vitest times each of its tests out at 5 s) run
# first, apart from the rest, SERIAL_WORKERS at a time (one: the suite's chunk-size pagination test
# spends 2.1-2.6 s of its 5 s in its own client, checking 100 KiB a byte at a time; two runs side by
# side on two cores, a cluster's three nodes each, took it to 5.5-6.4 s and failed it); then the
# fault suite (tests/faults: 2 s leases, whose renewals a machine busy with JVMs made late),
# FAULT_WORKERS tests at a time; then
# the rest on WORKERS pytest-xdist workers, one test file per worker at a time, in the order
# tests/conftest.py gives (files with a slow test first: no worker idles at the end). Three workers
# on this 2-core machine: the tests spend much of their time waiting on servers, JVMs, timers and
# disks (14:24 instead of 18:05). Every part always runs; the target fails if any did.
test: lint docs
	$(BIN)/python -m pytest -m serial -n $(SERIAL_WORKERS); serial=$$?; \
	$(BIN)/python -m pytest tests/faults -m "not serial" -n $(FAULT_WORKERS) --dist load; faults=$$?; \
	$(BIN)/python -m pytest -m "not serial" --ignore=tests/faults -n $(WORKERS) --dist loadfile --no-loadscope-reorder; rest=$$?; \
	test $$serial -eq 0 && test $$faults -eq 0 && test $$rest -eq 0

unit: install-test
	$(BIN)/python -m pytest -m "not slow"

conformance: install-test
	$(BIN)/python -m pytest tests/test_conformance.py -v

# The runs of record (bench/README.md, "Running"): full loads, raw results in bench/results/*.json,
# then the README's Headline and Results rendered from them. Run on a quiet machine.
bench: bench-server bench-spark bench-render

bench-server: install-test
	$(BIN)/python bench/server_bench.py

bench-spark: install-test
	$(BIN)/python bench/spark_bench.py

bench-render:
	$(BIN)/python bench/render.py

# Storage scale benchmark (issue 19): SCALE=small (minutes), full (hours, a few GB in /tmp) or max.
bench-scale: install-test
	$(BIN)/python bench/scale_bench.py --sizes $(SCALE)

# Cluster scale (issue 34): 1, 2 and 3 cluster nodes over moto's S3 on loopback (about 6 minutes).
bench-cluster: install-test
	$(BIN)/python bench/cluster_bench.py

clean:
	rm -rf $(VENV) site tests/conformance/node_modules tests/emulators/node_modules tests/delta_spark/site .pytest_cache .mypy_cache .ruff_cache
