"""`attn-course check`: a learner's notebooks run and graded as the grader will, before handing in."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attn_course.cli import main
from attn_course.grading.points import notebook_points
from attn_course.grading.results import ExerciseResult, NotebookResult
from attn_course.grading.selfcheck import report_text
from attn_course.tooling.repository import install_requirement

ROOT = Path(__file__).resolve().parents[1]
STEM = "02_scaling"


def test_a_finished_notebook_passes_and_exits_zero(tmp_path, capsys):
    mine = tmp_path / "my work" / f"{STEM}.ipynb"
    mine.parent.mkdir()
    shutil.copyfile(ROOT / "solutions" / f"{STEM}.ipynb", mine)
    before = mine.read_bytes()
    assert main(["check", str(mine)]) == 0
    out = capsys.readouterr().out
    assert f"{mine}: 2 / 2 point(s)" in out
    assert "score_variance: passed" in out and "scaled_dot_product_attention: passed" in out
    assert "ready to hand in" in out
    assert mine.read_bytes() == before and sorted(p.name for p in mine.parent.iterdir()) == [mine.name]


def test_an_unfinished_notebook_gets_each_checks_message_and_exits_one(capsys):
    shipped = ROOT / "notebooks" / f"{STEM}.ipynb"
    assert main(["check", str(shipped), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert f"{shipped}: 0 / 2 point(s)" in out
    assert "score_variance: NOT PASSED: `score_variance` is not implemented yet" in out
    sdpa = "scaled_dot_product_attention"
    assert f"{sdpa}: NOT PASSED: `{sdpa}` is not implemented yet" in out
    assert "Not every exercise passes." in out


def test_bad_paths_and_names_exit_two_before_anything_runs(tmp_path, capsys):
    assert main(["check", str(tmp_path / "02_scaling.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "homework.ipynb").write_text("{}", encoding="utf-8")
    assert main(["check", str(tmp_path / "homework.ipynb")]) == 2
    assert "'homework.ipynb' is not a course notebook" in capsys.readouterr().err
    assert main(["check", str(tmp_path)]) == 2
    assert "is not a notebook file" in capsys.readouterr().err


def test_a_malformed_notebook_is_reported_not_run(tmp_path, capsys):
    broken = tmp_path / f"{STEM}.ipynb"
    broken.write_text('{"cells": [', encoding="utf-8")
    assert main(["check", str(broken)]) == 1
    assert "not graded: 02_scaling.ipynb: the file is not a notebook" in capsys.readouterr().out


def test_the_instructors_guides_github_classroom_workflow_checks_each_notebook_for_its_points():
    yaml = pytest.importorskip("yaml")
    guide = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    section = guide.split("## GitHub Classroom", 1)[1]
    workflow = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    steps = workflow["jobs"]["run-autograding-tests"]["steps"]
    graders = [s for s in steps if s.get("uses", "").startswith("classroom-resources/autograding-command")]
    reporter = next(s for s in steps if s.get("uses", "").endswith("autograding-grading-reporter@v1"))
    assert graders
    for step in graders:
        stem = step["with"]["test-name"]
        assert step["with"]["command"] == f"attn-course check {stem}.ipynb"
        assert step["with"]["max-score"] == notebook_points(stem)
        assert install_requirement() in step["with"]["setup-command"]
        assert (
            reporter["env"][f"{step['id'].upper()}_RESULTS"]
            == f"${{{{ steps.{step['id']}.outputs.result }}}}"
        )
    assert reporter["with"]["runners"].split(",") == [step["id"] for step in graders]


def test_a_notebook_that_stops_after_its_checks_reports_what_was_checked():
    exercises = (
        ExerciseResult.success("score_variance", "ok"),
        ExerciseResult.not_reached("scaled_dot_product_attention", "not reached: it stopped"),
    )
    stopped = "the notebook timed out after 9 s of CPU time, in the cell under *Look*"
    text = report_text([Path("02_scaling.ipynb")], (NotebookResult(STEM, "timeout", stopped, exercises),))
    assert "02_scaling.ipynb: 1 / 2 point(s)" in text
    assert f"  stopped (partly graded (timed out)): {stopped}" in text
    assert "  score_variance: passed" in text
    assert "  scaled_dot_product_attention: NOT REACHED (the notebook stopped before its check)" in text
