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

# The browser test (tests/viz/test_browser.py) drives headless Chromium: Debian's package, installed if missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" -ne 0 ] && echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends chromium; }

test: $(BIN)/.installed chromium
	$(BIN)/python -m pytest -n 2 -q

.PHONY: install demo test chromium
