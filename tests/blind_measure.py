"""Run today's checks on a blind set and write what each mistake and alternative got.

`python tests/blind_measure.py a` writes tests/blind_first_run_a.json: per mistake its exercise,
idea, outcome (caught: CheckFailed; passed; or the other exception's type) and message; per
alternative its outcome and message. Whether a message names the idea is judged by a person
reading it, and recorded in tests/test_checks_blind.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def outcome(edit: Any, folder: Path) -> tuple[str, str]:
    """(outcome, message) of the exercise's check on the edited solution."""
    from learner_mistakes_blind_a import load

    import attn_course.checks
    from attn_course.checks import CheckerError, CheckFailed

    check = getattr(attn_course.checks, f"check_{edit.exercise}")
    out = io.StringIO()
    try:
        candidate = load(edit, folder)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            check(candidate)
    except CheckFailed as failure:
        return "caught", str(failure)
    except CheckerError as error:
        return "CheckerError", str(error)
    except Exception as error:  # noqa: BLE001 - recorded, not raised
        return type(error).__name__, str(error)
    return "passed", out.getvalue().strip()


def measure(which: str) -> dict[str, list[dict[str, str]]]:
    module = __import__(f"learner_mistakes_blind_{which}")
    suffix = which.upper()
    folder = Path(tempfile.mkdtemp())
    result: dict[str, list[dict[str, str]]] = {"mistakes": [], "alternatives": []}
    for kind, edits in (("mistakes", getattr(module, f"HOLDOUT_{suffix}")),
                        ("alternatives", getattr(module, f"ALTERNATIVES_{suffix}"))):  # fmt: skip
        for index, edit in enumerate(edits):
            got, message = outcome(edit, folder)
            print(f"{kind} {index} {edit.exercise} [{edit.idea}]: {got}", flush=True)
            result[kind].append(
                {"exercise": edit.exercise, "idea": edit.idea, "outcome": got, "message": message}
            )
    return result


if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("ATTN_COURSE_QUICK", "1")
    sys.path.insert(0, str(HERE))
    which = sys.argv[1]
    data = measure(which)
    (HERE / f"blind_first_run_{which}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
