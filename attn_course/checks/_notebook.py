"""How a failed check looks in Jupyter: its message in red, no traceback from inside the check."""

from __future__ import annotations

from typing import Any

from attn_course.checks._harness import RED, RESET, CheckerError, CheckFailed


def _show_check_failure(
    shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
) -> None:
    """IPython custom exception handler: show the error with the message alone as its traceback."""
    if isinstance(value, CheckerError):
        shell._showtraceback(etype, value, [f"{RED}CheckerError (not your mistake){RESET}: {value}"])
        return
    shell._showtraceback(etype, value, [f"{RED}CheckFailed{RESET}: {value}"])


def show_failures_without_traceback() -> None:
    """Inside IPython, show a CheckFailed or a CheckerError as its message only; elsewhere do nothing.

    The cell still ends in an error (the kernel reports CheckFailed), so "run all" stops there
    and graders and nbval see the failure.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((CheckFailed, CheckerError), _show_check_failure)
