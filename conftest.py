"""The environment of every test and notebook the suite runs, and nbval's solution notebooks.

Notebooks run with their reduced budgets (see attn_course.quick_run). Triton kernels run through
Triton's interpreter on the CPU, also on a machine with a GPU, so that the tests of notebook 08 and
its checks run the same everywhere (set before triton is imported). Kernels started by nbval,
nbclient and the grader inherit this process's environment. `make bench` times the notebooks at
their full budgets.

The GPU tier (`make test-gpu`, `tools.gpu_tier`) sets ATTN_COURSE_GPU_TIER=1: then Triton
compiles its kernels for the GPU (tests/conftest.py runs only the tests marked `gpu`).

`make test` runs the tests on every core with pytest-xdist (`-n auto`). Each worker, and each kernel
it starts, uses one torch thread, so that the workers do not oversubscribe the cores. `work_unit`
says which tests must share a worker (xdist's own `xdist_group` marks do not reach its scheduler under
pytest 9.2, which no longer lets a plugin rename a test's node id).

nbval runs each solution notebook with the swap test's learner versions inserted, and what each
cell printed is recorded for that test (tests/solution_runs.py): one run serves both.
nbval's kernels and the student run-throughs' are forked from one kernel factory per worker, which
imported torch once (tests/forked_kernels.py; ATTN_COURSE_FRESH_KERNELS=1 starts each afresh).
"""

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from attn_course.quick_run import QUICK_VARIABLE
from tools.gpu_tier import TIER_VARIABLE

TESTS = Path(__file__).resolve().parent / "tests"

os.environ[QUICK_VARIABLE] = "1"
if os.environ.get(TIER_VARIABLE) == "1":
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = "1"
if os.environ.get("PYTEST_XDIST_WORKER"):  # one torch thread per worker, and per kernel it starts
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    # torch is imported already (by tools.gpu_tier above), so it read no OMP_NUM_THREADS: two workers
    # of two threads each on two cores made the checks' small-tensor loops up to 40 times slower.
    torch.set_num_threads(1)
if str(TESTS) not in sys.path:  # solution_runs and the learner code it swaps in live in tests/
    sys.path.insert(0, str(TESTS))

from solution_runs import SwappedSolutionFile, record_cell  # noqa: E402

SHARED_FIXTURE_FILES = {"test_browser.py", "test_triton_compile.py", "test_gpu_checks.py"}
"""Test files whose tests share one expensive module fixture (a JupyterLab server, compiled kernels),
besides the grading tests (a graded class): each file's tests run on one worker."""
RANKS_FILES = {"test_ring.py", "test_checks_ring.py"}
"""Test files that run functions on processes (notebook 11's ring): on one worker together, whose pools of
ranks (a forkserver that imported torch, one pool per world size) they share."""


def work_unit(nodeid: str) -> str:
    """The tests that run on one xdist worker, in collection order, share this name.

    >>> work_unit("solutions/02_scaling.ipynb::Cell 3")
    'solution-02_scaling'
    >>> work_unit("tests/test_learner_code_used.py::test_cells[02_scaling-scaled_dot_product_attention]")
    'solution-02_scaling'
    >>> work_unit("tests/test_grading_dask.py::test_kill")
    'tests/test_grading_dask.py'
    >>> work_unit("tests/test_checks_ring.py::test_right_rings_pass[isend-irecv]")
    'ranks'
    >>> work_unit("tests/test_masking.py::test_causal")
    'tests/test_masking.py::test_causal'
    """
    path, _, test = nodeid.partition("::")
    name = path.rsplit("/", 1)[-1]
    if path.startswith("solutions/") and name.endswith(".ipynb"):  # nbval's cells share one kernel
        return f"solution-{name.removesuffix('.ipynb')}"
    if name == "test_learner_code_used.py" and "[" in test:  # reads nbval's run of its notebook
        return f"solution-{test.split('[', 1)[1].split('-', 1)[0]}"
    if name in SHARED_FIXTURE_FILES or name.startswith("test_grading"):
        return path
    if name in RANKS_FILES:
        return "ranks"
    return nodeid


UNIT_SECONDS: dict[str, float] = {
    "tests/test_browser.py": 160,
    "tests/test_grading.py": 100,
    "tests/test_grading_dask.py": 100,
    "tests/test_grading_gradescope.py": 80,
    "tests/test_grading_nbgrader.py": 75,
    "tests/test_triton_compile.py": 75,
    "tests/test_grading_load.py": 60,
    "tests/test_grading_selfcheck.py": 20,
    "ranks": 35,
    "solution-07_kv_cache": 20,
}
"""Seconds each of the longest work units took on one worker (2-core machine, 2026-12-03), so that they
start first and the two workers finish together; any other unit counts SECONDS_PER_TEST a test."""
SECONDS_PER_TEST = 0.25


def unit_cost(unit: str, tests: int) -> float:
    """The seconds a work unit of `tests` tests is expected to take, to schedule the longest first.

    >>> unit_cost("tests/test_masking.py::test_causal", 1)
    0.25
    """
    return UNIT_SECONDS.get(unit, SECONDS_PER_TEST * tests)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduler, with `work_unit` as the scope, the longest units first (`unit_cost`)."""
    from xdist.scheduler import LoadScopeScheduling

    class CourseScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            """The longest unit left goes next (xdist's own order is by number of tests)."""
            if not getattr(self, "_longest_first", False):
                units = sorted(self.workqueue.items(), key=lambda unit: -unit_cost(unit[0], len(unit[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
                self._longest_first = True
            super()._assign_work_unit(node)  # type: ignore[arg-type]

    return CourseScheduling(config, log)  # type: ignore[arg-type]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Solution notebooks are collected by `pytest_collect_file` below (nbval's, with the swaps in)."""
    nbval = session.config.pluginmanager.get_plugin("nbval")
    if nbval is not None and session.config.pluginmanager.is_registered(nbval):
        session.config.pluginmanager.unregister(nbval)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A notebook under nbval; a solution notebook with the swap test's learner versions inserted."""
    option = parent.config.option
    if file_path.suffix != ".ipynb" or not (option.nbval or option.nbval_lax):
        return None
    from nbval.plugin import IPyNbFile

    if file_path.parent != TESTS.parent / "solutions":
        return IPyNbFile.from_parent(parent, path=file_path)
    return SwappedSolutionFile.from_parent(parent, path=file_path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Record what each cell of a solution notebook printed under nbval, for the swap test."""
    try:
        return (yield)
    finally:
        if isinstance(item.parent, SwappedSolutionFile):
            outputs = getattr(item, "test_outputs", None) or []
            record_cell(item.path.stem, item.cell_num, item.cell.source, outputs)  # type: ignore[attr-defined]
