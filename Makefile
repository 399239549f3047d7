# Learners: `make lab`. Contributors: `make test`. Both create (once) and reuse a virtual
# environment in .venv; `make lab` installs only what the course needs, `make test` adds the tools.
PYTHON ?= python3
VENV ?= .venv
# torch is installed first, pinned, so that pip does not pick a multi-gigabyte CUDA build
# on a machine that has a CPU wheel at hand; set TORCH=... to choose another build, and
# TORCH_INDEX=... to take it from another index (PyTorch's CPU-only wheels, for example).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-torch
LAB_STAMP := $(VENV)/.installed-lab
STAMP := $(VENV)/.installed
PORT ?= 8888
# Jupyter refuses to run as root unless told to (containers, CI machines).
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
# The learner's working copy of notebooks/ (git-ignored; made once per notebook, never overwritten),
# the folder JupyterLab opens, and flags to add (the browser test passes --no-browser, a token, ...).
WORK ?= my-work
LAB_ROOT ?= $(WORK)
LAB_EXTRA ?=

.PHONY: setup setup-lab lab test test-fast test-blind test-gpu release site bench bench-grade bench-grade-dask clean

$(BASE):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	touch $(BASE)

# What learners need: the course package and JupyterLab.
$(LAB_STAMP): pyproject.toml $(BASE)
	$(BIN)/python -m pip install -e ".[lab]"
	touch $(LAB_STAMP)

# What contributors need besides: the test, lint and browser tools.
$(STAMP): pyproject.toml $(BASE)
	$(BIN)/python -m pip install -e ".[lab,dev]"
	touch $(STAMP)

setup-lab: $(LAB_STAMP)

setup: $(STAMP)

lab: setup-lab
	$(BIN)/attn-course workspace --into $(WORK)
	$(BIN)/jupyter lab --port=$(PORT) $(LAB_FLAGS) --ServerApp.root_dir=$(LAB_ROOT) $(LAB_EXTRA)

# Tests on every core (pytest-xdist; the root conftest.py says which tests share a worker); JOBS=1
# runs them in this process, one after another.
JOBS ?= auto
PYTEST_JOBS = $(if $(filter 1,$(JOBS)),-p no:xdist,-n $(JOBS))

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_JOBS)

# The inner loop: lint, types, and the tests not marked slow (tests/conftest.py: no notebook, kernel,
# browser, grader or Triton interpreter), in about a minute.
test-fast: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -m "not slow" -q $(PYTEST_JOBS)

# Every blind set of learner mistakes, the older ones too, each one's data verified against the
# reference (make test runs the newest six, and verifies the newest three's data).
test-blind: setup
	ATTN_COURSE_TEST_ALL_BLIND=1 $(BIN)/python -m pytest -q $(PYTEST_JOBS) tests/test_checks_blind.py tests/test_checks_blind_n.py

# The GPU tier: compiled Triton kernels, the checks' GPU cases, notebooks 06, 08 (09) at full budgets
# and the benchmarks, within 8 minutes; report in bench-results/gpu/. Without a GPU: one line, exit 0.
test-gpu: setup
	$(BIN)/python -m tools.gpu_tier

release: setup
	$(BIN)/attn-course release

# The course as a website in site/ (tools/site.py): every student notebook's prose, math (MathJax from
# the jupyter-server-mathjax package, nothing from a CDN) and code, the exercises as learners get them,
# an index with a search box; open site/index.html. EXECUTE=1 runs each notebook first (quick budgets,
# the course's versions standing in for the exercises) so the pages show their figures: about 4 minutes
# on 2 cores, so CI builds without it.
EXECUTE ?=
site: setup
	$(BIN)/python -m tools.site --out site $(if $(filter 1,$(EXECUTE)),--execute)

bench: setup
	$(BIN)/python -m tools.timing solutions

bench-grade: setup
	$(BIN)/python -m tools.grading_bench --learners 30 --each 4 --jobs 2

bench-grade-dask: setup
	$(BIN)/python -m tools.grading_bench_dask --learners 60 --jobs 2 --workers 1 2 4

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
