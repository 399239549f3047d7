"""Every learner's results as graded, kept beside the gradebook (`results.json`), so that a later run
can regrade one learner (`--only`) and rewrite the gradebook, feedback and report for the whole class.

What is kept is the grader's own result, before points, the roster and overrides are applied: those
are applied afresh on every run, from the files the instructor gives that run.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from attn_course.grading.discover import SubmissionsError
from attn_course.grading.results import ExerciseResult, LearnerResult, NotebookResult

RESULTS = "results.json"
FORMAT = 1
"""The version of results.json's layout."""


def write_results(learners: tuple[LearnerResult, ...], path: Path) -> None:
    """Write `learners` (as graded) to `path` as JSON."""
    data = {"format": FORMAT, "learners": [asdict(learner) for learner in learners]}
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def read_results(path: Path) -> tuple[LearnerResult, ...]:
    """The learners kept by `write_results`; SubmissionsError when there are none to read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
        return tuple(
            LearnerResult(
                learner["learner"],
                tuple(
                    NotebookResult(
                        **{k: v for k, v in notebook.items() if k != "exercises"},
                        exercises=tuple(ExerciseResult.from_dict(e) for e in notebook["exercises"]),
                    )
                    for notebook in learner["notebooks"]
                ),
                tuple(learner["problems"]),
            )
            for learner in data["learners"]
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SubmissionsError(
            f"cannot regrade into {path.parent}: no earlier results to keep ({path.name}: {error}); "
            "grade the whole class once first"
        ) from error
