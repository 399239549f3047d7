"""A learner's working copy: made once per notebook, never overwritten, untouched by updates."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from attn_course.cli import main
from attn_course.tooling.workspace import WorkspaceError, find_notebook, fresh_copy, set_up

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
STUB = 'raise NotImplementedError("Exercise: replace this line with your code.")'
MY_SOFTMAX = "return x.exp() / x.exp().sum(dim=dim, keepdim=True)"


def _write_softmax(path: Path) -> None:
    """What a learner does: write the softmax exercise and save (JupyterLab rewrites the file)."""
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [cell for cell in notebook.cells if cell.get("id") == "ex2-solution"]
    assert STUB in cell.source
    cell.source = cell.source.replace(STUB, MY_SOFTMAX)
    nbformat.write(notebook, path)


def _sources(path: Path) -> str:
    return "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)


def test_set_up_copies_each_notebook_once_and_never_overwrites(tmp_path):
    work = tmp_path / "my-work"
    copied = set_up(NOTEBOOKS, work)
    assert sorted(c.target.name for c in copied) == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    mine = work / "01_dot_product_attention.ipynb"
    _write_softmax(mine)
    (work / "02_scaling.ipynb").unlink()  # a learner who wants a fresh 02 deletes theirs
    before = mine.read_bytes()
    again = set_up(NOTEBOOKS, work)
    assert [c.target.name for c in again] == ["02_scaling.ipynb"]
    assert mine.read_bytes() == before


def test_a_working_copy_says_it_is_the_learners(tmp_path):
    (copied, *_) = set_up(NOTEBOOKS, tmp_path / "my-work")
    notebook = nbformat.read(copied.target, as_version=4)
    assert notebook.metadata["attn_course"]["working_copy_of"] == f"notebooks/{copied.target.name}"
    assert "released_cells" not in notebook.metadata["attn_course"]
    assert notebook.metadata["language_info"]["version"] == sys.version.split()[0]  # as ipykernel says
    released = nbformat.read(copied.source, as_version=4)
    assert [c.source for c in notebook.cells] == [c.source for c in released.cells]


def test_a_fresh_copy_keeps_the_learners_beside_it(tmp_path):
    work = tmp_path / "my-work"
    set_up(NOTEBOOKS, work)
    mine = work / "01_dot_product_attention.ipynb"
    _write_softmax(mine)
    copied = fresh_copy("01", NOTEBOOKS, work, now=datetime(2026, 12, 1, 9, 30, 5))
    assert copied.kept == work / "01_dot_product_attention.old-20261201-093005.ipynb"
    assert MY_SOFTMAX in _sources(copied.kept)
    assert MY_SOFTMAX not in _sources(mine) and STUB in _sources(mine)
    with pytest.raises(WorkspaceError, match="exists already"):
        fresh_copy("01", NOTEBOOKS, work, now=datetime(2026, 12, 1, 9, 30, 5))
    assert MY_SOFTMAX in _sources(copied.kept)


@pytest.mark.parametrize("name", ["03", "03_causal_masking", "03_causal_masking.ipynb"])
def test_a_notebook_is_found_by_name_or_number(name):
    assert find_notebook(name, NOTEBOOKS).name == "03_causal_masking.ipynb"


def test_cli_says_what_it_did_and_refuses_unknown_names(tmp_path, capsys):
    work = tmp_path / "my-work"
    assert main(["workspace", "--notebooks", str(NOTEBOOKS), "--into", str(work)]) == 0
    assert f"{work}/01_dot_product_attention.ipynb: copied from" in capsys.readouterr().out
    assert main(["workspace", "--notebooks", str(NOTEBOOKS), "--into", str(work), "--fresh", "42"]) == 2
    err = capsys.readouterr().err
    assert "no course notebook called '42'" in err and "01_dot_product_attention" in err
    assert main(["workspace", "--notebooks", str(tmp_path / "nowhere"), "--into", str(work)]) == 2
    assert "no student notebooks in" in capsys.readouterr().err


def _git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_work_survives_every_command_a_learner_is_told_to_run(tmp_path):
    """On a clone: `make lab`'s copy step, `make test`'s release check, `attn-course release` and an
    update of the course (`git pull`) leave the learner's exercise and own notebook as they were."""
    origin = tmp_path / "origin"
    (origin / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "solutions", origin / "solutions")
    for path in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy(path, origin / "notebooks")
    shutil.copy(ROOT / ".gitignore", origin)
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "course")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(origin), str(clone))

    cli = [sys.executable, "-m", "attn_course.cli"]
    subprocess.run([*cli, "workspace"], cwd=clone, check=True, capture_output=True)  # make lab
    mine = clone / "my-work" / "01_dot_product_attention.ipynb"
    _write_softmax(mine)
    own = clone / "my-work" / "my_notes.ipynb"
    shutil.copy(mine, own)
    work = {path: path.read_bytes() for path in (mine, own)}
    assert _git(clone, "status", "--porcelain") == ""  # the working copy is not the repository's

    checked = subprocess.run([*cli, "release", "--check"], cwd=clone, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # make test stays green
    subprocess.run([*cli, "release"], cwd=clone, check=True, capture_output=True)
    subprocess.run([*cli, "workspace"], cwd=clone, check=True, capture_output=True)

    updated = origin / "notebooks" / "01_dot_product_attention.ipynb"  # a new release upstream
    updated.write_text(updated.read_text().replace("Dot-product attention", "Dot-product attention, 2nd ed."))
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "update")
    _git(clone, "pull", "-q")
    assert "2nd ed." in (clone / "notebooks" / "01_dot_product_attention.ipynb").read_text()
    assert {path: path.read_bytes() for path in work} == work
