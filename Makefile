# The two set-up commands of the README: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/lsa-interp data generate --preset copy-20 --seed 0 --out runs/demo/copy-20 --force
	$(BIN)/lsa-interp data show runs/demo/copy-20

test: $(BIN)/.installed
	$(BIN)/python -m pytest -n 2 -q

.PHONY: install demo test
