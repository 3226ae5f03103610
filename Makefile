# txcache: the two commands a new machine needs are `make test` and `make demo`.
# Everything they use is installed here: the Rust build, a virtualenv with the Python
# package and its tools. Nothing relies on something installed by hand.

SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
CARGO ?= cargo
CARGO_FLAGS := --release --locked
SYSTEM_PYTHON ?= python3

.PHONY: all build venv lint lint-rust lint-python test test-rust test-python demo clean

all: build venv

## build: the Rust binaries (txcached) in release mode.
build:
	$(CARGO) build $(CARGO_FLAGS) --workspace --bins

## venv: a virtualenv with the txcache package (editable) and the test tools.
venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(SYSTEM_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e '.[dev]'
	touch $@

## lint: formatting, clippy with warnings as errors, ruff, mypy.
lint: lint-rust lint-python

lint-rust:
	$(CARGO) fmt --all --check
	$(CARGO) clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings

lint-python: venv
	$(VENV)/bin/ruff check python rubis tests bench
	$(VENV)/bin/ruff format --check python rubis tests bench
	$(VENV)/bin/mypy

## test: every test — lint, Rust unit and property tests, Python tests against real processes.
test: lint test-rust test-python

test-rust:
	$(CARGO) test $(CARGO_FLAGS) --workspace

test-python: build venv
	$(PYTHON) -m pytest

## demo: the library at work on a small example, then RUBiS with and without txcache.
demo: build venv
	$(PYTHON) -m txcache.demo
	$(PYTHON) -m rubis.demo

clean:
	$(CARGO) clean
	rm -rf $(VENV)
