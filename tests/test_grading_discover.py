"""The pure parts of grading: points, recognising notebooks, what is wrong with a folder, the report."""

from __future__ import annotations

import nbformat
import pytest

from attn_course.grading.discover import (
    SubmissionsError,
    discover,
    find_learner,
    looks_like,
    notebook_problem,
)
from attn_course.grading.execute import Limits, _describe_cell, defining_cells, kernel_env
from attn_course.grading.points import POINTS, notebook_points
from attn_course.grading.report import feedback_text
from attn_course.grading.results import ExerciseResult, LearnerResult, NotebookResult
from attn_course.reference import EXERCISES


def test_every_exercise_has_points_and_notebooks_sum_them():
    assert set(POINTS) == {name for names in EXERCISES.values() for name in names}
    assert all(points == 1 for points in POINTS.values())
    assert notebook_points("02_scaling") == 2


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (b"", "empty"),
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "no cells"),
        (b'{"cells": "x", "x": "\xff"}', "not UTF-8"),
        (b'{"cells": [{"cell_type": "x"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "valid"),
    ],
)
def test_invalid_notebooks_are_named(data, phrase):
    assert phrase in notebook_problem(data)


def test_a_valid_notebook_has_no_problem():
    assert notebook_problem(nbformat.writes(nbformat.v4.new_notebook()).encode()) == ""


def test_a_folder_reports_unknown_names_and_reads_known_ones(tmp_path):
    folder = tmp_path / "Zoë Ångström"
    folder.mkdir()
    (folder / "02_scaling.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()), encoding="utf-8")
    (folder / "my copy.ipynb").write_text("{}", encoding="utf-8")
    (folder / "data.csv").write_text("1,2", encoding="utf-8")
    learner = find_learner(folder)
    assert [s.stem for s in learner.submissions] == ["02_scaling"]
    assert learner.submissions[0].problem == ""
    assert len(learner.problems) == 1
    assert "`my copy.ipynb` is not a course notebook name" in learner.problems[0]


def test_misnamed_notebooks_and_notebooks_in_subfolders_are_found(tmp_path):
    empty = nbformat.writes(nbformat.v4.new_notebook())
    folder = tmp_path / "ann"
    (folder / "work" / "week 2").mkdir(parents=True)
    (folder / "01_dot_product_attention.ipynb").write_text(empty, encoding="utf-8")
    (folder / "Copy of 01_dot_product_attention.ipynb").write_text(empty, encoding="utf-8")
    (folder / "02-Scaling (1).ipynb").write_text(empty, encoding="utf-8")
    (folder / "work" / "week 2" / "03_causal_masking.ipynb").write_text(empty, encoding="utf-8")
    (folder / "work" / "notes.ipynb").write_text(empty, encoding="utf-8")
    learner = find_learner(folder)
    assert [s.stem for s in learner.submissions] == ["01_dot_product_attention"]
    assert learner.misplaced == (
        ("02_scaling", "02-Scaling (1).ipynb", "misnamed"),
        ("03_causal_masking", "work/week 2/03_causal_masking.ipynb", "subfolder"),
    )
    assert learner.problems == (  # a misnamed copy of a notebook handed in is not graded, and said so
        "`Copy of 01_dot_product_attention.ipynb` is not a course notebook name: "
        "01_dot_product_attention.ipynb was handed in too, and only it is graded",
    )
    assert looks_like("scaling.ipynb") == "02_scaling" and looks_like("rescaling.ipynb") == ""


def test_discover_sorts_learners_and_reports_stray_files(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    learners, problems = discover(tmp_path)
    assert [learner.name for learner in learners] == ["a", "b", "c"]
    assert all("the folder is empty" in learner.problems[0] for learner in learners)
    assert problems == [f"`notes.txt` at the top of {tmp_path.name} is not a learner folder and was skipped"]
    with pytest.raises(SubmissionsError, match="is not a folder"):
        discover(tmp_path / "notes.txt")


def test_defining_cells_finds_def_class_assignment_and_import():
    notebook = nbformat.v4.new_notebook()
    sources = ["x = 1", "def f(a):\n    return a", "f = g", "from m import f", "class F:\n    pass", "f(2)"]
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    assert defining_cells(notebook, "f") == [1, 2, 3]
    assert defining_cells(notebook, "F") == [4]


def test_feedback_lists_each_exercise_and_never_the_code():
    notebook = NotebookResult(
        "02_scaling",
        "graded",
        "",
        (
            ExerciseResult.success("score_variance", "all good"),
            ExerciseResult.failed("scaled_dot_product_attention", "is wrong:\nline two"),
        ),
    )
    text = feedback_text(LearnerResult("ann", (notebook,), ("the folder holds no course notebook",)), 2)
    assert "Score: 1 / 2" in text
    assert "- `score_variance` passed: all good" in text
    assert "- `scaled_dot_product_attention` **not passed**: is wrong:\n  line two" in text
    assert "- the folder holds no course notebook" in text


def test_feedback_of_a_notebook_not_graded_says_so_in_words():
    exercises = (ExerciseResult.not_reached("score_variance", "not reached: the notebook timed out"),)
    notebook = NotebookResult("02_scaling", "timeout", "the notebook timed out", exercises)
    text = feedback_text(LearnerResult("ann", (notebook,), ()), 2)
    assert "Status: timed out." in text
    assert "**Not graded**: the notebook timed out." in text
    assert "- `score_variance` **not graded**: 0 points" in text
    assert text.isascii()  # no emoji, which show as empty boxes without an emoji font


def test_a_notebook_stopped_after_some_checks_is_partly_graded_and_keeps_their_points():
    exercises = (
        ExerciseResult.success("score_variance", "all good"),
        ExerciseResult.not_reached("scaled_dot_product_attention", "not reached: it stopped"),
    )
    notebook = NotebookResult(
        "02_scaling", "crashed", "the kernel died while running the cell under *X*", exercises
    )
    learner = LearnerResult("ann", (notebook,), ())
    assert (notebook.status_text, learner.status_text, learner.total) == ("partly graded (crashed)",) * 2 + (
        1,
    )
    text = feedback_text(learner, 2)
    assert "**Stopped**: the kernel died while running the cell under *X*." in text
    assert "- `score_variance` passed: all good" in text
    assert "- `scaled_dot_product_attention` **not reached**: 0 points" in text


def test_cells_are_named_by_the_heading_above_them_never_by_a_number():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [code("# @title Setup\nimport x"), code("y = 1"),
                      md("# 09\n\n## 6 · **Train** with `it`"),
                      md("No heading."), code("train()"), code("plot()")]  # fmt: skip
    names = [_describe_cell(i, notebook) for i in (0, 1, 4, 5)]
    assert names == [
        "the cell that starts `@title Setup`",
        "the second code cell of the notebook, above its first heading",
        "the cell under *6 · Train with it*",
        "the second code cell under *6 · Train with it*",
    ]


def test_kernels_grade_on_the_cpu_with_the_threads_they_are_given():
    env = kernel_env(Limits(threads=1))
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["OMP_NUM_THREADS"] == "1"


def test_the_time_limit_is_cpu_time_per_thread_with_a_wall_clock_backstop():
    assert (Limits(timeout=10, threads=1).cpu_limit, Limits(timeout=10, threads=4).cpu_limit) == (10, 40)
    assert Limits(timeout=10).wall_limit == 50 and Limits(timeout=10, wall=12).wall_limit == 12


def test_kernels_run_notebooks_at_their_reduced_budgets(monkeypatch):
    monkeypatch.delenv("ATTN_COURSE_QUICK", raising=False)  # the test suite itself sets it
    assert kernel_env(Limits(threads=1))["ATTN_COURSE_QUICK"] == "1"
