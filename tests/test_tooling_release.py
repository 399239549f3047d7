"""The student release: markers, stubs, and that notebooks/ is exactly what it writes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import attn_course
from attn_course import __version__
from attn_course.cli import main
from attn_course.tooling.release import (
    BADGE_ID,
    BEGIN,
    END,
    HOW_TO_ID,
    RUN_ON_TAG,
    SETUP_ID,
    MarkerError,
    clean,
    header_cells,
    is_header,
    language_info,
    release,
    strip_solutions,
    student_version,
)
from attn_course.tooling.repository import INSTALL_SPEC_VARIABLE, REVISION, colab_url, install_requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
STUDENT = sorted((ROOT / "notebooks").glob("*.ipynb"))
HEADER = header_cells("notebooks", "00_any.ipynb", student=True)
BADGE_LINK = re.compile(r"\]\((https://colab\.research\.google\.com/github/[^)]+)\)")


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
    body = student.cells[len(HEADER) :]
    assert "return 42" not in body[1].source and "NotImplementedError" in body[1].source
    assert body[1].outputs == [] and body[1].execution_count is None
    assert student.metadata.kernelspec.name == "python3"
    cleaned = nbformat.read(solutions / "01_demo.ipynb", as_version=4)
    assert cleaned.cells[3].outputs == [] and "return 42" in cleaned.cells[3].source

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
    assert [cell.id for cell in student.cells if cell.id != HOW_TO_ID] == [cell.id for cell in solution.cells]
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


def test_clean_writes_the_kernels_language_info_as_jupyterlab_does():
    from ipykernel.ipkernel import IPythonKernel

    reported = IPythonKernel.language_info  # what JupyterLab writes into the notebook on connecting
    notebook = clean(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]))
    assert notebook.metadata.language_info == {k: v for k, v in reported.items() if k != "version"}
    here = clean(notebook, python_version=sys.version.split()[0])
    assert here.metadata.language_info == reported  # a copy made for this Python: nothing to change
    assert "version" not in language_info()  # the release itself does not depend on who runs it


def _release_args(tmp_path: Path, *extra: str) -> list[str]:
    folders = ["--solutions", str(tmp_path / "solutions"), "--notebooks", str(tmp_path / "notebooks")]
    return ["release", *extra, *folders]


def _demo(tmp_path: Path) -> Path:
    (tmp_path / "solutions").mkdir()
    path = tmp_path / "solutions" / "07_demo.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# Demo", id="title"), nbformat.v4.new_code_cell("x = 1", id="x")]
    _write(path, cells)
    return path


def test_release_puts_badge_and_setup_on_top_of_both_versions(tmp_path):
    _demo(tmp_path)
    assert main(_release_args(tmp_path)) == 0
    for folder in ("solutions", "notebooks"):
        notebook = nbformat.read(tmp_path / folder / "07_demo.ipynb", as_version=4)
        how_to = [HOW_TO_ID] if folder == "notebooks" else []
        badge, setup, title = notebook.cells[:3]
        ids = [cell.id for cell in notebook.cells[: 3 + len(how_to)]]
        assert ids == [BADGE_ID, SETUP_ID, "title", *how_to]
        assert is_header(badge) and is_header(setup) and not is_header(title)
        assert badge.cell_type == "markdown" and setup.cell_type == "code"
        assert BADGE_LINK.search(badge.source)[1] == colab_url(folder, "07_demo.ipynb")
        assert f"/blob/{REVISION}/{folder}/07_demo.ipynb" in badge.source
        assert install_requirement() in setup.source and INSTALL_SPEC_VARIABLE in setup.source
        assert "google.colab" in setup.source and "describe_device()" in setup.source
        compile(setup.source, "<setup>", "exec")


def test_release_header_is_idempotent_and_replaces_an_old_one(tmp_path, capsys):
    path = _demo(tmp_path)
    assert main(_release_args(tmp_path)) == 0
    first = path.read_text()
    assert main(_release_args(tmp_path)) == 0
    assert path.read_text() == first
    assert main(_release_args(tmp_path, "--check")) == 0

    notebook = nbformat.read(path, as_version=4)
    notebook.cells[0].source = "[![Open In Colab](badge.svg)](https://example.org/old/revision.ipynb)"
    notebook.cells.append(nbformat.from_dict(notebook.cells[1]))  # a stray copy of the header
    notebook.cells[-1].id = "stray-copy"
    nbformat.write(notebook, path)
    capsys.readouterr()
    assert main(_release_args(tmp_path, "--check")) == 1
    assert "header or outputs out of date" in capsys.readouterr().out
    assert main(_release_args(tmp_path)) == 0
    assert path.read_text() == first


def test_check_detects_a_solution_without_header(tmp_path, capsys):
    path = _demo(tmp_path)
    assert main(_release_args(tmp_path)) == 0
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = [cell for cell in notebook.cells if not is_header(cell)]
    nbformat.write(notebook, path)
    assert main(_release_args(tmp_path, "--check")) == 1
    assert "07_demo.ipynb: header or outputs out of date" in capsys.readouterr().out


def test_release_refuses_a_cell_that_takes_a_header_id(tmp_path, capsys):
    (tmp_path / "solutions").mkdir()
    _write(tmp_path / "solutions" / "08_clash.ipynb", [nbformat.v4.new_code_cell("x = 1", id=SETUP_ID)])
    assert main(_release_args(tmp_path)) == 2
    assert f"08_clash.ipynb: cell id {SETUP_ID!r} is reserved" in capsys.readouterr().err


def test_revision_is_the_tag_of_the_package_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    assert REVISION == f"v{__version__}"


@pytest.mark.slow  # starts a kernel or a process
def test_version_option_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"attn-course {__version__}\n"
    command = [sys.executable, "-m", "attn_course.cli", "--version"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"attn-course {__version__}\n", "")


def test_a_source_tree_without_install_metadata_reads_the_version_from_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert attn_course._source_tree_version() == project["version"]


@pytest.mark.parametrize("path", SOLUTIONS + STUDENT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_notebook_starts_with_a_badge_for_its_own_path(path):
    notebook = nbformat.read(path, as_version=4)
    badge, setup = notebook.cells[:2]
    assert is_header(badge) and is_header(setup)
    links = BADGE_LINK.findall(badge.source)
    assert links == [colab_url(path.parent.name, path.name)]
    assert links[0].endswith(f"/{path.parent.relative_to(ROOT).as_posix()}/{path.name}")
    student = path.parent.name == "notebooks"
    assert sum(is_header(cell) for cell in notebook.cells) == (3 if student else 2)
    assert (notebook.cells[3].id == HOW_TO_ID) == student


# --- The release never destroys what it did not write ------------------------------------------


def _exercise_demo(tmp_path: Path) -> tuple[Path, Path]:
    """solutions/05_demo.ipynb with one exercise, released once; returns (solution, student)."""
    (tmp_path / "solutions").mkdir()
    solution = tmp_path / "solutions" / "05_demo.ipynb"
    exercise = nbformat.v4.new_code_cell(
        f'def twice(x):\n    """2x."""\n    {BEGIN}\n    return 2 * x\n    {END}', id="ex"
    )
    _write(solution, [nbformat.v4.new_markdown_cell("# Demo", id="title"), exercise])
    assert main(_release_args(tmp_path)) == 0
    return solution, tmp_path / "notebooks" / "05_demo.ipynb"


def _edit_cell(path: Path, cell_id: str, change) -> None:
    """Edit one cell the way JupyterLab saves it: the whole notebook rewritten by nbformat."""
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [cell for cell in notebook.cells if cell.id == cell_id]
    cell.source = change(cell.source)
    nbformat.write(notebook, path)


def test_release_refuses_to_overwrite_an_exercise_someone_wrote(tmp_path, capsys):
    _, student = _exercise_demo(tmp_path)
    _edit_cell(student, "ex", lambda s: s.replace('raise NotImplementedError("Exercise: replace this line '
                                                  'with your code.")', "return x + x"))  # fmt: skip
    learner_work = student.read_bytes()
    capsys.readouterr()
    assert main(_release_args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"{student}: cell" in err and "exercise `twice`" in err and "nothing was written" in err
    assert "copy those notebooks out of" in err
    assert student.read_bytes() == learner_work
    assert main(_release_args(tmp_path, "--check")) == 1  # --check reports, never writes
    assert student.read_bytes() == learner_work
    assert main(_release_args(tmp_path, "--force")) == 0
    assert "return x + x" not in student.read_text()


def test_release_refuses_before_writing_any_notebook(tmp_path):
    solution, student = _exercise_demo(tmp_path)
    other = tmp_path / "solutions" / "06_other.ipynb"
    _write(other, [nbformat.v4.new_code_cell(f"def f():\n    {BEGIN}\n    return 1\n    {END}", id="f")])
    _edit_cell(student, "title", lambda s: s + "\n\nMy notes: softmax is translation-invariant.")
    assert main(_release_args(tmp_path)) == 2
    assert not (tmp_path / "notebooks" / "06_other.ipynb").exists()
    assert "My notes" in student.read_text()


def test_release_rewrites_cells_an_earlier_release_wrote(tmp_path):
    solution, student = _exercise_demo(tmp_path)
    _edit_cell(solution, "ex", lambda s: s.replace('"""2x."""', '"""Twice x."""'))
    _edit_cell(solution, "title", lambda s: "# Demo, second edition")
    assert main(_release_args(tmp_path)) == 0  # the student cells are the earlier release's: no refusal
    text = student.read_text()
    assert "Twice x." in text and "second edition" in text


def test_a_cell_someone_added_is_work(tmp_path, capsys):
    _, student = _exercise_demo(tmp_path)
    notebook = nbformat.read(student, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("my_experiment = 1", id="mine"))
    nbformat.write(notebook, student)
    capsys.readouterr()
    assert main(_release_args(tmp_path)) == 2
    assert "not written by the release" in capsys.readouterr().err
    assert "my_experiment" in student.read_text()


def test_release_leaves_a_notebook_it_has_no_solution_for_alone(tmp_path, capsys):
    _exercise_demo(tmp_path)
    notes = tmp_path / "notebooks" / "my_notes.ipynb"
    _write(notes, [nbformat.v4.new_markdown_cell("my notes")])
    before = notes.read_bytes()
    capsys.readouterr()
    for extra in ((), ("--check",), ("--force",)):
        assert main(_release_args(tmp_path, *extra)) == 0, extra
        out = capsys.readouterr().out
        assert f"{notes}: not written by the release" in out and "left alone" in out
        (line,) = [line for line in out.splitlines() if line.startswith(str(notes))]
        assert "written" not in line.replace("not written by", "")
        assert notes.read_bytes() == before


def test_student_notebook_whose_solution_is_gone_is_removed_only_when_forced(tmp_path, capsys):
    solution, student = _exercise_demo(tmp_path)
    _write(tmp_path / "solutions" / "06_keep.ipynb", [nbformat.v4.new_markdown_cell("# Keep", id="k")])
    solution.unlink()
    capsys.readouterr()
    assert main(_release_args(tmp_path, "--check")) == 1
    assert main(_release_args(tmp_path)) == 0
    assert "is gone: left alone" in capsys.readouterr().out and student.exists()
    assert main(_release_args(tmp_path, "--force")) == 0
    assert "is gone: removed" in capsys.readouterr().out and not student.exists()


def test_the_reported_data_loss_cannot_happen_again(tmp_path, capsys):
    """Issue 14's reproduction on the course itself: an edited softmax and a notebook of one's own."""
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    student = tmp_path / "notebooks" / "01_dot_product_attention.ipynb"
    _edit_cell(student, "ex2-solution", lambda s: s.replace(
        'raise NotImplementedError("Exercise: replace this line with your code.")',
        "return x.exp() / x.exp().sum(dim=dim, keepdim=True)"))  # fmt: skip
    notes = tmp_path / "notebooks" / "my_notes.ipynb"
    shutil.copy(student, notes)
    work = {path: path.read_bytes() for path in (student, notes)}
    capsys.readouterr()
    assert main(_release_args(tmp_path)) == 2
    assert "01_dot_product_attention.ipynb: cell" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in work} == work


def test_a_written_answer_is_work_and_the_answer_cells_are_released_as_they_stand(tmp_path, capsys):
    """Question and answer cells (issue 17) hold no markers: the release copies them; a learner's
    answer typed into an answer cell is work, named by its question."""
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    student = tmp_path / "notebooks" / "01_dot_product_attention.ipynb"
    solution = nbformat.read(tmp_path / "solutions" / student.name, as_version=4)
    written = [c for c in solution.cells if "answer" in c.metadata.get("attn_course", {})]
    assert written and all(c.source.startswith("**Your answer (01.") for c in written)
    shipped = {c.id: c.source for c in nbformat.read(student, as_version=4).cells}
    assert all(shipped[c.id] == c.source for c in written)
    _edit_cell(student, "answer-01-1", lambda s: s + "\n\nriver, 3.0")
    learner_work = student.read_bytes()
    capsys.readouterr()
    assert main(_release_args(tmp_path)) == 2
    assert "a written answer to question 01.1" in capsys.readouterr().err
    assert student.read_bytes() == learner_work


def test_run_all_goes_on_past_every_exercise_and_check_cell_of_a_student_notebook():
    """Issue 46: Run All stopped at the first unfinished check and left every cell below it without
    its output. The release tags each exercise cell and each check cell `raises-exception` (and no
    other cell); a tag the cell already had is kept."""
    cells = [
        nbformat.v4.new_markdown_cell("# Demo", id="title"),
        nbformat.v4.new_code_cell("import torch", id="setup"),
        nbformat.v4.new_code_cell(f"def f(x):\n    {BEGIN}\n    return x\n    {END}", id="ex"),
        nbformat.v4.new_code_cell("check_f(f)", id="check", metadata={"tags": ["mine"]}),
        nbformat.v4.new_code_cell('print(yours_if_passed("f")(1))', id="look"),
        nbformat.v4.new_markdown_cell(f"Why?\n\n{BEGIN}\nBecause.\n{END}", id="answer"),
    ]
    student, _ = student_version(nbformat.v4.new_notebook(cells=cells), "01_demo.ipynb")
    tags = {cell.id: cell.metadata.get("tags", []) for cell in student.cells}
    assert {name: found for name, found in tags.items() if found} == {
        "ex": [RUN_ON_TAG],
        "check": ["mine", RUN_ON_TAG],
    }


def test_a_solution_cell_tagged_raises_exception_is_refused_by_name(tmp_path, capsys):
    """nbval lets a `raises-exception` cell fail: in a solution notebook it would hide a check that
    no longer passes."""
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    check = nbformat.v4.new_code_cell("check_f(f)", metadata={"tags": [RUN_ON_TAG]})
    _write(solutions / "02_tagged.ipynb", [nbformat.v4.new_markdown_cell("# T"), check])
    assert main(["release", "--solutions", str(solutions), "--notebooks", str(tmp_path / "nb")]) == 2
    err = capsys.readouterr().err
    assert "02_tagged.ipynb, cell 1 (code)" in err and RUN_ON_TAG in err
    assert not (tmp_path / "nb").exists()


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_the_shipped_notebooks_tag_exactly_the_exercise_and_check_cells(path):
    """One tagged check cell per exercise of the notebook, each exercise cell tagged, nothing else;
    no solution cell tagged."""
    from attn_course.reference import EXERCISES

    solution = nbformat.read(path, as_version=4)
    student = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
    assert not [cell.id for cell in solution.cells if RUN_ON_TAG in cell.metadata.get("tags", [])]
    code = [cell for cell in solution.cells if cell.cell_type == "code"]
    exercises = [cell.id for cell in code if BEGIN in cell.source]
    checks = [cell.id for cell in code if re.search(r"^check_\w+\(", cell.source, re.M)]
    assert len(checks) == len(EXERCISES[path.stem]) and len(exercises) >= len(checks)
    tagged = [cell.id for cell in student.cells if RUN_ON_TAG in cell.metadata.get("tags", [])]
    assert tagged == [cell.id for cell in code if cell.id in {*exercises, *checks}]


def test_an_optional_region_becomes_a_comment_that_runs():
    """08's helpers: a learner whose design needs none leaves the cell, and Run All goes on past it."""
    source = "# helpers\n### BEGIN SOLUTION (optional)\ndef helper(x):\n    return x\n### END SOLUTION"
    stripped, regions = strip_solutions(source, "code", "nb, cell 0")
    assert regions == 1 and "raise" not in stripped and "def helper" not in stripped
    exec(compile(stripped, "cell", "exec"), {})  # runs: nothing to raise
