"""A learner's check before handing in: each notebook run and graded exactly as the grader will.

`attn-course check 02_scaling.ipynb` runs the notebook top to bottom in a fresh kernel, in a
temporary copy of its folder, with the grader's time and memory limits, then the course's own
checks (`execute.run_notebook`), and prints, per exercise, pass or the check's message.

>>> results = check_notebooks([Path("notebooks/02_scaling.ipynb")])  # doctest: +SKIP
>>> all_passed(results)  # doctest: +SKIP
False
"""

from __future__ import annotations

from pathlib import Path

from attn_course.grading.discover import (
    Learner,
    Submission,
    SubmissionsError,
    course_notebooks,
    notebook_problem,
)
from attn_course.grading.grader import DEFAULT_MEMORY_GIB, DEFAULT_TIMEOUT, grade_tasks, make_limits
from attn_course.grading.points import notebook_points
from attn_course.grading.results import STOPPED, NotebookResult


def _read(path: Path) -> bytes:
    if not path.exists():
        raise SubmissionsError(f"{path} does not exist")
    if not path.is_file():
        raise SubmissionsError(f"{path} is not a notebook file")
    try:
        return path.read_bytes()
    except OSError as error:
        raise SubmissionsError(f"cannot read {path}: {error.strerror or error}") from error


def check_notebooks(
    paths: list[Path], *, timeout: float = DEFAULT_TIMEOUT, memory_gib: float = DEFAULT_MEMORY_GIB
) -> tuple[NotebookResult, ...]:
    """Grade each course notebook in `paths` as `attn-course grade` would; one result each, in order.

    Raises SubmissionsError for a path that is missing or unreadable, or not named after a course
    notebook (before anything runs).
    """
    tasks = []
    for number, path in enumerate(paths):
        data = _read(path)
        if not path.name.endswith(".ipynb"):
            raise SubmissionsError(
                f"{path} is not a notebook (a course notebook is named like 02_scaling.ipynb)"
            )
        (stem,) = course_notebooks([path.name])
        if path.name != f"{stem}.ipynb":
            raise SubmissionsError(f"{path} must be named {stem}.ipynb to be graded")
        submission = Submission(stem, path, data, notebook_problem(data))
        tasks.append((Learner(str(number), path.parent, (submission,), ()), submission))
    limits = make_limits((), jobs=min(2, len(tasks)), timeout=timeout, memory_gib=memory_gib)
    results = grade_tasks(tasks, limits, jobs=min(2, len(tasks)))
    return tuple(results[(learner.name, submission.stem)] for learner, submission in tasks)


def all_passed(results: tuple[NotebookResult, ...]) -> bool:
    """Whether every exercise of every checked notebook passed."""
    return all(e.passed for result in results for e in result.exercises)


def report_text(paths: list[Path], results: tuple[NotebookResult, ...]) -> str:
    """What `attn-course check` prints: per notebook its score, per exercise pass or the check's message."""
    lines = []
    for path, result in zip(paths, results, strict=True):
        scored = sum(e.points for e in result.exercises)
        lines.append(f"{path}: {scored} / {notebook_points(result.stem)} point(s)")
        stopped = result.status in STOPPED and (result.reached or any(e.stopped for e in result.exercises))
        if result.problem:
            lines.append(
                f"  stopped ({result.status_text}): {result.problem}"
                if stopped
                else f"  not graded: {result.problem}"
            )
        for exercise in result.exercises:
            if exercise.upstream:
                message = exercise.message.strip().replace("\n", "\n     ")
                through = f"right; failed through your `{exercise.upstream}`"
                lines.append(f"  {exercise.exercise}: {through}: {message}")
            elif exercise.passed:
                lines.append(f"  {exercise.exercise}: passed")
            elif exercise.stopped:
                lines.append(f"  {exercise.exercise}: STOPPED WHILE CHECKED: {exercise.message.strip()}")
            elif not exercise.reached:
                lines.append(f"  {exercise.exercise}: NOT REACHED (the notebook stopped before its check)")
            else:
                message = exercise.message.strip().replace("\n", "\n     ")
                lines.append(f"  {exercise.exercise}: NOT PASSED: {message}")
    verdict = (
        "every exercise passes: ready to hand in" if all_passed(results) else "not every exercise passes"
    )
    return "\n".join([*lines, "", verdict.capitalize() + "."])
