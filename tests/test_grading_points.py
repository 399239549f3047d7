"""The points file (`--points`): what each exercise is worth, as the instructor writes it."""

from __future__ import annotations

import pytest

from attn_course.grading.points import POINTS, PointsError, notebook_points, read_points


def test_a_points_file_sets_the_exercises_it_lists_and_leaves_the_rest_at_one(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("\ufeffexercise,points\n# the core of notebook 03\nattention, 2\n\nsample_next,0.5\n")
    points = read_points(path)
    assert points["attention"] == 2 and isinstance(points["attention"], int)
    assert points["sample_next"] == 0.5
    assert points["causal_mask"] == 1 and set(points) == set(POINTS)
    assert notebook_points("03_causal_masking", points) == 4
    assert notebook_points("03_causal_masking") == 3


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("attention,2\natention,1\n", "line 2: no exercise is named 'atention'"),
        ("attention,two\n", "line 1: 'two' is not a number of points"),
        ("attention,-1\n", "points must be a number ≥ 0"),
        ("attention,nan\n", "points must be a number ≥ 0"),
        ("attention\n", "expected `exercise,points`"),
        ("attention,1\nattention,2\n", "line 2: attention is listed twice"),
    ],
)
def test_a_wrong_points_file_is_refused_naming_its_line(tmp_path, text, phrase):
    path = tmp_path / "points.csv"
    path.write_text(text)
    with pytest.raises(PointsError, match=phrase):
        read_points(path)


def test_a_missing_points_file_is_refused(tmp_path):
    with pytest.raises(PointsError, match="cannot read the points file"):
        read_points(tmp_path / "nowhere.csv")
