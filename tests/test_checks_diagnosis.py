"""The diagnosis pipeline (attn_course/checks/_diagnosis.py): one order, findings as data, one renderer."""

from __future__ import annotations

import pytest
import torch
from learner_code import SCORES, learner

from attn_course.checks import CheckFailed, check_dot_product_scores
from attn_course.checks._diagnosis import LAYERS, Failure, diagnose_failure, primary, render
from attn_course.checks._harness import Mistake, expect_close, is_close


def test_the_order_of_diagnosis_is_written_once():
    assert [layer.id for layer in LAYERS] == [
        "known-mistake", "mutant", "property", "repair",
        "misplaced-arguments", "equal-argument", "non-finite", "where-wrong",
    ]  # fmt: skip


def _failure(**overrides):
    expected = torch.arange(6.0).reshape(2, 3)
    fields = {
        "actual": expected * 2,
        "expected": expected,
        "what": "Your f(x)",
        "called": "",
        "close": is_close,
    }
    return Failure(**{**fields, **overrides})


def test_a_known_mistake_is_the_finding_and_its_message():
    doubled = Mistake("doubles the result: return x, not 2 * x.", lambda: torch.arange(6.0).reshape(2, 3) * 2)
    failure = _failure(mistakes=[doubled])
    found = diagnose_failure(failure)
    assert primary(found) == "known-mistake" and set(found) == {"known-mistake"}  # nothing after it runs
    assert render(failure, found) == "Your f(x) doubles the result: return x, not 2 * x."


def test_a_property_comes_first_in_the_message_and_a_check_may_narrow_the_layers():
    failure = _failure(diagnose=lambda actual, expected: "is twice what it should be.")
    found = diagnose_failure(failure, only=("property", "where-wrong"))
    assert set(found) == {"property"} and render(failure, found) == "Your f(x) is twice what it should be."
    assert primary(diagnose_failure(failure, only=("where-wrong",))) == "where-wrong"


def test_expect_close_raises_with_the_id_of_its_finding():
    expected = torch.ones(2, 3)
    with pytest.raises(CheckFailed) as failure:
        expect_close(expected.neg(), expected, "Your f(x)", called_as="", only=("where-wrong",))
    assert failure.value.finding == "where-wrong" and str(failure.value).startswith("Your f(x) is wrong: ")


def test_a_check_failure_carries_the_finding_its_message_is_about():
    wrong = learner(
        SCORES,
        "dot_product_scores",
        ("q @ k.transpose(-2, -1)", "(q @ k.transpose(-2, -1)).roll(1, dims=-1)"),
    )
    with pytest.raises(CheckFailed) as failure:
        check_dot_product_scores(wrong)
    assert failure.value.finding in {"property", "where-wrong", "mutant"}
    assert "passes this check written `return (q @ k.transpose(-2, -1)).roll(0, dims=-1)`" in str(
        failure.value
    )
