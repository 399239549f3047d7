"""`attn-course export gradescope`: the zip, and its run_autograder run as Gradescope runs it.

Each case is a Gradescope root in a temporary folder (AUTOGRADER_ROOT): the zip unpacked in
source/, a submission in submission/. The five run_autograder runs go at once (about one notebook
run each, the hanging one its short time limit).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from attn_course import __version__
from attn_course.cli import main
from attn_course.grading.gradescope import CONFIG, VENV, VENV_MADE

ROOT = Path(__file__).resolve().parents[1]
STEM = "02_scaling"
EXERCISES = ["score_variance", "scaled_dot_product_attention"]


def _solution() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)


def _submission(case: str, folder: Path) -> None:
    folder.mkdir(parents=True)
    notebook = _solution()
    if case == "wrong":  # score_variance of unscaled scores whatever `scaled` says
        cell = next(c for c in notebook.cells if c.source.startswith("def score_variance"))
        cell.source = (
            "def score_variance(d_k, n_samples=20_000, scaled=False):\n"
            "    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)\n"
            "    return (q * k).sum(-1).var().item()"
        )
    elif case == "hanging":
        notebook.cells.insert(3, nbformat.v4.new_code_cell("while True:\n    pass"))
    if case == "malformed":
        (folder / f"{STEM}.ipynb").write_text('{"cells": [ not json', encoding="utf-8")
    elif case != "missing":
        nbformat.write(notebook, folder / f"{STEM}.ipynb")
    (folder / "notes.txt").write_text("mine", encoding="utf-8")


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("gradescope")
    quick, slow = base / "quick.zip", base / "autograder.zip"
    for zip_path, timeout in ((slow, "90"), (quick, "4")):
        options = ["--notebooks", STEM, "--timeout", timeout, "--memory", "2"]
        assert main(["export", "gradescope", str(zip_path), *options]) == 0
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    processes, before = {}, {}
    for case in ("correct", "wrong", "hanging", "malformed", "missing"):
        root = base / case
        with zipfile.ZipFile(quick if case == "hanging" else slow) as archive:
            archive.extractall(root / "source")
        _submission(case, root / "submission")
        before[case] = _snapshot(root / "submission")
        processes[case] = subprocess.Popen(
            ["bash", str(root / "source" / "run_autograder")],
            env={**env, "AUTOGRADER_ROOT": str(root)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    results = {}
    for case, process in processes.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        results[case] = json.loads((base / case / "results" / "results.json").read_text(encoding="utf-8"))
        assert _snapshot(base / case / "submission") == before[case], f"{case}: the submission changed"
    return slow, results


def test_the_zip_has_setup_and_run_autograder_at_its_root_and_the_course_source(runs):
    slow, _ = runs
    with zipfile.ZipFile(slow) as archive:
        names = archive.namelist()
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        config = json.loads(archive.read(CONFIG))
        setup = archive.read("setup.sh").decode()
    assert {"setup.sh", "run_autograder", "course/pyproject.toml", "course/README.md", "course/LICENSE",
            "course/attn_course/checks/__init__.py",
            "course/attn_course/grading/gradescope.py"} <= set(names)  # fmt: skip
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert config == {"version": __version__, "notebooks": [STEM], "timeout": 90.0, "memory_gib": 2.0}
    assert subprocess.run(["bash", "-n", "-c", setup]).returncode == 0


def test_setup_sh_pins_the_makefiles_torch_from_pypi_alone_into_a_venv_of_its_own(runs):
    with zipfile.ZipFile(runs[0]) as archive:
        setup = archive.read("setup.sh").decode()
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pin = re.search(r"^TORCH \?= (\S+)$", makefile, re.M).group(1)
    assert f'pip install "{pin}"' in setup and "pip install ./course" in setup
    assert "index-url" not in setup and "download.pytorch.org" not in setup  # PyPI alone
    assert "python3 -m venv" in setup and "apt_install python3-venv" in setup
    installs = [line for line in setup.splitlines() if "pip install" in line and not line.startswith("#")]
    assert installs and all(line.startswith('"$venv/bin/python" -m pip') for line in installs)


def test_setup_sh_makes_its_venv_with_the_system_python_of_a_pep_668_system(runs, tmp_path):
    """setup.sh up to its installs, run with the Debian system Python first on PATH (as Ubuntu 24.04's)."""
    system = Path("/usr/bin/python3")
    if not system.is_file():
        pytest.skip("no system Python at /usr/bin/python3")
    stdlib = subprocess.run([str(system), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    if not Path(stdlib, "EXTERNALLY-MANAGED").is_file():
        pytest.skip("the system Python here is not externally managed (PEP 668)")
    with zipfile.ZipFile(runs[0]) as archive:
        archive.extractall(tmp_path / "source")
    setup = (tmp_path / "source" / "setup.sh").read_text(encoding="utf-8")
    assert VENV_MADE in setup
    (tmp_path / "source" / "venv_step.sh").write_text(setup.split(VENV_MADE)[0], encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "AUTOGRADER_ROOT": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(tmp_path / "source" / "venv_step.sh")], env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    python = tmp_path / VENV / "bin" / "python"
    probe = "import sys; print(sys.prefix != sys.base_prefix, sys.base_prefix)"
    inside = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env)
    assert inside.stdout.split() == ["True", str(Path(stdlib).parents[1])], inside.stderr
    pip = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True, env=env)
    assert pip.returncode == 0 and str(tmp_path / VENV) in pip.stdout, pip.stderr


def test_export_works_from_an_installed_package(tmp_path):
    """No checkout: the package installed alone; gradescope needs nothing more, and the course in its zip
    installs and is this version; nbgrader needs --solutions."""
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
               "--quiet", "--target", str(target), str(ROOT)]  # fmt: skip
    done = subprocess.run(install, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    cli = [sys.executable, "-m", "attn_course.cli", "export"]

    def export(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], env=env, cwd=tmp_path, capture_output=True, text=True)

    zipped = export("gradescope", "a.zip", "--notebooks", STEM)
    assert zipped.returncode == 0, zipped.stderr
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        archive.extractall(tmp_path / "source")
        assert archive.read("course/LICENSE") == (ROOT / "LICENSE").read_bytes()
    (tmp_path / "site2").mkdir()
    again = [*install[:-2], str(tmp_path / "site2"), str(tmp_path / "source" / "course")]
    done = subprocess.run(again, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    probe = "import attn_course.grading.gradescope as g, importlib.metadata as m\n"  # the zip's course
    probe += "print(g.attn_course.__file__, g.__version__, m.version('attn-course'))"
    env2 = env | {"PYTHONPATH": str(tmp_path / "site2")}
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env2, cwd=tmp_path, capture_output=True, text=True
    )
    installed = str(tmp_path / "site2" / "attn_course" / "__init__.py")
    assert found.stdout.split() == [installed, __version__, __version__], found.stderr
    course = export("nbgrader", "course", "--notebooks", STEM, "--solutions", str(ROOT / "solutions"))
    assert course.returncode == 0 and (tmp_path / "course" / "source" / STEM / f"{STEM}.ipynb").is_file()
    lacking = export("nbgrader", "course2")
    assert lacking.returncode == 2 and lacking.stderr.count("\n") == 1, lacking.stderr
    assert "no solution notebooks in solutions" in lacking.stderr and "--solutions" in lacking.stderr


def test_a_correct_submission_scores_every_exercise_with_the_checks_pass_lines(runs):
    result = runs[1]["correct"]
    assert result["score"] == 2
    assert [t["name"] for t in result["tests"]] == [f"{STEM}: {name}" for name in EXERCISES]
    for test in result["tests"]:
        assert (test["score"], test["max_score"], test["status"]) == (1, 1, "passed")
        assert set(test) >= {"name", "score", "max_score", "output", "visibility"}
    assert "Score: 2 / 2" in result["output"]


def test_a_wrong_exercise_gets_the_checks_message_and_no_points(runs):
    result = runs[1]["wrong"]
    assert result["score"] == 1
    wrong, right = result["tests"]
    assert (wrong["score"], wrong["status"]) == (0, "failed")
    assert "score_variance not passed" in wrong["output"] and "scaled" in wrong["output"]
    assert right["score"] == 1


@pytest.mark.parametrize(
    ("case", "says"),
    [("hanging", "timed out after 4 s"), ("malformed", "not a notebook"), ("missing", "was not handed in")],
)
def test_hanging_malformed_and_missing_notebooks_give_a_result_that_says_so(runs, case, says):
    result = runs[1][case]
    assert result["score"] == 0 and len(result["tests"]) == 2
    assert all(t["score"] == 0 and says in t["output"] for t in result["tests"]), result
    assert says in result["output"]


def test_export_refuses_unknown_notebooks_and_unwritable_zips(tmp_path, capsys):
    assert main(["export", "gradescope", str(tmp_path / "a.zip"), "--notebooks", "nope"]) == 2
    assert "'nope' is not a course notebook" in capsys.readouterr().err
    assert main(["export", "gradescope", str(tmp_path / "no" / "such" / "a.zip")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["export", "gradescope", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


FULL_SETUP = "ATTN_COURSE_TEST_FULL_SETUP"
"""Set to 1 to run the whole setup.sh (it installs torch and the course from the package index)."""


@pytest.mark.skipif(os.environ.get(FULL_SETUP) != "1", reason=f"installs torch: {FULL_SETUP}=1")
def test_setup_sh_then_run_autograder_with_the_system_python(runs, tmp_path):
    """As on Gradescope: setup.sh with the system Python alone on PATH, then run_autograder in its venv."""
    if not Path("/usr/bin/python3").is_file():
        pytest.skip("no system Python at /usr/bin/python3")
    with zipfile.ZipFile(runs[0]) as archive:
        archive.extractall(tmp_path / "source")
    _submission("correct", tmp_path / "submission")
    env = {"PATH": "/usr/bin:/bin", "AUTOGRADER_ROOT": str(tmp_path), "HOME": str(tmp_path)}
    env |= {k: v for k, v in os.environ.items() if k.startswith("PIP_")}  # this machine's index settings
    for script in ("setup.sh", "run_autograder"):
        done = subprocess.run(["bash", str(tmp_path / "source" / script)], env=env, capture_output=True,
                              text=True, timeout=1800)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results" / "results.json").read_text(encoding="utf-8"))
    assert result["score"] == 2, result["output"]
