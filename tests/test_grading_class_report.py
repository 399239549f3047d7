"""The class report (report.json, report.html) from a made-up class: shares, named mistakes, statuses."""

from __future__ import annotations

import base64
import json
import re

from attn_course.grading.class_report import mistake, report_data, write_class_report
from attn_course.grading.results import ExerciseResult, GradeReport, LearnerResult, NotebookResult

DK = (
    "Your attention_backward(q (2, 3, 6, 8), k (2, 3, 6, 8), v (2, 3, 6, 8), grad_out, is_causal={}) forgets "
    "the 1/√d scale in dK: dK = dSᵀ Q / √d.\nSecond line."
)
NAMES = ("softmax_backward", "attention_backward")


def _learner(name: str, softmax: str | None, attention: str | None, status: str = "graded") -> LearnerResult:
    def result(exercise: str, message: str | None) -> ExerciseResult:
        if message is None:
            return ExerciseResult.success(exercise, "ok")
        if message.startswith("not reached"):
            return ExerciseResult.not_reached(exercise, message)
        return ExerciseResult.failed(exercise, message)

    exercises = (result(NAMES[0], softmax), result(NAMES[1], attention))
    return LearnerResult(name, (NotebookResult("09_backward", status, "", exercises),))


def _class() -> GradeReport:
    learners = (
        _learner("ann", None, DK.format(False)),
        _learner("bob", None, DK.format(True)),  # the same slip met on another case
        _learner("<cy & dee>", "`softmax_backward` is not implemented yet: replace it", DK.format(False)),
        _learner("zoë", None, "`attention_backward` is not implemented yet: replace `raise`"),
        _learner("eve", None, "not reached: the notebook timed out after 9 s of CPU time", "timeout"),
    )
    return GradeReport(learners=learners, exercises=NAMES, maximum=2)


def test_mistakes_are_named_by_their_first_sentence_without_the_calls_arguments():
    assert mistake(DK.format(True)) == "Your attention_backward forgets the 1/√d scale in dK"
    assert (
        mistake("`x` is not implemented yet: replace `raise NotImplementedError`")
        == "`x` is not implemented yet"
    )
    assert mistake("") == "no message"


def test_the_report_counts_passes_and_groups_each_named_mistake(tmp_path):
    data = report_data(_class())
    softmax, attention = data["exercises"]
    assert (softmax["passed"], softmax["learners"], softmax["share"]) == (4, 5, 0.8)
    assert attention["passed"] == 0 and data["nobody_passed"] == ["attention_backward"]
    first = attention["mistakes"][0]
    assert first == {
        "mistake": "Your attention_backward forgets the 1/√d scale in dK",
        "count": 3,
        "learners": ["<cy & dee>", "ann", "bob"],
    }
    assert [m["count"] for m in attention["mistakes"]] == [3, 1, 1]
    assert data["histogram"] == [
        {"score": 0, "learners": 1},
        {"score": 1, "learners": 4},
        {"score": 2, "learners": 0},
    ]
    assert {c["learner"]: c["status"] for c in data["class"]}["eve"] == "partly graded (timed out)"


def test_the_html_page_is_self_contained_escaped_and_links_each_learners_feedback(tmp_path):
    as_json, as_html = write_class_report(_class(), tmp_path)
    assert json.loads(as_json.read_text(encoding="utf-8")) == report_data(_class())
    page = as_html.read_text(encoding="utf-8")
    assert "3 of 5: Your attention_backward forgets the 1/√d scale in dK" in page
    assert "Nobody passed: <code>attention_backward</code>" in page
    assert '<a href="feedback/%3Ccy%20%26%20dee%3E.md">&lt;cy &amp; dee&gt;</a>' in page
    assert '<a href="feedback/zo%C3%AB.md">zoë</a>' in page
    assert "<cy" not in page  # every learner-given text is escaped
    (png,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert base64.b64decode(png).startswith(b"\x89PNG")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from elsewhere
    write_class_report(_class(), tmp_path / ".." / tmp_path.name)
    assert as_html.read_text(encoding="utf-8") == page  # the same class gives the same bytes
