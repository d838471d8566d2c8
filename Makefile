# RocketCluster — every target does its own setup (see README).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp

.PHONY: setup run test bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,operator]'
	@touch $(STAMP)

run: setup
	$(PY) -m rocket.local demo

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) -m bench $(BENCH)

lint: setup
	$(VENV)/bin/ruff check services operator tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
