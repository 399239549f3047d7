"""The student release: markers, stubs, and that notebooks/ is exactly what it writes."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from attn_course.cli import main
from attn_course.release import BEGIN, END, MarkerError, release, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
STUDENT = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_strip_replaces_region_with_stub_at_marker_indentation():
    source = f'def f(x):\n    """Doc."""\n    {BEGIN}\n    return x + 1\n    {END}\n\nprint(1)'
    stripped, regions = strip_solutions(source, "code", "nb, cell 0")
    assert regions == 1
    assert stripped == (
        'def f(x):\n    """Doc."""\n    # YOUR CODE HERE\n'
        '    raise NotImplementedError("Exercise: replace this line with your code.")\n\nprint(1)'
    )
    compile(stripped, "<cell>", "exec")


def test_strip_handles_several_regions_and_markdown():
    source = f"{BEGIN}\na = 1\n{END}\nb = 2\n{BEGIN}\nc = 3\n{END}"
    stripped, regions = strip_solutions(source, "code", "nb, cell 0")
    assert regions == 2 and "a = 1" not in stripped and "c = 3" not in stripped and "b = 2" in stripped
    answer, regions = strip_solutions(f"Why?\n\n{BEGIN}\nBecause.\n{END}", "markdown", "nb, cell 1")
    assert regions == 1 and answer == "Why?\n\n*Your answer here.*"


@pytest.mark.parametrize(
    ("source", "phrase"),
    [
        (f"{BEGIN}\nx = 1", "is never closed"),
        (f"x = 1\n{END}", "without a"),
        (f"{BEGIN}\n{BEGIN}\nx\n{END}\n{END}", "inside the region opened on line 1"),
        (f"x = 1  {BEGIN}\n{END}", "must stand alone"),
    ],
)
def test_unbalanced_or_nested_markers_name_notebook_and_cell(source, phrase):
    with pytest.raises(MarkerError, match=re.escape(phrase)) as error:
        strip_solutions(source, "code", "01_x.ipynb, cell 7 (code)")
    assert "01_x.ipynb, cell 7" in str(error.value)


def _write(path: Path, cells: list) -> None:
    notebook = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(notebook, path)


def test_release_writes_student_notebooks_and_check_detects_drift(tmp_path, capsys):
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    solutions.mkdir()
    code = nbformat.v4.new_code_cell(f"def f():\n    {BEGIN}\n    return 42\n    {END}", execution_count=3)
    code.outputs = [nbformat.v4.new_output("stream", text="hi")]
    _write(solutions / "01_demo.ipynb", [nbformat.v4.new_markdown_cell("# Demo"), code])

    assert main(["release", "--solutions", str(solutions), "--notebooks", str(notebooks)]) == 0
    student = nbformat.read(notebooks / "01_demo.ipynb", as_version=4)
    assert "return 42" not in student.cells[1].source and "NotImplementedError" in student.cells[1].source
    assert student.cells[1].outputs == [] and student.cells[1].execution_count is None
    assert student.metadata.kernelspec.name == "python3"
    cleaned = nbformat.read(solutions / "01_demo.ipynb", as_version=4)
    assert cleaned.cells[1].outputs == [] and "return 42" in cleaned.cells[1].source

    assert main(["release", "--check", "--solutions", str(solutions), "--notebooks", str(notebooks)]) == 0
    (notebooks / "01_demo.ipynb").write_text(
        (notebooks / "01_demo.ipynb").read_text().replace("Demo", "Edited")
    )
    assert main(["release", "--check", "--solutions", str(solutions), "--notebooks", str(notebooks)]) == 1
    assert "out of date" in capsys.readouterr().out


def test_release_reports_bad_markers_without_writing(tmp_path, capsys):
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    solutions.mkdir()
    _write(solutions / "02_bad.ipynb", [nbformat.v4.new_code_cell(f"{BEGIN}\nx = 1")])
    assert main(["release", "--solutions", str(solutions), "--notebooks", str(notebooks)]) == 2
    assert "02_bad.ipynb, cell 0" in capsys.readouterr().err
    assert not (notebooks / "02_bad.ipynb").exists()


def test_student_notebooks_are_exactly_what_release_writes():
    results = release(ROOT / "solutions", ROOT / "notebooks", check=True)
    stale = [str(r.target.relative_to(ROOT)) for r in results if r.changed]
    assert not stale, f"run `make release` (attn-course release) and commit: {stale}"
    assert [r.exercises > 0 for r in results] == [True] * len(results)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_student_notebook_contains_no_solution_code(path):
    solution = nbformat.read(path, as_version=4)
    student = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
    student_cells = {cell.id: cell.source for cell in student.cells}
    assert [cell.id for cell in student.cells] == [cell.id for cell in solution.cells]
    assert all(BEGIN not in text and END not in text for text in student_cells.values())
    for cell in solution.cells:
        regions = re.findall(rf"{re.escape(BEGIN)}\n(.*?)\n\s*{re.escape(END)}", cell.source, re.S)
        for line in "\n".join(regions).splitlines():
            code = line.strip()
            if code and not code.startswith("#"):
                assert code not in student_cells[cell.id], f"solution line leaked into {path.name}: {code}"


@pytest.mark.parametrize("path", SOLUTIONS + STUDENT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_notebooks_have_no_outputs_and_name_python3(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
