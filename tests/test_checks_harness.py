"""What every check does whatever the exercise: input validation, quiet failures, determinism."""

from __future__ import annotations

import warnings

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from attn_course import reference
from attn_course.checks import CheckFailed, check_attention, check_causal_mask, check_softmax
from attn_course.checks._harness import GREEN, RED, RESET, check, pass_detail, pass_line


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


def test_a_bug_in_the_checker_is_reported_as_such_not_as_a_traceback():
    @check("broken")
    def check_broken(candidate):
        return {}["missing"]

    with pytest.raises(CheckFailed, match="the checker for `broken` itself failed") as failure:
        check_broken(print)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__


def test_checks_leave_the_learners_random_state_and_warnings_alone(recwarn):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)

    def noisy_softmax(x, dim=-1):
        warnings.warn("learner's warning", UserWarning, stacklevel=1)
        return torch.softmax(x, dim=dim)

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


def test_in_jupyter_a_failed_check_shows_its_message_without_traceback():
    cells = [
        "from attn_course.checks import check_causal_mask",
        "def causal_mask(t_q, t_k=None, device=None):\n    return None",
        "check_causal_mask(causal_mask)",
        "1 / 0",
        "from attn_course.reference import causal_mask\ncheck_causal_mask(causal_mask)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=60, kernel_name="python3", allow_errors=True).execute()
    error = notebook.cells[2].outputs[0]
    assert error.output_type == "error" and error.ename == "CheckFailed"
    assert "should be a torch.Tensor" in error.evalue
    assert len(error.traceback) == 1 and "_harness" not in error.traceback[0]
    # Words carry the meaning without an emoji font; bold red and green add to them.
    assert error.traceback[0].startswith(f"{RED}CheckFailed{RESET}: ")
    other = notebook.cells[3].outputs[0]
    assert other.ename == "ZeroDivisionError" and len(other.traceback) > 1  # other errors untouched
    (passed,) = notebook.cells[4].outputs
    assert passed.name == "stdout" and passed.text.startswith(f"{GREEN}check_causal_mask passed{RESET}: ")
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
