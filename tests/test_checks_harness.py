"""What every check does whatever the exercise: input validation, quiet failures, determinism."""

# ruff: noqa: E501  (a table of learner cases, one case a few lines)

from __future__ import annotations

import warnings

import nbformat
import pytest
import torch
from check_assertions import assert_rejected
from learner_code import APPLY_ROPE, ATTENTION, FLASH, FLASH_QUERY_BLOCK, MERGE, MHA, SCORES, SPLIT, learner
from nbclient import NotebookClient

import attn_course.checks
from attn_course import reference
from attn_course.checks import CheckerError, CheckFailed, check_attention, check_causal_mask, check_softmax
from attn_course.checks._harness import (
    CHECKS,
    GREEN,
    RED,
    RESET,
    as_view,
    check,
    describe_error,
    pass_detail,
    pass_line,
)


def test_check_failed_is_an_assertion_error():
    assert issubclass(CheckFailed, AssertionError)


@pytest.mark.parametrize("value", [None, 3, "softmax", torch.ones(2)])
def test_a_non_callable_candidate_gets_a_clear_message(value):
    with pytest.raises(CheckFailed, match=r"expects your function `softmax` itself"):
        check_softmax(value)


def test_an_error_in_the_learners_code_names_their_line():
    def softmax(x, dim=-1):
        exps = x.exp()
        return exps / exps.sum(dim=dim, keepdims=True, oops=1)

    with pytest.raises(CheckFailed) as failure:
        check_softmax(softmax)
    message = str(failure.value)
    assert "`softmax` raised TypeError" in message
    assert "return exps / exps.sum(dim=dim, keepdims=True, oops=1)" in message
    assert "It was called as softmax(<float64 tensor of shape (5, 5)>, dim=-1)" in message


def test_every_exercise_has_a_reference_and_a_check_and_nothing_else_does():
    names = [name for names in reference.EXERCISES.values() for name in names]
    assert len(names) == len(set(names))
    assert reference.__all__ == ["EXERCISES", *names]
    assert attn_course.checks.__all__ == ["CheckFailed", "CheckerError", *(f"check_{n}" for n in names)]
    assert sorted(CHECKS) == sorted(names)
    for name in names:
        assert callable(getattr(reference, name))
        check_function = getattr(attn_course.checks, f"check_{name}")
        assert check_function is CHECKS[name] and check_function.__name__ == f"check_{name}"


def test_the_check_decorator_takes_the_exercise_name_from_the_function():
    @check
    def check_made_up_exercise(candidate):
        return "fine"

    try:
        assert CHECKS["made_up_exercise"] is check_made_up_exercise
        assert attn_course.checks.check_made_up_exercise is check_made_up_exercise
    finally:
        del CHECKS["made_up_exercise"]
    with pytest.raises(ValueError, match="check_NAME"):
        check(lambda candidate: "")


def test_a_bug_in_the_checker_is_a_checker_error_that_is_not_the_learners_failure():
    @check
    def check_broken(candidate):
        return {}["missing"]

    try:
        with pytest.raises(CheckerError) as failure:
            check_broken(print)
    finally:
        del CHECKS["broken"]
    message = str(failure.value)
    assert "the checker for `broken` itself failed (KeyError: 'missing')" in message
    assert "not your mistake" in message and "report it" in message
    assert not isinstance(failure.value, AssertionError)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__


def test_checks_leave_the_learners_random_state_and_warnings_alone(recwarn):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)

    def noisy_softmax(x, dim=-1):
        warnings.warn("learner's warning", UserWarning, stacklevel=1)
        exps = (x - x.amax(dim=dim, keepdim=True)).exp()
        return exps / exps.sum(dim=dim, keepdim=True)

    check_softmax(noisy_softmax)
    assert torch.equal(torch.rand(3), expected_next)
    assert len(recwarn) == 0


def test_checks_are_deterministic():
    def wrong(q, k, v, mask=None, is_causal=False):
        return reference.attention(q * 1.01, k, v, mask=mask, is_causal=is_causal)

    messages = set()
    for _ in range(2):
        with pytest.raises(CheckFailed) as failure:
            check_attention(wrong)
        messages.add(str(failure.value))
    assert len(messages) == 1


@pytest.mark.slow  # starts a kernel or a process
def test_in_jupyter_a_failed_check_shows_its_message_without_traceback():
    cells = [
        "from attn_course.checks import check_causal_mask",
        "def causal_mask(t_q, t_k=None, device=None):\n    return None",
        "check_causal_mask(causal_mask)",
        "from attn_course.checks._harness import check\n@check\ndef check_broken(c):\n    return 1 / 0\n"
        "check_broken(print)",
        "1 / 0",
        "from attn_course.reference import causal_mask\ncheck_causal_mask(causal_mask)",
        "import torch\ndef causal_mask(t_q, t_k=None, device=None):\n"
        "    return torch.ones(t_q, t_k or t_q, dtype=torch.bool).triu(1)\ncheck_causal_mask(causal_mask)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=60, kernel_name="python3", allow_errors=True).execute()
    error = notebook.cells[2].outputs[0]
    assert error.output_type == "error" and error.ename == "CheckFailed"
    assert "should be a torch.Tensor" in error.evalue
    assert len(error.traceback) == 1 and "_harness" not in error.traceback[0]
    # Words carry the meaning without an emoji font; bold red and green add to them.
    assert error.traceback[0].startswith(f"{RED}CheckFailed{RESET}: ")
    broken = notebook.cells[3].outputs[0]
    assert broken.ename == "CheckerError" and len(broken.traceback) == 1
    assert "CheckerError (not your mistake)" in broken.traceback[0] and "ZeroDivisionError" in broken.evalue
    other = notebook.cells[4].outputs[0]
    assert other.ename == "ZeroDivisionError" and len(other.traceback) > 1  # other errors untouched
    (passed,) = notebook.cells[5].outputs
    assert passed.name == "stdout" and passed.text.startswith(f"{GREEN}check_causal_mask passed{RESET}: ")
    inverted = notebook.cells[6].outputs[0].traceback[0].replace(RED, "").replace(RESET, "")
    assert "inverted" in inverted and len(inverted) > 100
    assert max(len(line) for line in inverted.splitlines()) <= 100  # wrapped at spaces: Lab breaks mid-word
    assert pass_detail(passed.text, "causal_mask") == passed.text.split(": ", 1)[1].strip()


def test_mask_check_accepts_masks_made_on_the_requested_device():
    check_causal_mask(reference.causal_mask)


def test_pass_detail_finds_the_named_checks_last_pass_line_with_or_without_colour():
    output = "\n".join([
        "a line the learner printed",
        pass_line("scaled_dot_product_attention", "other check"),
        pass_line("dot_product_attention", "first", colour=True),
        pass_line("dot_product_attention", "last"),
    ])  # fmt: skip
    assert pass_detail(output, "dot_product_attention") == "last"
    assert pass_detail(output, "scaled_dot_product_attention") == "other check"
    assert pass_detail(output, "softmax") is None


# Family 2 of issue 27: a size error of the learner's line is explained (which tensors, their shapes,
# the usual cause), generically, whatever the check. Each case is a right learner solution, one edit.
SHAPE_ERRORS = [
    pytest.param(
        "split_heads", SPLIT, ("d = d_model // n_heads", "d = d_model // n_heads + 1"),
        "`x` (2, 5, 12) has 120 entries, but the shape [2, 5, 3, 5] needs 150 entries", id="view-wrong-length",
    ),
    pytest.param(
        "dot_product_scores", SCORES, ("q @ k.transpose(-2, -1)", "q @ k"),
        "here 6 meets 5. On that line: `q` (3, 6), `k` (5, 6). Usual causes: k not transposed", id="k-not-transposed",
    ),
    pytest.param(
        "flash_attention_query_block", FLASH_QUERY_BLOCK, ("l = l * alpha + p.sum(dim=-1, keepdim=True)",
                                                          "l = l * alpha + p.sum(dim=-1)"),
        "`p.sum(dim=-1)` drops the axis it reduces ((2, 3, 16, 16) becomes (2, 3, 16))", id="sum-without-keepdim",
    ),
    pytest.param(
        "MultiHeadAttention", MHA, ("return self.out(out)", "return self.out(out.transpose(1, 2))"),
        "Linear layer with in_features=", id="linear-given-the-wrong-tensor",
    ),
    pytest.param(
        "split_heads", SPLIT, ("return x.view(b, t, n_heads, d).transpose(1, 2)",
                               "return rearrange(x, 'b t (h d) -> b h t d', h=n_heads + 2)"),
        "splits an axis of length 12 into groups of 5, which does not divide it", id="einops-wrong-size",
    ),
    pytest.param(
        "merge_heads", MERGE, ("return x.transpose(1, 2).reshape(b, t, h * d)", "return x.transpose(1, 2).view(b, t, h * d)"),
        "view needs a contiguous tensor, and a transposed or permuted one is not", id="view-after-transpose",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("exercise", "source", "edit", "phrase"), SHAPE_ERRORS)
def test_a_size_error_of_the_learners_line_is_explained(exercise, source, edit, phrase, capsys):
    assert_rejected(
        getattr(attn_course.checks, f"check_{exercise}"), learner(source, exercise, edit), phrase, capsys
    )


def test_an_error_of_the_learners_code_in_a_call_the_check_makes_for_them_is_theirs():
    @check
    def check_made_up_callback(candidate):
        return candidate()(torch.ones(3))  # the learner's returned function, called outside call()

    def made_up_callback():
        def inner(x):
            return x @ torch.ones(4, 2)

        return inner

    try:
        with pytest.raises(CheckFailed) as failure:
            check_made_up_callback(made_up_callback)
    finally:
        del CHECKS["made_up_callback"]
    message = str(failure.value)
    assert message.startswith("Your code raised RuntimeError") and "`return x @ torch.ones(4, 2)`" in message


# Family 4 of issue 27: when no known mistake matches, a property of the error comes before an index.
PROPERTIES = [
    pytest.param("dot_product_scores", SCORES, [("q @ k.transpose(-2, -1)", "q @ k[:1].transpose(-2, -1) if q.dim() == 3 else q @ k.transpose(-2, -1)")],
                 "only the indices of axis 0 1 of 2 are wrong (the others are right): all but the first", id="batch-from-the-first-entry"),
    pytest.param("dot_product_scores", SCORES, [("q @ k.transpose(-2, -1)", "(q @ k.transpose(-2, -1)).roll(1, dims=-1)")],
                 "shifted by one position along the columns (last axis)", id="shift-by-one"),
    pytest.param("flash_attention", FLASH, [("out = torch.empty(", "out = torch.zeros("),
                                            ("for qs in range(0, t_q, block_size):", "for qs in range(0, t_q - t_q % block_size, block_size):")],
                 "never writes rows 32–36 (they are 0): the query loop stops before T_q = 37", id="query-loop-stops-early"),
]  # fmt: skip


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), PROPERTIES)
def test_a_property_of_the_error_comes_before_the_index(exercise, source, edits, phrase, capsys):
    assert_rejected(
        getattr(attn_course.checks, f"check_{exercise}"), learner(source, exercise, *edits), phrase, capsys
    )


@pytest.mark.parametrize(
    ("make", "phrase"),
    [
        (lambda e: e + 0.25, "every entry is off by the same 0.25"),
        (lambda e: e.roll(1, dims=-2), "shifted by one position along the rows (axis -2)"),
        (lambda e: e.flip(-1), "reversed along the columns (last axis)"),
        (
            lambda e: e * torch.arange(1.0, 6.0, dtype=e.dtype)[:, None],
            "each row (last axis) is the right row times a factor",
        ),
        (
            lambda e: e - torch.arange(5.0, dtype=e.dtype)[:, None],
            "each row (last axis) is off by a constant of its own",
        ),
        (
            lambda e: torch.where(torch.arange(5)[:, None] >= 3, torch.zeros_like(e), e),
            "are exactly 0 where the right answer is not",
        ),
        (
            lambda e: torch.where(torch.ones(5, 6, dtype=torch.bool).tril(1), e, e + 1),
            "only the entries above the causal diagonal",
        ),
    ],
)
def test_describe_error_names_a_property_of_the_whole_error(make, phrase):
    expected = torch.randn(5, 6, dtype=torch.float64)
    assert phrase in describe_error(make(expected), expected)


def test_describe_error_names_a_softmax_along_another_axis():
    scores = torch.randn(2, 5, 5, dtype=torch.float64)
    assert "sums to 1 along the indices of axis 1" not in describe_error(
        scores.softmax(-2), scores.softmax(-1)
    )
    assert "each slice sums to 1 along the rows (axis -2) instead of along the last axis" in describe_error(
        scores.softmax(-2), scores.softmax(-1)
    )


# Family 5 of issue 27: the checks try what the contract allows, non-contiguous views among it.
VIEWS = [
    pytest.param("apply_rope", APPLY_ROPE, [("x_even, x_odd = x[..., 0::2], x[..., 1::2]",
                                             "flat = x.view(-1, t, d)\n    x_even, x_odd = flat[..., 0::2].reshape(*x.shape[:-1], d // 2), "
                                             "flat[..., 1::2].reshape(*x.shape[:-1], d // 2)")],
                 "view needs a contiguous tensor, and a transposed or permuted one is not", id="rope-view-of-a-view"),
    pytest.param("attention", ATTENTION, [("scores = q @ k.transpose(-2, -1)",
                                           "k = k.as_strided(k.shape, k.contiguous().stride())\n    scores = q @ k.transpose(-2, -1)")],
                 "is right for contiguous tensors but wrong for non-contiguous views", id="attention-strides-assumed"),
]  # fmt: skip


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), VIEWS)
def test_a_function_right_for_contiguous_inputs_only_is_named(exercise, source, edits, phrase, capsys):
    assert_rejected(
        getattr(attn_course.checks, f"check_{exercise}"), learner(source, exercise, *edits), phrase, capsys
    )


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 6), lambda: torch.randn(2, 3, 5, 4)])
def test_as_view_keeps_the_values_and_the_last_axis_contiguous(make):
    x = make()
    view = as_view(x)
    assert torch.equal(view, x) and not view.is_contiguous() and view.stride(-1) == 1
