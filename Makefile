# Two commands take a fresh machine to a running platform and to green tests:
#   make demo   -- runs the main job end to end on embedded defaults
#   make test   -- the whole test suite against real services it starts itself
# Both create the venv from the committed lock (uv.lock) first.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# uv is installed with pip when absent and run as a module, so a fresh PATH needs no rehash.
UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
VENV := .venv
SLUICE := $(VENV)/bin/sluice
export SLUICE_HOME ?= $(CURDIR)/.sluice
PYTEST_ARGS ?=

.PHONY: help setup demo test lint typecheck fmt clean bench

help:
	@echo "make demo       run the main job end to end (starts and stops its own Postgres)"
	@echo "make test       run the test suite (starts and stops its own Postgres)"
	@echo "make lint       ruff + mypy"
	@echo "make clean      stop the local Postgres and delete $(SLUICE_HOME)"

$(VENV)/.synced: pyproject.toml uv.lock
	@python3 -m uv --version >/dev/null 2>&1 || command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	$(UV) sync --frozen --python 3.11
	@touch $@

setup: $(VENV)/.synced

demo: setup
	$(SLUICE) demo

test: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check pipeline dags plugins tests
	$(VENV)/bin/ruff format --check pipeline dags plugins tests
	$(VENV)/bin/mypy

fmt: setup
	$(VENV)/bin/ruff format pipeline dags plugins tests
	$(VENV)/bin/ruff check --fix pipeline dags plugins tests

clean:
	-$(SLUICE) db down --destroy
	rm -rf $(SLUICE_HOME)
