"""The setup cell at the top of every notebook, run with Colab simulated and without it.

Colab is simulated by a stand-in `google.colab` package on PYTHONPATH. The install runs for real,
in a fresh virtual environment that sees this environment's packages (torch, pip, setuptools,
...) but not the course package, from a copy of this checkout instead of the network:
ATTN_COURSE_INSTALL_SPEC replaces what the cell passes to `pip install`.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import nbformat

from attn_course import __version__
from attn_course.tooling.release import SETUP_ID, is_header
from attn_course.tooling.repository import INSTALL_SPEC_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_dot_product_attention.ipynb"
STANDIN_MESSAGE = "stand-in google.colab: custom widget manager enabled"
CHECK_INSTALL = """
import importlib.metadata
import attn_course
print("imported from", attn_course.__file__)
print("installed version", importlib.metadata.version("attn-course"))
"""


def setup_source() -> str:
    """The setup cell as shipped in a student notebook."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [cell for cell in notebook.cells if cell.get("id") == SETUP_ID]
    assert is_header(cell)
    return cell.source


def fake_colab(folder: Path) -> Path:
    """A folder holding a stand-in `google.colab` package (with `output`), for PYTHONPATH."""
    package = folder / "google" / "colab"
    package.mkdir(parents=True)
    (folder / "google" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "output.py").write_text(
        f"def enable_custom_widget_manager():\n    print({STANDIN_MESSAGE!r})\n"
    )
    return folder


def run_python(python: Path | str, script: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `script` with `python` in the script's folder (not the checkout, which is importable)."""
    return subprocess.run(
        [str(python), str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=240
    )


def environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def test_setup_cell_installs_and_imports_the_package_on_colab(tmp_path):
    # A copy of the package's sources, so that building it writes nothing into the checkout.
    source = tmp_path / "checkout"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "attn_course", source / "attn_course", ignore=ignore)

    # A fresh environment without the course package that sees every other package of this one.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    new_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    others = tmp_path / "other-packages"
    others.mkdir()
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.startswith(("attn_course", "__editable__")) and entry.suffix != ".pth":
            (others / entry.name).symlink_to(entry)
    (new_site / "other-packages.pth").write_text(f"{others}\n")

    script = tmp_path / "setup_cell.py"
    script.write_text(CHECK_INSTALL)
    env = environment(PYTHONPATH=str(fake_colab(tmp_path / "standin")))
    before = run_python(python, script, env)
    assert before.returncode != 0 and "No module named 'attn_course'" in before.stderr, before

    script.write_text(setup_source() + "\n" + CHECK_INSTALL)
    spec = f"--no-deps --no-build-isolation --no-index {source}"
    result = run_python(python, script, {**env, INSTALL_SPEC_VARIABLE: spec})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Installing --no-deps --no-build-isolation --no-index {source}" in out
    assert STANDIN_MESSAGE in out
    assert "scaled_dot_product_attention backends:" in out and "math" in out  # the device summary
    assert f"imported from {new_site / 'attn_course' / '__init__.py'}" in out  # installed, not the checkout
    assert f"installed version {__version__}" in out


def test_setup_cell_skips_the_install_where_the_version_is_there(tmp_path):
    script = tmp_path / "setup_cell.py"
    script.write_text(setup_source())
    standin = fake_colab(tmp_path / "standin")
    env = environment(PYTHONPATH=str(standin), **{INSTALL_SPEC_VARIABLE: "/nonexistent"})
    result = run_python(sys.executable, script, env)
    assert result.returncode == 0, result.stderr
    assert "Installing" not in result.stdout and STANDIN_MESSAGE in result.stdout
    assert "scaled_dot_product_attention backends:" in result.stdout


def test_setup_cell_only_reports_the_device_off_colab(tmp_path):
    script = tmp_path / "setup_cell.py"
    script.write_text(setup_source() + "\nprint('ON_COLAB', ON_COLAB)\n")
    env = environment(**{INSTALL_SPEC_VARIABLE: "/nonexistent"})
    result = run_python(sys.executable, script, env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "ON_COLAB False" and "Installing" not in result.stdout
    assert lines[0].startswith(("cpu", "cuda", "mps")) and "backends:" in lines[1]
