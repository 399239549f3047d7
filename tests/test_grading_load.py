"""Grading's time limits: the kernel's CPU time, so a correct class keeps full marks on a busy machine.

Three notebook-02 submissions graded with `--jobs 2` beside four processes that spin a core each
(on a 2-core machine each kernel gets a third of a core or less); one of them passes only in a
kernel that has its share of the cores for torch's threads and the quick budgets. Then single
notebooks: a cell that waits meets the wall-clock backstop, a check that hangs its CPU budget, and
an exercise deleted after its check is checked again at the end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

from attn_course.grading.discover import discover
from attn_course.grading.execute import Limits, run_notebook
from attn_course.grading.grader import grade, make_limits
from attn_course.grading.report import gradebook_rows

ROOT = Path(__file__).resolve().parents[1]
STEM = "02_scaling"
TIMEOUT = 12.0
"""CPU seconds per notebook: a few times what notebook 02 needs, less than it takes under this load."""

ENVIRONMENT = """
import os

import torch

assert torch.get_num_threads() == {threads}, torch.get_num_threads()
assert os.environ["OMP_NUM_THREADS"] == "{threads}" and os.environ["ATTN_COURSE_QUICK"] == "1"
"""


def _write(folder: Path, notebook: nbformat.NotebookNode) -> None:
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / f"{STEM}.ipynb")


def test_a_correct_class_keeps_full_marks_beside_four_busy_processes(tmp_path):
    solution = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    subs = tmp_path / "subs"
    _write(subs / "ann", solution)
    _write(subs / "bob", solution)
    threads = make_limits((), jobs=2).threads  # one on a 2-core machine
    checked = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    cell = next(c for c in checked.cells if c.source.startswith("def score_variance"))
    cell.source = ENVIRONMENT.format(threads=threads) + "\n\n" + cell.source
    _write(subs / "cy_environment", checked)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        report = grade(subs, tmp_path / "out", jobs=2, timeout=TIMEOUT, memory_gib=2.0)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    rows = gradebook_rows(report)
    assert rows[1:] == [
        [name, "1", "1", "2", "graded", "2", "2", "graded"] for name in ("ann", "bob", "cy_environment")
    ]
    for learner in report.learners:
        (notebook,) = learner.notebooks
        print(f"{learner.learner}: {notebook.seconds:.1f} s wall, {notebook.cpu:.1f} s CPU")
        assert 0 < notebook.cpu < TIMEOUT


def test_a_cell_that_waits_meets_the_wall_clock_backstop_which_says_why(tmp_path):
    notebook = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    after = next(i for i, c in enumerate(notebook.cells) if c.source.startswith("check_score_variance"))
    notebook.cells.insert(after + 1, nbformat.v4.new_code_cell("import time\n\ntime.sleep(600)"))
    _write(tmp_path / "dee", notebook)
    (learner,) = discover(tmp_path)[0]
    result = run_notebook(learner, learner.submissions[0], Limits(timeout=60, wall=12, threads=1))
    assert result.status == "timeout" and result.status_text == "partly graded (timed out)"
    assert (
        "timed out after 12 s of wall-clock time, in the third code cell under *Exercise 1" in result.problem
    )
    assert "the machine was too busy" in result.problem and "waited without computing" in result.problem
    passed, waiting = result.exercises
    assert passed.passed and not waiting.reached and waiting.message == f"not reached: {result.problem}"


def test_a_learners_function_that_hangs_in_the_graders_check_is_stopped_by_its_cpu_time(tmp_path):
    notebook = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    index = next(i for i, c in enumerate(notebook.cells) if c.source.startswith("def score_variance"))
    notebook.cells[
        index
    ].source = "def score_variance(d_k, n_samples=20_000, scaled=False):\n    while True:\n        pass"
    notebook.cells[index + 1].source = "pass"  # the learner's own check cell, which would hang first
    _write(tmp_path / "eve", notebook)
    (learner,) = discover(tmp_path)[0]
    result = run_notebook(learner, learner.submissions[0], Limits(timeout=8, threads=1))
    # stopped in its first exercise's check: nothing was graded to the end
    assert result.status == "timeout" and result.status_text == "timed out"
    hung, rest = result.exercises
    assert hung.stopped and not hung.reached
    assert hung.message == (
        "the grader's checks timed out after 8 s of CPU time "
        "(while the grader's check called your `score_variance`)"
    )
    assert not rest.reached and result.cpu < 8 + 8 + 2


def test_an_exercise_deleted_after_its_check_is_checked_again_at_the_end(tmp_path):
    notebook = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    after = next(i for i, c in enumerate(notebook.cells) if c.source.startswith("check_score_variance"))
    notebook.cells.insert(after + 1, nbformat.v4.new_code_cell("del score_variance"))
    _write(tmp_path / "fay", notebook)
    (learner,) = discover(tmp_path)[0]
    result = run_notebook(learner, learner.submissions[0], Limits(timeout=60, threads=1))
    deleted, kept = result.exercises
    assert result.status_text == "graded" and kept.passed and not deleted.passed
    assert "`score_variance` was never defined: it was deleted or overwritten after" in deleted.message


def test_a_notebook_the_grader_failed_on_once_is_graded_again_from_scratch(tmp_path, monkeypatch):
    """A failure of the grader's own (here the SystemError CPython 3.11 can raise when two of the
    grader's threads build syntax trees at once, gh-106905) costs a second try, not the learner's points."""
    from attn_course.grading import tasks

    _write(tmp_path / "gil", nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4))
    (learner,) = discover(tmp_path)[0]
    tries: list[Limits] = []

    def failing_once(learner, submission, limits):
        tries.append(limits)
        if len(tries) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=58, after=56)")
        return run_notebook(learner, submission, limits)

    monkeypatch.setattr(tasks, "run_notebook", failing_once)
    result = tasks.grade_one(learner, learner.submissions[0], Limits(timeout=60, threads=1, zygote="factory"))
    assert result.status == "graded" and all(e.passed for e in result.exercises), result.problem
    assert [t.zygote for t in tries] == ["factory", None]  # the second in a kernel started afresh


def test_a_notebook_the_grader_fails_on_twice_is_recorded_as_the_graders_failure(tmp_path, monkeypatch):
    from attn_course.grading import tasks

    _write(tmp_path / "gil", nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4))
    (learner,) = discover(tmp_path)[0]

    def failing(learner, submission, limits):
        raise SystemError("AST constructor recursion depth mismatch (before=58, after=56)")

    monkeypatch.setattr(tasks, "run_notebook", failing)
    result = tasks.grade_one(learner, learner.submissions[0], Limits(timeout=60, threads=1))
    assert result.status == "grader_error" and not any(e.passed for e in result.exercises)
    assert result.problem == (
        "the grader failed on this notebook (SystemError: AST constructor recursion depth mismatch "
        "(before=58, after=56))"
    )
