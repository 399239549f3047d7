"""The GPU tier (`make test-gpu`): one command that runs every GPU path compiled, and reports the figures.

On a machine with a CUDA GPU it runs, without TRITON_INTERPRET and within `BUDGET_SECONDS`:
the tests marked `gpu` (tests/conftest.py compiles Triton kernels when ATTN_COURSE_GPU_TIER=1),
`attn-course bench` at the README's sizes with every SDPA backend and the Triton provider, and the
solution notebooks of `GPU_NOTEBOOKS` under nbval at their full budgets. It writes report.md and
report.json (see `tools.gpu_report`) to bench-results/gpu/. Without a GPU it says so in one
line and exits 0; `--dry-run` writes the report with the plan on any machine.

Run as `python -m tools.gpu_tier [--dry-run] [--out DIR] [--budget SECONDS]`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from attn_course.demos.attention_bench import BenchRow, read_json
from attn_course.quick_run import QUICK_VARIABLE
from tools.gpu_report import (
    NAIVE_SETTING,
    TRITON_SETTING,
    Figure,
    StepResult,
    TierReport,
    backward_figure,
    naive_figure,
    not_measured,
    throughput_figure,
    write_report,
)

TIER_VARIABLE = "ATTN_COURSE_GPU_TIER"
"""Set to 1 for the tier's test session: tests/conftest.py then leaves Triton compiled."""

BUDGET_SECONDS = 480.0
"""The whole tier fits in 8 minutes on one GPU (T4 to H200); steps past it are not run."""

GPU_NOTEBOOKS = ("06", "08", "09")
"""Solution notebooks (by number) the tier runs on the GPU; one that does not exist yet is left out."""

LIMITS = {"tests": 150.0, "bench": 45.0, "notebook": 120.0}
"""The most seconds one step of each kind may take (and each notebook cell, under nbval)."""

OUT = Path("bench-results/gpu")
"""Where the report, the benchmarks' files and the steps' logs go."""

BENCH_STEPS = {
    "bench triton": "bench-triton",
    "bench naive": "bench-naive",
    "bench backward": "bench-backward",
}
"""Each bench step's folder under the tier's output folder."""


@dataclass(frozen=True)
class GpuInfo:
    """The GPU the plan is made for."""

    name: str
    """As torch.cuda.get_device_name gives it."""
    capability: tuple[int, int]
    """CUDA compute capability (major, minor)."""


DRY_RUN_GPU = GpuInfo("(dry run: any Ampere-or-newer GPU)", (8, 0))
"""The GPU a dry run plans for."""


@dataclass(frozen=True)
class Step:
    """One command of the tier."""

    name: str
    """"gpu tests", "bench triton", "bench naive", "bench backward" or "notebook NN_topic"."""
    kind: str
    """"tests", "bench" or "notebook" (its limit is `LIMITS[kind]`)."""
    argv: tuple[str, ...]
    """The command, run from the repository's root."""
    junit: str | None = None
    """The JUnit XML file a pytest step writes, relative to the tier's output folder."""


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


def bf16_problem(capability: tuple[int, int]) -> str | None:
    """Why bfloat16 kernels are not tried on a GPU of this compute capability (None from Ampere, 8.0, on).

    >>> bf16_problem((9, 0)) is None, "7.5" in bf16_problem((7, 5))
    (True, True)
    """
    if capability >= (8, 0):
        return None
    return (
        f"bfloat16 tensor-core products need compute capability 8.0 (Ampere) or newer; this GPU is "
        f"{capability[0]}.{capability[1]}"
    )


def gpu_notebooks(solutions: Path) -> list[Path]:
    """The solution notebooks of `GPU_NOTEBOOKS` that exist, in order."""
    return [path for number in GPU_NOTEBOOKS for path in sorted(solutions.glob(f"{number}_*.ipynb"))]


def backward_available() -> bool:
    """Whether notebook 09's Triton backward is in the package (then its figure is measured)."""
    from attn_course.triton_flash import launchers

    return hasattr(launchers, "triton_flash_attention_backward")


def _bench_step(out: Path, name: str, setting: dict, dtypes: Sequence[str], *extra: str) -> Step:
    """`attn-course bench` at one size (`setting`), writing into out/BENCH_STEPS[name]."""
    sizes = ["--lengths", str(setting["t"]), "--head-dims", str(setting["d"]), "--causal", "yes",
             "--batch", str(setting["b"]), "--heads", str(setting["h"])]  # fmt: skip
    argv = (sys.executable, "-m", "attn_course.cli", "bench", "--device", "cuda", "--dtype", *dtypes,
            *sizes, *extra, "--out", str(out / BENCH_STEPS[name]))  # fmt: skip
    return Step(name, "bench", argv)


def _pytest_argv(out: Path, junit: str, *args: str) -> tuple[str, ...]:
    pytest = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q")
    return (*pytest, f"--junitxml={out / junit}", *args)


def tier_plan(root: Path, out: Path, gpu: GpuInfo, backward: bool) -> list[Step]:
    """The tier's steps for `gpu`: gpu tests, the benchmarks, then the notebooks (the longest) last."""
    dtypes = ["float16"] + (["bfloat16"] if bf16_problem(gpu.capability) is None else [])
    tests = _pytest_argv(out, "logs/gpu-tests.xml", "-m", "gpu", "tests")
    steps = [
        Step("gpu tests", "tests", tests, junit="logs/gpu-tests.xml"),
        _bench_step(out, "bench triton", TRITON_SETTING, dtypes, "--providers", "triton", "sdpa"),
        _bench_step(out, "bench naive", NAIVE_SETTING, ["float16"], "--providers", "naive", "tiled", "sdpa",
                    "--block-size", "1024"),
    ]  # fmt: skip
    if backward:  # notebook 09: `attn-course bench --backward`
        steps.append(_bench_step(out, "bench backward", TRITON_SETTING, ["float16"], "--backward",
                                 "--providers", "triton", "sdpa"))  # fmt: skip
    cell_limit = f"--nbval-cell-timeout={LIMITS['notebook']:.0f}"
    for path in gpu_notebooks(root / "solutions"):
        junit = f"logs/notebook-{path.stem}.xml"
        argv = _pytest_argv(out, junit, cell_limit, str(path.relative_to(root)))
        steps.append(Step(f"notebook {path.stem}", "notebook", argv, junit=junit))
    return steps


def tier_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with the tier's switch on, Triton compiled (no TRITON_INTERPRET), full budgets (no quick)."""
    env = {k: v for k, v in base.items() if k not in ("TRITON_INTERPRET", QUICK_VARIABLE)}
    env[TIER_VARIABLE] = "1"
    return env


def junit_summary(path: Path) -> str:
    """ "N passed, N failed, N skipped" from a pytest JUnit XML file, and the first failures' names."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [
        f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    bad = count["failures"] + count["errors"]
    passed = count["tests"] - bad - count["skipped"]
    text = f"{passed} passed, {bad} failed, {count['skipped']} skipped"
    if failed:
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        text += "; failed: " + ", ".join(failed[:5]) + more
    return text


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run_step(step: Step, env: Mapping[str, str], cwd: Path, out: Path, limit: float) -> StepResult:
    """Run one step with its output in out/logs/; kill it (and its kernels) after `limit` seconds."""
    log = out / "logs" / f"{step.name.replace(' ', '-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(step.argv)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(step.argv, cwd=cwd, env=dict(env), stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
        try:
            code = process.wait(timeout=limit)
            status = "passed" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # pytest's notebook kernels too
            process.wait()
            status = f"timed out after {limit:.0f} s"
    seconds = time.perf_counter() - start
    junit = out / step.junit if step.junit else None
    detail = junit_summary(junit) if junit is not None and junit.exists() else _last_line(log)
    return StepResult(step.name, step.kind, command, status, seconds, detail)


def run_steps(
    steps: Sequence[Step],
    env: Mapping[str, str],
    cwd: Path,
    out: Path,
    budget: float = BUDGET_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> list[StepResult]:
    """Run the steps in order, each within its kind's limit and what is left of `budget`."""
    start, results = clock(), []
    for step in steps:
        left = budget - (clock() - start)
        if left < 5:
            results.append(StepResult(step.name, step.kind, shlex.join(step.argv),
                                      f"not run: the tier's {budget:.0f} s budget was spent"))  # fmt: skip
            continue
        print(f"[gpu tier] {step.name} ...", flush=True)
        result = run_step(step, env, cwd, out, min(LIMITS[step.kind], left))
        print(f"[gpu tier] {step.name}: {result.status} in {result.seconds:.0f} s. {result.detail}",
              flush=True)  # fmt: skip
        results.append(result)
    return results


def figures_from(rows: Mapping[str, list[BenchRow]], backward: bool) -> list[Figure]:
    """The README's figures from the bench steps' rows, by folder name (a missing folder: no rows)."""
    return [
        throughput_figure(rows.get("bench-triton", []), "Triton forward / SDPA flash", "triton", 0.8),
        naive_figure(rows.get("bench-naive", [])),
        backward_figure(rows.get("bench-backward", []) if backward else None),
    ]


def measure_figures(out: Path, results: Sequence[StepResult], backward: bool) -> list[Figure]:
    """The figures, read off the bench steps' bench.json; one whose step did not pass says how it went."""
    rows = {name: read_json(out / name / "bench.json") for name in BENCH_STEPS.values()
            if (out / name / "bench.json").exists()}  # fmt: skip
    status = {r.name: r.status for r in results}
    return [
        not_measured(f, f"`{s}` {status[s]}") if status.get(s, "passed") != "passed" and f.met is None else f
        for f, s in zip(figures_from(rows, backward), BENCH_STEPS, strict=False)
    ]


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("torch", "triton"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def dry_run(root: Path, out: Path, budget: float = BUDGET_SECONDS) -> TierReport:
    """Write the report with the plan and no figures, on any machine; nothing is run."""
    from attn_course.device import device_summary

    backward = backward_available()
    steps = tier_plan(root, out, DRY_RUN_GPU, backward)
    results = [StepResult(s.name, s.kind, shlex.join(s.argv), "planned (dry run)") for s in steps]
    figures = [not_measured(f, "dry run") for f in figures_from({}, backward)]
    if not backward:
        figures[-1] = backward_figure(None)  # the slot keeps saying why
    report = TierReport(_now(), str(device_summary("cpu")), _versions(), True, budget, None, results, figures)
    write_report(report, out)
    return report


def run_tier(root: Path, out: Path, budget: float = BUDGET_SECONDS) -> TierReport:
    """Run every step on this machine's GPU and write the report."""
    import torch

    from attn_course.device import device_summary

    gpu = GpuInfo(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
    backward = backward_available()
    start = time.perf_counter()
    results = run_steps(tier_plan(root, out, gpu, backward), tier_environment(os.environ), root, out, budget)
    total = time.perf_counter() - start
    figures = measure_figures(out, results, backward)
    device = str(device_summary())
    if bf16_problem(gpu.capability):
        device += f"\n{bf16_problem(gpu.capability)}: bfloat16 is left out of the benchmark."
    report = TierReport(_now(), device, _versions(), False, budget, total, results, figures)
    write_report(report, out)
    return report


def no_gpu_reason() -> str | None:
    """Why the tier cannot run here (no CUDA GPU Triton compiles for), or None when it can."""
    from attn_course.triton_flash.runtime import gpu_problem

    return gpu_problem()


def main(argv: list[str] | None = None) -> int:
    """Run the GPU tier (or its dry run); without a GPU print one line and return 0."""
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_tier", description=main.__doc__)
    parser.add_argument("--dry-run", action="store_true", help="write the report with the plan; run nothing")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the report goes (default {OUT})")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds the tier may take")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if args.dry_run:
        report = dry_run(root, args.out, args.budget)
        print(f"GPU tier, dry run: {len(report.steps)} steps planned; wrote {args.out}/report.md and .json")
        return 0
    reason = no_gpu_reason()
    if reason is not None:
        print(f"GPU tier skipped: {reason}; run `make test-gpu` on a machine with a CUDA GPU (e.g. Colab).")
        return 0
    report = run_tier(root, args.out, args.budget)
    for figure in report.figures:
        print(f"{figure.name} ({figure.setting}): {figure.value}")
    print(f"wrote {args.out / 'report.md'} and {args.out / 'report.json'}")
    return 0 if all(s.status == "passed" for s in report.steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
