"""The CPU time a learner waits for a failing check: median and worst over a blind set's mistakes.

`python tests/blind_wait.py i` runs each mistake of blind set I through its check and prints, per
notebook and over the set, the median and the worst CPU seconds (this process's, so the figure does
not depend on what else the machine runs), and the five slowest mistakes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from blind_measure import outcome


def main(which: str) -> None:
    """Time every mistake of blind set `which` and print the figures."""
    module = __import__(f"learner_mistakes_blind_{which}")
    folder = Path(tempfile.mkdtemp())
    times: list[tuple[float, str, str]] = []
    for edit in getattr(module, f"HOLDOUT_{which.upper()}"):
        start = time.process_time()
        got, _ = outcome(edit, folder)
        times.append((time.process_time() - start, edit.exercise, edit.idea))
        print(f"{times[-1][0]:6.2f} s  {got:8s} {edit.exercise} [{edit.idea}]", flush=True)
    from attn_course.reference import EXERCISES

    notebook = {name: stem for stem, names in EXERCISES.items() for name in names}
    print("\nnotebook            mistakes  median s  worst s")
    for stem in EXERCISES:
        mine = [t for t, exercise, _ in times if notebook[exercise] == stem]
        if mine:
            print(f"{stem:26s} {len(mine):3d} {statistics.median(mine):8.2f} {max(mine):8.2f}")
    every = [t for t, _, _ in times]
    print(f"{'all':26s} {len(every):3d} {statistics.median(every):8.2f} {max(every):8.2f}")
    print("slowest:", *(f"{t:.1f} s {e} [{i}]" for t, e, i in sorted(times, reverse=True)[:5]), sep="\n  ")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(sys.argv[1] if len(sys.argv) > 1 else "i")
