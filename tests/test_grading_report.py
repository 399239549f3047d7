"""The gradebook and its LMS export, from made-up results: blank for no work, 0 for a real 0."""

from __future__ import annotations

import csv

from attn_course.grading.grader import absent_learner, with_points
from attn_course.grading.report import lms_rows, write_gradebook, write_lms
from attn_course.grading.results import ExerciseResult, GradeReport, LearnerResult, NotebookResult
from attn_course.grading.roster import Roster

M03 = ("causal_mask", "padding_mask", "attention")
M02 = ("score_variance", "scaled_dot_product_attention")
POINTS = {
    "causal_mask": 1,
    "padding_mask": 1,
    "attention": 2,
    "score_variance": 1,
    "scaled_dot_product_attention": 0.5,
}


def _notebook(stem: str, names: tuple[str, ...], status: str, passed: tuple[str, ...] = ()) -> NotebookResult:
    exercises = tuple(
        ExerciseResult.success(n, "ok") if n in passed else ExerciseResult.failed(n, "wrong") for n in names
    )
    return NotebookResult(stem, status, "" if status == "graded" else "why", exercises)


def _report() -> GradeReport:
    ada = LearnerResult(
        "ada",
        (
            _notebook("02_scaling", M02, "graded", M02),
            _notebook("03_causal_masking", M03, "graded", ("attention",)),
        ),
    )
    bo = LearnerResult(
        "bo", (_notebook("02_scaling", M02, "graded"), _notebook("03_causal_masking", M03, "misnamed"))
    )
    learners = (
        with_points(ada, POINTS),
        with_points(bo, POINTS),
        absent_learner("cy", ("02_scaling", "03_causal_masking")),
    )
    roster = Roster(
        ("ada", "bo", "cy"), ("Student", "SIS User ID"), (("Ada L.", "s1"), ("Bo", "s2"), ("Cy", "s3"))
    )
    return GradeReport(learners, M02 + M03, sum(POINTS.values()), roster=roster, points=POINTS)


def test_the_gradebook_has_each_notebooks_points_and_status_blank_where_nothing_was_graded(tmp_path):
    write_gradebook(_report(), tmp_path / "gradebook.csv")
    with (tmp_path / "gradebook.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.reader(file))
    assert rows == [
        ["learner", *M02, *M03, "02_scaling points", "02_scaling status", "03_causal_masking points",
         "03_causal_masking status", "total", "max", "status"],
        ["ada", "1", "0.5", "0", "0", "2", "1.5", "graded", "2", "graded", "3.5", "5.5", "graded"],
        ["bo", "0", "0", "", "", "", "0", "graded", "", "misnamed", "0", "5.5",
         "02_scaling: graded; 03_causal_masking: misnamed"],
        ["cy", "", "", "", "", "", "", "not handed in", "", "not handed in", "", "5.5", "not handed in"],
    ]  # fmt: skip


def test_the_lms_export_has_the_rosters_columns_then_one_column_per_notebook(tmp_path):
    report = _report()
    assert lms_rows(report) == [
        ["Student", "SIS User ID", "02_scaling", "03_causal_masking", "attn-course total"],
        ["Ada L.", "s1", "1.5", "2", "3.5"],
        ["Bo", "s2", "0", "", "0"],
        ["Cy", "s3", "", "", ""],
    ]
    write_lms(report, tmp_path / "lms.csv")
    assert (tmp_path / "lms.csv").read_bytes().startswith(b"Student,SIS User ID,02_scaling,")
    assert b"\r\nCy,s3,,,\r\n" in (tmp_path / "lms.csv").read_bytes()


def test_without_a_roster_the_lms_export_names_each_learner_by_folder():
    report = _report()
    rows = lms_rows(GradeReport(report.learners, report.exercises, report.maximum))
    assert [row[0] for row in rows] == ["Student", "ada", "bo", "cy"]


def test_the_html_feedback_is_the_markdowns_structure_escaped():
    from attn_course.grading.report import feedback_html

    markdown = (
        "# Feedback for <eve>\n\nScore: 1 / 2\n\n## 03_causal_masking.ipynb: 1 point(s)\n\n"
        "Status: graded.\n\n- `causal_mask` **not passed**: rows a < b are *wrong*:\n  second line\n"
        "- `attention` passed: ok\n"
    )
    page = feedback_html(markdown, "Feedback for <eve>")
    assert "<title>Feedback for &lt;eve&gt;</title>" in page and "<h1>Feedback for &lt;eve&gt;</h1>" in page
    assert (
        "<ul><li><code>causal_mask</code> <strong>not passed</strong>: rows a &lt; b are <em>wrong</em>:"
        "<br>second line</li><li><code>attention</code> passed: ok</li></ul>"
    ) in page
    assert "<p>Status: graded.</p>" in page and "<h2>03_causal_masking.ipynb: 1 point(s)</h2>" in page


def test_hand_points_add_a_column_per_question_to_the_gradebook_and_the_total(tmp_path):
    from dataclasses import replace

    from attn_course.grading.report import feedback_text, gradebook_rows

    report = replace(_report(), written={"03.1": {"ada": 1, "cy": 0.5}})
    rows = gradebook_rows(report)
    assert rows[0][-5:] == ["03_causal_masking status", "written 03.1", "total", "max", "status"]
    assert [row[-4:-1] for row in rows[1:]] == [["1", "4.5", "6.5"], ["", "0", "6.5"], ["0.5", "0.5", "6.5"]]
    assert lms_rows(report)[0][-2:] == ["written answers", "attn-course total"]
    assert lms_rows(report)[3] == ["Cy", "s3", "", "", "0.5", "0.5"]
    assert "Written answers, graded by hand: 1 point(s) (03.1: 1)." in feedback_text(
        report.learners[0], report.maximum, {"03.1": 1}
    )
