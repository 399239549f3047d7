# Two commands for a fresh machine (see README): `make lab` and `make test`.
# Both create (once) and reuse a local virtual environment in .venv.
PYTHON ?= python3
VENV ?= .venv
# torch is installed first, pinned, so that pip does not pick a multi-gigabyte CUDA build
# on a machine that has a CPU wheel at hand; set TORCH=... (or PIP_INDEX_URL) to choose another.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8888
# Jupyter refuses to run as root unless told to (containers, CI machines).
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
# The folder JupyterLab opens, and flags to add (the browser test passes --no-browser, a token, ...).
LAB_ROOT ?= notebooks
LAB_EXTRA ?=

.PHONY: setup lab test release bench bench-grade bench-grade-dask clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install -e ".[lab,dev]"
	touch $(STAMP)

setup: $(STAMP)

lab: setup
	$(BIN)/jupyter lab --port=$(PORT) $(LAB_FLAGS) --ServerApp.root_dir=$(LAB_ROOT) $(LAB_EXTRA)

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

release: setup
	$(BIN)/attn-course release

bench: setup
	$(BIN)/python -m attn_course.timing solutions

bench-grade: setup
	$(BIN)/python -m attn_course.grading.bench --learners 30 --jobs 2

bench-grade-dask: setup
	$(BIN)/python -m attn_course.grading.bench_dask --learners 60 --jobs 2 --workers 1 2 4

clean:
	rm -rf $(VENV) .pytest_cache
