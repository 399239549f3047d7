"""A check says the same thing on a quiet machine and on a busy one.

The mutation and repair layers once stopped after 10 s and 4 s of wall clock, so the same wrong code
got a fuller message on a quiet laptop than on a busy grading server. They now count their work
(runs of changed code), with a safety net in this process's CPU seconds that other processes cannot
spend; this runs learner-style wrong code of the time-bounded layers quietly and again beside four busy
processes, and compares the messages word for word. (The same 09 learner whose fix sits 285 runs deep
in the repair search got the line on a quiet machine and not on a busy one before.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from learner_code import ONLINE_SOFTMAX, SCORES, learner
from test_checks_fixtures import MaskWithoutHeadAxis

from attn_course.checks import (
    CheckFailed,
    check_dot_product_scores,
    check_MultiHeadAttention,
    check_online_softmax,
)

pytestmark = pytest.mark.slow


def _cases() -> Iterator[tuple[str, Callable[[Any], None], Any]]:
    """(name, check, wrong code): a repair of the learner's line, a repair of an error, an explained error."""
    roll = ("q @ k.transpose(-2, -1)", "(q @ k.transpose(-2, -1)).roll(1, dims=-1)")
    yield "repair", check_dot_product_scores, learner(SCORES, "dot_product_scores", roll)
    no_keepdim = ("block.max(dim=-1, keepdim=True).values", "block.max(dim=-1).values")
    yield "error repaired", check_online_softmax, learner(ONLINE_SOFTMAX, "online_softmax", no_keepdim)
    yield "error explained", check_MultiHeadAttention, MaskWithoutHeadAxis


def _messages(cases: list[tuple[str, Callable[[Any], None], Any]]) -> dict[str, str]:
    found = {}
    for name, check, candidate in cases:
        with pytest.raises(CheckFailed) as failure:
            check(candidate)
        found[name] = str(failure.value)
    return found


def test_messages_are_the_same_beside_four_busy_processes():
    cases = list(_cases())
    quiet = _messages(cases)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        loaded = _messages(cases)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert loaded == quiet
    assert "passes this check written `return (q @ k.transpose(-2, -1)).roll(0, dims=-1)`" in quiet["repair"]
    assert "passes this check written `m_new = torch.maximum(" in quiet["error repaired"]
