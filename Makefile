# dledger-py developer commands. `make run` and `make test` each work on a fresh clone:
# they create .venv, install the package (building the Cython extension in place) and
# its dependencies, then do their job.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD_INPUTS := pyproject.toml setup.py dledger/_store.pyx $(wildcard dledger/*.pxd dledger/*.pxi native/*.h)
PYTEST_ARGS ?=

.PHONY: install sysdeps chaos-sysdeps bench-sysdeps run test chaos bench lint format typecheck check clean genproto mutants

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip

# libdeflate makes CRC-32 ~8x faster than zlib; the build falls back to zlib without it.
sysdeps:
	@if [ ! -f /usr/include/libdeflate.h ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -qq libdeflate-dev >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libdeflate-dev >/dev/null 2>&1) || \
	  echo "note: libdeflate-dev could not be installed; CRC-32 falls back to zlib"; \
	fi

$(STAMP): $(BIN)/python $(BUILD_INPUTS)
	@$(MAKE) --no-print-directory sysdeps
	$(BIN)/python -m pip install -q -e '.[dev,spark]'
	@touch $@

install: $(STAMP)

run: install
	$(BIN)/dledger cluster --store-base-dir .dledger-data --state-machine kv

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The chaos campaign: every schedule in async and sync flush mode, a verdict per run and
# a table (docs/SIMULATION.md, "Chaos suite"). Partitions need root; nftables is
# installed when possible, else they drop packets with blackhole routes.
CHAOS_ROUNDS ?= 2
CHAOS_ARGS ?=
chaos-sysdeps:
	@if ! command -v nft >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -qq nftables >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq nftables >/dev/null 2>&1) || \
	  echo "note: nftables could not be installed; partitions drop packets with blackhole routes"; \
	fi

chaos: install chaos-sysdeps
	DLEDGER_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(BIN)/python -m tests.chaos.run $(CHAOS_ARGS)

# The service benchmark compares with a 3-member etcd (Debian's etcd-server, 3.4); without
# it those comparisons are skipped and the rest runs.
bench-sysdeps:
	@if ! command -v etcd >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -qq etcd-server >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq etcd-server >/dev/null 2>&1); \
	fi; \
	command -v etcd >/dev/null || \
	  echo "note: etcd-server could not be installed (apt-get install etcd-server as root); the etcd comparisons are skipped"

bench: install bench-sysdeps
	$(BIN)/python -m pytest bench/ -p no:randomly --benchmark-only --benchmark-columns=min,median,mean,ops,rounds \
	  --benchmark-sort=name --benchmark-group-by=group $(PYTEST_ARGS)

# Mutation check of the simulation (tests/mutants.py, docs/SIMULATION.md): each Raft safety
# rule is removed in turn from a temporary copy of the tree, and the random simulation
# (CI seed budget) must catch every one. MUTANTS_ARGS="--only figure8-commit", "--all", "--list".
MUTANTS_ARGS ?=
mutants: install
	$(BIN)/python -m tests.mutants $(MUTANTS_ARGS)

lint: install
	$(BIN)/ruff check dledger dledger_cli.py tests bench
	$(BIN)/ruff format --check dledger dledger_cli.py tests bench

format: install
	$(BIN)/ruff format dledger dledger_cli.py tests bench
	$(BIN)/ruff check --fix dledger dledger_cli.py tests bench

typecheck: install
	$(BIN)/mypy

check: lint typecheck

# Regenerate dledger/proto/*_pb2*.py(i) from dledger.proto with the pinned grpcio-tools
# (tests/unit/test_proto_current.py fails when the committed code is stale).
genproto: install
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. dledger/proto/dledger.proto

clean:
	rm -rf build *.egg-info dledger/*.so dledger/_store.c .pytest_cache .mypy_cache .ruff_cache
