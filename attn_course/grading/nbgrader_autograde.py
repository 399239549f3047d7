"""nbgrader's autograde with the course's rules: each check cell graded as `attn-course grade` grades it.

nbgrader runs the locked check cells (`check_NAME(NAME)`) in the learner's kernel, after the
learner's code, so a learner who imports `attn_course.reference` or replaces `check_NAME` would
score there. The nbgrader course that `attn-course export nbgrader` writes configures two
preprocessors around nbgrader's `Execute` instead (see its `nbgrader_config.py`):

- `CourseChecks`, before it, marks the demonstrations nothing graded needs to be skipped, as
  `attn-course grade` leaves them unrun (`demonstrations`; nbclient's `skip-execution` tag), and
  replaces each check cell's source by the grader's own code: the
  course's checks imported afresh from the installed package (whatever the learner did to
  `attn_course` modules, `sys.path` or files in the folder does not count), the reference and
  tampering refused by `kernel_checks`, exactly as in `attn-course grade`, each result printed
  after a random nonce that the learner's code never saw;
- `CourseVerdicts`, after it, takes those tags off again (a skipped cell's output says it was
  skipped), reads the results and puts the check cell back as it was, with
  the check's message as its output and an error output when the exercise did not pass, which is
  what nbgrader scores: the points when there is no error, else 0.

Imported by nbgrader's process only (it needs nbgrader); the learner's kernel imports `kernel_checks`.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

import attn_course
from attn_course.grading.demonstrations import skippable
from attn_course.grading.execute import SKIPPED
from attn_course.grading.kernel_checks import MARKER
from attn_course.reference import EXERCISES

EXERCISE_NAMES = {name for names in EXERCISES.values() for name in names}
SOURCE_KEY = "check_source"
"""Where `CourseChecks` keeps a check cell's own source (in the cell's `attn_course` metadata)."""
SKIP_TAG = "skip-execution"
"""The tag of a cell nbgrader's executor (nbclient) does not run."""
SKIP_KEY = "skipped"
"""The mark `CourseChecks` leaves on a demonstration it tagged `SKIP_TAG` (in `attn_course` metadata)."""

GRADER_CELL = """\
import sys as _attn_sys, importlib as _attn_importlib
_attn_kept = {{_n: _attn_sys.modules.pop(_n) for _n in [*_attn_sys.modules]
              if _n.split(".")[0] == "attn_course"}}
_attn_path = _attn_sys.path[:]
_attn_sys.path[:] = [{parent!r}] + [_p for _p in _attn_sys.path if _p not in ("", ".", {work!r})]
_attn_importlib.invalidate_caches()
try:
    from attn_course.grading import kernel_checks as _attn_grader
    _attn_grader.setup({parent!r}, {nonce!r})
    _attn_grader.grade_exercise({name!r}, globals())
finally:  # the learner's notebook goes on with its own modules
    for _n in [_n for _n in _attn_sys.modules if _n.split(".")[0] == "attn_course"]:
        del _attn_sys.modules[_n]
    _attn_sys.modules.update(_attn_kept)
    _attn_sys.path[:] = _attn_path
"""
"""A check cell as nbgrader runs it: what `execute` runs after a notebook, for one exercise."""


def check_cell_exercise(cell: nbformat.NotebookNode) -> str:
    """The exercise whose locked check cell this is (grade id `NAME-check`), or ""."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    grade_id = str(meta.get("grade_id", ""))
    name = grade_id.removesuffix("-check")
    if (
        cell.cell_type == "code"
        and meta.get("grade")
        and grade_id.endswith("-check")
        and name in EXERCISE_NAMES
    ):
        return name
    return ""


class CourseChecks(NbGraderPreprocessor):
    """Before `Execute`: each check cell becomes the course grader's code for its exercise."""

    def preprocess(self, nb: nbformat.NotebookNode, resources: dict) -> tuple[nbformat.NotebookNode, dict]:
        nonce = secrets.token_hex(16)
        resources["attn_course_nonce"] = nonce
        parent = str(Path(attn_course.__file__).resolve().parents[1])
        work = str(resources.get("metadata", {}).get("path", ""))
        stem = str(resources.get("unique_key", "") or resources.get("metadata", {}).get("name", ""))
        for index in skippable(nb, EXERCISES.get(stem, ()), stem) if stem in EXERCISES else ():
            cell = nb.cells[index]
            tags = cell.metadata.setdefault("tags", [])
            if SKIP_TAG not in tags:
                tags.append(SKIP_TAG)
                cell.metadata.setdefault("attn_course", {})[SKIP_KEY] = True
        for cell in nb.cells:
            name = check_cell_exercise(cell)
            if name:
                cell.metadata.setdefault("attn_course", {})[SOURCE_KEY] = cell.source
                cell.source = GRADER_CELL.format(parent=parent, work=work, nonce=nonce, name=name)
        return nb, resources


def _payloads(cell: nbformat.NotebookNode, nonce: str) -> list[dict[str, Any]]:
    prefix = f"{MARKER}-{nonce} "
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    found = []
    for line in text.splitlines():
        if line.startswith(prefix):
            try:
                found.append(json.loads(line[len(prefix) :]))
            except ValueError:
                continue
    return found


def verdict(name: str, payloads: list[dict[str, Any]], error: str = "") -> tuple[bool, str]:
    """(passed, message) for exercise `name` from the grader's lines in its cell, as `attn-course grade`."""
    ready = [p for p in payloads if "ok" in p]
    if not ready:
        why = error or "no answer from the grader's code in the kernel"
        return False, f"the grader could not check this notebook: {why}."
    if not ready[-1]["ok"]:
        return False, f"the grader could not check this notebook: {ready[-1].get('problem', '')}."
    found = [p for p in payloads if p.get("exercise") == name]
    if not found:
        return False, "the grader could not check it" + (f": {error}" if error else "")
    payload = found[-1]
    if not payload.get("defined"):
        return False, f"`{name}` was never defined: no cell before this check defines it."
    if payload.get("not_graded"):
        return False, f"not graded: {payload.get('message', '')}"
    return bool(payload.get("passed")), str(payload.get("message", ""))


class CourseVerdicts(NbGraderPreprocessor):
    """After `Execute`: each check cell back as it was, its output the verdict that nbgrader scores."""

    def preprocess(self, nb: nbformat.NotebookNode, resources: dict) -> tuple[nbformat.NotebookNode, dict]:
        nonce = resources.get("attn_course_nonce", "")
        for cell in nb.cells:
            if cell.metadata.get("attn_course", {}).pop(SKIP_KEY, None):
                cell.metadata["tags"].remove(SKIP_TAG)
                for key in ("tags", "attn_course"):
                    if not cell.metadata[key]:
                        del cell.metadata[key]
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=SKIPPED)]
        for cell in nb.cells:
            name = check_cell_exercise(cell)
            original = cell.metadata.get("attn_course", {}).pop(SOURCE_KEY, None)
            if not name or original is None:
                continue
            if not cell.metadata["attn_course"]:
                del cell.metadata["attn_course"]
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            error = f"{errors[-1].get('ename', '')}: {errors[-1].get('evalue', '')}" if errors else ""
            passed, message = verdict(name, _payloads(cell, nonce) if nonce else [], error)
            cell.source = original
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{name}: {message}\n")]
            if not passed:
                cell.outputs.append(
                    nbformat.v4.new_output("error", ename="CheckFailed", evalue=message, traceback=[message])
                )
        return nb, resources
