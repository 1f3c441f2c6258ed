# shardkit: `make demo` packs built-in sample data; `make test` runs the whole suite;
# `make quick` the tests that need no server, without the slow ones.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo test quick lint typecheck unit bench charts clean system-deps

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The demo needs only the package and its image extra.
$(VENV)/.demo-stamp: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[images]' 2>$(VENV)/pip.log || { cat $(VENV)/pip.log; exit 1; }
	touch $@

# The test environment: every extra plus pinned interop peers and tools.
$(VENV)/.test-stamp: $(BIN)/python pyproject.toml requirements-dev.txt
	$(BIN)/pip install -q -e '.[all]' -r requirements-dev.txt 2>$(VENV)/pip.log || \
	  { cat $(VENV)/pip.log; exit 1; }
	touch $@

demo: $(VENV)/.demo-stamp
	$(BIN)/shardkit demo demo-out

lint: $(VENV)/.test-stamp
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: $(VENV)/.test-stamp
	$(BIN)/mypy

# nginx serves the http tests; headless Chromium drives the viewer's browser tests
# (Debian packages, no browser download; root on this machine kind).
system-deps:
	@missing=""; \
	  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="nginx"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  [ -z "$$missing" ] || (apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null)

unit: $(VENV)/.test-stamp system-deps
	scripts/test-services scripts/cluster-services $(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

test: lint typecheck unit

# The suite without servers and without the long cases (docs/architecture.md, Testing):
# `service` tests need scripts/test-services or cluster-services, `slow` ones take seconds.
quick: $(VENV)/.test-stamp
	$(BIN)/python -m pytest -n 2 -m "not slow and not service" $(PYTEST_ARGS)

bench: $(VENV)/.test-stamp
	$(BIN)/python bench/formats.py

# bench/results/*.json (each benchmark writes its own with --json) -> docs/charts/*.png
charts: $(VENV)/.test-stamp
	$(BIN)/python bench/charts.py

clean:
	rm -rf $(VENV) demo-out .pytest_cache .mypy_cache .ruff_cache
