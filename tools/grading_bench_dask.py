"""Benchmark of grading on Dask: N copies of one notebook, locally with --jobs J, then on local clusters.

Run as `python -m tools.grading_bench_dask [--learners 60] [--jobs 2] [--workers 1 2 4]`
(`make bench-grade-dask`). Grades the same folder locally, then on a `distributed.LocalCluster` of
each number of single-threaded worker processes, and prints the wall times side by side (the
cluster's start is timed apart; each worker's first notebook pays for its kernel factory). On one
machine, workers beyond its cores add no speed: the figures show the cost of the cluster, not a
gain. The target: the cluster with as many workers as --jobs costs at most 20% more than local.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
import time
from pathlib import Path

from attn_course.grading.grader import grade
from tools.grading_bench import build_submissions

TARGET_OVERHEAD = 0.20


def _same_output(first: Path, second: Path) -> bool:
    names = ["gradebook.csv", *(f"feedback/{p.name}" for p in sorted((first / "feedback").iterdir()))]
    return all(filecmp.cmp(first / name, second / name, shallow=False) for name in names)


def main(argv: list[str] | None = None) -> int:
    """Build the submissions in a temporary folder, grade them locally and on clusters, print a table."""
    from distributed import LocalCluster

    parser = argparse.ArgumentParser(prog="python -m tools.grading_bench_dask", description=__doc__)
    parser.add_argument("--learners", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--notebook", type=Path, default=Path("solutions/02_scaling.ipynb"))
    args = parser.parse_args(argv)
    rows: list[tuple[str, float, float, bool]] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="attn-grade-bench-dask-") as temporary:
        submissions = Path(temporary, "submissions")
        build_submissions(submissions, args.learners, args.notebook)
        start = time.perf_counter()
        grade(submissions, Path(temporary, "local"), jobs=args.jobs)
        local = time.perf_counter() - start
        rows.append((f"local, --jobs {args.jobs}", 0.0, local, True))
        for workers in args.workers:
            start = time.perf_counter()
            with LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster:
                ready = time.perf_counter() - start
                out = Path(temporary, f"cluster-{workers}")
                start = time.perf_counter()
                grade(submissions, out, scheduler=cluster.scheduler_address)
                seconds = time.perf_counter() - start
            rows.append(
                (
                    f"LocalCluster, {workers} worker(s)",
                    ready,
                    seconds,
                    _same_output(out, Path(temporary, "local")),
                )
            )
    print(f"\n{args.learners} learners × {args.notebook.name} on {os.cpu_count()} CPU core(s), "
          f"load average at the start: {load:.2f}, at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(
        f"{'run':<28} {'cluster start':>13} {'grading':>9} {'per notebook':>12} {'vs local':>9}  same bytes"
    )
    for name, ready, seconds, same in rows:
        print(f"{name:<28} {ready:>12.1f}s {seconds:>8.1f}s {seconds / args.learners:>11.2f}s "
              f"{seconds / local - 1:>+8.0%}  {'yes' if same else 'NO'}")  # fmt: skip
    matching = [seconds for name, _, seconds, _ in rows[1:] if name.startswith(f"LocalCluster, {args.jobs} ")]
    within = all(s <= local * (1 + TARGET_OVERHEAD) for s in matching)
    print(f"\nTarget: the cluster of {args.jobs} worker(s) within {TARGET_OVERHEAD:.0%} of local: "
          f"{'met' if within else 'NOT met'}")  # fmt: skip
    return 0 if within and all(same for *_, same in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
