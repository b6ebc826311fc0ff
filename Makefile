# Two commands on a fresh machine: `make demo` and `make test` (`make test-fast` while editing).
# Every target creates .venv when missing and installs what it needs:
# torch pinned to 2.13.0 first (the CPU build), then flowsplit with its extras.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0
# Extras `make install`/`test`/`demo` install (dev: the linters and test tools); a
# lighter venv without them: make install EXTRAS=dpi (only NFStream and its small deps),
# or none at all: make install EXTRAS=
EXTRAS ?= dev
comma  := ,
STAMP  := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
BSTAMP := $(VENV)/.installed-bench
DEMO_OUT ?= runs/demo
export PIP_DISABLE_PIP_VERSION_CHECK = 1
# No bytecode compiled at install (330 MB for every module of every package): Python
# writes it at first import for the modules actually used (about 100 MB).
PIP_INSTALL := $(PIP) install -q --no-compile
# ...which an environment with PYTHONDONTWRITEBYTECODE set forbids: then every process
# (each test's workers, each demo run) compiles torch's modules again, about 4 CPU-s a
# start. Our targets let Python keep its bytecode cache.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test test-fast lint docs pytest pytest-fast bench install clean demo-capture

# Outside macOS, pyproject.toml installs the CPU-only `xgboost-cpu` wheel. A venv made
# before that holds the CUDA `xgboost` wheel and its NCCL (about 700 MB); both provide
# the same `xgboost` package, so that wheel is removed before the new one goes in.
ifeq ($(shell uname -s),Darwin)
DROP_CUDA_XGBOOST := true
else
DROP_CUDA_XGBOOST := ! $(PIP) show -q xgboost 2>/dev/null || $(PIP) uninstall -q -y xgboost nvidia-nccl-cu12
endif

$(PY):
	$(PYTHON) -m venv $(VENV)

# setup.py and the .pyx: the compiled reader kernel, rebuilt by the install when they change.
# The torch wheel carries its own C++ unit-test executables (torch/test, 83 MB), which
# nothing imports or runs; they are removed after the install (pip uninstall still works).
$(STAMP): pyproject.toml setup.py src/flowsplit/reader/_kernel.pyx | $(PY)
	$(PIP_INSTALL) "$(TORCH)"
	rm -rf $(VENV)/lib/python*/site-packages/torch/test
	$(DROP_CUDA_XGBOOST)
	$(PIP_INSTALL) -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	@touch $@

$(BSTAMP): $(STAMP)
	$(PIP_INSTALL) -e ".[$(if $(EXTRAS),$(EXTRAS)$(comma))bench]"
	@touch $@

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m flowsplit demo -o $(DEMO_OUT)

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks scripts
	$(PY) -m ruff format --check src tests benchmarks scripts
	$(VENV)/bin/lint-imports

# The ten slowest tests are listed at the end, so a test that grows shows in every run.
# Extra pytest options: make test PYTEST_ARGS="-x -k dask".
# The tests run on PYTEST_WORKERS pytest-xdist processes, a test file at a time (--dist
# loadfile), so a module's fixtures are built once; each test gets its own tmp_path and
# free ports. PYTEST_WORKERS=0 runs them in this one process. Default: two more workers
# than cores, as the multi-process tests spend much of their time waiting (peers
# starting, heartbeats, timeouts) and one worker per core left the cores idle about
# half the time. Files are handed out in tests/conftest.py's order (the multi-process
# files first), not xdist's (most tests first, which left those files for the end).
PYTEST_ARGS ?=
# (cores: those this process may run on, so taskset and cgroup cpusets count; macOS: all)
PYTEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) + 2)" \
	2>/dev/null || $(PYTHON) -c "import os; print(os.cpu_count() + 2)")
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
pytest: $(STAMP)
	$(PY) -m pytest -q $(XDIST) --durations=10 $(PYTEST_ARGS)

# Everything but the tests marked `slow` (multi-process runs, the browser checks).
pytest-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

# The documentation site, built offline with every warning an error (broken links,
# a page missing from the nav, a docstring the API page cannot read); the CLI reference
# page is generated from the parsers (docs/hooks/cli_reference.py).
docs: $(STAMP)
	$(PY) -m mkdocs build --strict -q -d $(VENV)/docs-site

test: lint docs pytest

test-fast: lint docs pytest-fast

bench: $(BSTAMP)
	@mkdir -p bench-results
	$(PY) benchmarks/run_all.py --out-dir bench-results

# Regenerates the embedded lab capture (needs root, tcpdump and the servers; about 3 minutes).
demo-capture:
	sudo $(PYTHON) scripts/make_demo_capture.py --out demo/captures

clean:
	rm -rf $(VENV) runs bench-results .pytest_cache .ruff_cache .hypothesis
