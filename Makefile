# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint unit integration bench clean

# A venv counts only with a working pip: `python3 -m venv` without ensurepip (Debian's
# python3-venv not installed) fails after making .venv/bin/python, and every later run
# would trip over that half-made .venv. It is removed, and made again or explained.
# setup.py and the C source: the install also builds the reader's native decoder
# (tiered/reader/_record_columns.c) in place, next to its source.
$(BIN)/tiercel: pyproject.toml setup.py tiered/reader/_record_columns.c
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: Tiercel needs Python >= 3.11; '$(PYTHON)' is not (make PYTHON=...)" >&2; \
	  exit 1; }
	@if [ -e $(VENV) ] && ! $(BIN)/python -m pip --version >/dev/null 2>&1; then \
	  echo "removing the half-made $(VENV): it has no working bin/python with pip" >&2; \
	  rm -rf $(VENV); \
	fi
	@if [ ! -e $(VENV) ]; then \
	  $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip --version >/dev/null 2>&1 || { \
	    rm -rf $(VENV); \
	    echo "error: '$(PYTHON) -m venv $(VENV)' made no venv with pip: install Python's" \
	      "venv module (Debian/Ubuntu: apt-get install python3-venv) and run make again" >&2; \
	    exit 1; }; \
	fi
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
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
	$(BIN)/pytest -q -p no:cacheprovider --durations=20

bench: $(BIN)/tiercel
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python tests/bench/produce_consume.py

clean:
	rm -rf $(VENV) data .mypy_cache .ruff_cache
