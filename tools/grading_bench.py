"""Benchmark of the grader: N learners' copies of one solution notebook, graded with --jobs J.

Run as `python -m tools.grading_bench [--learners 30] [--jobs 2] [--notebook PATH]`
(`make bench-grade`). Prints the wall time; the target is under 90 s for 30 copies of notebook 02
with 2 jobs on a 2-core machine.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from attn_course.grading.grader import grade
from attn_course.grading.report import summary

TARGET_SECONDS = 90.0


def build_submissions(submissions: Path, learners: int, notebook: Path) -> None:
    """`learners` learner folders in `submissions`, each holding a copy of `notebook`."""
    for number in range(learners):
        folder = submissions / f"learner_{number:03d}"
        folder.mkdir(parents=True)
        shutil.copyfile(notebook, folder / notebook.name)


def main(argv: list[str] | None = None) -> int:
    """Build the submissions in a temporary folder, grade them, print the wall time."""
    parser = argparse.ArgumentParser(prog="python -m tools.grading_bench", description=__doc__)
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--notebook", type=Path, default=Path("solutions/02_scaling.ipynb"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="attn-grade-bench-") as temporary:
        submissions, out = Path(temporary, "submissions"), Path(temporary, "out")
        build_submissions(submissions, args.learners, args.notebook)
        start = time.perf_counter()
        report = grade(submissions, out, jobs=args.jobs, progress=True)
        seconds = time.perf_counter() - start
    print(summary(report).split("\nGradebook:")[0])
    verdict = "under" if seconds < TARGET_SECONDS else "OVER"
    print(
        f"\n{args.learners} learners × {args.notebook.name}, --jobs {args.jobs}: {seconds:.1f} s wall "
        f"({verdict} the {TARGET_SECONDS:.0f} s target)"
    )
    return 0 if seconds < TARGET_SECONDS and not report.failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
