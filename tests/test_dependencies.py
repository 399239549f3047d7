"""environment.yml (conda, for learners) declares what pyproject.toml (pip) gives learners."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def pyproject_requirements() -> set[str]:
    """The package's dependencies and its `lab` extra: what `make lab` installs for learners."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lab = project["optional-dependencies"]["lab"]
    return {re.sub(r"\s+", "", req) for req in [*project["dependencies"], *lab]}


def environment_requirements() -> tuple[set[str], str]:
    """The pip requirements of environment.yml and its python pin."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    python = next(line.split("- ", 1)[1] for line in lines if line.strip().startswith("- python"))
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    pip = [line.strip()[2:] for line in lines[start + 1 :] if line.strip().startswith("- ")]
    return {re.sub(r"\s+", "", req) for req in pip if not req.startswith("--")}, python


def test_environment_yml_and_pyproject_declare_the_same_requirements():
    pip, _ = environment_requirements()
    assert pip == pyproject_requirements()


def test_python_versions_agree():
    _, python = environment_requirements()
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == f"python{requires}"
