"""Grade a folder of submissions: every learner's notebooks, in parallel, into a gradebook and feedback.

>>> report = grade(Path("submissions"), Path("grades"), jobs=2)  # doctest: +SKIP
>>> report.gradebook  # doctest: +SKIP
PosixPath('grades/gradebook.csv')
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir

from attn_course.grading import sandbox
from attn_course.grading.answers import collect_answers, write_answers
from attn_course.grading.class_report import write_class_report
from attn_course.grading.dask_runner import grade_on_cluster
from attn_course.grading.discover import (
    Learner,
    Submission,
    SubmissionsError,
    accept_misplaced,
    discover,
    misplaced_problem,
)
from attn_course.grading.execute import Limits
from attn_course.grading.overrides import Override, apply_overrides, unused
from attn_course.grading.points import POINTS
from attn_course.grading.report import (
    FEEDBACK,
    GRADEBOOK,
    LMS,
    write_feedback,
    write_gradebook,
    write_lms,
)
from attn_course.grading.results import ExerciseResult, GradeReport, LearnerResult, NotebookResult
from attn_course.grading.roster import Roster
from attn_course.grading.store import RESULTS, read_results, write_results
from attn_course.grading.tasks import grade_locally
from attn_course.reference import EXERCISES

DEFAULT_TIMEOUT = 180.0
"""Seconds of CPU time each notebook's cells may use per thread (and again the grader's checks);
the wall-clock backstop is `execute.WALL_FACTOR` times this."""
DEFAULT_CHECK_TIMEOUT = 60.0
"""Seconds of CPU time (per thread) one exercise's check may spend before it is stopped and the
exercises after it are graded (`execute.Limits.check`)."""
EXECUTED = "executed"
"""The folder of `--out` where `--keep-executed` writes the executed notebooks."""
DEFAULT_MEMORY_GIB = 4.0
"""Memory (address space) each notebook's kernel may use, in GiB."""


def _missing(stem: str, learner: Learner | None = None) -> NotebookResult:
    """A notebook not handed in: not at all, or found misnamed or in a subfolder (`discover`)."""
    found = next((m for m in (learner.misplaced if learner else ()) if m[0] == stem), None)
    status, reason = "missing", f"{stem}.ipynb was not handed in"
    if found is not None:
        status, reason = found[2], misplaced_problem(*found)
    return NotebookResult(
        stem, status, reason, tuple(ExerciseResult.failed(n, reason) for n in EXERCISES[stem])
    )


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _cores() -> int:
    """The cores this process may run on (its affinity, where the system tells)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def make_limits(
    hidden: tuple[str, ...], *, jobs: int = 2, timeout: float = DEFAULT_TIMEOUT,
    memory_gib: float = DEFAULT_MEMORY_GIB, check_timeout: float = DEFAULT_CHECK_TIMEOUT, keep: str = "",
) -> Limits:  # fmt: skip
    """The limits of each kernel when `jobs` notebooks run at once on this machine; `hidden` from them."""
    return Limits(
        timeout=timeout,
        check=check_timeout,
        keep=keep,
        memory=int(memory_gib * 2**30),
        threads=max(1, _cores() // max(1, jobs)),
        hidden=(*hidden, jupyter_runtime_dir()),
    )


def grade_tasks(
    tasks: list[tuple[Learner, Submission]],
    limits: Limits,
    *,
    jobs: int = 2,
    fork: bool = True,
    progress: bool = False,
    scheduler: str | None = None,
) -> dict[tuple[str, str], NotebookResult]:
    """Grade each (learner, notebook); results by (learner, stem).

    On this machine, `jobs` at a time (`tasks.grade_locally`; with `fork`, kernels forked from one
    kernel factory), or with `scheduler` on that Dask cluster (`dask_runner.grade_on_cluster`).
    """
    if scheduler is not None:
        return grade_on_cluster(scheduler, tasks, limits, progress=progress)
    return grade_locally(tasks, limits, jobs=jobs, fork=fork, progress=progress)


def learner_result(
    learner: Learner, stems: list[str] | tuple[str, ...], results: dict[tuple[str, str], NotebookResult]
) -> LearnerResult:
    """One learner's result on the notebooks `stems` (a notebook without a result: not handed in)."""
    notebooks = tuple(results.get((learner.name, stem)) or _missing(stem, learner) for stem in stems)
    return LearnerResult(learner.name, notebooks, learner.problems)


def absent_learner(name: str, stems: list[str] | tuple[str, ...]) -> LearnerResult:
    """A learner of the roster with no folder in SUBMISSIONS: every notebook not handed in."""
    return LearnerResult(name, tuple(_missing(stem) for stem in stems), ("no folder in SUBMISSIONS",))


def with_points(learner: LearnerResult, points: dict[str, float]) -> LearnerResult:
    """`learner` with each passed exercise worth its points in `points` (a points file's)."""
    notebooks = tuple(
        replace(
            n, exercises=tuple(replace(e, points=points[e.exercise] if e.passed else 0) for e in n.exercises)
        )
        for n in learner.notebooks
    )
    return replace(learner, notebooks=notebooks)


def grade(
    submissions: Path,
    out: Path,
    *,
    jobs: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    memory_gib: float = DEFAULT_MEMORY_GIB,
    progress: bool = False,
    fork: bool = True,
    scheduler: str | None = None,
    points: dict[str, float] | None = None,
    roster: Roster | None = None,
    overrides: tuple[Override, ...] = (),
    accept_misnamed: bool = False,
    only: tuple[str, ...] = (),
    keep_executed: bool = False,
    hand_points: dict[str, dict[str, float]] | None = None,
    check_timeout: float = DEFAULT_CHECK_TIMEOUT,
) -> GradeReport:
    """Grade every learner folder of `submissions`; write `out/gradebook.csv`, `out/lms.csv`,
    `out/feedback/` and the class report `out/report.html` and `out/report.json` (see `class_report`).

    `points` (`points.read_points`) sets what each exercise is worth (default `points.POINTS`);
    with `roster` (`roster.read_roster`), a learner with no folder appears as not handed in.
    Each exercise's check may spend `check_timeout` CPU seconds (0: only the notebook's `timeout`).
    `overrides` (`overrides.read_overrides`) set one learner's points for an exercise, with a note;
    with `accept_misnamed`, a notebook found misnamed or in a subfolder is graded, saying so.
    With `only` (learner folder names), only they are graded again: every other learner keeps the
    result kept in `out/results.json` by the run before (see `store`). With `keep_executed`, each
    executed notebook is written to `out/executed/<learner>/<stem>.ipynb`.

    Each notebook runs in a fresh kernel in a temporary copy of its learner's folder, with a
    time and memory limit, and is graded by the course's own checks. Raises SubmissionsError
    when `submissions` cannot be graded at all (missing, not a folder, `out` inside it).
    With `fork`, kernels are forked from a process that has imported torch once (see `kernel_factory`).
    With `scheduler` (a Dask scheduler's address), each notebook is graded on the cluster instead
    (see `dask_runner`), with the same limits; the gradebook and feedback are the same bytes.
    """
    start = time.perf_counter()
    if _inside(out, submissions) and submissions.is_dir():
        raise SubmissionsError(f"--out {out} is inside {submissions}: the grader never writes there")
    learners, folder_problems = discover(submissions)
    kept: tuple[LearnerResult, ...] = ()
    if only:
        unknown = sorted(set(only) - {learner.name for learner in learners})
        if unknown:
            raise SubmissionsError(f"--only: no learner folder {', '.join(unknown)} in {submissions}")
        kept = tuple(r for r in read_results(out / RESULTS) if r.learner not in only)
        learners = [learner for learner in learners if learner.name in only]
    if accept_misnamed:
        learners = [accept_misplaced(learner) for learner in learners]
    tasks = [(learner, submission) for learner in learners for submission in learner.submissions]
    hidden = (str(submissions.resolve()), str(out.resolve()))
    executed = out / EXECUTED
    if keep_executed and not only and executed.is_dir() and not executed.is_symlink():
        shutil.rmtree(executed)  # this run's notebooks only (with --only, the others' are kept)
    keep = str(executed.resolve()) if keep_executed else ""
    limits = make_limits(
        hidden, jobs=jobs, timeout=timeout, memory_gib=memory_gib, check_timeout=check_timeout, keep=keep
    )
    results = grade_tasks(tasks, limits, jobs=jobs, fork=fork, progress=progress, scheduler=scheduler)
    for learner, submission in tasks:
        key = (learner.name, submission.stem)
        if submission.accepted and key in results:
            found_as = submission.path.relative_to(learner.folder).as_posix()
            results[key] = replace(results[key], found_as=found_as)
    misplaced = {m[0] for learner in learners for m in learner.misplaced}
    stems = [
        stem
        for stem in EXERCISES
        if stem in misplaced
        or any(stem == s for _, s in results)
        or any(n.stem == stem for r in kept for n in r.notebooks)
    ]
    exercises = tuple(name for stem in stems for name in EXERCISES[stem])
    worth: dict[str, float] = dict(points or POINTS)
    raw = tuple(sorted(
        tuple(learner_result(learner, stems, results) for learner in learners)
        + tuple(_with_stems(r, stems) for r in kept),
        key=lambda r: r.learner,
    ))  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    write_results(raw, out / RESULTS)
    graded = tuple(with_points(learner, worth) for learner in raw)
    if roster is not None:
        found = {learner.name for learner in learners}
        graded = tuple(sorted(
            graded + tuple(absent_learner(name, stems) for name in roster.learners if name not in found),
            key=lambda learner: learner.learner,
        ))  # fmt: skip
    graded = tuple(apply_overrides(learner, overrides) for learner in graded)
    failures = tuple(
        f"{learner.learner}/{n.stem}.ipynb: {n.problem}"
        for learner in graded
        for n in learner.notebooks
        if n.status == "grader_error"
    ) + checker_failures(graded)
    report = GradeReport(
        learners=graded,
        exercises=exercises,
        maximum=sum(worth[name] for name in exercises),
        problems=tuple(folder_problems)
        + unused(overrides, graded)
        + tuple(
            f"{learner.learner}: {n.stem}.ipynb graded from `{n.found_as}` (--accept-misnamed)"
            for learner in graded
            for n in learner.notebooks
            if n.found_as
        )
        + tuple(
            f"{learner.name}: a folder of SUBMISSIONS whose name is not on the roster"
            for learner in learners
            if roster is not None and learner.name not in roster.learners
        ),
        gradebook=out / GRADEBOOK,
        feedback=out / FEEDBACK,
        failures=failures,
        sandboxed=sandbox.landlock_abi() > 0,
        points={name: worth[name] for name in exercises},
        roster=roster,
        written=hand_points or {},
    )
    write_gradebook(report, out / GRADEBOOK)
    write_lms(report, out / LMS)
    write_feedback(report, out / FEEDBACK)
    write_class_report(report, out)
    if not only:  # with --only, the other learners' notebooks are not read again
        write_answers(collect_answers(learners), out)
    return _with_seconds(report, time.perf_counter() - start)


def _with_stems(learner: LearnerResult, stems: list[str]) -> LearnerResult:
    """A kept result with one notebook per stem of this gradebook (not handed in where it had none)."""
    have = {n.stem: n for n in learner.notebooks}
    return replace(learner, notebooks=tuple(have.get(stem) or _missing(stem) for stem in stems))


def checker_failures(learners: tuple[LearnerResult, ...]) -> tuple[str, ...]:
    """Exercises not graded because the course's check failed on them, as 'learner/notebook: ...'."""
    return tuple(
        f"{learner.learner}/{n.stem}.ipynb: `{e.exercise}` not graded: {e.message}"
        for learner in learners
        for n in learner.notebooks
        for e in n.exercises
        if not e.graded
    )


def _with_seconds(report: GradeReport, seconds: float) -> GradeReport:
    return replace(report, seconds=seconds)
