# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint unit integration bench clean

$(BIN)/tiercel: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: $(BIN)/tiercel
	$(BIN)/tiercel broker config/single-node.yaml

lint: $(BIN)/tiercel
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: $(BIN)/tiercel
	bash tests/install-services.sh
	$(MAKE) lint
	$(BIN)/pytest -q -p no:cacheprovider

bench: $(BIN)/tiercel
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python tests/bench/produce_consume.py

clean:
	rm -rf $(VENV) data .mypy_cache .ruff_cache
