"""What every check test asserts: a quiet pass line for right answers, the named mistake for wrong ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from attn_course.checks import CheckFailed


def assert_accepted(check: Callable[[Any], None], candidate: Any, capsys: pytest.CaptureFixture) -> None:
    """The check passes and prints exactly one pass line, nothing on stderr."""
    check(candidate)
    captured = capsys.readouterr()
    assert captured.out.startswith("✅") and "passed" in captured.out
    assert captured.out.count("\n") == 1
    assert captured.err == ""


def assert_rejected(
    check: Callable[[Any], None], candidate: Any, phrase: str, capsys: pytest.CaptureFixture
) -> None:
    """The check raises CheckFailed containing `phrase`, with no chained traceback and no output."""
    with pytest.raises(CheckFailed) as failure:
        check(candidate)
    assert phrase in str(failure.value)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
