# fipstop — the two quick-start targets (demo, test) and the C targets.
# Every Python step uses the repo's .venv (made by scripts/setup.sh).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

VENV    := .venv
PY      := $(VENV)/bin/python
FIPSTOP := $(VENV)/bin/fipstop

# How long the demo producer writes, in seconds.
DEMO_SECONDS ?= 4

.PHONY: all setup demo test ctest lib examples bench clean distclean

all: lib examples

setup:
	@bash scripts/setup.sh

# README command 1: set up, then run a C producer and a C consumer (its output
# discarded) on a private shm dir, and look at them with `fipstop snapshot`
# while they run. (`fipstop demo`, the full pipeline, replaces this later.)
demo: setup
	@dir=$$(mktemp -d /tmp/fipstop-demo.XXXXXX); pids=; \
	trap 'for p in $$pids; do kill $$p 2>/dev/null || true; wait $$p 2>/dev/null || true; done; rm -rf "$$dir"' EXIT; \
	echo "demo: examples/producer writes domain 'demo' in $$dir for $(DEMO_SECONDS) s; examples/consumer 'ips' drains it"; \
	FIPS_SHM_DIR=$$dir examples/producer demo $(DEMO_SECONDS) & prod=$$!; pids="$$prod"; \
	for _ in $$(seq 50); do \
		[ -e "$$dir/fips.demo" ] && break; \
		kill -0 $$prod 2>/dev/null || { wait $$prod; echo "demo: producer exited early" >&2; exit 1; }; \
		sleep 0.1; \
	done; \
	[ -e "$$dir/fips.demo" ] || { echo "demo: producer created no domain in $$dir" >&2; exit 1; }; \
	FIPS_SHM_DIR=$$dir examples/consumer demo ips $$(( $(DEMO_SECONDS) + 1 )) >/dev/null & pids="$$pids $$!"; \
	sleep 2; \
	$(FIPSTOP) --shm-dir "$$dir" snapshot; \
	wait $$prod; pids="$${pids#$$prod }"

# README command 2: set up, then the C tests (plain, TSan, ASan/UBSan) and pytest.
test: setup
	@$(MAKE) --no-print-directory ctest
	@rc=0; $(PY) -m pytest -q tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test: pytest collected no tests (exit 5): that is a failure here" >&2; fi; \
	exit $$rc

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
	rm -rf build fipstop/lib fipstop/include fipstop/_fips*.so *.egg-info .pytest_cache .hypothesis
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
	if [ -f examples/Makefile ]; then $(MAKE) -C examples clean; fi
	if [ -f tests/c/Makefile ]; then $(MAKE) -C tests/c clean; fi

distclean: clean
	rm -rf $(VENV)
