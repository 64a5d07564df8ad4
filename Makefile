# make install: idempotent set-up of everything tidelog needs on a Debian machine.
# make test:    lint, format and type check (ruff, mypy), then the whole test suite.
# make demo:    see the README.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# ZooKeeper for clusters, kcat as an independent client in the tests; a Docker engine and
# debootstrap (its base images where no registry is reachable) for scripts/docker-engine.sh;
# gcc for the log cleaner's C loops (setup.py); iproute2 (ip, tc) and iptables for a cluster in
# network namespaces and its network faults (cluster up --netns); fiu-utils (libfiu's preload)
# for the disk_errors scenario; chromium (headless) to look at the report page as a reader does
# (tests/pipeline/test_report_page.py).
APT_PACKAGES := zookeeper kcat docker.io debootstrap gcc iproute2 iptables fiu-utils chromium
STAMP := $(VENV)/.installed

.PHONY: install test lint format bench demo clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py tidelog/log/_entry_walk.c tidelog/records/_record_walk.c Makefile
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	# kafkajs, a JavaScript client of the v2 era, for tests/integration/test_upgrade_v2.py
	npm install --prefix $(VENV) --no-audit --no-fund --silent kafkajs@2.2.4
	touch $(STAMP)

lint: install
	$(BIN)/ruff check tidelog tests benchmarks
	$(BIN)/ruff format --check tidelog tests benchmarks
	$(BIN)/mypy

format: install
	$(BIN)/ruff format tidelog tests benchmarks
	$(BIN)/ruff check --fix tidelog tests benchmarks

# The suite on PYTEST_WORKERS pytest-xdist workers: most of its time is spent waiting on real
# processes (a session timeout, a restart, an ISR), so two workers on two cores overlap those
# waits. Each module (tests/containers as a whole) runs on one worker, in collection order
# (tests/conftest.py). PYTEST_WORKERS=0 runs everything in one process. The forty slowest
# tests are listed at the end: the suite must stay under 20 minutes.
PYTEST_WORKERS ?= 2
test: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --no-loadscope-reorder --durations=40

bench: install
	$(BIN)/python benchmarks/storage.py
	$(BIN)/python benchmarks/broker.py
	$(BIN)/python benchmarks/cluster.py
	$(BIN)/python benchmarks/tiered.py

demo: install
	./scripts/demo.sh

# make images: a Docker engine (started if need be) and tidelog's images; README "Containers".
.PHONY: images
images: install
	./scripts/docker-engine.sh --images

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis demo-cluster
