"""What every check test asserts: a quiet pass line for right answers, the named mistake for wrong ones."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

from attn_course.checks import CheckFailed


def assert_accepted(check: Callable[[Any], None], candidate: Any, capsys: pytest.CaptureFixture) -> None:
    """The check passes and prints exactly one pass line, nothing on stderr."""
    check(candidate)
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{check.__name__} passed: ")
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


def cpu_standing_in_for_cuda(monkeypatch: pytest.MonkeyPatch, checks_module: ModuleType) -> list[bool]:
    """Make the GPU case of a checks module run here, on the CPU; the list grows by one per use.

    Checks run an extra case on CUDA where there is a GPU (`cuda_device()`); the test machine has
    none, so the tests hand the CPU to that case to see that it runs and accepts a right answer.
    """
    calls: list[bool] = []

    def stand_in() -> torch.device:
        calls.append(True)
        return torch.device("cpu")

    monkeypatch.setattr(checks_module, "cuda_device", stand_in)
    return calls
