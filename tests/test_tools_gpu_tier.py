"""The GPU tier's entry point, plan, runner and report, on the CPU (the tier itself needs a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attn_course.demos.attention_bench import BenchRow, write_json
from tools import gpu_tier
from tools.gpu_report import StepResult, backward_figure, naive_figure, read_report, throughput_figure
from tools.gpu_tier import gpu_skip_reason

ROOT = Path(__file__).resolve().parents[1]
T4 = gpu_tier.GpuInfo("Tesla T4", (7, 5))
H100 = gpu_tier.GpuInfo("NVIDIA H100 80GB HBM3", (9, 0))


@pytest.mark.slow  # starts a kernel or a process
def test_without_a_gpu_make_test_gpu_says_so_in_one_line_and_exits_0():
    env = dict(os.environ) | {"CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine with one
    result = subprocess.run([sys.executable, "-m", "tools.gpu_tier"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "GPU tier skipped: there is no CUDA GPU here; run `make test-gpu` on a machine with a CUDA GPU "
        "(e.g. Colab)."
    ]


def test_the_dry_run_writes_the_report_with_the_plan(tmp_path, capsys):
    assert gpu_tier.main(["--dry-run", "--out", str(tmp_path)]) == 0
    assert "steps planned" in capsys.readouterr().out
    report = read_report(tmp_path / "report.json")
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert report.dry_run and report.total_seconds is None and report.budget_seconds == 480
    names = [s.name for s in report.steps]
    assert names[:3] == ["gpu tests", "bench triton", "bench naive"]
    assert "notebook 06_flash_attention" in names and "notebook 08_triton_flash_attention" in names
    assert all(s.status == "planned (dry run)" for s in report.steps)
    assert "-m gpu tests" in report.steps[0].command
    assert "--providers triton sdpa" in report.steps[1].command and "--heads 16" in report.steps[1].command
    assert "--lengths 8192" in report.steps[2].command and "--dtype float16" in report.steps[2].command
    assert [f.met for f in report.figures] == [None, None, None]
    assert report.figures[0].value == "not measured: dry run"
    assert "# GPU tier: plan (dry run)" in markdown and "| Triton forward / SDPA flash |" in markdown
    if not gpu_tier.backward_available():
        assert "slot kept for notebook 09" in report.figures[2].value
        assert "slot kept for notebook 09" in markdown


def test_the_plan_takes_notebook_09_and_its_backward_when_they_exist(tmp_path):
    for stem in ("05_rope", "06_flash_attention", "07_kv_cache", "08_triton", "09_backward", "10_models"):
        (tmp_path / "solutions").mkdir(exist_ok=True)
        (tmp_path / "solutions" / f"{stem}.ipynb").write_text("{}")
    steps = gpu_tier.tier_plan(tmp_path, tmp_path / "out", H100, backward=True)
    assert [s.name for s in steps] == [
        "gpu tests", "bench triton", "bench naive", "bench backward",
        "notebook 06_flash_attention", "notebook 08_triton", "notebook 09_backward",
    ]  # fmt: skip
    assert "--backward" in steps[3].argv
    assert "--nbval-cell-timeout=120" in steps[-1].argv
    assert steps[-1].argv[-1] == "solutions/09_backward.ipynb"
    assert "bench backward" not in [s.name for s in gpu_tier.tier_plan(tmp_path, tmp_path, H100, False)]


def test_bfloat16_is_benchmarked_from_ampere_on_only():
    dtypes = {gpu.name: gpu_tier.tier_plan(ROOT, ROOT, gpu, False)[1].argv for gpu in (T4, H100)}
    assert "bfloat16" in dtypes[H100.name] and "bfloat16" not in dtypes[T4.name]
    assert "compute capability 8.0" in gpu_tier.bf16_problem((7, 5))


def test_the_tier_compiles_triton_at_full_budgets():
    env = gpu_tier.tier_environment({"TRITON_INTERPRET": "1", "ATTN_COURSE_QUICK": "1", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "ATTN_COURSE_GPU_TIER": "1"}


def test_gpu_tests_are_skipped_outside_the_tier_and_where_there_is_no_gpu():
    assert "make test-gpu" in gpu_skip_reason(False, None)
    assert gpu_skip_reason(True, "there is no CUDA GPU here") == "GPU tier, but there is no CUDA GPU here"
    assert gpu_skip_reason(True, None) is None


def _step(name: str, kind: str, code: str) -> gpu_tier.Step:
    return gpu_tier.Step(name, kind, (sys.executable, "-c", code))


def test_the_runner_records_pass_failure_timeout_and_a_spent_budget(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_tier.LIMITS, "bench", 2.0)
    steps = [
        _step("ok", "tests", "print('all good')"),
        _step("broken", "tests", "import sys; print('boom'); sys.exit(3)"),
        _step("slow", "bench", "import time; time.sleep(30)"),
        _step("late", "tests", "print('never')"),
    ]
    ticks = iter([0.0, 0.0, 1.0, 2.0, 600.0])  # start, then before each step: the last finds the budget spent
    results = gpu_tier.run_steps(steps, os.environ, tmp_path, tmp_path, budget=480, clock=lambda: next(ticks))
    assert [r.status for r in results] == [
        "passed",
        "failed (exit 3)",
        "timed out after 2 s",
        "not run: the tier's 480 s budget was spent",
    ]
    assert results[0].detail == "all good" and results[1].detail == "boom"
    assert (tmp_path / "logs" / "broken.log").read_text() == "boom\n"
    assert results[3].seconds is None


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="1"
skipped="2" tests="7"><testcase classname="tests.test_gpu_triton" name="test_a"/><testcase
classname="tests.test_gpu_triton" name="test_b[dtype0]"><failure message="x"/></testcase><testcase
classname="tests.test_gpu_checks" name="test_c"><error message="y"/></testcase></testsuite></testsuites>"""


def test_a_pytest_step_is_summarised_from_its_junit_file(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    assert gpu_tier.junit_summary(path) == (
        "3 passed, 2 failed, 2 skipped; failed: tests.test_gpu_triton::test_b[dtype0], "
        "tests.test_gpu_checks::test_c"
    )


def _row(provider: str, t: int, seconds: float | None, skipped: str = "", **sizes) -> BenchRow:
    b, h = sizes.get("b", 4), sizes.get("h", 16)
    if seconds is None:
        return BenchRow(provider, "NVIDIA H100 80GB HBM3", "float16", b, h, t, 64, True, None, None, None,
                        None, skipped)  # fmt: skip
    tflops = 4 * b * h * t * t * 64 / 2 / seconds / 1e12
    return BenchRow(provider, "NVIDIA H100 80GB HBM3", "float16", b, h, t, 64, True, seconds, tflops,
                    100 * tflops / 989, 2**20 * (1024 if provider == "naive" else 8))  # fmt: skip


def test_the_figures_are_read_off_the_bench_rows():
    rows = [_row("sdpa-flash", 4096, 2e-3), _row("triton", 4096, 2.5e-3), _row("sdpa-math", 4096, 9e-3)]
    figure = throughput_figure(rows, "Triton forward / SDPA flash", "triton", 0.8)
    assert figure.met is True and figure.numbers["ratio"] == pytest.approx(0.8)
    expected = "0.80×: 55.0 TFLOP/s (6% of peak) against 68.7 TFLOP/s (7% of peak); 2.50 / 2.00 ms"
    assert figure.value == expected
    slow = throughput_figure([rows[0], _row("triton", 4096, 4e-3)], "x", "triton", 0.8)
    assert slow.met is False and slow.numbers["ratio"] == pytest.approx(0.5)
    naive = naive_figure([_row("naive", 8192, 60e-3, b=1, h=8), _row("sdpa-flash", 8192, 4e-3, b=1, h=8)])
    assert naive.met is True and naive.numbers["speedup"] == pytest.approx(15)
    assert "naive 1024 MiB, flash 8.0 MiB" in naive.value


def test_a_missing_figure_says_why():
    refused = _row("sdpa-flash", 4096, None, skipped="No available kernel. Aborting execution.")
    figure = throughput_figure([refused, _row("triton", 4096, 1e-3)], "x", "triton", 0.8)
    assert figure.met is None
    assert figure.value == "not measured: sdpa-flash: No available kernel. Aborting execution."
    assert naive_figure([]).value == (
        "not measured: naive was not run at this size; sdpa-flash was not run at this size"
    )
    assert "slot kept for notebook 09" in backward_figure(None).value


def test_on_a_gpu_without_flash_the_triton_figure_is_against_efficient_and_not_judged():
    # a T4 (compute capability 7.5): SDPA refuses flash, and Triton compiles without tensor cores
    refused = _row("sdpa-flash", 4096, None, skipped="No available kernel. Aborting execution.")
    rows = [refused, _row("sdpa-efficient", 4096, 2e-3), _row("triton", 4096, 8e-3)]
    figure = throughput_figure(rows, "Triton forward / SDPA flash", "triton", 0.8)
    assert figure.met is None and figure.numbers["ratio"] == pytest.approx(0.25)
    assert figure.value.startswith(
        "against sdpa-efficient (this GPU has no flash backend, so the aim is not "
    )
    assert "0.25×" in figure.value
    not_run = throughput_figure(
        [_row("sdpa-efficient", 4096, 2e-3), _row("triton", 4096, 8e-3)], "x", "triton", 0.8
    )
    assert not_run.value == "not measured: sdpa-flash was not run at this size"  # not refused: no stand-in


def test_a_failed_bench_step_is_named_in_its_figure(tmp_path):
    rows = [_row("sdpa-flash", 4096, 2e-3), _row("triton", 4096, 2e-3)]
    write_json(rows, _mkdir(tmp_path / "bench-triton"))
    results = [StepResult("bench naive", "bench", "cmd", "timed out after 45 s")]
    figures = gpu_tier.measure_figures(tmp_path, results, backward=False)
    assert figures[0].met is True and figures[0].numbers["ratio"] == pytest.approx(1.0)
    assert figures[1].value == "not measured: `bench naive` timed out after 45 s"
    assert figures[2].met is None


def _mkdir(folder: Path) -> Path:
    folder.mkdir(parents=True)
    return folder / "bench.json"
