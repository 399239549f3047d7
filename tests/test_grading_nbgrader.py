"""`attn-course export nbgrader` with real nbgrader: generate, autograde, same scores as `attn-course grade`.

Notebook 05 (one of the quickest), once per module, through nbgrader's whole workflow: generate and
release the assignment; a hostile class (a correct notebook, a wrong exercise, the course's reference
imported, a check replaced by the learner), each learner in a home of their own, fetches, solves and
submits through a local exchange; collect, autograde, generate_feedback, export. `attn-course
grade` grades the same notebooks: the scores are equal. The written
answers are manually graded cells: autograding leaves them to the instructor (0 points for an answer
cell left as released), so the autograded points stay the course's.

nbgrader's commands run in this process through its own command-line app (`_nbgrader`), the first
through a fresh interpreter as an instructor types it (`_nbgrader_cli`).
"""

from __future__ import annotations

import csv
import html
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attn_course.cli import main
from attn_course.grading.answers import written_answers
from attn_course.grading.grader import grade
from attn_course.grading.nbgrader_export import ANSWER_POINTS, export_nbgrader
from attn_course.grading.points import POINTS, notebook_points
from attn_course.reference import EXERCISES

pytest.importorskip("nbgrader", reason="nbgrader is a test dependency: pip install -e '.[dev]'")
pytestmark = pytest.mark.filterwarnings(  # nbgrader's autograde, in this process: its own ORM use
    "ignore:Object of type <Submitted:sqlalchemy.exc.SAWarning"
)

ROOT = Path(__file__).resolve().parents[1]
STEM = "05_rope"


def _nbgrader(course: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """`nbgrader ARGS` in `course` (or a learner's home), with `env` added to this environment.

    nbgrader's own command-line application, run in this process as `python -m nbgrader` runs it
    (`NbGraderApp` with these arguments, its configuration read from the working directory), and its
    instances cleared after: a fresh interpreter per command took 2.5 to 10 s of start-up, three
    quarters of the workflow's time without autograde. `_nbgrader_cli` runs the first one through the CLI.
    """
    from jupyter_core.application import NoStart
    from nbgrader.apps.nbgraderapp import NbGraderApp

    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    os.environ.update(env or {}, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    os.chdir(course)
    app = NbGraderApp.instance()
    try:
        app.initialize(list(args))
        app.start()
    except NoStart:  # what NbGraderApp raises once its subcommand's app has run
        pass
    except SystemExit as exit:
        assert not exit.code, f"nbgrader {' '.join(args)} exited {exit.code}"
    finally:
        if app.subapp is not None:
            type(app.subapp).clear_instance()
        NbGraderApp.clear_instance()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _nbgrader_cli(course: Path, *args: str) -> None:
    """nbgrader's CLI in a fresh interpreter, in `course`, as an instructor types it."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


Notebook = nbformat.NotebookNode
WRONG = ("return base ** (-two_i / d)", "return base ** (-two_i / (d - 1))")
"""rope_frequencies with the exponent over d - 1."""
TAMPER = """
import attn_course.checks

attn_course.checks.check_rope_frequencies = lambda candidate: "all good"


def check_rope_frequencies(candidate):
    return "all good"
"""


def _learner(
    student: nbformat.NotebookNode, source: nbformat.NotebookNode, case: str
) -> nbformat.NotebookNode:
    """The student notebook solved (from the source's solution cells), then one of the hostile cases."""
    notebook = nbformat.from_dict(student)
    for cell, solved in zip(notebook.cells, source.cells, strict=True):
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = solved.source
    exercise = next(c for c in notebook.cells if c.source.startswith("def rope_frequencies"))
    if case in ("wrong", "tamper"):
        assert WRONG[0] in exercise.source
        exercise.source = exercise.source.replace(*WRONG) + ("\n" + TAMPER if case == "tamper" else "")
    elif case == "reference":
        exercise.source = "from attn_course.reference import rope_frequencies"
    return notebook


CASES = ("full", "wrong", "reference", "tamper")


@pytest.fixture(scope="module")
def autograded(tmp_path_factory):
    """The hostile class, through nbgrader's whole workflow: release, each learner (a home of their
    own) fetching, solving and submitting through a local exchange, collect, autograde, feedback, export."""
    root = tmp_path_factory.mktemp("nbgrader")
    course = root / "course"
    assert main(["export", "nbgrader", str(course), "--solutions", str(ROOT / "solutions"),
                 "--notebooks", STEM]) == 0  # fmt: skip
    exchange = f"--Exchange.root={root / 'exchange'}"
    _nbgrader_cli(course, "generate_assignment", STEM)
    _nbgrader(course, "release_assignment", STEM, exchange)
    source = nbformat.read(course / "source" / STEM / f"{STEM}.ipynb", as_version=4)
    subs = root / "submissions"
    for learner in CASES:
        home = root / "homes" / learner
        home.mkdir(parents=True)
        env = {"HOME": str(home)}
        _nbgrader(home, "fetch_assignment", STEM, "--course", "attn-course", exchange, env=env)
        fetched = home / STEM / f"{STEM}.ipynb"
        student = nbformat.read(fetched, as_version=4)
        notebook = _learner(student, source, learner)
        (subs / learner).mkdir(parents=True)
        for path in (fetched, subs / learner / f"{STEM}.ipynb"):
            nbformat.write(notebook, path)
        # all learners are this test's user: each submits under their own id
        _nbgrader(home, "submit", STEM, "--course", "attn-course", f"--student={learner}", exchange, env=env)
    _nbgrader(course, "collect", STEM, exchange, "--CollectApp.check_owner=False")
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(CASES)
    _nbgrader(course, "autograde", STEM, "--create")
    _nbgrader(course, "generate_feedback", STEM)
    _nbgrader(course, "export")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grades = {
            learner: gradebook.find_submission_notebook(STEM, STEM, learner).grades for learner in CASES
        }
        scores = {
            learner: {g.name.removesuffix("-check"): g.score for g in found if g.name.endswith("-check")}
            for learner, found in grades.items()
        }
        answers = {
            learner: {g.name: (g.score, g.max_score) for g in found if g.name.startswith("answer-")}
            for learner, found in grades.items()
        }
    as_released = {
        f"answer-{n.replace('.', '-')}": (0.0, float(ANSWER_POINTS)) for n in _answer_labels(source)
    }
    assert all(found == as_released for found in answers.values())  # graded by hand, not by autograde
    return course, source, student, scores, grade(subs, root / "grades", jobs=2)


def _graded(report) -> list[tuple[str, str, str, list[str]]]:
    """What `attn-course grade` said of each notebook: (learner, status, problem, messages)."""
    return [(learner.learner, book.status, book.problem, [e.message[:300] for e in book.exercises])
            for learner in report.learners for book in learner.notebooks]  # fmt: skip


def test_exported_grades_and_feedback_say_what_attn_course_grade_says(autograded):
    course, _, _, _, report = autograded
    with (course / "grades.csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    exported = {row["student_id"]: float(row["raw_score"]) for row in rows}
    assert exported == {learner.learner: float(learner.total) for learner in report.learners}, _graded(report)
    # the same total out of the same maximum: the written answers add nothing until graded by hand
    assert {float(row["max_score"]) for row in rows} == {float(report.maximum)} == {notebook_points(STEM)}
    feedback = html.unescape((course / "feedback" / "reference" / STEM / f"{STEM}.html").read_text("utf-8"))
    assert "the course's reference implementation (attn_course.reference.rope_frequencies)" in feedback


def _answer_labels(notebook: nbformat.NotebookNode) -> list[str]:
    return [c.metadata["attn_course"]["answer"] for c in notebook.cells
            if "answer" in c.metadata.get("attn_course", {})]  # fmt: skip


def test_exercises_are_solution_cells_and_checks_locked_tests_with_the_course_points(autograded):
    _, source, _, _, _ = autograded
    meta = [c.metadata["nbgrader"] for c in source.cells if "nbgrader" in c.metadata]
    tests = [m for m in meta if m["grade"] and m["grade_id"].endswith("-check")]
    assert [m["grade_id"] for m in tests] == [f"{name}-check" for name in EXERCISES[STEM]]
    assert all(m["locked"] and not m["solution"] for m in tests)
    assert [m["points"] for m in tests] == [POINTS[name] for name in EXERCISES[STEM]]
    solutions = [m for m in meta if m["solution"] and m["grade_id"].endswith("-solution")]
    assert [m["grade_id"] for m in solutions] == [f"{name}-solution" for name in EXERCISES[STEM]]
    answers = [c.metadata["nbgrader"] for c in source.cells if "answer" in c.metadata.get("attn_course", {})]
    assert all(
        m["solution"] and m["grade"] and not m["locked"] and m["points"] == ANSWER_POINTS for m in answers
    )
    assert len(meta) == len(tests) + len(solutions) + 2 * len(answers)  # each answer's question: read-only
    assert len({m["grade_id"] for m in meta}) == len(meta)


def test_nbgrader_writes_the_courses_own_student_notebook(autograded):
    _, _, student, _, _ = autograded
    shipped = nbformat.read(ROOT / "notebooks" / f"{STEM}.ipynb", as_version=4)
    assert [c.source for c in student.cells] == [c.source for c in shipped.cells]
    assert "solutions/" not in student.cells[0].source  # the Colab badge opens the student notebook


def test_autograde_scores_the_hostile_class_as_attn_course_grade_does(autograded):
    course, _, _, scores, report = autograded
    ours = {learner.learner: {name: float(learner.score(name)) for name in EXERCISES[STEM]}
            for learner in report.learners}  # fmt: skip
    assert scores == ours, _graded(report)
    assert scores["full"] == {name: float(POINTS[name]) for name in EXERCISES[STEM]}
    assert sum(scores["full"].values()) == notebook_points(STEM)
    for case in ("wrong", "reference", "tamper"):  # no point for the reference or a replaced check
        assert scores[case]["rope_frequencies"] == 0.0, case
    assert scores["reference"]["apply_rope"] == float(POINTS["apply_rope"])


def test_the_autograded_check_cell_is_the_courses_with_the_checks_message(autograded):
    course, source, _, _, _ = autograded
    for case, says in (("reference", "course's reference implementation"), ("full", "rope_frequencies: ")):
        done = nbformat.read(course / "autograded" / case / STEM / f"{STEM}.ipynb", as_version=4)
        cell = next(
            c
            for c in done.cells
            if c.metadata.get("nbgrader", {}).get("grade_id") == "rope_frequencies-check"
        )
        assert cell.source == "check_rope_frequencies(rope_frequencies)"
        assert says in "".join(o.get("text", "") for o in cell.outputs), cell.outputs
        assert any(o.output_type == "error" for o in cell.outputs) == (case != "full")


def test_export_refuses_unknown_notebooks_and_missing_solutions(tmp_path, capsys):
    assert main(["export", "nbgrader", str(tmp_path / "c"), "--notebooks", "09_moe"]) == 2
    assert "'09_moe' is not a course notebook" in capsys.readouterr().err
    assert main(["export", "nbgrader", str(tmp_path / "c"), "--solutions", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert f"no solution notebooks in {tmp_path / 'none'}" in err and "--solutions CLONE/solutions" in err
    assert err.count("\n") == 1
    (tmp_path / "some").mkdir()
    (tmp_path / "some" / "02_scaling.ipynb").write_bytes(
        (ROOT / "solutions" / "02_scaling.ipynb").read_bytes()
    )
    assert main(["export", "nbgrader", str(tmp_path / "c"), "--solutions", str(tmp_path / "some")]) == 2
    assert "solution notebook(s) not found in" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="not a folder"):
        export_nbgrader(ROOT / "solutions", tmp_path / "file", [STEM])


def test_written_answers_are_manual_cells_that_keep_their_prompt(tmp_path):
    """Notebook 02's questions: read-only question cells, manually graded answer cells worth
    ANSWER_POINTS (0) each, so that nbgrader's total is `attn-course grade`'s; the answers are the
    ones `attn-course grade` collects, and nbgrader's student version of them is the course's own."""
    stem, course = "02_scaling", tmp_path / "course"
    done = export_nbgrader(ROOT / "solutions", course, [stem])
    _nbgrader(course, "generate_assignment", stem)
    source = nbformat.read(course / "source" / stem / f"{stem}.ipynb", as_version=4)
    released = nbformat.read(course / "release" / stem / f"{stem}.ipynb", as_version=4)
    labels = _answer_labels(source)
    assert done.answers == len(labels) >= 3
    for cell in source.cells:
        meta = cell.metadata.get("attn_course", {})
        if "answer" in meta:
            grade_id = f"answer-{meta['answer'].replace('.', '-')}"
            assert cell.metadata["nbgrader"] == {"grade": True, "grade_id": grade_id, "locked": False,
                                                 "points": ANSWER_POINTS, "schema_version": 3,
                                                 "solution": True, "task": False}  # fmt: skip
        elif "question" in meta:
            assert cell.metadata["nbgrader"]["locked"] and not cell.metadata["nbgrader"]["grade"]
    shipped = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    assert [c.source for c in released.cells] == [c.source for c in shipped.cells]
    points = [c.metadata["nbgrader"].get("points", 0) for c in released.cells if "nbgrader" in c.metadata]
    assert ANSWER_POINTS == 0 and sum(points) == notebook_points(stem)
    collected = written_answers(nbformat.writes(released).encode("utf-8"))  # as `attn-course grade` does
    assert sorted(collected) == labels
    ids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in released.cells]
    graded_by_hand = [grade_id for grade_id in ids if grade_id.startswith("answer-")]
    assert graded_by_hand == [f"answer-{label.replace('.', '-')}" for label in labels]
    export_nbgrader(ROOT / "solutions", tmp_path / "one", [stem], answer_points=1)
    source = nbformat.read(tmp_path / "one" / "source" / stem / f"{stem}.ipynb", as_version=4)
    points = [c.metadata["nbgrader"].get("points", 0) for c in source.cells if "nbgrader" in c.metadata]
    assert sum(points) == notebook_points(stem) + len(labels)  # as `grade --hand-points` counts them


def test_an_nbgrader_command_that_fails_fails_the_workflow_step_and_the_next_one_runs(tmp_path):
    """`_nbgrader` in this process: a command nbgrader refuses is an assertion, not a silent pass."""
    course = tmp_path / "course"
    assert main(["export", "nbgrader", str(course), "--solutions", str(ROOT / "solutions"),
                 "--notebooks", STEM]) == 0  # fmt: skip
    with pytest.raises(AssertionError, match="nbgrader release_assignment no_such_assignment .* exited 1"):
        _nbgrader(course, "release_assignment", "no_such_assignment", f"--Exchange.root={tmp_path / 'x'}")
    with pytest.raises(AssertionError, match="exited 1"):
        _nbgrader(course, "autograde", "no_such_assignment")
    _nbgrader(course, "generate_assignment", STEM)
    assert (course / "release" / STEM / f"{STEM}.ipynb").is_file()


def test_autograde_leaves_the_demonstrations_unrun_as_attn_course_grade_does(autograded):
    """The demonstrations nothing graded needs are skipped and say so; the tags the grader added to
    skip them are gone, and the scores are still `attn-course grade`'s (the test above)."""
    from attn_course.grading.execute import SKIPPED

    course = autograded[0]
    done = nbformat.read(course / "autograded" / "full" / STEM / f"{STEM}.ipynb", as_version=4)
    skipped = [
        c for c in done.cells if c.cell_type == "code" and c.outputs and c.outputs[0].get("text") == SKIPPED
    ]
    assert len(skipped) >= 10
    assert not any("skip-execution" in c.metadata.get("tags", []) for c in done.cells)
    assert not any("skipped" in c.metadata.get("attn_course", {}) for c in done.cells)
