"""After an exercise's check passes, the look and measure cells run the learner's code, not the course's.

For each (notebook, exercise, right learner solution) of `SWAPS` (in `solution_runs.py`), a right
solution written as a learner writes it (`learner_code.py`: another spelling than the course's,
view/transpose for rearrange, stack and flatten for rearrange, its own masked_fill) is defined after
the exercise's check cell and checked again, wrapped so that every call (for a class: every
construction and forward) records the cell it ran in. The notebook runs in quick mode, and every
later cell that names the exercise in `yours_if_passed("NAME")` must have called the learner's version
(as its check did) and said "Using your `NAME`".

Each notebook runs once, with all its swaps, and that run is nbval's run of the solution notebook
(`solution_runs.py`); adding an exercise is one line in `SWAPS`.
"""

from __future__ import annotations

import functools
import hashlib
import json

import nbformat
import pytest
from solution_runs import SWAP_TAG, SWAPS, execute, recorded_run, swapped_solution


@functools.cache
def run_swapped(stem: str) -> tuple[nbformat.NotebookNode, dict[str, list[str]]]:
    """Notebook `stem` run with every swap of SWAPS in it; the cells (`fingerprint`) each swap ran in.

    It is nbval's run of the solution notebook, which is handed the swapped notebook
    (`solution_runs`); the notebook runs here only when nbval did not run it in this process.
    """
    notebook = recorded_run(stem) or execute(swapped_solution(stem))
    errors = [
        (index, out.ename, out.evalue[:200])
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not errors, f"{stem} with the learner's versions swapped in: {errors}"
    report = "".join(out.get("text", "") for out in notebook.cells[-1].outputs if out.output_type == "stream")
    return notebook, json.loads(report)


def fingerprint(cell: nbformat.NotebookNode) -> str:
    """What the kernel records of the cell it runs (IPython gives no cell id here): its source's SHA-1."""
    return hashlib.sha1(cell.source.encode()).hexdigest()


def _stream(cell: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")


RUN_ON_OTHER_PROCESSES = frozenset({"ring_attention"})
"""Exercises whose learner version runs in other processes (notebook 11's ring, on its ranks), where the
kernel's recorder cannot see the calls: for them the check must pass on the learner's version and every
look cell after it must say that it used the learner's version."""


@pytest.mark.parametrize(("stem", "name"), [(stem, name) for stem, name, _ in SWAPS], ids=lambda v: v)
def test_cells_after_the_check_run_the_learners_version(stem, name):
    notebook, calls = run_swapped(stem)
    check = next(
        index
        for index, cell in enumerate(notebook.cells)
        if cell.metadata.get(SWAP_TAG) == name and cell.source.startswith(f"check_{name}(")
    )
    assert f"check_{name} passed" in _stream(notebook.cells[check]), "the learner's right version must pass"
    looks = [
        index
        for index, cell in enumerate(notebook.cells)
        if index > check and cell.cell_type == "code" and f'yours_if_passed("{name}")' in cell.source
    ]
    assert looks, f'no cell of {stem} after check_{name} uses yours_if_passed("{name}")'
    ran_in = set(calls.get(name, []))
    elsewhere = name in RUN_ON_OTHER_PROCESSES
    assert elsewhere or fingerprint(notebook.cells[check]) in ran_in, (
        f"check_{name} did not call the learner's version"
    )
    for index in looks:
        cell = notebook.cells[index]
        assert elsewhere or fingerprint(cell) in ran_in, (
            f"{stem} cell {index} did not call the learner's {name}"
        )
        assert f"Using your `{name}`" in _stream(cell), (stem, index, _stream(cell)[:300])
