# Two commands for a new user: `make demo` runs the product, `make test` passes the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo setup test test-pythons test-latest lock bench docs clean dashboard

demo: $(VENV)/.installed
	$(BIN)/otel-agent-eval demo

# What the suite needs beyond Python (Prometheus, Chromium, Node.js and tests/node's packages, valgrind, the kit's
# Collector; cargo is checked): .ci/setup installs what is missing, and does nothing (quickly) when all is there.
setup:
	@bash .ci/setup

# The tests run on the versions locked in tests/constraints.txt, so an upstream release cannot turn
# main red between two commits; `make test-latest` runs them on today's newest releases instead, to
# find drift on purpose, and `make lock` re-resolves the lock at the newest releases.
test: setup $(VENV)/.installed-test
	$(BIN)/python -m pytest

# The suite again on the other CPython versions the project supports, each in its own .venv-3.X with the same
# lock, built native reader included: a C-API change between versions (3.13's inline values) breaks only there.
# The interpreters are pyenv's (`pyenv latest 3.X`) or python3.X on PATH; one missing stops at once, naming it.
OTHER_PYTHONS ?= 3.12 3.13
test-pythons: setup
	@set -e; for v in $(OTHER_PYTHONS); do \
	  py=; if command -v pyenv >/dev/null && found=$$(pyenv latest $$v 2>/dev/null); then \
	    py=$$(pyenv root)/versions/$$found/bin/python$$v; else py=$$(command -v python$$v || true); fi; \
	  [ -x "$$py" ] || { echo "make test-pythons: no python$$v (pyenv install $$v, or put python$$v on PATH)" >&2; exit 1; }; \
	  echo "== the suite on $$($$py --version)"; \
	  $(MAKE) --no-print-directory test PYTHON=$$py VENV=.venv-$$v; \
	done

LATEST ?= .venv-latest
test-latest: setup
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	$(LATEST)/bin/pip list --format=freeze | grep -i -E '^(opentelemetry-sdk|deepeval|prometheus.client|pyyaml|jsonschema|orjson)=' || true
	$(LATEST)/bin/python -m pytest

lock:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet -e '.[test]'
	{ echo "# Test dependencies, locked: make lock writes this file from today's newest releases (python $$($(LATEST)/bin/python -c 'import platform; print(platform.python_version())'))."; \
	  $(LATEST)/bin/pip freeze --exclude-editable; } > tests/constraints.txt

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or anchor.
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The kit's Grafana dashboard is generated: edit collector-config/grafana/dashboard.py, then this writes
# collector-config/grafana/dashboards/agent-eval.json (tests/test_ops_dashboard.py fails while the two differ).
dashboard: $(VENV)/.installed-test
	$(BIN)/python collector-config/grafana/dashboard.py

bench: $(VENV)/.installed
	$(BIN)/python -m otel_agent_eval.bench

# The install builds the native reader (native/, Rust) with cargo when it is on PATH; PIP_CONSTRAINT pins the
# build tools too (a plain -c does not reach pip's isolated build environment).
$(VENV)/.installed: pyproject.toml tests/constraints.txt native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PIP_CONSTRAINT=tests/constraints.txt $(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	PIP_CONSTRAINT=tests/constraints.txt $(BIN)/pip install --quiet -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) $(LATEST) .venv-3.* build site *.egg-info
