# Every target works on a fresh machine: `make test` installs what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SCHEMA_DIR ?= ../shared/acp-schema

.PHONY: install test test-all lint schema bench bench-setup demo clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest --timeout=120 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check acp tests tools benchmarks
	$(PY) -m mypy --strict acp

schema: $(STAMP)
	$(PY) tools/generate_schema.py --schema-dir $(SCHEMA_DIR) --out acp/schema

# Our SDK vs the official Python SDK (its own venv, installed on first use) vs a bare msgspec
# pipe, side by side; results in benchmarks/results/latest.json. BENCH_ARGS: --quick, --only rtt...
bench: $(STAMP)
	$(PY) benchmarks/run.py --setup $(BENCH_ARGS)

bench-setup: $(STAMP)
	$(PY) benchmarks/run.py --setup-only

# Runs the suite under every supported interpreter pyenv has (3.10 .. 3.13).
test-all:
	@set -e; for v in 3.10 3.11 3.12 3.13; do \
	  py=$$(ls -d $$HOME/.pyenv/versions/$$v*/bin/python 2>/dev/null | head -1); \
	  if [ -z "$$py" ]; then echo "python $$v: not installed, skipped"; continue; fi; \
	  echo "=== python $$v ($$py)"; \
	  $$py -m venv .venv-$$v && .venv-$$v/bin/pip install -q -e '.[dev]' && \
	  .venv-$$v/bin/python -m pytest --timeout=120 -q; \
	done

clean:
	rm -rf $(VENV) .venv-3.* .pytest_cache .mypy_cache .ruff_cache build *.egg-info
