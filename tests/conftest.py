"""Marks and groups the tests: `slow` for `make test-fast`, `gpu` for the GPU tier, xdist's groups.

The environment every test and notebook runs in (quick budgets, Triton's interpreter, one torch
thread per xdist worker) and the collection of the solution notebooks for nbval are set in the
repository's root `conftest.py`.

Under pytest-xdist (`make test`), nbval's run of each solution notebook and the swap tests that read
it are one work unit (the root `conftest.py` says which tests share a worker); they run in that order.
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
    "test_tooling_workspace.py", "test_decoder.py", "test_tools_site_browser.py",
    # nbconvert and MathJax's 12 MB copied (`make site`)
    "test_tools_site.py",
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


def is_slow(path: str) -> bool:
    """Whether the tests in the file at `path` are left out of `make test-fast`."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    slow_kinds = name.startswith(("test_grading", "test_explorers_")) or name.endswith(".ipynb")
    return name in SLOW_FILES or slow_kinds


def _order_and_group(items: list[pytest.Item]) -> None:
    """Put the swap tests of a solution notebook right after nbval's cells of it (one work unit)."""
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


AFTER_THE_MERGE = {
    "test_checks_blind.py::test_each_set_covers_every_exercise_of_01_to_10[A]": "split",
    "test_checks_blind.py::test_each_set_covers_every_exercise_of_01_to_10[B]": "split",
    "test_checks_blind_a.py::test_blind_a_mistakes_first_unnamed_are_named_now[#96]": "no key",
    "test_checks_blind_a.py::test_the_reconstructed_solution_cells_pass": "split",
    "test_checks_triton_backward.py::test_kernel_checks_name_each_mistake"
    "[dkdv: causal start without the offset]": "harness",
}
"""Tests that three branches landed together broke, each an open item of issue 27 (not strict xfails):
'split' — notebook 09's Exercise 5 became three steps, so the kernels have no blind mistakes yet
(the edits that no longer find their text are test_checks_blind.STALE); 'no key' — rows that see no
key are now 0, as SDPA (notebook 06's solution too, since 2026-12-05); 'harness' — the
learner-raised message of the new harness names this dK/dV mistake otherwise."""
_REASONS = {
    "split": "notebook 09's Exercise 5 split into three steps: the blind edits and tables to re-target",
    "no key": "rows without keys are now 0 (SDPA's convention); the blind comparison to follow it",
    "harness": "the new harness's message for this dK/dV mistake to re-phrase",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests; skip `gpu` tests outside the GPU tier, and every other test inside it;
    order the swap tests after the nbval run they read (`_order_and_group`)."""
    from attn_course.triton_flash.runtime import gpu_problem

    _order_and_group(items)
    for item in items:
        kind = AFTER_THE_MERGE.get(item.nodeid.removeprefix("tests/"))
        if kind is not None:
            item.add_marker(pytest.mark.xfail(reason=_REASONS[kind], strict=False))

    reason = gpu_skip_reason(GPU_TIER, gpu_problem() if GPU_TIER else None)
    for item in items:
        if is_slow(str(item.path)):
            item.add_marker(pytest.mark.slow)
        marked = item.get_closest_marker("gpu") is not None
        if marked and reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif GPU_TIER and not marked:
            item.add_marker(pytest.mark.skip(reason="the GPU tier runs only the tests marked gpu"))
