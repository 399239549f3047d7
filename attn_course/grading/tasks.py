"""One notebook as a task: what grading one (learner, notebook) runs, here or on a Dask worker.

`grade_one` is the task, the same wherever it runs; `grade_locally` runs tasks on this machine,
`jobs` at a time, with kernels forked from one kernel factory. `dask_runner.grade_on_cluster` runs
the same task on a Dask cluster, and `grader.grade_tasks` picks between the two. Nothing here
imports `grader` or `dask_runner`, so that the runners depend on this module and never on each other.
"""

from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace

from attn_course.grading.discover import Learner, Submission
from attn_course.grading.execute import Limits, kernel_env, run_notebook
from attn_course.grading.kernel_factory import Zygote
from attn_course.grading.report import ProgressBar
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.reference import EXERCISES

Results = dict[tuple[str, str], NotebookResult]
"""Notebook results by (learner, stem)."""


def failed(stem: str, status: str, problem: str) -> NotebookResult:
    """A notebook that could not be graded: every exercise at zero, saying why."""
    zeros = tuple(ExerciseResult.failed(n, f"not graded: {problem}") for n in EXERCISES[stem])
    return NotebookResult(stem, status, problem, zeros)


def grade_one(learner: Learner, submission: Submission, limits: Limits) -> NotebookResult:
    """Grade one notebook of one learner; the grader's own failure is a result, never an exception.

    Where the grader fails on a notebook (its kernel did not start, its factory is gone, an error of its
    own), the notebook is graded once more from scratch, in a kernel started afresh: such failures are
    the grader's and mostly passing (a busy machine, a race), and the learner's points must not hang on
    them. A second failure is recorded, and the run exits non-zero.
    """
    result: NotebookResult | None = None
    problem = ""
    for attempt in (limits, replace(limits, zygote=None)):
        try:
            result = run_notebook(learner, submission, attempt)
        except Exception as error:  # noqa: BLE001 - the grader's own failure, never the learner's
            result, problem = None, f"the grader failed on this notebook ({type(error).__name__}: {error})"
            continue
        if result.status != "grader_error":
            return result
    return result if result is not None else failed(submission.stem, "grader_error", problem)


def start_zygote(limits: Limits) -> Zygote | None:
    """A kernel factory, or None (then each kernel starts from scratch) where forking is unavailable."""
    if not hasattr(os, "fork"):
        return None
    try:
        return Zygote(kernel_env(limits))
    except (OSError, RuntimeError):
        return None


_FACTORIES: dict[tuple[tuple[str, str], ...], Zygote] = {}
_FACTORIES_LOCK = threading.Lock()


def shared_zygote(limits: Limits, start: bool = True) -> Zygote | None:
    """This process's kernel factory for the kernels' environment, started on first use and kept until
    the process exits, so that grading again (another class, a Dask task) imports torch no more; one
    that died is started again. None where forking is unavailable, or without `start` where none runs."""
    key = tuple(sorted(kernel_env(limits).items()))
    with _FACTORIES_LOCK:
        zygote = _FACTORIES.get(key)
        if zygote is not None and zygote.process.poll() is None:
            return zygote
        if not start:
            return None
        zygote = start_zygote(limits)
        if zygote is not None:
            _FACTORIES[key] = zygote
            atexit.register(zygote.close)
        return zygote


def grade_locally(
    tasks: list[tuple[Learner, Submission]],
    limits: Limits,
    *,
    jobs: int = 2,
    fork: bool = True,
    progress: bool = False,
) -> Results:
    """Grade each (learner, notebook) on this machine, `jobs` at a time; results by (learner, stem).

    With `fork`, kernels are forked from a process that has imported torch once (`shared_zygote`, see
    `kernel_factory`): started for more than one notebook, and used for one where it runs already.
    """
    zygote = shared_zygote(limits, start=len(tasks) > 1) if fork else None
    if zygote is not None:
        limits = replace(limits, zygote=zygote.socket)
    bar = ProgressBar(len(tasks)) if progress else None
    results: Results = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(grade_one, learner, s, limits): (learner.name, s.stem) for learner, s in tasks}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if bar:
                bar.advance()
    return results
