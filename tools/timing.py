"""Wall time of each notebook, run top to bottom in a fresh kernel (kernel start included), and of its
slowest cells: a learner's cell should take under `CELL_SECONDS` on a 2-core laptop at its default budget.

Run as `python -m tools.timing [NOTEBOOK_OR_FOLDER ...]` (default: solutions/).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from attn_course.quick_run import QUICK_VARIABLE

TARGET_SECONDS = 20.0
"""How long a notebook may take on a 2-core CPU, unless `TARGETS` says otherwise."""

TARGETS: dict[str, float] = {
    "06_flash_attention": 60.0,
    "07_kv_cache": 120.0,
    "08_triton_flash_attention": 60.0,
    "09_backward": 120.0,
    "10_modern_attention": 120.0,
    "11_attention_at_scale": 90.0,
}
"""Longer targets, by notebook stem, for the notebooks that benchmark or train."""

CELL_SECONDS = 60.0
"""How long one cell may take on a 2-core CPU at the notebook's default budget."""
ANNOUNCED_SECONDS = 10.0
"""A cell longer than this on a 2-core CPU says beforehand how long it takes: `make bench` lists them."""


def target_seconds(path: Path) -> float:
    """The run-time target of a notebook, by its file name.

    >>> target_seconds(Path("solutions/07_kv_cache.ipynb")), target_seconds(Path("02_scaling.ipynb"))
    (120.0, 20.0)
    """
    return TARGETS.get(path.stem, TARGET_SECONDS)


@dataclass(frozen=True)
class NotebookTiming:
    """How long one notebook took to run, and whether it ran without an error."""

    path: Path
    """The notebook."""
    seconds: float
    """Wall time from kernel start to the end of the last cell."""
    error: str
    """Empty when every cell ran; else the error's name and message."""
    cells: tuple[tuple[int, float], ...] = ()
    """(index, seconds) of each code cell that ran, slowest first."""


def time_notebook(path: Path, timeout: int = 600) -> NotebookTiming:
    """Run one notebook in a fresh python3 kernel of this environment and time it."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no start-up warnings between the figures
    )
    start = time.perf_counter()
    error = ""
    try:
        client.execute()
    except CellExecutionError as failure:
        error = f"{failure.ename}: {failure.evalue}"
    return NotebookTiming(path, time.perf_counter() - start, error, cell_seconds(notebook))


def cell_seconds(notebook: nbformat.NotebookNode) -> tuple[tuple[int, float], ...]:
    """(index, seconds) of each executed code cell, slowest first, from nbclient's timing metadata.

    >>> stamps = {"iopub.execute_input": "2026-12-03T07:00:00.000000Z",
    ...           "shell.execute_reply": "2026-12-03T07:00:02.500000Z"}
    >>> cell = nbformat.v4.new_code_cell("pass", metadata={"execution": stamps})
    >>> cell_seconds(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("x"), cell]))
    ((1, 2.5),)
    """
    from datetime import datetime

    found = []
    for index, cell in enumerate(notebook.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        began, ended = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if cell.cell_type == "code" and began and ended:
            seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds()
            found.append((index, round(seconds, 3)))
    return tuple(sorted(found, key=lambda pair: -pair[1]))


def notebooks_in(paths: list[Path]) -> list[Path]:
    """The notebooks named, or found in the folders named, sorted."""
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.glob("*.ipynb")) if path.is_dir() else [path])
    return found


def main(argv: list[str] | None = None) -> int:
    """Print a table of notebook run times; non-zero exit if a notebook failed."""
    args = [Path(a) for a in (sys.argv[1:] if argv is None else argv)] or [Path("solutions")]
    os.environ.pop(QUICK_VARIABLE, None)  # time what a learner runs: the full budgets
    print(f"{'notebook':<40} {'seconds':>8}  {'target':>6}  status")
    failed = False
    for path in notebooks_in(args):
        timing = time_notebook(path)
        target = target_seconds(path)
        status = timing.error or ("ok" if timing.seconds < target else "over target")
        failed |= bool(timing.error)
        print(f"{path.name:<40} {timing.seconds:>8.1f}  {target:>6.0f}  {status}", flush=True)
        long_cells = [(index, seconds) for index, seconds in timing.cells if seconds >= ANNOUNCED_SECONDS]
        slow = [f"cell {index}: {seconds:.0f} s" for index, seconds in long_cells]
        if slow:
            over = sum(seconds > CELL_SECONDS for _, seconds in timing.cells)
            print(
                f"    cells over {ANNOUNCED_SECONDS:.0f} s: {', '.join(slow)}"
                + (f" ({over} over {CELL_SECONDS:.0f} s)" if over else "")
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
