"""The diagnosis pipeline (attn_course/checks/_diagnosis.py): one order, findings as data, one renderer."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
from learner_code import SCORES, learner

import attn_course.checks
from attn_course.checks import CheckFailed, check_dot_product_scores
from attn_course.checks._diagnosis import LAYERS, Failure, diagnose_failure, primary, render
from attn_course.checks._harness import Mistake, expect_close, is_close, library_dirs
from attn_course.checks._upstream import learner_upstream


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


def _gradients_failure(**overrides):
    """A failure over a tuple of three results, as a backward check's (dq, dk, dv)."""
    ones = torch.ones(2, 3)
    fields = {
        "actual": (ones, -2 * ones, 3 * ones),
        "expected": (ones, 2 * ones, 3 * ones),
        "what": "Your g(x)",
        "called": "\n(Called as g(x).)",
        "close": is_close,
        "parts": ("da", "db", "dc"),
    }
    return Failure(**{**fields, **overrides})


def test_a_tuple_of_results_runs_the_same_layers_as_a_tensor():
    ones = torch.ones(2, 3)
    negated = Mistake("negates db.", lambda: (ones, -2 * ones, 3 * ones))
    failure = _gradients_failure(mistakes=[negated])
    found = diagnose_failure(failure)
    assert primary(found) == "known-mistake" and set(found) == {"known-mistake"}
    assert render(failure, found) == "Your g(x) negates db.\n(Called as g(x).)"


def test_a_check_may_name_only_the_first_slip_of_its_ordered_table():
    ones = torch.ones(2, 3)
    first, second = (
        Mistake(words, lambda: (ones, -2 * ones, 3 * ones)) for words in ("negates db.", "flips db.")
    )
    assert diagnose_failure(_gradients_failure(mistakes=[first, second]))["known-mistake"].evidence == (
        "negates db.",
        "flips db.",
    )
    failure = _gradients_failure(mistakes=[first, second], first_slip_only=True)
    assert diagnose_failure(failure)["known-mistake"].evidence == ("negates db.",)


def test_only_the_parts_a_check_owns_are_compared():
    ones = torch.ones(2, 3)
    wrong_elsewhere = Mistake("negates db and drops da.", lambda: (0 * ones, -2 * ones, 0 * ones))
    assert "known-mistake" not in diagnose_failure(_gradients_failure(mistakes=[wrong_elsewhere]))
    found = diagnose_failure(_gradients_failure(mistakes=[wrong_elsewhere], owned=(1,)))
    assert found["known-mistake"].evidence == ("negates db and drops da.",)


def test_a_tuple_unnamed_is_located_by_the_check_with_its_hint():
    failure = _gradients_failure(locate=lambda: "gives the wrong db: negated.", unnamed_hint="\nLook at db.")
    found = diagnose_failure(failure, only=("known-mistake", "where-wrong"))
    assert primary(found) == "where-wrong"
    assert render(failure, found) == "Your g(x) gives the wrong db: negated.\nLook at db.\n(Called as g(x).)"
    plain = _gradients_failure()  # no locate: the first wrong part, described
    text = render(plain, diagnose_failure(plain, only=("where-wrong",)))
    assert text.startswith("Your g(x) gives the wrong db: ")


def test_no_check_wires_the_diagnosis_order_itself():
    """The layers' own functions are called from `_diagnosis.py` alone: the order is written once."""
    checks = Path(attn_course.checks.__file__).parent
    for path in sorted(checks.glob("*.py")):
        if path.name in ("_diagnosis.py", "_mutants.py", "_calls.py"):
            continue
        source = path.read_text()
        for layer in ("name_by_mutation(", "misplaced_in(", "slips_message("):
            if path.name == "_harness.py" and layer == "slips_message(":
                continue  # narrow_slips says the narrowed slips again, as the renderer does
            assert layer not in source, f"{path.name} calls {layer[:-1]}: diagnose through _diagnosis.fail"


def test_no_check_tries_its_known_mistakes_by_hand():
    """A check hands its known mistakes to the pipeline (`known-mistake`): no loop of its own calls them and
    raises their message, so that what is tried after a slip, and in what order, is written once."""
    checks = Path(attn_course.checks.__file__).parent
    for path in sorted(checks.glob("*.py")):
        if path.name == "_diagnosis.py":
            continue
        source = path.read_text()
        for by_hand in (".implementation(", "mistake.message"):
            assert by_hand not in source, f"{path.name} tries its mistakes by hand: pass them to expect_close"


def test_notebook_10s_mistakes_are_named_variants_not_knobs():
    """modern.py declares each slip once, as (message, a frozen variant), not as keyword knobs."""
    source = (Path(attn_course.checks.__file__).parent / "modern.py").read_text()
    assert "**knobs" not in source and "knobs" not in source


def test_an_earlier_exercise_is_found_in_each_namespace_that_holds_it(tmp_path):
    """A learner's helpers in a copy of their globals: two namespaces equal as dicts, each swapped."""
    learner_file = tmp_path / "learner.py"
    learner_file.write_text(
        "import torch\n\n"
        "def causal_mask(t_q, t_k):\n"
        "    return torch.ones(t_q, t_k, dtype=torch.bool).triu(1)\n\n"
        "def mask_of(t):\n"
        "    return causal_mask(t, t)\n"
    )
    first: dict = {}
    exec(compile(learner_file.read_text(), str(learner_file), "exec"), first)
    second = dict(first)  # equal to `first` as a dict, but another namespace
    from_second = types.FunctionType(first["mask_of"].__code__, second, "mask_of")
    caller_file = tmp_path / "caller.py"
    caller_file.write_text(
        "def attention(q, k, v, is_causal=False):\n    return mask_of(1), mask_of_too(1)\n"
    )
    third = {"mask_of": first["mask_of"], "mask_of_too": from_second}
    exec(compile(caller_file.read_text(), str(caller_file), "exec"), third)
    found = learner_upstream("attention", third["attention"], library_dirs())
    assert len(found) == 2 and {id(namespace) for namespace, _ in found} == {id(first), id(second)}
    assert [used for _, used in found] == ["causal_mask", "causal_mask"]


def test_the_call_is_described_once_where_the_opening_shows_its_shapes():
    ones = torch.ones(2, 3)
    negated = Mistake("negates db.", lambda: (ones, -2 * ones, 3 * ones))
    said = "\n(Called as g(x (2, 3), y (4,)).)"
    opened = _gradients_failure(mistakes=[negated], what="Your g(x (2, 3), y (4,))", called=said)
    assert render(opened, diagnose_failure(opened)) == "Your g(x (2, 3), y (4,)) negates db."
    partly = _gradients_failure(mistakes=[negated], what="Your g(x (2, 3))", called=said)
    assert render(partly, diagnose_failure(partly)).endswith(said)  # y's shape is said only there
