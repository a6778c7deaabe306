# Every target bootstraps what it needs: a pinned uv in .tools/, the locked
# environment in .venv/. On a fresh machine `make demo` and `make test` are all
# the set-up there is.

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)

.PHONY: help demo test lint typecheck check bench bench-peers clean

help:
	@echo "make demo       run the bookstore demo on the embedded SQLite store"
	@echo "make test       run the test suite with coverage"
	@echo "make lint       ruff check and ruff format --check"
	@echo "make typecheck  mypy --strict on src/"
	@echo "make bench      gate overhead benchmarks (peers too: make bench-peers)"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

$(VENV)/.synced: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen
	@touch $@

$(VENV)/.synced-bench: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --group bench
	@touch $@ $(VENV)/.synced

demo: $(VENV)/.synced
	$(VENV)/bin/handrail demo

test: $(VENV)/.synced
	$(VENV)/bin/python -m pytest --cov --cov-branch --cov-report=term --cov-fail-under=95 $(PYTEST_ARGS)

lint: $(VENV)/.synced
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.synced
	$(VENV)/bin/mypy src

check: lint typecheck test

bench: $(VENV)/.synced
	$(VENV)/bin/python bench/gate_overhead.py

bench-peers: $(VENV)/.synced-bench
	$(VENV)/bin/python bench/gate_overhead.py --peers
	@rm -f $(VENV)/.synced

clean:
	rm -rf $(VENV) $(TOOLS) .handrail .pytest_cache .mypy_cache .ruff_cache .coverage
