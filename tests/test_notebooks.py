"""Student notebooks, run as shipped, fail every check; the solution notebooks run under nbval.

(nbval itself collects solutions/*.ipynb: see testpaths and addopts in pyproject.toml.)
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from forked_kernels import client_kwargs
from nbclient import NotebookClient

from attn_course.reference import EXERCISES

ROOT = Path(__file__).resolve().parents[1]
CHECK_CALL = re.compile(r"^check_(\w+)\((\w+)\)\s*$", re.M)


def check_cells(notebook: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(cell index, exercise name) of each check cell, in order."""
    return [
        (index, match[1])
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for match in CHECK_CALL.finditer(cell.source)
    ]


@pytest.mark.parametrize("stem", sorted(EXERCISES))
def test_each_notebook_checks_exactly_its_exercises_in_order(stem):
    for folder in ("solutions", "notebooks"):
        notebook = nbformat.read(ROOT / folder / f"{stem}.ipynb", as_version=4)
        assert [name for _, name in check_cells(notebook)] == list(EXERCISES[stem]), folder


def test_every_notebook_is_listed_in_the_exercise_table():
    assert sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb")) == sorted(EXERCISES)


@pytest.mark.parametrize("stem", sorted(EXERCISES))
def test_student_notebook_run_through_undone_shows_only_the_checks_messages(stem):
    """Run All past every unfinished exercise (as Shift+Enter does): each check fails with its one
    line, and no other cell shows an error; cells that use an exercise say they use the course's."""
    path = ROOT / "notebooks" / f"{stem}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
        **client_kwargs(),
    ).execute()
    checks = dict(check_cells(notebook))
    for index, name in checks.items():
        errors = [out for out in notebook.cells[index].outputs if out.output_type == "error"]
        assert errors, f"check_{name} passed on the unfinished notebook {path.name}"
        error = errors[0]
        assert error.ename == "CheckFailed", (name, error.ename, error.evalue)
        assert "not implemented yet" in error.evalue
        assert len(error.traceback) == 1 and "File " not in error.traceback[0], error.traceback
    misleading = [
        (index, out.ename, out.evalue[:80])
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and index not in checks
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not misleading, f"{path.name}: cells fail past an unfinished exercise: {misleading}"
    for index, cell in enumerate(notebook.cells):
        if "yours_if_passed(" in cell.source and cell.cell_type == "code":
            text = "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")
            assert "Using the course's `" in text and "yours has not passed" in text, (path.name, index)


def test_a_skipped_exercise_cell_is_named_by_its_check_and_the_later_cells_use_the_course_version():
    """Run a notebook but skip the cell that defines an exercise (issue 30): its check says to run
    that cell first, in one line, and every later cell runs on with the course's version."""
    stem, name = "01_dot_product_attention", "dot_product_attention"
    path = ROOT / "solutions" / f"{stem}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    check = next(index for index, checked in check_cells(notebook) if checked == name)
    assert f"def {name}(" in notebook.cells[check - 1].source
    notebook.cells[check - 1].source = "# the learner skipped this cell"
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
        **client_kwargs(),
    ).execute()
    errors = {
        index: out
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "error"
    }
    assert list(errors) == [check], {index: out.evalue[:80] for index, out in errors.items()}
    error = errors[check]
    assert error.ename == "NameError"
    assert len(error.traceback) == 1 and f"run the cell that defines `{name}` first" in error.traceback[0]
    looks = [
        cell
        for cell in notebook.cells[check + 1 :]
        if cell.cell_type == "code" and f'yours_if_passed("{name}")' in cell.source
    ]
    assert looks
    for cell in looks:
        text = "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")
        assert f"Using the course's `{name}`" in text, text[:300]


def test_a_forked_kernel_is_gone_once_its_notebook_has_run(tmp_path):
    """The suite's kernels are forked from a factory (tests/forked_kernels.py); jupyter_client's shutdown
    stops the launcher that stood in for one, and the kernel itself must go too, not linger to the end."""
    import os

    kwargs = client_kwargs()
    if not kwargs:
        pytest.skip("kernels start afresh (ATTN_COURSE_FRESH_KERNELS=1)")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nprint(os.getpid())")])
    client = NotebookClient(notebook, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                            **kwargs)  # fmt: skip
    client.execute()
    pid = int(notebook.cells[0].outputs[0]["text"])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
