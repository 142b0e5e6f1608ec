# Two commands for a new user: `make demo` runs the product, `make test` passes the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

demo: $(VENV)/.installed
	$(BIN)/otel-agent-eval demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

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
