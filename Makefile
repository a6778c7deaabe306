# Every target bootstraps what it needs: a pinned uv in .tools/, then the locked
# environment (requirements/*.txt, exact versions with hashes) in .venv/. On a
# fresh machine `make demo` and `make test` are all the set-up there is.
# `make lock` re-resolves the lock files from pyproject.toml.

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
LOCK_FLAGS := --generate-hashes --universal --python-version 3.11 --quiet
export UV_PYTHON_DOWNLOADS := never

.PHONY: help demo test lint typecheck check bench bench-peers bench-writes bench-shaping bench-tools bench-mcp bench-search bench-tasks bench-service lock clean system-packages npm-tools

help:
	@echo "make demo       run the demo (bookstore, recovery ticket) on SQLite, then serve payments over HTTP once"
	@echo "make test       run the test suite with coverage"
	@echo "make lint       ruff check and ruff format --check"
	@echo "make typecheck  mypy --strict on src/"
	@echo "make bench      gate overhead benchmarks (peers too: make bench-peers)"
	@echo "make bench-writes  durable executions/s vs a bare INSERT+UPDATE loop"
	@echo "make bench-shaping 1 GB streamed log -> 16 KB view (RSS, vs wc); redaction MB/s on 100 MB"
	@echo "make bench-tools   search_text vs rg --json; read_file tail of 100 MB; sandbox start"
	@echo "make bench-mcp     a tool call through Handrail's MCP server vs a bare mcp SDK server"
	@echo "make bench-search  tool search over 1,000 tools: tokens per turn vs every definition; latency"
	@echo "make bench-tasks   no-op tasks/s through the DBOS task runner vs DBOS's bare workflow"
	@echo "make bench-service POST /v1/calls (a read, gated, audited) vs a bare ASGI endpoint, 1/16/64 clients"
	@echo "make npm-tools     the pinned MCP Inspector CLI and reference MCP servers, into .tools/npm"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

# $(1): the lock file to install exactly (extraneous packages are removed).
define sync
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip sync --quiet --python $(VENV)/bin/python $(1)
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps --require-hashes -r requirements/eval.txt
endef

$(VENV)/.synced: $(UV) pyproject.toml requirements/dev.txt requirements/eval.txt
	$(call sync,requirements/dev.txt)
	@rm -f $(VENV)/.synced-bench
	@touch $@

$(VENV)/.synced-bench: $(UV) pyproject.toml requirements/bench.txt requirements/eval.txt
	$(call sync,requirements/bench.txt)
	@rm -f $(VENV)/.synced
	@touch $@

# Programs from Debian's packages: ripgrep (search_text), bubblewrap (the command
# sandbox) and chromium (the console's browser tests, driven by Playwright; browser
# downloads do not work here). Installed when missing and we may (root with apt);
# otherwise their tests skip with a reason, except under CI=true, where they fail.
SYSTEM_PROGRAMS := rg:ripgrep bwrap:bubblewrap chromium:chromium
system-packages:
	@missing=""; for pair in $(SYSTEM_PROGRAMS); do command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null \
	      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; }; \
	  else echo "warning: missing Debian packages:$$missing (their tests will skip)"; fi; \
	fi

# The MCP Inspector's CLI (@modelcontextprotocol/inspector-cli: what `inspector --cli`
# runs; the newest that runs on Node 20 on its own) and the reference MCP servers the MCP
# tests drive, pinned in mcp-tools/package-lock.json and installed exactly (`npm ci`)
# into .tools/npm; the stamp makes a re-run a no-op until the lock changes. Without npm
# their tests skip with a reason, except under CI=true, where they fail.
NPM_DIR := $(TOOLS)/npm
NPM_STAMP := $(NPM_DIR)/.installed
$(NPM_STAMP): mcp-tools/package.json mcp-tools/package-lock.json
	@echo "installing the pinned MCP Inspector CLI and MCP servers into $(NPM_DIR)"
	@mkdir -p $(NPM_DIR)
	cp mcp-tools/package.json mcp-tools/package-lock.json $(NPM_DIR)/
	npm ci --prefix $(NPM_DIR) --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

npm-tools:
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory -s $(NPM_STAMP); \
	else echo "warning: npm missing; install Node.js 20+ (the MCP Inspector and npm MCP server tests will skip)"; fi

lock: $(UV)
	$(UV) pip compile pyproject.toml --group dev $(LOCK_FLAGS) -o requirements/dev.txt
	$(UV) pip compile pyproject.toml --group dev --group bench $(LOCK_FLAGS) -o requirements/bench.txt
	$(UV) pip compile --group pyproject.toml:eval --no-deps $(LOCK_FLAGS) -o requirements/eval.txt

demo: $(VENV)/.synced system-packages
	$(VENV)/bin/handrail demo
	$(VENV)/bin/python -m examples.service.demo

test: $(VENV)/.synced system-packages npm-tools
	$(VENV)/bin/python -m pytest --cov --cov-branch --cov-report=term --cov-fail-under=95 $(PYTEST_ARGS)

lint: $(VENV)/.synced
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.synced
	$(VENV)/bin/mypy src

check: lint typecheck test

bench: $(VENV)/.synced
	$(VENV)/bin/python bench/gate_overhead.py

bench-writes: $(VENV)/.synced
	$(VENV)/bin/python bench/write_throughput.py

bench-shaping: $(VENV)/.synced
	$(VENV)/bin/python bench/shape_stream.py
	$(VENV)/bin/python bench/redaction.py

bench-tools: $(VENV)/.synced system-packages
	$(VENV)/bin/python bench/search_text.py
	$(VENV)/bin/python bench/read_file_tail.py
	$(VENV)/bin/python bench/sandbox_start.py

bench-mcp: $(VENV)/.synced
	$(VENV)/bin/python bench/mcp_overhead.py

bench-search: $(VENV)/.synced
	$(VENV)/bin/python bench/tool_search.py

bench-tasks: $(VENV)/.synced
	$(VENV)/bin/python bench/task_throughput.py

bench-service: $(VENV)/.synced
	$(VENV)/bin/python bench/service_load.py

bench-peers: $(VENV)/.synced-bench
	$(VENV)/bin/python bench/gate_overhead.py --peers

clean:
	rm -rf $(VENV) $(TOOLS) .handrail .pytest_cache .mypy_cache .ruff_cache .coverage
