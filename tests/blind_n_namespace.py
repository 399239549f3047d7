"""Notebook 11's exercises with one text edit applied, as a learner's notebook holds them (blind set N).

`namespace(exercise, old, new)` runs the solution notebook's setup cell and every exercise cell (each
without its `### BEGIN/END SOLUTION` marker lines, as `solution_cells` reads them) in one namespace,
the cell of `exercise` with `old` replaced by `new`; each cell's source is registered in `linecache`,
as IPython does, so that a check can quote the learner's lines.
"""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Any

import nbformat
from learner_mistakes_holdout2 import solution_cells

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


def setup_cell() -> str:
    """The solution notebook's setup cell: the one that imports the checks."""
    notebook = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    return next(
        c.source
        for c in notebook.cells
        if c.cell_type == "code" and "from attn_course.checks import" in c.source
    )


def namespace(exercise: str | None = None, old: str = "", new: str = "") -> dict[str, Any]:
    """The notebook's names after its setup and exercise cells, `exercise`'s cell edited."""
    found = solution_cells()
    names: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(setup_cell(), "<setup>", "exec"), names)
    for name in EXERCISES:
        source = found[name]
        if name == exercise:
            assert source.count(old) == 1, f"{name}: the edit's text occurs {source.count(old)} times"
            source = source.replace(old, new)
        filename = f"<cell {name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), names)
    return names
