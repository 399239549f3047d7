"""Export the course as an nbgrader course: one assignment per notebook, checks as autograder tests.

`attn-course export nbgrader COURSE_DIR` writes `COURSE_DIR/source/<stem>/<stem>.ipynb` from each
solution notebook and `COURSE_DIR/nbgrader_config.py`. In each notebook, the cell that defines an
exercise becomes an nbgrader solution cell (its `### BEGIN SOLUTION` region is the one
`attn-course release` stubs, and the config makes nbgrader write the same stub), and the exercise's
check cell (`check_NAME(NAME)`) becomes a locked autograder test worth the course's points
(`points.POINTS`). nbgrader then generates the student version, collects and autogrades as usual,
except that the config makes autograde grade each check cell with the course's own grader
(`nbgrader_autograde`): the checks imported afresh, the reference and tampering refused, exactly as
`attn-course grade` does, so the scores are the same.

The written questions (`attn_course.questions`) are collected for the instructor: each question
cell becomes a read-only cell and the learner's answer cell after it a manually graded answer, which
instructors read and comment on in formgrader, worth `ANSWER_POINTS` (0) unless the export is told
otherwise (`answer_points`, `--answer-points`). So nbgrader's total is the course's points, the
total `attn-course grade` gives (which collects the same answers in answers.html and answers.csv,
and adds hand points only where the instructor enters them, `--hand-points`, 1 point an answer:
export with `--answer-points 1` to grade them the same way in formgrader). The answers are
formative: each notebook shows its own answer to every question right below it. The config keeps
an answer cell's prompt in nbgrader's student version, as `attn-course release` does.

>>> export_nbgrader(Path("solutions"), Path("course"))  # doctest: +SKIP
NbgraderExport(course=PosixPath('course'), assignments=(...), tests=22, answers=...)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attn_course import __version__
from attn_course.grading.discover import SubmissionsError, course_notebooks
from attn_course.grading.execute import defining_cells
from attn_course.grading.points import POINTS
from attn_course.questions import answer_cells, question_label
from attn_course.reference import EXERCISES
from attn_course.tooling.release import BEGIN, CODE_STUB, MARKDOWN_STUB, clean, with_header
from attn_course.tooling.repository import REPOSITORY

SCHEMA_VERSION = 3
"""nbgrader's cell metadata schema."""
CONFIG = "nbgrader_config.py"

CONFIG_TEXT = """\
# Written by `attn-course export nbgrader` (attn-course {version}). Run nbgrader from this folder.
import os

c = get_config()  # noqa: F821  (nbgrader defines it)
c.CourseDirectory.course_id = "attn-course"
c.CourseDirectory.assignment_id = ""
# The stubs `attn-course release` writes, so that nbgrader's student notebooks are the course's own.
c.ClearSolutions.code_stub = {{"python": {code_stub!r}}}
c.ClearSolutions.text_stub = {text_stub!r}
# Each autograded cell may run as long as `attn-course grade --timeout` allows by default.
c.Execute.timeout = {timeout}
c.Execute.interrupt_on_timeout = True
# Grade as `attn-course grade` does: notebooks that train or measure use their reduced budgets,
# Triton kernels run through Triton's interpreter, and kernels see no GPU (the same scores on every
# machine). Kernels started by nbgrader inherit this environment.
os.environ.update({env!r})

# Written answers are manually graded answer cells. nbgrader would replace such a cell by its text
# stub; keep the course's prompt ("**Your answer (NN.K):** ..."), as `attn-course release` does.
from nbgrader.converters import GenerateAssignment  # noqa: E402
from nbgrader.preprocessors import ClearSolutions  # noqa: E402


class KeepAnswerPrompts(ClearSolutions):  # ClearSolutions, except for the course's answer cells

    def preprocess_cell(self, cell, resources, index):
        if "answer" in cell.metadata.get("attn_course", {{}}):
            return cell, resources
        return super().preprocess_cell(cell, resources, index)


c.GenerateAssignment.preprocessors = [
    KeepAnswerPrompts if step is ClearSolutions else step
    for step in GenerateAssignment.preprocessors.default()
]

# Autograde as `attn-course grade` does: each check cell runs the course's own checks, imported
# afresh, and the reference and tampering score zero (attn_course.grading.nbgrader_autograde).
from nbgrader.converters import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402

from attn_course.grading.nbgrader_autograde import CourseChecks, CourseVerdicts  # noqa: E402

c.Autograde.autograde_preprocessors = [
    found
    for step in Autograde.autograde_preprocessors.default()
    for found in ((CourseChecks, Execute, CourseVerdicts) if step is Execute else (step,))
]
"""

ANSWER_POINTS = 0
"""Points of each written answer in formgrader by default (not part of `points.POINTS`): none, so
that nbgrader's total is `attn-course grade`'s. The notebooks show their own answers below each
question: the written answers are for the instructor to read, and points for them a choice."""

GRADING_ENV = {"ATTN_COURSE_QUICK": "1", "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
"""What the grader's kernels set (see `execute.kernel_env`) and nbgrader's kernels get too."""


class ExportError(SubmissionsError):
    """A notebook or course folder the export cannot use; the message names it."""


@dataclass(frozen=True)
class NbgraderExport:
    """What `export_nbgrader` wrote."""

    course: Path
    """The nbgrader course folder."""
    assignments: tuple[str, ...]
    """One assignment per notebook, named by its stem (`source/<stem>/<stem>.ipynb`)."""
    tests: int
    """Autograder test cells written, one per exercise."""
    answers: int = 0
    """Manually graded answer cells written, one per written question."""


def _nbgrader(grade_id: str, *, solution: bool, grade: bool, locked: bool, points: float = 0) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}  # fmt: skip
    if grade:
        meta["points"] = points
    return meta


def _check_cell(notebook: nbformat.NotebookNode, name: str, after: int, where: str) -> int:
    call = re.compile(rf"^\s*check_{re.escape(name)}\(\s*{re.escape(name)}\s*\)\s*$")
    for index in range(after + 1, len(notebook.cells)):
        if notebook.cells[index].cell_type == "code" and call.match(notebook.cells[index].source):
            return index
    raise ExportError(f"{where}: no check cell `check_{name}({name})` after the exercise cell of `{name}`")


def nbgrader_notebook(
    solution: nbformat.NotebookNode, stem: str, answer_points: float = ANSWER_POINTS
) -> nbformat.NotebookNode:
    """The nbgrader source version of one solution notebook: solution cells and locked test cells,
    and manually graded answer cells worth `answer_points` each.

    The header is the student notebooks' (its Colab badge opens notebooks/, not solutions/).
    """
    notebook = with_header(clean(nbformat.from_dict(solution)), "notebooks", f"{stem}.ipynb", student=True)
    where = f"{stem}.ipynb"
    marked: set[int] = set()
    for name in EXERCISES[stem]:
        cells = [i for i in defining_cells(notebook, name) if BEGIN in notebook.cells[i].source]
        if not cells:
            raise ExportError(f"{where}: no cell defines `{name}` inside a `{BEGIN}` region")
        exercise, check = cells[-1], _check_cell(notebook, name, cells[-1], where)
        notebook.cells[exercise].metadata["nbgrader"] = _nbgrader(
            f"{name}-solution", solution=True, grade=False, locked=False
        )
        notebook.cells[check].metadata["nbgrader"] = _nbgrader(
            f"{name}-check", solution=False, grade=True, locked=True, points=POINTS[name]
        )
        marked |= {exercise, check}
    for index, cell in enumerate(notebook.cells):
        if index not in marked and BEGIN in cell.source:  # an answer outside the exercises: not autograded
            written = cell.cell_type == "markdown"
            cell.metadata["nbgrader"] = _nbgrader(
                f"answer-{index}", solution=True, grade=written, locked=False, points=0
            )
    for index, label in answer_cells(notebook):  # written answers: graded by hand
        number = label.replace(".", "-")
        question = notebook.cells[index - 1]
        if question_label(question) != label:
            raise ExportError(f"{where}: the answer cell of question {label} does not follow its question")
        question.metadata["nbgrader"] = _nbgrader(
            f"question-{number}", solution=False, grade=False, locked=True
        )
        notebook.cells[index].metadata["nbgrader"] = _nbgrader(
            f"answer-{number}", solution=True, grade=True, locked=False, points=answer_points
        )
    return notebook


def export_nbgrader(
    solutions: Path,
    course: Path,
    notebooks: list[str] | None = None,
    *,
    timeout: float = 180.0,
    answer_points: float = ANSWER_POINTS,
) -> NbgraderExport:
    """Write an nbgrader course to `course` from the solution notebooks in `solutions`, each written
    answer worth `answer_points` in formgrader."""
    stems = course_notebooks(notebooks)
    sources = {stem: solutions / f"{stem}.ipynb" for stem in stems}
    missing = [path.name for path in sources.values() if not path.is_file()]
    if len(missing) == len(sources):  # no folder of solutions here: an installed package has none
        raise ExportError(
            f"no solution notebooks in {solutions} (looked for {missing[0]}"
            f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}): they are in the course's "
            f"repository, not in the installed package: git clone {REPOSITORY}, "
            "then --solutions CLONE/solutions"
        )
    if missing:
        raise ExportError(f"solution notebook(s) not found in {solutions}: {', '.join(missing)}")
    converted = {}
    for stem, path in sources.items():
        try:
            solution = nbformat.read(path, as_version=4)
        except (OSError, ValueError) as error:
            raise ExportError(f"cannot read {path}: {error}") from error
        converted[stem] = nbgrader_notebook(solution, stem, answer_points)
    if course.exists() and not course.is_dir():
        raise ExportError(f"{course} exists and is not a folder")
    try:
        for stem, notebook in converted.items():
            folder = course / "source" / stem
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, folder / f"{stem}.ipynb")
        config = CONFIG_TEXT.format(
            version=__version__,
            code_stub=CODE_STUB.format(indent=""),
            text_stub=MARKDOWN_STUB,
            timeout=int(timeout),
            env=GRADING_ENV,
        )
        (course / CONFIG).write_text(config, encoding="utf-8")
    except OSError as error:
        raise ExportError(f"cannot write the nbgrader course to {course}: {error}") from error
    tests = sum(len(EXERCISES[stem]) for stem in stems)
    answers = sum(len(answer_cells(notebook)) for notebook in converted.values())
    return NbgraderExport(course, stems, tests, answers)
