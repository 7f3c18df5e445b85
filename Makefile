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

.PHONY: help setup system-tools foxglove-reader demo demo-cluster test test-cluster test-lerobot test-vlm lint typecheck fmt clean bench

help:
	@echo "make demo       run the main job end to end (starts and stops its own Postgres)"
	@echo "make demo-cluster  the demo in cluster mode: store on S3 (moto), Celery workers on Redis, Ray head + worker"
	@echo "make test       run the test suite (starts and stops its own Postgres)"
	@echo "make lint       ruff + mypy"
	@echo "make test-cluster  Celery workers per queue, a Ray head + worker node, their fault tests, the cluster demo against the demo (~45 min)"
	@echo "make test-lerobot  the LeRobot export through lerobot itself (builds $(LEROBOT_VENV), with torch)"
	@echo "make test-vlm   the VLM captioner on a tiny random-weights model (builds $(VLM_VENV), with torch)"
	@echo "make clean      stop the local Postgres and delete $(SLUICE_HOME)"

$(VENV)/.synced: pyproject.toml uv.lock
	@python3 -m uv --version >/dev/null 2>&1 || command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	$(UV) sync --frozen --python 3.11 --extra cluster
	@touch $@

setup: $(VENV)/.synced

# System tools some tests drive (a headless browser for the UI test, compose for the stack file, Redis as the
# Celery broker of cluster mode). Installed
# from Debian's packages when running as root and missing; the tests skip with a reason when they are absent.
SYSTEM_TOOLS := chromium docker-compose redis-server
system-tools:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$missing from Debian's packages"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null) \
			|| echo "could not install$$missing; the tests that need them will skip"; \
	fi

# Foxglove's own MCAP reader and schemas (npm: @mcap/core, @mcap/support, @foxglove/schemas), pinned in
# tests/foxglove/package-lock.json, for the test that opens our episodes as Foxglove does. Installed once
# with `npm ci` (a stamp keeps later runs offline); a failed install fails `make test` rather than letting
# the test skip; only a machine without npm skips it.
FOXGLOVE_DIR := tests/foxglove
$(FOXGLOVE_DIR)/node_modules/.installed: $(FOXGLOVE_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		(cd $(FOXGLOVE_DIR) && npm ci --no-audit --no-fund --loglevel=error) && touch $@; \
	else echo "npm is not on PATH: tests/foxglove will skip"; fi

foxglove-reader: $(FOXGLOVE_DIR)/node_modules/.installed

demo: setup
	$(SLUICE) demo

# The same demo in cluster mode on this machine (docs/cluster.md): Redis is Debian's redis-server.
demo-cluster: setup system-tools
	$(SLUICE) demo --cluster

test: setup system-tools foxglove-reader
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The cluster tests that start many services each (Redis + Airflow on Celery with a worker per queue; a
# Ray head and worker node): opt-in, beside `make test`, which keeps the S3 store test.
test-cluster: setup system-tools
	SLUICE_TEST_CLUSTER=1 $(VENV)/bin/pytest tests/cluster -q $(PYTEST_ARGS)

# The LeRobot round trip needs lerobot and torch: never in the project's venv, so a venv of their own.
# lerobot 0.4.4 is the newest release for Python 3.11 (0.5 needs 3.12). Its torch, torchvision and torchcodec
# are the newest its pins allow (torch<2.11, torchvision<0.26, torchcodec<0.11), the set pip resolves for a
# user; CUDA builds from PyPI, a large download for this opt-in target only. Newer torchvision has no
# io.VideoReader, which lerobot's "pyav" backend decodes through. lerobot itself goes in without its
# dependencies (robot drivers, teleop, wandb, rerun), next to the packages its dataset and processor code
# imports. torchcodec, lerobot's default decoder on Linux, loads the system's FFmpeg libraries.
LEROBOT_VENV ?= .venv-lerobot
LEROBOT_VERSION ?= 0.4.4
LEROBOT_TORCH ?= torch==2.10.0 torchvision==0.25.0 torchcodec==0.10.0
LEROBOT_DEPS := "datasets>=4.0,<5" "huggingface-hub>=0.34.2,<0.36" "av>=15,<16" "draccus==0.10.0" \
	"einops>=0.8,<0.9" "jsonlines>=4,<5" "packaging>=24.2,<26" "termcolor>=2.4,<4" "deepdiff>=7.0.1,<9" \
	"accelerate>=1.10,<2" "imageio[ffmpeg]>=2.34,<3" "pyserial>=3.5,<4" pandas pillow
LEROBOT_FFMPEG_DEBS := libavcodec59 libavformat59 libavutil57 libavdevice59 libavfilter8 libswscale6 libswresample4
# The stamp names the pins, so changing them rebuilds the venv.
LEROBOT_STAMP := $(LEROBOT_VENV)/.installed-$(shell printf '%s' 'lerobot==$(LEROBOT_VERSION) $(LEROBOT_TORCH) $(LEROBOT_DEPS)' | sha256sum | cut -c1-12)

$(LEROBOT_STAMP):
	@if ! ldconfig -p | grep -q 'libavcodec\.so\.'; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing FFmpeg's libraries for torchcodec from Debian's packages"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				$(LEROBOT_FFMPEG_DEBS) >/dev/null; \
		else echo "torchcodec needs FFmpeg's shared libraries (Debian: $(LEROBOT_FFMPEG_DEBS))"; exit 1; fi; \
	fi
	python3 -m venv --clear $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/pip install --quiet $(LEROBOT_TORCH) $(LEROBOT_DEPS)
	$(LEROBOT_VENV)/bin/pip install --quiet --no-deps lerobot==$(LEROBOT_VERSION)
	$(LEROBOT_VENV)/bin/python -c "import lerobot.datasets.lerobot_dataset, lerobot.processor.normalize_processor, torchcodec.decoders"
	@touch $@

# Only this target points the export test at lerobot: a plain `make test` must not need the venv.
test-lerobot: export SLUICE_LEROBOT_PYTHON ?= $(CURDIR)/$(LEROBOT_VENV)/bin/python
test-lerobot: setup $(LEROBOT_STAMP)
	$(VENV)/bin/pytest tests/export -q $(PYTEST_ARGS)

# The VLM captioner needs transformers and torch (the `vlm` extra): never in the project's venv, so a venv of
# its own built from the same lock (the same versions of everything both venvs hold). torch's Linux wheel on
# PyPI is the CUDA build, a large download for this opt-in target only; the tests run on CPU when there is no
# GPU. In the project's venv the same tests skip, saying the extra is missing.
VLM_VENV ?= .venv-vlm
$(VLM_VENV)/.synced: pyproject.toml uv.lock
	@python3 -m uv --version >/dev/null 2>&1 || command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	UV_PROJECT_ENVIRONMENT=$(VLM_VENV) $(UV) sync --frozen --python 3.11 --extra cluster --extra vlm
	@touch $@

test-vlm: $(VLM_VENV)/.synced
	$(VLM_VENV)/bin/pytest tests/annotate/test_caption.py -q $(PYTEST_ARGS)

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
