# surreal-kube: `make run` runs the main job, `make test` the whole suite, on a fresh machine.
# Every step reuses what is already there (the venv, Debian packages, the control-plane cache).

SHELL := /bin/bash
PYTHON_BOOT ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
LOCK := requirements/dev.lock
# Debian packages the tests need: MuJoCo's offscreen EGL renderer (video recording) and podman
# serving the Docker API (image builds), with debootstrap for an offline base image; the real test
# node's runc, iptables, conntrack, socat and busybox-static (its test image); tmux, the real
# terminal the CLI's live views are captured in (tests/cli/test_terminal.py); chromium, the headless
# browser that screenshots TensorBoard through the port-forward (tests/e2e).
DEB_PACKAGES := libegl1 libgl1 podman buildah runc catatonit debootstrap fuse-overlayfs uidmap \
  iptables conntrack socat busybox-static tmux chromium
RUN_ROOT ?= $(CURDIR)/runs
PYTEST_ARGS ?=

.PHONY: install deb run test test-fast lint typecheck lock bench bench-quick bench-report clean help

help:
	@echo "make run     - a small PPO experiment as local processes (installs what it needs)"
	@echo "make test    - the whole test suite (builds or reuses the control plane)"
	@echo "make bench   - every benchmark under bench/ (BENCH_ARGS=--quick for a quick run)"
	@echo "make lint    - ruff, the layering contract and mypy (what .ci/run checks first)"
	@echo "make lock    - re-resolve requirements/dev.lock in a fresh venv"

install: $(STAMP)

# Installed from the lock (exact versions), so that CI and every machine test one resolution.
$(STAMP): pyproject.toml $(LOCK) surreal_kube/__init__.py
	@test -x $(PYTHON) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP) install -q -c $(LOCK) --upgrade pip setuptools wheel
	$(PIP) install -q -c $(LOCK) -e '.[dev]'
	@touch $@

lock:
	rm -rf $(CURDIR)/.lock-venv && $(PYTHON_BOOT) -m venv $(CURDIR)/.lock-venv
	$(CURDIR)/.lock-venv/bin/pip install -q --upgrade pip setuptools wheel
	$(CURDIR)/.lock-venv/bin/pip install -q -e '.[dev]'
	{ grep '^#' $(LOCK); $(CURDIR)/.lock-venv/bin/pip freeze --all --exclude-editable | sort -f; } > $(LOCK).new
	mv $(LOCK).new $(LOCK) && rm -rf $(CURDIR)/.lock-venv

deb:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

run: install
	$(VENV)/bin/surreal-kube create exp-ppo-ant --local --root $(RUN_ROOT) \
	  --env gym:Ant-v5 --num-agents 2 --num-evals 1 --max-time 180 --replace

# The suite in two tiers. The first needs nothing the node or the add-ons bring (the control
# plane's helm at most): it starts beside their builds, which on a fresh machine are half an hour
# of compiling; the second, every test that needs them, starts once they are built, while the
# first may still run: with warm caches the builds take seconds and the two tiers overlap (each
# leaves over half of the 2 cores idle, waiting on processes, pods and the API server). The first
# tier's output (build/test-first-tier.log) is shown when both are done; in the background it
# still takes Ctrl-C like a foreground run (tests/conftest.py). The second tier's end-to-end
# tests (marker e2e: their own cluster and real node, mostly waiting on pods that learn) run
# beside the rest of it, in the background too (build/test-e2e.log). PYTEST_ARGS go to each (a
# run that selects nothing, exit 5, is not a failure). Each names its 15 slowest tests: where
# the suite's time goes, the list to make cheaper first (docs/development.md).
FIRST_TIER := not cluster and not node and not e2e
test: install deb controlplane
	@log=$$(mktemp); out=build/test-first-tier.log; mkdir -p build; \
	( $(MAKE) --no-print-directory cluster-builds >"$$log" 2>&1 ) & builds=$$!; \
	( exec $(PYTHON) -m pytest -q --durations=15 -m "$(FIRST_TIER)" $(PYTEST_ARGS) >"$$out" 2>&1 ) & tier=$$!; \
	echo "make test: the first tier runs in the background ($$out; shown after the second)"; \
	if ! wait $$builds; then cat "$$log"; rm -f "$$log"; kill -INT $$tier 2>/dev/null; \
	  wait $$tier; cat "$$out"; \
	  echo "make test: building the node or the cluster add-ons failed" >&2; exit 1; fi; \
	cat "$$log"; rm -f "$$log"; e2e=build/test-e2e.log; \
	( exec $(PYTHON) -m pytest -q --durations=15 -m "e2e" $(PYTEST_ARGS) >"$$e2e" 2>&1 ) & ends=$$!; \
	echo "make test: the end-to-end tests run in the background ($$e2e; shown after the second tier)"; \
	$(PYTHON) -m pytest -q --durations=15 -m "not ($(FIRST_TIER)) and not e2e" $(PYTEST_ARGS); second=$$?; \
	wait $$ends; third=$$?; \
	echo "make test: the end-to-end tests' output"; cat "$$e2e"; \
	wait $$tier; first=$$?; \
	echo "make test: the first tier's output"; cat "$$out"; \
	for rc in $$first $$second $$third; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc; done

test-fast: install
	$(PYTHON) -m pytest -q -m "not cluster and not learning and not podman and not slow" $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check surreal_kube tests bench
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory typecheck
	$(PYTHON) bench/report.py --check

typecheck: install
	$(VENV)/bin/mypy

bench: install deb
	@for b in bench/*.py; do \
	  case $$b in bench/common.py|bench/report.py) continue;; esac; \
	  echo "== $$b"; $(PYTHON) $$b $(BENCH_ARGS) || exit 1; \
	done

bench-quick:
	$(MAKE) bench BENCH_ARGS=--quick

# docs/benchmarks.md from the committed bench/results/*.json
bench-report: install
	$(PYTHON) bench/report.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

-include tests/cluster/cluster.mk
