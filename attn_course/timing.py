"""Wall time of each notebook, run top to bottom in a fresh kernel (kernel start included).

Run as `python -m attn_course.timing [NOTEBOOK_OR_FOLDER ...]` (default: solutions/).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TARGET_SECONDS = 20.0


@dataclass(frozen=True)
class NotebookTiming:
    """How long one notebook took to run, and whether it ran without an error."""

    path: Path
    """The notebook."""
    seconds: float
    """Wall time from kernel start to the end of the last cell."""
    error: str
    """Empty when every cell ran; else the error's name and message."""


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
    return NotebookTiming(path, time.perf_counter() - start, error)


def notebooks_in(paths: list[Path]) -> list[Path]:
    """The notebooks named, or found in the folders named, sorted."""
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.glob("*.ipynb")) if path.is_dir() else [path])
    return found


def main(argv: list[str] | None = None) -> int:
    """Print a table of notebook run times; non-zero exit if a notebook failed."""
    args = [Path(a) for a in (sys.argv[1:] if argv is None else argv)] or [Path("solutions")]
    print(f"{'notebook':<40} {'seconds':>8}  status (target: under {TARGET_SECONDS:.0f} s)")
    failed = False
    for path in notebooks_in(args):
        timing = time_notebook(path)
        status = timing.error or ("ok" if timing.seconds < TARGET_SECONDS else "over target")
        failed |= bool(timing.error)
        print(f"{path.name:<40} {timing.seconds:>8.1f}  {status}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
