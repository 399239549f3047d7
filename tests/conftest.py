"""Test-wide setup: notebooks run with their reduced budgets (see attn_course.quick_run).

Triton kernels run through Triton's interpreter on the CPU, also on a machine with a GPU, so that
the tests of notebook 08 and its checks run the same everywhere (set before triton is imported).
Kernels started by nbval, nbclient and the grader inherit this process's environment.
`make bench` times the notebooks at their full budgets.

The GPU tier (`make test-gpu`, `tools.gpu_tier`) sets ATTN_COURSE_GPU_TIER=1: then Triton
compiles its kernels for the GPU, and only the tests marked `gpu` run. Everywhere else the tests
marked `gpu` are skipped with the reason.
"""

import os

import pytest

from attn_course.quick_run import QUICK_VARIABLE
from tools.gpu_tier import TIER_VARIABLE

GPU_TIER = os.environ.get(TIER_VARIABLE) == "1"

os.environ[QUICK_VARIABLE] = "1"
if GPU_TIER:
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = "1"


def gpu_skip_reason(gpu_tier: bool, gpu_problem: str | None) -> str | None:
    """Why a test marked `gpu` is skipped in this session (None: it runs)."""
    if not gpu_tier:
        return (
            "GPU tier only: Triton runs interpreted in this session; run `make test-gpu` on a machine "
            "with a CUDA GPU"
        )
    if gpu_problem is not None:
        return f"GPU tier, but {gpu_problem}"
    return None


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


def is_slow(path: str) -> bool:
    """Whether the tests in the file at `path` are left out of `make test-fast`."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    slow_kinds = name.startswith(("test_grading", "test_explorers_")) or name.endswith(".ipynb")
    return name in SLOW_FILES or slow_kinds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests; skip `gpu` tests outside the GPU tier, and every other test inside it."""
    from attn_course.triton_flash.runtime import gpu_problem

    reason = gpu_skip_reason(GPU_TIER, gpu_problem() if GPU_TIER else None)
    for item in items:
        if is_slow(str(item.path)):
            item.add_marker(pytest.mark.slow)
        marked = item.get_closest_marker("gpu") is not None
        if marked and reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif GPU_TIER and not marked:
            item.add_marker(pytest.mark.skip(reason="the GPU tier runs only the tests marked gpu"))
