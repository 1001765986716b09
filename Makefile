# Every target works on a fresh machine: `make test` installs what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The ACP JSON Schema folder for `make schema`. Left empty, tools/schema_source.py finds it:
# $ACP_SCHEMA_DIR, else ../shared/acp-schema, else the copy in the TypeScript SDK that
# `make interop-setup` installs (tests/interop/node_modules/@agentclientprotocol/sdk/schema).
SCHEMA_DIR ?=

.PHONY: install test test-load test-all lint schema bench bench-setup demo clean interop-setup interop-python-setup dist docs docs-serve

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP) interop-setup interop-python-setup
	$(PY) -m pytest --timeout=120 $(PYTEST_ARGS)

# The fault, fuzz and load tests at full size (100,000-update burst, 10,000 cancel races,
# 30,000 fuzz examples per side, 1,000 sessions / 10 agents x 100, 200 WebSocket clients on one
# agent server, 100 clients over Streamable HTTP + WebSocket); latency percentiles are printed
# and written to benchmarks/results/load-*.json. `make test` runs them reduced.
test-load: $(STAMP)
	ACP_LOAD=full $(PY) -m pytest --timeout=900 -s tests/test_faults.py tests/test_fuzz.py tests/test_load.py \
	  tests/test_transport_websocket.py tests/test_transport_http.py $(PYTEST_ARGS)

# The official TypeScript SDK, pinned in tests/interop (package.json + package-lock.json), for the
# interop tests. Installs only when node_modules is missing or older than the lock. Without node/npm
# it warns (the interop tests then skip) -- except under CI, where it fails.
INTEROP := tests/interop
interop-setup:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  case "$${CI:-}" in ""|0|false|no) \
	    echo "interop-setup: node/npm not found; the TypeScript interop tests will be skipped"; exit 0;; \
	  esac; \
	  echo "interop-setup: error: node and npm are required under CI (tests/interop)" >&2; exit 1; \
	fi; \
	if [ ! -f $(INTEROP)/node_modules/.package-lock.json ] || \
	   [ $(INTEROP)/package-lock.json -nt $(INTEROP)/node_modules/.package-lock.json ]; then \
	  if [ -f $(INTEROP)/package-lock.json ]; then cmd=ci; else cmd=install; fi; \
	  echo "interop-setup: npm $$cmd in $(INTEROP)"; \
	  (cd $(INTEROP) && npm $$cmd --no-audit --no-fund) && touch $(INTEROP)/node_modules/.package-lock.json; \
	fi

# The official Python SDK with its remote transports (extra "http": httpx[http2], websockets) and
# uvicorn to serve its ASGI app, for tests/test_interop_remote.py. Same venv as `make bench`
# (benchmarks/.venv-official, created by `benchmarks/run.py --setup-only`); the extras are pinned
# here and recorded in a stamp, so this is one `test` when already installed. A failure warns (the
# tests then skip) -- except under CI, where it fails.
OFFICIAL_VENV := benchmarks/.venv-official
OFFICIAL_REMOTE_PINS := agent-client-protocol==0.12.1 httpx==0.28.1 h2==4.4.1 websockets==17.4 uvicorn==0.54.0
OFFICIAL_REMOTE_STAMP := $(OFFICIAL_VENV)/.installed-remote
interop-python-setup: $(STAMP)
	@if [ -x $(OFFICIAL_VENV)/bin/python ] && [ -f $(OFFICIAL_REMOTE_STAMP) ] && \
	   [ "$$(cat $(OFFICIAL_REMOTE_STAMP))" = "$(OFFICIAL_REMOTE_PINS)" ]; then exit 0; fi; \
	echo "interop-python-setup: installing $(OFFICIAL_REMOTE_PINS) into $(OFFICIAL_VENV)"; \
	if $(PY) benchmarks/run.py --setup-only && \
	   env -u PYTHONPATH -u PIP_USER $(OFFICIAL_VENV)/bin/python -m pip install -q \
	     --disable-pip-version-check $(OFFICIAL_REMOTE_PINS); then \
	  echo "$(OFFICIAL_REMOTE_PINS)" > $(OFFICIAL_REMOTE_STAMP); \
	else \
	  case "$${CI:-}" in ""|0|false|no) \
	    echo "interop-python-setup: warning: install failed; the official SDK remote interop tests will be skipped"; exit 0;; \
	  esac; \
	  echo "interop-python-setup: error: cannot install the official Python SDK under CI ($(OFFICIAL_VENV))" >&2; exit 1; \
	fi

lint: $(STAMP)
	$(PY) -m ruff check acp tests tools benchmarks
	$(PY) -m mypy --strict acp

schema: $(STAMP)
	@dir=$$($(PY) tools/schema_source.py $(SCHEMA_DIR)) && echo "schema: from $$dir" && \
	  $(PY) tools/generate_schema.py --schema-dir "$$dir" --out acp/schema

# Our SDK vs the official Python SDK (its own venv, installed on first use) vs a bare msgspec
# pipe, side by side; results in benchmarks/results/latest.json. BENCH_ARGS: --quick, --only rtt...
bench: $(STAMP)
	$(PY) benchmarks/run.py --setup $(BENCH_ARGS)

bench-setup: $(STAMP)
	$(PY) benchmarks/run.py --setup-only

# Spawns the scenario agent and drives one full turn with SyncClient (no network).
demo: $(STAMP)
	$(PY) -m acp demo

# The sdist and the wheel in dist/, checked by twine (metadata, README rendering).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --sdist --wheel --outdir dist .
	$(PY) -m twine check --strict dist/*

# The documentation site (MkDocs, Material, mkdocstrings) in site/; --strict: a broken link or
# reference fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# Runs the suite under every supported interpreter pyenv has (3.10 .. 3.13).
test-all:
	@set -e; for v in 3.10 3.11 3.12 3.13; do \
	  py=$$(ls -d $$HOME/.pyenv/versions/$$v*/bin/python 2>/dev/null | head -1); \
	  if [ -z "$$py" ]; then echo "python $$v: not installed, skipped"; continue; fi; \
	  echo "=== python $$v ($$py)"; \
	  $$py -m venv .venv-$$v && .venv-$$v/bin/pip install -q -e '.[dev]' && \
	  .venv-$$v/bin/python -m pytest --timeout=120; \
	done

clean:
	rm -rf $(VENV) .venv-3.* .pytest_cache .mypy_cache .ruff_cache build dist site *.egg-info
