"""Marks and groups the tests: `slow` for `make test-fast`, `gpu` for the GPU tier, xdist's groups.

The environment every test and notebook runs in (quick budgets, Triton's interpreter, one torch
thread per xdist worker) and the collection of the solution notebooks for nbval are set in the
repository's root `conftest.py`.

`make test` runs the tests on every core with pytest-xdist (`-n auto --dist loadgroup`). Tests that
share an expensive module fixture (a JupyterLab server, a graded class) stay on one worker
(`SHARED_FIXTURE_FILES`), and nbval's run of each solution notebook and the swap test that reads it
run on one worker, in that order (`solution_runs.py`).
"""

import os
from collections import defaultdict

import pytest
from solution_runs import SwappedSolutionFile

from tools.gpu_tier import TIER_VARIABLE, gpu_skip_reason

GPU_TIER = os.environ.get(TIER_VARIABLE) == "1"


SLOW_FILES = {
    # run notebooks, kernels, a browser or the grader
    "test_browser.py", "test_notebooks.py", "test_learner_code_used.py", "test_colab_setup.py",
    "test_tooling_workspace.py", "test_decoder.py",
    # Triton's interpreter
    "test_checks_triton.py", "test_checks_triton_backward.py", "test_triton_flash_launchers.py",
    "test_triton_compile.py", "test_demos_attention_bench_triton.py", "test_gpu_checks.py",
    # many tiled loops in float64, or measurements
    "test_checks_flash.py", "test_flash.py", "test_checks_backward.py", "test_checks_modern.py",
    "test_checks_holdout2.py", "test_checks_learner_mistakes.py", "test_demos_attention_bench.py",
    "test_checks_blind.py",
}  # fmt: skip
"""Test files that `make test-fast` leaves out (marked `slow`), besides the grading tests, the explorers'
(ipywidgets driven control by control), nbval and the tests marked `slow` one by one."""


SHARED_FIXTURE_FILES = {"test_browser.py", "test_triton_compile.py", "test_gpu_checks.py"}
"""Test files whose tests share one expensive module fixture, besides the grading tests: one worker each."""


def is_slow(path: str) -> bool:
    """Whether the tests in the file at `path` are left out of `make test-fast`."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    slow_kinds = name.startswith(("test_grading", "test_explorers_")) or name.endswith(".ipynb")
    return name in SLOW_FILES or slow_kinds


def _shares_fixtures(path: str) -> bool:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name in SHARED_FIXTURE_FILES or name.startswith("test_grading")


def _order_and_group(items: list[pytest.Item]) -> None:
    """Keep nbval's cells of a solution notebook, then the swap tests reading them, on one worker."""
    swap_tests: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        stem = getattr(item, "callspec", None) and item.callspec.params.get("stem")
        if item.path.name == "test_learner_code_used.py" and stem:
            swap_tests[stem].append(item)
    last_cell: dict[str, int] = {}
    for index, item in enumerate(items):
        if isinstance(item.parent, SwappedSolutionFile):
            last_cell[item.path.stem] = index
    moved = {id(item) for stem in last_cell for item in swap_tests.get(stem, [])}
    ordered: list[pytest.Item] = []
    for index, item in enumerate(items):
        if id(item) in moved:
            continue
        ordered.append(item)
        stem = item.path.stem
        if isinstance(item.parent, SwappedSolutionFile) and last_cell.get(stem) == index:
            ordered.extend(swap_tests.get(stem, []))
    items[:] = ordered
    for item in items:
        if isinstance(item.parent, SwappedSolutionFile):
            item.add_marker(pytest.mark.xdist_group(f"solution-{item.path.stem}"))
        elif item.path.name == "test_learner_code_used.py":
            stem = item.callspec.params.get("stem")  # type: ignore[attr-defined]
            item.add_marker(pytest.mark.xdist_group(f"solution-{stem}"))
        elif _shares_fixtures(str(item.path)):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests; skip `gpu` tests outside the GPU tier, and every other test inside it;
    group the tests for xdist's workers (`_order_and_group`)."""
    from attn_course.triton_flash.runtime import gpu_problem

    _order_and_group(items)

    reason = gpu_skip_reason(GPU_TIER, gpu_problem() if GPU_TIER else None)
    for item in items:
        if is_slow(str(item.path)):
            item.add_marker(pytest.mark.slow)
        marked = item.get_closest_marker("gpu") is not None
        if marked and reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif GPU_TIER and not marked:
            item.add_marker(pytest.mark.skip(reason="the GPU tier runs only the tests marked gpu"))
