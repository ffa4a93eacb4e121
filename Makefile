# The README's commands. Every target sets up .venv first, so each works from a fresh clone.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench venv clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first and pinned: 2.13.0 is the CPU build these machines carry; a bare `torch`
# requirement would pull a multi-GB CUDA build instead.
$(STAMP): $(VENV)/bin/python pyproject.toml
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

# A headless control plane and a local agent; examples/train_mlp.json run on each (`codefy run`, then
# `codefy run --target any`), streamed to its end; both stopped.
demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" examples/demo.sh

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/run_queue.py
	$(PY) benchmarks/workers.py
	$(PY) benchmarks/cpu_threads.py
	$(PY) benchmarks/discovery.py

clean:
	rm -rf $(VENV) .pytest_cache
