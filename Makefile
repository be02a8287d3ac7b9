# The two set-up commands of the README: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[test,ray]'
	touch $@

install: $(BIN)/.installed

# The main job: every finding of the paper re-measured on the shipped copy-200, and its attention viewer.
demo: $(BIN)/.installed
	$(BIN)/lsa-interp report --model copy-200 --out runs/demo/report
	$(BIN)/lsa-interp attention --model copy-200 --task "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd" \
		--out runs/demo/attention.html

# The browser tests (tests/viz/test_browser.py, tests/explorer/test_browser.py) drive headless Chromium through
# Playwright, pointed at Debian's package (installed here if missing; Playwright never downloads a browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" -ne 0 ] && echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends chromium; }

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# --dist worksteal: a worker that has run out of tests takes some of the other's (2026-12-02, 2 cores: 9.5 minutes
# against 10.7 with the default split, of which about 10 s went with a test's needless sleep).
# PYTHONUTF8=0: without a locale (LANG unset, as a CI runner may start) Python would start in its UTF-8 mode, in which
# the tests of writing under an ASCII locale (the ascii_locale fixture) can only skip.
test: $(BIN)/.installed chromium lint
	PYTHONUTF8=0 $(BIN)/python -m pytest -n 2 --dist worksteal -q

# Mutation testing (docs/testing.md): slow, not part of `make test`. Results are cached in mutants/ between runs;
# MODULE=lsa_interp.data.batching re-runs the mutants of one module only.
mutation: $(BIN)/.installed
	$(BIN)/pip install -q -c constraints.txt -e '.[mutation]'
	OMP_NUM_THREADS=1 $(BIN)/mutmut run --max-children 1 $(if $(MODULE),"$(MODULE).*")
	$(BIN)/mutmut results

.PHONY: install demo test lint chromium mutation
