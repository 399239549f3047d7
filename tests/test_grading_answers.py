"""The written answers collected per question across the class, from the instructor class's notebooks."""

from __future__ import annotations

import csv

import pytest
from instructor_class import copy_class, needs_class

from attn_course.grading.answers import (
    HandPointsError,
    collect_answers,
    read_hand_points,
    write_answers,
    written_answers,
)
from attn_course.grading.discover import discover


@needs_class
def test_answers_are_collected_per_question_with_colabs_cells_and_blank_prompts(tmp_path):
    subs = copy_class(tmp_path, ("alice", "bob", "dana", "kim", "nora"))
    learners, _ = discover(subs)
    answers = collect_answers(learners)
    assert list(answers) == ["03.1", "03.2", "03.3", "03.4", "07.1", "07.2", "07.3", "07.4"]
    first = dict(answers["03.1"])
    assert first["alice"].startswith("the lower triangle") and first["dana"]
    assert first["bob"] == ""  # the prompt as handed out: no answer
    assert "kim" in first  # Colab dropped the cells' metadata: found by the prompt's words
    assert "nora" not in first  # her 03 is a truncated download
    write_answers(answers, tmp_path)
    page = (tmp_path / "answers.html").read_text(encoding="utf-8")
    assert "<h2>Question 03.1</h2><p>2 of 4 answered.</p>" in page
    assert '<a href="feedback/alice.html">alice</a>' in page
    with (tmp_path / "answers.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["learner", "question", "answer", "points"]
    assert ["bob", "03.1", "", ""] in rows


def test_a_file_that_is_not_a_notebook_has_no_answers():
    assert written_answers(b"{truncated") == {}


def test_hand_points_entered_in_answers_csv_are_read_per_question(tmp_path):
    path = tmp_path / "answers.csv"
    path.write_text(
        'learner,question,answer,points\nalice,03.1,the lower triangle,1\nbob,03.1,,\ndana,03.2,"a, b",0.5\n'
    )
    assert read_hand_points(path) == {"03.1": {"alice": 1}, "03.2": {"dana": 0.5}}
    path.write_text("learner,question,answer,points\nalice,03.1,x,lots\n")
    with pytest.raises(HandPointsError, match="line 2: 'lots' is not a number"):
        read_hand_points(path)
    path.write_text("alice,03.1,x,1\n")
    with pytest.raises(HandPointsError, match="the first line must be"):
        read_hand_points(path)
