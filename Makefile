# Two commands for a new user: `make demo` runs the product, `make test` passes the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean prometheus-check

demo: $(VENV)/.installed
	$(BIN)/otel-agent-eval demo

# The operations-kit tests (tests/test_ops_*.py) run promtool and prometheus (Debian's
# `prometheus` package): without them, stop at once with one line instead of a page of failures.
test: prometheus-check $(VENV)/.installed-test
	$(BIN)/python -m pytest

PROMETHEUS_HINT := make test needs promtool and prometheus: sudo apt-get install --no-install-recommends prometheus (Debian/Ubuntu) or run .ci/run

prometheus-check:
	@$(if $(and $(shell command -v promtool),$(shell command -v prometheus)),:,$(error $(PROMETHEUS_HINT)))

bench: $(VENV)/.installed
	$(BIN)/python -m otel_agent_eval.bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
