"""The results' words: a notebook's status as the gradebook, the report and the feedback say it."""

from __future__ import annotations

from attn_course.grading.results import ExerciseResult, LearnerResult, NotebookResult

HUNG = (
    "the grader's checks timed out after 5 s of CPU time (while the grader's check called your `sample_next`)"
)


def _notebook(status: str, *exercises: ExerciseResult) -> NotebookResult:
    return NotebookResult("07_kv_cache", status, "stopped" if status != "graded" else "", exercises)


def test_a_notebook_stopped_in_its_last_check_is_partly_graded_not_graded():
    hung = _notebook(
        "timeout",
        ExerciseResult.success("KVCache", "ok"),
        ExerciseResult.stopped_in_check("sample_next", HUNG),
    )
    assert hung.reached == 1
    assert hung.status_text == "partly graded (timed out)"
    assert LearnerResult("jonas", (hung,)).status_text == "partly graded (timed out)"
    assert hung.exercises[1].message == HUNG and not hung.exercises[1].reached


def test_a_notebook_stopped_after_every_check_finished_is_graded():
    late = _notebook(
        "timeout", ExerciseResult.success("KVCache", "ok"), ExerciseResult.failed("sample_next", "wrong")
    )
    assert late.status_text == "graded"


def test_a_notebook_stopped_in_its_first_check_timed_out():
    first = _notebook(
        "timeout",
        ExerciseResult.stopped_in_check("KVCache", HUNG),
        ExerciseResult.not_reached("sample_next", "x"),
    )
    assert first.reached == 0 and first.status_text == "timed out"
