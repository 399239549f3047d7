"""Notebook 11's exercises with one text edit applied, as a learner's notebook holds them (blind set N).

`namespace(exercise, old, new)` runs the solution notebook's setup cell and every exercise cell (each
without its `### BEGIN/END SOLUTION` marker lines) in one namespace, the cell of `exercise` with `old`
replaced by `new`; each cell's source is registered in `linecache`, as IPython does, so that a check
can quote the learner's lines.
"""

from __future__ import annotations

import linecache
import re
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[1]
STEM = "11_attention_at_scale"
EXERCISES = (
    "merge_attention",
    "flash_decode",
    "ring_attention",
    "gather_kv",
    "append_kv",
    "latent_attention",
    "absorbed_latent_attention",
)


def cells() -> tuple[str, dict[str, str]]:
    """The setup cell's source, and each exercise's cell without its marker lines."""
    notebook = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    setup = next(source for source in code if "from attn_course.checks import" in source)
    found = {}
    for name in EXERCISES:
        source = next(s for s in code if re.search(rf"^(def|class) {name}\b", s, re.M))
        lines = [line for line in source.splitlines() if "### BEGIN SOLUTION" not in line]
        found[name] = "\n".join(line for line in lines if "### END SOLUTION" not in line)
    return setup, found


def namespace(exercise: str | None = None, old: str = "", new: str = "") -> dict[str, Any]:
    """The notebook's names after its setup and exercise cells, `exercise`'s cell edited."""
    setup, found = cells()
    names: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(setup, "<setup>", "exec"), names)
    for name in EXERCISES:
        source = found[name]
        if name == exercise:
            assert source.count(old) == 1, f"{name}: the edit's text occurs {source.count(old)} times"
            source = source.replace(old, new)
        filename = f"<cell {name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), names)
    return names
