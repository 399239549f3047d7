"""The class report (report.json, report.html) from a made-up class: paperwork apart from mistakes,
shares over those who handed in, each mistake named whole and grouped across exercises."""

from __future__ import annotations

import base64
import json
import re

from attn_course.grading.class_report import mistake, report_data, report_html, write_class_report
from attn_course.grading.results import ExerciseResult, GradeReport, LearnerResult, NotebookResult

DK = (
    "Your attention_backward(q (2, 3, 6, 8), k (2, 3, 6, 8), v (2, 3, 6, 8), grad_out, is_causal={}) forgets "
    "the 1/√d scale in dK: dK = dSᵀ Q / √d.\nSecond line."
)
ROWS = "The rows of the result sum to 0.5, not 1: normalise along dim=-1."
NAMES = ("softmax_backward", "attention_backward")


def _learner(name: str, softmax: str | None, attention: str | None, status: str = "graded") -> LearnerResult:
    def result(exercise: str, message: str | None) -> ExerciseResult:
        if message is None:
            return ExerciseResult.success(exercise, "ok")
        if message.startswith("not reached"):
            return ExerciseResult.not_reached(exercise, message)
        if message.startswith("through "):
            return ExerciseResult.success(exercise, message, upstream=message.split()[1])
        return ExerciseResult.failed(exercise, message)

    exercises = (result(NAMES[0], softmax), result(NAMES[1], attention))
    seconds, cpu = (12.34, 9.87) if status != "missing" else (0.0, 0.0)
    return LearnerResult(name, (NotebookResult("09_backward", status, "", exercises, seconds, cpu),))


def _class() -> GradeReport:
    learners = (
        _learner("ann", None, DK.format(False)),
        _learner("bob", None, DK.format(True)),  # the same slip met on another case: another message
        _learner("<cy & dee>", "`softmax_backward` is not implemented yet: replace it", DK.format(False)),
        _learner("zoë", None, "`attention_backward` is not implemented yet: replace `raise`"),
        _learner("eve", None, "not reached: the notebook timed out after 9 s of CPU time", "timeout"),
        _learner(
            "fay", "09_backward.ipynb was not handed in", "09_backward.ipynb was not handed in", "missing"
        ),
        _learner("hal", ROWS, ROWS),  # one message met in two exercises: one mistake
        _learner("ivy", None, "through softmax_backward: right with the course's softmax_backward"),
    )
    return GradeReport(learners=learners, exercises=NAMES, maximum=2)


def test_mistakes_are_named_whole_with_their_numbers():
    assert mistake(DK.format(True)) == " ".join(DK.format(True).split())
    assert "is_causal=True" in mistake(DK.format(True)) and "Second line." in mistake(DK.format(True))
    assert mistake("") == "no message"


def test_paperwork_has_its_own_row_and_shares_count_those_who_handed_in():
    data = report_data(_class())
    (notebook,) = data["notebooks"]
    assert notebook == {
        "notebook": "09_backward", "learners": 8, "handed in": 7, "not handed in": 1,
        "misnamed or in a subfolder": 0, "not a notebook": 0, "timed out": 1,
        "out of memory or crashed": 0, "grader error": 0,
    }  # fmt: skip
    softmax, attention = data["exercises"]
    assert (softmax["passed"], softmax["handed_in"], softmax["not_attempted"]) == (5, 7, 1)
    assert softmax["share"] == 5 / 7  # fay handed nothing in: not a failure
    assert (attention["passed"], attention["not_attempted"], attention["through_earlier"]) == (1, 1, 1)
    assert data["nobody_passed"] == [] and data["handed_in"] == 7


def test_each_mistake_is_grouped_by_its_whole_message_across_exercises_with_who_made_it():
    data = report_data(_class())
    texts = [m["mistake"] for m in data["mistakes"]]
    assert texts == [mistake(ROWS), mistake(DK.format(False)), mistake(DK.format(True))]  # most made first
    rows, first, _ = data["mistakes"]
    assert (first["count"], first["learners"], first["exercises"]) == (
        2,
        ["<cy & dee>", "ann"],
        ["attention_backward"],
    )
    assert rows["exercises"] == list(NAMES) and rows["learners"] == ["hal"] and rows["count"] == 2
    assert rows["made_by"][0] == {
        "learner": "hal",
        "exercise": "softmax_backward",
        "feedback": "feedback/hal.html",
        "message": ROWS,
    }
    assert rows["finding"] == "" and rows["messages"] == [ROWS]
    everything = " ".join(texts)
    for paperwork in ("not implemented yet", "not reached", "not handed in", "right with the course"):
        assert paperwork not in everything
    assert {c["learner"]: c["status"] for c in data["class"]}["eve"] == "partly graded (timed out)"
    eve = next(c for c in data["class"] if c["learner"] == "eve")
    assert eve["notebooks"] == [
        {
            "notebook": "09_backward",
            "status": "partly graded (timed out)",
            "points": 1,
            "seconds": 12.3,
            "cpu": 9.9,
        }
    ]
    assert data["histogram"] == [
        {"score": 0, "learners": 3},  # cy & dee, fay, hal
        {"score": 1, "learners": 4},
        {"score": 2, "learners": 1},  # ivy: right through an earlier exercise
    ]


TOP_LEFT = "is aligned top-left: query i sits at position i + (t_k - t_q)."


def test_a_known_mistake_is_one_idea_across_exercises_whatever_the_call():
    """The check's finding and slips group what the messages word differently: the same slip met in
    two exercises on two calls is one mistake; a finding that is not a known mistake keeps its message."""

    def learner(name: str, *results: ExerciseResult) -> LearnerResult:
        return LearnerResult(name, (NotebookResult("03_causal_masking", "graded", "", results),))

    def top_left(exercise: str, call: str) -> ExerciseResult:
        message = f"Your {exercise}({call}) {TOP_LEFT}\n(Called as {call}.)"
        return ExerciseResult.failed(exercise, message, "known-mistake", (TOP_LEFT,))

    property_message = "Your attention(...) rows sum to 0.5, not 1."
    report = GradeReport(
        learners=(
            learner("ann", top_left("causal_mask", "3, 5"), ExerciseResult.success("attention", "ok")),
            learner("bob", ExerciseResult.success("causal_mask", "ok"), top_left("attention", "q (2, 7)")),
            learner(
                "cy",
                ExerciseResult.success("causal_mask", "ok"),
                ExerciseResult.failed("attention", property_message, "property"),
            ),
            learner(
                "dee", ExerciseResult.success("causal_mask", "ok"), ExerciseResult.failed("attention", "Odd.")
            ),
        ),
        exercises=("causal_mask", "attention"),
        maximum=2,
    )
    data = report_data(report)
    first, *others = data["mistakes"]
    assert (first["mistake"], first["finding"], first["count"]) == (TOP_LEFT, "known-mistake", 2)
    assert first["exercises"] == ["causal_mask", "attention"] and first["learners"] == ["ann", "bob"]
    assert len(first["messages"]) == 2 and all(TOP_LEFT in m for m in first["messages"])
    assert [(m["mistake"], m["finding"]) for m in others] == [("Odd.", ""), (property_message, "property")]
    page = report_html(data)
    assert f'<td>2</td><td>{TOP_LEFT} <span class="muted">(known-mistake)</span>' in page
    assert "<summary>as the checks said it (2)</summary>" in page
    assert '<a href="feedback/bob.html">bob</a> <span class="muted">(attention)</span>' in page


def test_the_html_page_is_self_contained_escaped_and_links_each_learners_feedback(tmp_path):
    as_json, as_html = write_class_report(_class(), tmp_path)
    assert json.loads(as_json.read_text(encoding="utf-8")) == report_data(_class())
    page = as_html.read_text(encoding="utf-8")
    assert "<td>2</td><td>Your attention_backward(q (2, 3, 6, 8)" in page
    assert "is_causal=False) forgets the 1/√d scale in dK: dK = dSᵀ Q / √d. Second line.</td>" in page
    assert "5 of 7 who handed it in" in page and "1 not attempted" in page
    assert "<th>not handed in</th>" in page
    assert "09_backward: 12.3 s, 9.9 s CPU" in page
    assert '<a href="feedback/%3Ccy%20%26%20dee%3E.html">&lt;cy &amp; dee&gt;</a>' in page
    assert '<a href="feedback/zo%C3%AB.html">zoë</a>' in page
    assert (
        '<a href="feedback/hal.html">hal</a> <span class="muted">(softmax_backward)</span>, '
        '<a href="feedback/hal.html">hal</a> <span class="muted">(attention_backward)</span>'
    ) in page
    assert "<cy" not in page  # every learner-given text is escaped
    (png,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert base64.b64decode(png).startswith(b"\x89PNG")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from elsewhere
    write_class_report(_class(), tmp_path / ".." / tmp_path.name)
    assert as_html.read_text(encoding="utf-8") == page  # the same class gives the same bytes
