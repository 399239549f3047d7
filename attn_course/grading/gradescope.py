"""A Gradescope autograder: the course's own grader, packed as the zip Gradescope asks for.

`attn-course export gradescope OUT.zip` (`export_gradescope`) writes `setup.sh` and
`run_autograder` at the zip's root, the course package's source (`course/`, installed by
`setup.sh` with a CPU build of torch) and `attn_course_autograder.json` (the notebooks to grade
and the limits). On Gradescope, `run_autograder` runs `python3 -m attn_course.grading.gradescope`
(`run_autograder` below): it grades the course notebooks in `ROOT/submission` exactly as
`attn-course grade` grades a learner's folder and writes `ROOT/results/results.json` in
Gradescope's format: one test per exercise, with the feedback the learner would get, and the
total. ROOT is `/autograder`, or `$AUTOGRADER_ROOT`. Whatever happens, results.json is written.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import attn_course
from attn_course import __version__
from attn_course.grading.discover import Learner, SubmissionsError, course_notebooks, find_learner
from attn_course.grading.grader import (
    DEFAULT_MEMORY_GIB,
    DEFAULT_TIMEOUT,
    grade_tasks,
    learner_result,
    make_limits,
)
from attn_course.grading.points import POINTS
from attn_course.grading.report import feedback_text
from attn_course.grading.results import LearnerResult
from attn_course.reference import EXERCISES
from attn_course.tooling.repository import PACKAGE

CONFIG = "attn_course_autograder.json"
ROOT_VARIABLE = "AUTOGRADER_ROOT"
LEARNER = "your submission"

TORCH = "torch==2.13.0"
"""The torch the autograder installs: the Makefile's pin (`TORCH`), from PyPI."""
VENV = "attn-course-venv"
"""The autograder's own virtual environment, in ROOT (setup.sh makes it, run_autograder uses it)."""

VENV_MADE = "# The virtual environment is made: from here on only its pip installs, from PyPI alone."
"""The line of setup.sh after which it installs packages."""

SETUP_SH = """\
#!/usr/bin/env bash
# Written by `attn-course export gradescope` (attn-course {version}): Gradescope runs it once, in
# /autograder/source, to build the autograder's image (Ubuntu 22.04 or 24.04). It makes a virtual
# environment of its own in $ROOT/{venv} (never pip into the system Python, which Ubuntu 24.04
# refuses: PEP 668) and installs {torch} and the course package at this version, from
# the copy in course/, all from PyPI. ROOT is /autograder unless AUTOGRADER_ROOT says otherwise.
set -euo pipefail
cd "$(dirname "$0")"
root="${{AUTOGRADER_ROOT:-/autograder}}"
venv="$root/{venv}"
apt_install() {{
  if ! command -v apt-get >/dev/null; then
    echo "setup.sh: $* missing and no apt-get to install it: use Gradescope's Ubuntu 22.04 or 24.04 image" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}}
command -v python3 >/dev/null || apt_install python3 python3-venv
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup.sh: the course needs Python 3.10 or later, this image has $(python3 -V 2>&1):" \\
    "choose Ubuntu 22.04 or 24.04" >&2
  exit 1
fi
rm -rf "$venv"
if ! python3 -m venv "$venv" >/dev/null 2>&1; then  # Debian and Ubuntu ship venv's pip apart
  rm -rf "$venv"
  apt_install python3-venv
  python3 -m venv "$venv"
fi
{venv_made}
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install "{torch}"
"$venv/bin/python" -m pip install ./course
"$venv/bin/python" -c \\
  "import attn_course; assert attn_course.__version__ == '{version}', attn_course.__version__"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Written by `attn-course export gradescope` (attn-course {version}): Gradescope runs it for each
# submission. It grades the course notebooks in $ROOT/submission with the course's own grader and
# writes $ROOT/results/results.json. ROOT is /autograder unless AUTOGRADER_ROOT says otherwise.
root="${{AUTOGRADER_ROOT:-/autograder}}"
python="$root/{venv}/bin/python"  # made by setup.sh
[ -x "$python" ] || python=python3
"$python" -m attn_course.grading.gradescope "$root" "$root/source/{config}"
status=$?
if [ ! -s "$root/results/results.json" ]; then  # never an empty result, even if Python could not start
  mkdir -p "$root/results"
  message="The autograder could not run (exit status $status): tell your instructor."
  printf '{{"score": 0, "output": "%s", "tests": []}}\\n' "$message" > "$root/results/results.json"
fi
"""


class ExportError(SubmissionsError):
    """The autograder cannot be exported (a notebook name, the zip, the course source)."""


@dataclass(frozen=True)
class GradescopeExport:
    """What `export_gradescope` wrote."""

    zip: Path
    """The autograder zip to upload to Gradescope."""
    notebooks: tuple[str, ...]
    """The course notebooks its run_autograder grades, by stem."""
    files: tuple[str, ...]
    """Every file in the zip."""


def _license_files(pyproject: str) -> list[str]:
    """The `license-files` that pyproject.toml names (LICENSE where it names none)."""
    match = re.search(r"^license-files\s*=\s*\[([^\]]*)\]", pyproject, re.M)
    return re.findall(r"[\"']([^\"']+)[\"']", match.group(1)) if match else ["LICENSE"]


def _package_files(package: Path) -> dict[str, bytes]:
    files = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    return {p.relative_to(package.parent).as_posix(): p.read_bytes() for p in files}


def _checkout_source(root: Path) -> dict[str, bytes]:
    """The files pip needs from a checkout: pyproject.toml, README.md, the license files it names."""
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    names = ["pyproject.toml", "README.md", *_license_files(pyproject)]
    missing = [name for name in names if not (root / name).is_file()]
    if missing:
        raise ExportError(f"{', '.join(missing)} (named by {root / 'pyproject.toml'}) not found in {root}")
    return {name: (root / name).read_bytes() for name in names}


PYPROJECT = """\
# Written by `attn-course export gradescope` from the installed attn-course {version}'s metadata.
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = {name}
version = {version_toml}
description = {description}
readme = {{file = "README.md", content-type = "text/markdown"}}
requires-python = {python}
license = {license}
license-files = {license_files}
dependencies = {dependencies}

[project.scripts]
{scripts}

[tool.setuptools.packages.find]
include = ["attn_course*"]
"""


def _installed_source(package: Path) -> dict[str, bytes]:
    """The same files, written from the installed distribution's metadata (no checkout at hand)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(PACKAGE)
    except PackageNotFoundError:
        dist = None
    if (
        dist is None
        or Path(str(dist.locate_file("attn_course/__init__.py"))).resolve() != package / "__init__.py"
    ):
        raise ExportError(
            f"the course's source is not here: neither pyproject.toml beside {package} (a checkout) nor "
            f"the metadata of an installed {PACKAGE} there: pip install {PACKAGE}, or export from a checkout"
        )
    meta = dist.metadata
    licenses = {}
    for file in dist.files or []:
        if file.parent.name == "licenses" and file.parent.parent.name.endswith(".dist-info"):
            licenses[file.name] = Path(str(dist.locate_file(file))).read_bytes()
    names = meta.get_all("License-File") or list(licenses)
    missing = [name for name in names if name not in licenses]
    if missing:
        raise ExportError(f"the installed {PACKAGE} lacks its license file(s) {', '.join(missing)}")
    requires = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    scripts = "\n".join(f"{json.dumps(e.name)} = {json.dumps(e.value)}" for e in dist.entry_points
                        if e.group == "console_scripts")  # fmt: skip
    pyproject = PYPROJECT.format(
        version=meta["Version"],
        name=json.dumps(meta["Name"]),
        version_toml=json.dumps(meta["Version"]),
        description=json.dumps(meta["Summary"] or ""),
        python=json.dumps(meta["Requires-Python"] or ">=3.10"),
        license=json.dumps(meta["License-Expression"] or "MIT"),
        license_files=json.dumps(names),
        dependencies=json.dumps(requires, indent=4).replace("\n]", ",\n]") if requires else "[]",
        scripts=scripts,
    )
    readme = getattr(meta, "get_payload", lambda: "")() or ""  # the long description: the README
    return {"pyproject.toml": pyproject.encode(), "README.md": str(readme).encode(), **licenses}


def course_source() -> dict[str, bytes]:
    """What pip needs to install this course package, by path under course/: from a checkout, or
    else from the installed distribution's metadata; ExportError saying what is missing."""
    package = Path(attn_course.__file__).resolve().parent
    root = package.parent
    if (root / "pyproject.toml").is_file():
        files = _checkout_source(root)
    else:
        files = _installed_source(package)
    return {**files, **_package_files(package)}


def setup_sh() -> str:
    """The autograder's setup.sh for this version of the course."""
    return SETUP_SH.format(version=__version__, venv=VENV, torch=TORCH, venv_made=VENV_MADE)


def export_gradescope(
    out: Path,
    notebooks: list[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    memory_gib: float = DEFAULT_MEMORY_GIB,
) -> GradescopeExport:
    """Write the Gradescope autograder zip `out` for the course notebooks `notebooks` (all by default)."""
    stems = course_notebooks(notebooks)
    sources = course_source()
    config = {"version": __version__, "notebooks": list(stems), "timeout": timeout, "memory_gib": memory_gib}
    entries: dict[str, tuple[bytes, int]] = {
        "setup.sh": (
            SETUP_SH.format(version=__version__, venv=VENV, torch=TORCH, venv_made=VENV_MADE).encode(),
            0o755,
        ),
        "run_autograder": (
            RUN_AUTOGRADER.format(version=__version__, config=CONFIG, venv=VENV).encode(),
            0o755,
        ),
        CONFIG: ((json.dumps(config, indent=2) + "\n").encode(), 0o644),
    }
    for name, data in sources.items():
        entries["course/" + name] = (data, 0o644)
    if out.is_dir():
        raise ExportError(f"{out} is a folder: name the zip file to write (for example autograder.zip)")
    try:
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, (data, mode) in entries.items():
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
    except OSError as error:
        if out.is_file():
            out.unlink()
        raise ExportError(f"cannot write {out}: {error.strerror or error}") from error
    return GradescopeExport(out, stems, tuple(entries))


def results_json(learner: LearnerResult, seconds: float = 0.0) -> dict:
    """Gradescope's results.json for one graded submission: a test per exercise, the total, the feedback."""
    tests = []
    for number, notebook in enumerate(learner.notebooks, start=1):
        for part, exercise in enumerate(notebook.exercises, start=1):
            state = "passed" if exercise.passed else "not passed"
            if exercise.upstream:
                state = f"right; failed through your `{exercise.upstream}`"
            tests.append({
                "name": f"{notebook.stem}: {exercise.exercise}",
                "number": f"{number}.{part}",
                "score": exercise.points,
                "max_score": POINTS[exercise.exercise],
                "status": "passed" if exercise.passed else "failed",
                "output": f"{exercise.exercise} {state}: {exercise.message}",
                "visibility": "visible",
            })  # fmt: skip
    maximum = sum(POINTS[name] for n in learner.notebooks for name in EXERCISES[n.stem])
    return {
        "score": learner.total,
        "execution_time": round(seconds),
        "output": feedback_text(learner, maximum),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def _failure(message: str) -> dict:
    return {"score": 0, "output": message, "visibility": "visible", "tests": []}


def grade_submission(root: Path, config: dict) -> dict:
    """Grade `root/submission` for the notebooks in `config`; Gradescope's results as a dict."""
    start = time.perf_counter()
    stems = course_notebooks(config["notebooks"])
    submission = root / "submission"
    if submission.is_dir():
        learner = replace(find_learner(submission), name=LEARNER)
    else:
        learner = Learner(LEARNER, submission, (), ("nothing was handed in (no submission folder)",))
    tasks = [(learner, s) for s in learner.submissions if s.stem in stems]
    hidden = (str(submission.resolve()), str((root / "results").resolve()))
    limits = make_limits(hidden, jobs=2, timeout=config["timeout"], memory_gib=config["memory_gib"])
    results = grade_tasks(tasks, limits, jobs=2)
    return results_json(learner_result(learner, stems, results), time.perf_counter() - start)


def run_autograder(root: Path, config_path: Path) -> Path:
    """Grade Gradescope's submission under `root` and write `root/results/results.json`; its path."""
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        payload = grade_submission(root, config)
    except Exception as error:  # the grader's own failure: still a result that says so
        payload = _failure(
            f"The autograder failed ({type(error).__name__}: {error}); nothing was graded. "
            "Tell your instructor."
        )
    partial = results.with_suffix(".json.partial")
    partial.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, results)
    return results


def main(argv: list[str] | None = None) -> int:
    """`python -m attn_course.grading.gradescope ROOT CONFIG`, as run_autograder calls it."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else os.environ.get(ROOT_VARIABLE, "/autograder"))
    config = Path(args[1]) if len(args) > 1 else root / "source" / CONFIG
    run_autograder(root, config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
