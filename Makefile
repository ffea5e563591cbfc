# fipstop — the two quick-start targets (demo, test) and the C targets.
# Every Python step uses the repo's .venv (made by scripts/setup.sh).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

VENV    := .venv
PY      := $(VENV)/bin/python
FIPSTOP := $(VENV)/bin/fipstop

# `make demo` without a terminal (CI): how long the headless demo runs, in seconds.
DEMO_SECONDS ?= 10
# more options for `fipstop demo`, e.g. DEMO_ARGS="--attackers 65536 --slow-consumer 5"
DEMO_ARGS ?=

.PHONY: all setup demo test lint ctest lib examples bench clean distclean

all: lib examples

setup:
	@bash scripts/setup.sh

# README command 1: set up, then `fipstop demo`: the C demo producer logs BIND
# query lines and an attack into a fresh domain, `fipstop ips` bans, and the
# dashboard shows it (5: the Bans panel, q quits).  Without a terminal (CI, a
# pipe) it runs headless for DEMO_SECONDS and prints its summary instead.
demo: setup
	@if [ -t 0 ] && [ -t 1 ]; then \
		$(FIPSTOP) demo $(DEMO_ARGS); \
	else \
		$(FIPSTOP) demo --headless --duration $(DEMO_SECONDS) $(DEMO_ARGS); \
	fi

# README command 2: set up, then ruff and mypy (configured in pyproject.toml), the
# C tests (plain, TSan, ASan/UBSan) and pytest.
test: setup
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory ctest
	@rc=0; $(PY) -m pytest -q tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test: pytest collected no tests (exit 5): that is a failure here" >&2; fi; \
	exit $$rc

# Style and types over every Python file: a finding fails the build like a test.
lint: $(PY)
	$(PY) -m ruff check .
	$(PY) -m mypy

ctest:
	$(MAKE) -C tests/c all

# fipstop/lib/libfips.so (+ libfips.so.1) and fipstop/_fips*.so, in the source
# tree, rebuilt when the C sources changed (setup.py's build_ext).
lib: $(PY)
	PYTHONWARNINGS=ignore::UserWarning:setuptools.config.pyprojecttoml $(PY) setup.py -q build_ext --inplace

examples: lib
	$(MAKE) -C examples

bench: setup
	$(FIPSTOP) bench ring --json

$(PY):
	@bash scripts/setup.sh

clean:
	rm -rf build fipstop/lib fipstop/include fipstop/_fips*.so *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
	if [ -f examples/Makefile ]; then $(MAKE) -C examples clean; fi
	if [ -f tests/c/Makefile ]; then $(MAKE) -C tests/c clean; fi

distclean: clean
	rm -rf $(VENV)
