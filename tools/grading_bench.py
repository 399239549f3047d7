"""Benchmark of the grader: copies of each solution notebook, graded with --jobs J, one notebook at a time.

Run as `python -m tools.grading_bench [--learners 30] [--each 4] [--jobs 2] [--notebook PATH]`
(`make bench-grade`). Grades `--learners` copies of the headline notebook (02 by default), then
`--each` copies of every other solution notebook, and prints per notebook the wall time, the wall
time per notebook per core (wall × jobs / copies), the kernels' mean CPU time per notebook, and the
CPU time per notebook of everything grading spent (kernels, the grader's process and the processes
it reaped), which on an otherwise idle machine is about the wall time per notebook per core, and on
a busy one is what the wall time per notebook per core would be there.
Targets: the headline notebook at most 1 s per notebook per core, and every notebook at most 15 s
of CPU; every copy must score full marks.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from attn_course.grading.grader import grade

PER_CORE_TARGET = 1.0
"""Seconds of wall time per notebook per core for the headline notebook."""
CPU_TARGET = 15.0
"""CPU seconds of one correct notebook's kernel, any notebook."""


def build_submissions(submissions: Path, learners: int, notebook: Path) -> None:
    """`learners` learner folders in `submissions`, each holding a copy of `notebook`."""
    for number in range(learners):
        folder = submissions / f"learner_{number:03d}"
        folder.mkdir(parents=True)
        shutil.copyfile(notebook, folder / notebook.name)


@dataclass(frozen=True)
class Row:
    """One notebook's figures."""

    stem: str
    copies: int
    wall: float
    per_core: float
    cpu: float
    all_cpu: float
    full_marks: bool


def bench(notebook: Path, copies: int, jobs: int) -> Row:
    """Grade `copies` copies of `notebook` with `jobs` at a time."""
    with tempfile.TemporaryDirectory(prefix="attn-grade-bench-") as temporary:
        submissions, out = Path(temporary, "submissions"), Path(temporary, "out")
        build_submissions(submissions, copies, notebook)
        start, host = time.perf_counter(), _host_cpu()
        report = grade(submissions, out, jobs=jobs)
        wall, host = time.perf_counter() - start, _host_cpu() - host
    results = [n for learner in report.learners for n in learner.notebooks]
    full = not report.failures and all(e.passed for n in results for e in n.exercises)
    kernels = sum(n.cpu for n in results)
    cpu, all_cpu = kernels / max(1, len(results)), (kernels + host) / copies
    return Row(notebook.stem, copies, wall, wall * jobs / copies, cpu, all_cpu, full)


def _host_cpu() -> float:
    """CPU seconds of this process and the children it reaped (the kernels' launchers, the factory)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    """Grade the copies, print one line per notebook and a verdict; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(prog="python -m tools.grading_bench", description=__doc__)
    parser.add_argument("--learners", type=int, default=30, help="copies of the headline notebook")
    parser.add_argument("--each", type=int, default=4, help="copies of every other notebook (0: none)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--notebook", type=Path, default=Path("solutions/02_scaling.ipynb"))
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    args = parser.parse_args(argv)
    plan = [(args.notebook, args.learners)]
    if args.each:
        others = sorted(p for p in args.solutions.glob("*.ipynb") if p.name != args.notebook.name)
        plan += [(path, args.each) for path in others]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    columns = f"{'copies':>6} {'wall':>8} {'per notebook per core':>22} {'kernel CPU':>11} {'all CPU':>8}"
    print(f"{'notebook':<26} {columns}")
    rows = []
    for path, copies in plan:
        row = bench(path, copies, args.jobs)
        rows.append(row)
        marks = "" if row.full_marks else "  NOT FULL MARKS"
        figures = (
            f"{row.copies:>6} {row.wall:>7.1f}s {row.per_core:>21.2f}s {row.cpu:>10.2f}s {row.all_cpu:>7.2f}s"
        )
        print(f"{row.stem:<26} {figures}{marks}", flush=True)
    headline = rows[0]
    slow = [r.stem for r in rows if r.cpu > CPU_TARGET]
    ok = headline.per_core <= PER_CORE_TARGET and not slow and all(r.full_marks for r in rows)
    print(
        f"\n{headline.stem}: {headline.per_core:.2f} s per notebook per core with --jobs {args.jobs} "
        f"({headline.all_cpu:.2f} s of CPU per notebook in all; target: at most {PER_CORE_TARGET:g} s); "
        f"over {CPU_TARGET:g} s of kernel CPU: {', '.join(slow) or 'none'}; load average now "
        f"{os.getloadavg()[0]:.1f}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
