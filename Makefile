# Sailor monorepo tasks. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
PYTHON ?= python3
# uv: the one on PATH, else the per-user pip install location, else `python3 -m uv` (works once
# `make setup` has pip-installed uv anywhere). Recursively expanded, so it is re-resolved per use.
UV ?= $(shell command -v uv 2>/dev/null || { test -x "$$HOME/.local/bin/uv" && echo "$$HOME/.local/bin/uv"; } || echo "$(PYTHON) -m uv")

.PHONY: setup system-deps test lint proto proto-check demo bench

# Bytecode is compiled once here, for the installed packages (uv's --compile-bytecode; a
# second sync recompiles nothing) and the workspace's own sources (editable, so outside
# site-packages). Where the environment sets PYTHONDONTWRITEBYTECODE (the development
# machines of 2026-11 do, as many Docker images), Python never caches what it compiles, so
# every process compiled every module it imported: `import torch` took 6.2 s CPU instead of
# 3.9, and test_run_options.py (a `sailor run --local` with its workers and ranks) 126 s CPU
# instead of 64 (2026-11-29).
setup:
	@if ! $(UV) --version >/dev/null 2>&1; then \
		echo "uv not found; installing it from PyPI"; \
		$(PYTHON) -m pip install --user uv || $(PYTHON) -m pip install uv; \
	fi
	$(UV) sync --all-packages --locked --compile-bytecode
	$(UV) run python -m compileall -q packages/sailor-sim/src packages/sailor-planner/src \
		packages/sailor-profiler/src packages/sailor-runtime/src

# Test files spread over TEST_WORKERS processes (pytest-xdist; a file's tests stay together, so
# a module's fixtures are built once). 2 = CI's cores: the in-process package tests use one
# core, and the runtime's multi-process tests spend much of their time waiting on start-ups, so
# two files at once took 12.6 min where one at a time took 18.2 (2026-11-26). TEST_WORKERS=0
# runs every test in pytest's own process. Files start in conftest.py's order (the long ones
# first), not xdist's (most tests first, which left the long ones for last).
TEST_WORKERS ?= 2

# The Slurm launch test (packages/sailor-runtime/tests/test_deploy_slurm.py) starts a real
# one-node cluster from Debian's slurm-wlm (munged, slurmctld, slurmd, sbatch, ...). CI's fresh
# machine lacks it, so the test skipped there and the launcher went untested. Installed here
# where we are root with apt-get (about 12 s, 2026-11-29); anywhere else, or when apt fails,
# the test skips and says how to install it. SYSTEM_DEPS=0 leaves the system alone.
SYSTEM_DEPS ?= 1
# The commands the test runs (it reads this line).
SLURM_COMMANDS := munged slurmctld slurmd sbatch scontrol scancel squeue

system-deps:
	@missing=0; for c in $(SLURM_COMMANDS); do command -v $$c >/dev/null 2>&1 || missing=1; done; \
	if [ "$(SYSTEM_DEPS)" = 1 ] && [ $$missing = 1 ] && [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null 2>&1; then \
		echo "installing slurm-wlm from Debian for the Slurm launch test"; \
		export DEBIAN_FRONTEND=noninteractive; \
		timeout 300 apt-get install -y -q --no-install-recommends slurm-wlm >/dev/null 2>&1 \
		|| { timeout 300 apt-get update -q >/dev/null 2>&1 \
			&& timeout 300 apt-get install -y -q --no-install-recommends slurm-wlm >/dev/null 2>&1; } \
		|| echo "warning: slurm-wlm did not install; the Slurm launch test will skip"; \
	fi

# The tests' runs keep their measured profiles in .test-profile-cache (conftest.py), emptied
# here so each `make test` measures every profile once and its later runs reuse it.
test: setup system-deps lint
	rm -rf .test-profile-cache
	$(UV) run pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: setup
	$(UV) run ruff check .

proto: setup
	$(UV) run python scripts/gen_proto.py

proto-check: setup
	$(UV) run python scripts/gen_proto.py --check

demo: setup
	$(UV) run sailor-sim demo
	$(UV) run sailor data prepare --out .sailor-demo/shakespeare --vocab-size 1024
	$(UV) run sailor run --local --workers 2 --gpu-types cpu-2t,cpu-1t \
		--model examples/shakespeare-demo/config.json --data .sailor-demo/shakespeare \
		--eval-every 10 --lr 3e-3 --warmup-steps 5 --precision bf16 \
		--global-batch-size 16 --seq-len 64 --steps 60 --checkpoint-every 5 --kill-worker-at-step 30

bench: setup
	$(UV) run python bench/run_all.py
