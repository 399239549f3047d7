"""How a failed check looks in Jupyter: its message in red, no traceback from inside the check.

And what a cell that names an exercise whose cell was never run says: `check_softmax(softmax)` in a
kernel where the cell defining `softmax` has not run raises NameError, shown as one line that says
to run that cell first.
"""

from __future__ import annotations

import textwrap
from typing import Any

from attn_course.checks._harness import CHECKS, RED, RESET, CheckerError, CheckFailed


def missing_exercise_message(error: NameError) -> str | None:
    """What to say when `error` is about an exercise whose defining cell has not run, else None.

    >>> print(missing_exercise_message(NameError("name 'softmax' is not defined", name="softmax")))
    `softmax` is not defined in this kernel: run the cell that defines `softmax` first (its exercise,
    right above check_softmax). Until then the cells below use the course's `softmax`.
    """
    name = getattr(error, "name", None)
    if not isinstance(name, str) or name not in CHECKS:
        return None
    return (
        f"`{name}` is not defined in this kernel: run the cell that defines `{name}` first (its exercise,\n"
        f"right above check_{name}). Until then the cells below use the course's `{name}`."
    )


WIDTH = 100
"""The longest line a check's message is shown with: JupyterLab breaks longer ones mid-word."""


def readable(message: str, width: int = WIDTH) -> str:
    """`message` with every line wrapped at spaces to at most `width` characters (a word longer stays whole).

    A line that starts a list ("- ") keeps its continuation under its text.

    >>> print(readable("Your softmax normalises along dim=0, the batch: rows must sum to 1 along dim.", 40))
    Your softmax normalises along dim=0, the
    batch: rows must sum to 1 along dim.
    """
    lines = []
    for line in message.splitlines() or [""]:
        indent = "  " if line.startswith("- ") else ""
        lines.extend(
            textwrap.wrap(
                line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
            )
            or [""]
        )
    return "\n".join(lines)


def _show_check_failure(
    shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
) -> None:
    """IPython custom exception handler: show the error with the message alone as its traceback."""
    if isinstance(value, NameError):
        message = missing_exercise_message(value)
        if message is None:  # any other NameError: IPython's usual traceback
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        else:
            shell._showtraceback(etype, value, [f"{RED}NameError{RESET}: {message}"])  # laid out by hand
        return
    if isinstance(value, CheckerError):
        text = readable(f"CheckerError (not your mistake): {value}")
        shell._showtraceback(
            etype,
            value,
            [
                text.replace(
                    "CheckerError (not your mistake)", f"{RED}CheckerError (not your mistake){RESET}", 1
                )
            ],
        )
        return
    text = readable(f"CheckFailed: {value}")  # wrapped as shown, with the label on its first line
    shell._showtraceback(etype, value, [text.replace("CheckFailed", f"{RED}CheckFailed{RESET}", 1)])


def show_failures_without_traceback() -> None:
    """Inside IPython, show a CheckFailed or a CheckerError as its message only, and a NameError of an
    exercise as what to run first; elsewhere do nothing.

    The cell still ends in an error (the kernel reports CheckFailed), so graders and nbval see the
    failure. Run All goes on past it in a student notebook, whose check cells the release tags
    `raises-exception` (`attn_course.tooling.release.RUN_ON_TAG`).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((CheckFailed, CheckerError, NameError), _show_check_failure)
