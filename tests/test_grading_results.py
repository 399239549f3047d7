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


def test_a_findings_idea_survives_results_json_and_a_dask_worker(tmp_path):
    """The check's finding and slips go into results.json (for --only) and over Dask as they were."""
    from attn_course.grading.dask_runner import result_from_bytes, result_to_bytes
    from attn_course.grading.store import read_results, write_results

    wrong = ExerciseResult.failed(
        "sample_next", "Your sample_next(...) ignores top_k.", "known-mistake", ("a", "b")
    )
    notebook = _notebook("graded", ExerciseResult.success("KVCache", "ok"), wrong)
    assert result_from_bytes(result_to_bytes(notebook)) == notebook
    write_results((LearnerResult("ann", (notebook,)),), tmp_path / "results.json")
    ((kept,),) = [learner.notebooks for learner in read_results(tmp_path / "results.json")]
    assert kept == notebook and kept.exercises[1].slips == ("a", "b")
