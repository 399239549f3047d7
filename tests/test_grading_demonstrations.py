"""The demonstration cells the grader leaves unrun (attn_course.grading.demonstrations)."""

from pathlib import Path

import nbformat
import pytest

from attn_course.grading.demonstrations import DEMONSTRATIONS, TAG, skippable
from attn_course.reference import EXERCISES

ROOT = Path(__file__).resolve().parents[1]


def _notebook(*cells: tuple[str, bool]) -> nbformat.NotebookNode:
    """Code cells (source, tagged as a demonstration)."""
    return nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(source, metadata={"tags": [TAG]} if tagged else {})
            for source, tagged in cells
        ]
    )


def test_tagged_cells_nothing_needs_are_skipped() -> None:
    nb = _notebook(
        ("import math", False),
        ("sentence = make()\nplot(sentence)", True),
        ("def f(x, scale=2.0):\n    y = x * scale\n    return math.sqrt(y)", False),
        ("check_f(f)", False),
        ("for x in range(3):\n    show(f(x))", True),
    )
    assert skippable(nb, ["f"]) == {1, 4}


@pytest.mark.parametrize(
    "exercise",
    [
        "def f(x):\n    return x * sentence",  # a global read in the function body
        "def f(x, s=sentence):\n    return x * s",  # a default value
        "class f:\n    size = sentence\n",  # a class body
        "def f(x):\n    return [x * w for w in sentence]",  # a comprehension
        "f = lambda x: x + sentence",  # a lambda
        "%time z = 1\ndef f(x):\n    return sentence",  # a magic, translated
    ],
)
def test_a_tagged_cell_the_learner_used_is_run(exercise: str) -> None:
    nb = _notebook(("sentence = make()", True), (exercise, False), ("check_f(f)", False))
    assert skippable(nb, ["f"]) == set()


def test_what_a_needed_cell_needs_is_run_too() -> None:
    nb = _notebook(
        ("base = 3", True),
        ("sentence = base * 2", True),
        ("other = 5", True),
        ("def f(x):\n    return x * sentence", False),
    )
    assert skippable(nb, ["f"]) == {2}


def test_a_changed_object_counts_as_bound() -> None:
    nb = _notebook(
        ("config = Config()", False), ("config.size = 4", True), ("def f():\n    return config", False)
    )
    assert skippable(nb, ["f"]) == set()


def test_a_local_name_is_not_a_global_read() -> None:
    nb = _notebook(("x = 1\nq = 2", True), ("def f(q):\n    x = q + 1\n    return x", False))
    assert skippable(nb, ["f"]) == {0}


@pytest.mark.parametrize(
    "cell",
    [
        "def f(x):\n    return x",  # defines an exercise, tagged or not
        "check_f(f)",  # a check cell
        "from helpers import *",  # binds what it cannot tell
        "this is not python(",  # unreadable
    ],
)
def test_cells_that_are_never_skipped(cell: str) -> None:
    nb = _notebook((cell, True))
    assert skippable(nb, ["f"]) == set()


@pytest.mark.parametrize("cell", ["print(globals()['sentence'])", "eval('sentence')", "this is not python("])
def test_a_cell_that_reads_what_it_cannot_name_keeps_every_cell_above(cell: str) -> None:
    nb = _notebook(("sentence = make()", True), ("other = 1", True), (cell, False), ("late = 2", True))
    assert skippable(nb, ["f"]) == {3}


def test_untagged_cells_always_run() -> None:
    nb = _notebook(("plot(1)", False), ("def f():\n    return 1", False))
    assert skippable(nb, ["f"]) == set()


def _tagged(nb: nbformat.NotebookNode) -> set[int]:
    return {i for i, c in enumerate(nb.cells) if TAG in c.get("metadata", {}).get("tags", [])}


@pytest.mark.parametrize("stem", sorted(EXERCISES))
def test_every_tagged_cell_of_the_course_is_skippable(stem: str) -> None:
    """A tag on a cell that the exercises need would mislead: the course tags demonstrations only,
    and the student notebooks carry the same tags (a stub may read a name its solution binds, so
    the grader runs more of a notebook handed in untouched)."""
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    student = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    assert _tagged(solution), f"{stem}: no cell tagged {TAG!r}"
    assert skippable(solution, EXERCISES[stem]) == _tagged(solution)
    assert {student.cells[i].id for i in _tagged(student)} == {
        solution.cells[i].id for i in _tagged(solution)
    }
    assert skippable(student, EXERCISES[stem]) <= _tagged(student)


@pytest.mark.parametrize("stem", sorted(EXERCISES))
def test_the_registry_of_demonstrations_is_the_tags_of_the_solutions(stem: str) -> None:
    """`DEMONSTRATIONS` names the tagged cells by id, so that a notebook saved without its tags is
    graded as fast: it must follow the tags (copy the ids from solutions/ when they change)."""
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    assert DEMONSTRATIONS[stem] == {solution.cells[i].id for i in _tagged(solution)}


def test_a_notebook_saved_without_its_tags_is_known_by_its_cell_ids() -> None:
    solution = nbformat.read(ROOT / "solutions" / "07_kv_cache.ipynb", as_version=4)
    expected = skippable(solution, EXERCISES["07_kv_cache"])
    for cell in solution.cells:
        cell.metadata.pop("tags", None)
    assert skippable(solution, EXERCISES["07_kv_cache"]) == set()
    assert skippable(solution, EXERCISES["07_kv_cache"], "07_kv_cache") == expected
