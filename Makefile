# The README's commands. Every target sets up .venv first, so each works from a fresh clone.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test e2e bench docs venv clean

# The lab extension's sources: a change rebuilds it (the editable install runs the JS build).
LAB_SOURCES := labextension/package.json labextension/package-lock.json labextension/tsconfig.json \
	$(wildcard labextension/src/*.ts labextension/style/* labextension/schema/*.json)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first and pinned: 2.13.0 is the CPU build these machines carry; a bare `torch`
# requirement would pull a multi-GB CUDA build instead.
# The editable install builds the lab extension (hatch-jupyter-builder: npm install from
# labextension/package-lock.json, tsc, `jupyter labextension build`) into codefy_jupyter/labextension
# and installs it where Lab finds it; the check after it fails the setup if Lab does not list it.
# tests/hub starts a real JupyterHub, whose proxy (configurable-http-proxy) is a Node program:
# installed from tests/hub/package-lock.json into tests/hub/node_modules, never globally.
$(STAMP): $(VENV)/bin/python pyproject.toml $(LAB_SOURCES) tests/hub/package.json tests/hub/package-lock.json
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	$(VENV)/bin/jupyter labextension list 2>&1 | grep -E "codefy-jupyter .*enabled.*OK"
	npm ci --prefix tests/hub --no-audit --no-fund --loglevel=error
	touch $(STAMP)

venv: $(STAMP)

# A headless control plane and a local agent; examples/train_mlp.json run on each (`codefy run`, then
# `codefy run --target any`), streamed to its end; both stopped.
demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" examples/demo.sh

# Two test processes (pytest-xdist), each taking whole files: the tests mostly wait on servers,
# agents and browsers, so two halve the wall time on a 2-core machine (38 -> ~20 min). Every test
# isolates its servers, ports and folders, so a file runs alike in either process.
# `make test TEST_PROCESSES=0` runs them in this one process.
# Then the PostgreSQL pass: the restart, adoption and study suites again with every control plane
# on a fresh database of a real PostgreSQL server (CODEFY_TEST_STORE, tests/conftest.py); the store
# and sweep suites run on both backends within the first pass. Skipped where no PostgreSQL is installed.
TEST_PROCESSES ?= 2
XDIST := $(if $(filter 0,$(TEST_PROCESSES)),,-n $(TEST_PROCESSES) --dist loadfile)
POSTGRESQL_PASS := $(addprefix tests/integration/,test_store_backend_pass.py test_restart_recovery.py \
	test_worker_adoption.py test_agent_survives_restart.py test_study_crash.py test_study_adoption.py \
	test_study_restarts.py test_studies.py)
test: $(STAMP)
	$(PY) -m pytest $(XDIST)
	CODEFY_TEST_STORE=postgresql $(PY) -m pytest $(XDIST) $(POSTGRESQL_PASS)

# The documentation site into docs/_build/html (open index.html). Warnings are errors, as in
# `make test` (tests/unit/test_docs_site.py builds it too).
docs: $(STAMP)
	PYTHONPATH="$(CURDIR)" $(PY) -m sphinx -b html -W --keep-going docs docs/_build/html

# The browser tests alone: the notebook widgets and the lab panels in headless Chromium.
e2e: $(STAMP)
	$(PY) -m pytest tests/e2e

bench: $(STAMP)
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/run_queue.py
	$(PY) benchmarks/workers.py
	$(PY) benchmarks/cpu_threads.py
	$(PY) benchmarks/system_metrics.py
	$(PY) benchmarks/discovery.py
	$(PY) benchmarks/experiments.py
	$(PY) benchmarks/store_readers.py
	$(PY) benchmarks/run_pages.py
	$(PY) benchmarks/lab_graph.py
	$(PY) benchmarks/lab_runs.py
	$(PY) benchmarks/storage.py
	$(PY) benchmarks/hub_forward.py
	$(PY) benchmarks/request_cost.py
	$(PY) benchmarks/chaos.py
	$(PY) benchmarks/failover.py

clean:
	rm -rf $(VENV) .pytest_cache docs/_build codefy_jupyter/labextension labextension/lib labextension/node_modules \
		labextension/tsconfig.tsbuildinfo tests/hub/node_modules
