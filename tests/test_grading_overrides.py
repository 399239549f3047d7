"""The overrides file (`--overrides`): points and a note an instructor sets for one learner's exercise."""

from __future__ import annotations

import pytest

from attn_course.grading.overrides import Override, OverridesError, apply_overrides, read_overrides, unused
from attn_course.grading.report import feedback_text
from attn_course.grading.results import ExerciseResult, LearnerResult, NotebookResult

HEADER = "learner,exercise,points,note\n"


def _lena(status: str = "graded") -> LearnerResult:
    exercises = (ExerciseResult.failed("causal_mask", "inverted"), ExerciseResult.success("attention", "ok"))
    return LearnerResult("lena", (NotebookResult("03_causal_masking", status, "", exercises),))


def test_an_override_sets_the_points_and_the_feedback_shows_its_note(tmp_path):
    path = tmp_path / "overrides.csv"
    path.write_text(HEADER + 'lena,causal_mask,0.5,"Right idea, sent by e-mail"\nmo,attention,1,\n')
    overrides = read_overrides(path)
    assert overrides == (
        Override("lena", "causal_mask", 0.5, "Right idea, sent by e-mail"),
        Override("mo", "attention", 1, "set by your instructor"),
    )
    lena = apply_overrides(_lena(), overrides)
    assert lena.total == 1.5 and lena.score("causal_mask") == 0.5
    text = feedback_text(lena, 2)
    assert "- `causal_mask` 0.5 point(s), set by your instructor: Right idea, sent by e-mail" in text
    assert "- `attention` passed: ok" in text
    assert unused(overrides, (lena,)) == (
        "overrides: mo's attention is not in this gradebook (no such learner or notebook)",
    )


def test_an_override_gives_points_to_a_notebook_with_no_work_graded():
    lena = apply_overrides(_lena("misnamed"), (Override("lena", "attention", 1, "renamed by hand"),))
    notebook = lena.notebooks[0]
    assert notebook.subtotal == 1 and lena.graded_score("attention") == 1
    assert "- `attention` 1 point(s), set by your instructor: renamed by hand" in feedback_text(lena, 2)


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("lena,attention,1,x\n", "the first line must be the header"),
        (HEADER + "lena,atention,1,x\n", "line 2: expected a learner and an exercise NAME"),
        (HEADER + "lena,attention,many,x\n", "line 2: 'many' is not a number of points"),
        (HEADER + "lena,attention,-2,x\n", "points must be a number ≥ 0"),
        (HEADER + "lena,attention,1,x\nlena,attention,0,y\n", "line 3: lena's attention is overridden twice"),
    ],
)
def test_a_wrong_overrides_file_is_refused_naming_its_line(tmp_path, text, phrase):
    path = tmp_path / "overrides.csv"
    path.write_text(text)
    with pytest.raises(OverridesError, match=phrase):
        read_overrides(path)
