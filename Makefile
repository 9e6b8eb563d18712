# gan3d: the two commands of the README, and a few conveniences.
#   make figures   regenerate every figure of the study (quick profile by default)
#   make test      run the whole test suite (multi-process Horovod, every notebook, JupyterLab
#                  in a real browser included)
# Both build the pinned environment (.venv) first if it is missing or out of date.

PROFILE ?= quick
ARGS ?=
PY := .venv/bin/python

.PHONY: env browser figures test test-fast lab bench doctor clean

# make env GPU=1: the GPU variant in .venv-gpu (needs a CUDA 12 toolkit: tools/bootstrap_gpu.sh)
env:
ifeq ($(GPU),1)
	@bash tools/bootstrap_gpu.sh
else
	@bash tools/bootstrap.sh
endif

figures: env
	$(PY) -m gan3d reproduce --profile $(PROFILE) $(ARGS)

# Debian's Chromium for the browser test; skipped with a reason where it cannot be installed.
browser:
	@bash tools/browser.sh

# Two pytest processes, each taking whole files (a module's fixtures are built once): on 2 cores
# one process's start-ups and launches overlap the other's computation. Files go out in xdist's
# order, most tests first; the longest files first instead (--no-loadscope-reorder) was measured
# no faster: heavy files then share the cores with each other.
TEST_JOBS ?= 2
XDIST := -n $(TEST_JOBS) --dist loadfile

test: env browser
	$(PY) -m pytest $(XDIST) $(ARGS)

test-fast: env
	$(PY) -m pytest $(XDIST) -m "not slow" $(ARGS)

lab: env
	$(PY) -m gan3d lab

doctor: env
	$(PY) -m gan3d doctor

bench: env
	$(PY) bench/bench_data.py
	$(PY) bench/bench_allreduce.py
	$(PY) bench/bench_training.py
	$(PY) bench/bench_inference.py

clean:
	rm -rf results .pytest_cache
