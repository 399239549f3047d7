"""The roster (`--roster`): the class list, with the columns an LMS matches learners by."""

from __future__ import annotations

import pytest

from attn_course.grading.roster import Roster, RosterError, read_roster


def test_a_canvas_roster_keeps_its_columns_for_the_export(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(
        "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,learner\n"
        "Alice Liddell,101,s101,alice@uni,A,alice\n"
        '"Mo, Jr.",104,s104,mo@uni,B,mo\n'
    )
    roster = read_roster(path)
    assert roster.learners == ("alice", "mo")
    assert roster.columns == ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
    assert roster.identity("mo") == ("Mo, Jr.", "104", "s104", "mo@uni", "B")
    assert roster.identity("stranger") == ("", "", "", "", "")


def test_a_list_of_names_is_a_roster():
    assert Roster(("a",)).identity("a") == ()


def test_one_name_per_line(tmp_path):
    path = tmp_path / "roster.txt"
    path.write_text("alice\n\nmo\n")
    assert read_roster(path) == Roster(("alice", "mo"), (), ((), ()))


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("", "lists nobody"),
        ("alice\nalice\n", "line 2: alice is listed twice"),
        ("learner,ID\n,7\n", "line 2: no learner"),
    ],
)
def test_a_wrong_roster_is_refused_naming_its_line(tmp_path, text, phrase):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(RosterError, match=phrase):
        read_roster(path)
