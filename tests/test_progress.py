"""Later cells run the learner's function once its check passed, the reference until then."""

from __future__ import annotations

import pytest
import torch

from attn_course import reference
from attn_course.checks import CheckFailed, check_softmax
from attn_course.checks._notebook import missing_exercise_message
from attn_course.progress import forget_passes, has_passed, whose, yours_if_passed


@pytest.fixture(autouse=True)
def _fresh_kernel():
    forget_passes()
    yield
    forget_passes()


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """A correct learner softmax, written differently from the reference."""
    exps = (x - x.max(dim=dim, keepdim=True).values).exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def test_before_its_check_passes_the_reference_runs_and_says_so(capsys):
    chosen = yours_if_passed(softmax)
    assert chosen is reference.softmax
    expected = "Using the course's `softmax`: yours has not passed check_softmax yet.\n"
    assert capsys.readouterr().out == expected


def test_after_its_check_passes_the_learners_function_runs(capsys):
    check_softmax(softmax)
    assert has_passed("softmax", softmax)
    capsys.readouterr()
    assert yours_if_passed(softmax) is softmax
    assert capsys.readouterr().out == "Using your `softmax` (check_softmax passed).\n"


def test_a_failed_check_keeps_the_reference():
    def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:  # sums along the wrong axis
        return x.exp() / x.exp().sum(dim=0, keepdim=True)

    with pytest.raises(CheckFailed):
        check_softmax(softmax)
    assert yours_if_passed(softmax) is reference.softmax


def test_a_new_definition_is_not_trusted_until_it_is_checked_again(capsys):
    check_softmax(softmax)

    def softmax_again(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return x.exp()

    capsys.readouterr()
    assert yours_if_passed(softmax_again, "softmax") is reference.softmax
    assert "this definition of `softmax` has not been checked yet" in capsys.readouterr().out


def test_one_line_per_exercise_however_often_a_cell_calls_it(capsys):
    for _ in range(5):
        yours_if_passed(softmax)(torch.zeros(3))
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_by_name_the_version_that_passed_runs_and_says_so(capsys):
    assert yours_if_passed("softmax") is reference.softmax
    expected = "Using the course's `softmax`: yours has not passed check_softmax yet.\n"
    assert capsys.readouterr().out == expected
    check_softmax(softmax)
    capsys.readouterr()
    assert yours_if_passed("softmax") is softmax
    assert capsys.readouterr().out == "Using your `softmax` (the version that passed check_softmax).\n"


def test_by_name_a_later_failed_check_goes_back_to_the_reference():
    check_softmax(softmax)

    def softmax_broken(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return x.exp()

    with pytest.raises(CheckFailed):
        check_softmax(softmax_broken)
    assert yours_if_passed("softmax") is reference.softmax


def test_whose_names_the_version_that_yours_if_passed_runs():
    """Issue 46: 10 printed "your Exercise 2 layer" right after saying it used the course's."""
    assert whose("softmax") == "the course's"
    check_softmax(softmax)
    assert whose("softmax") == "your" and yours_if_passed("softmax") is softmax

    def softmax_broken(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return x.exp()

    with pytest.raises(CheckFailed):
        check_softmax(softmax_broken)
    assert whose("softmax") == "the course's" and yours_if_passed("softmax") is reference.softmax


def test_a_check_names_an_earlier_exercise_whose_cell_never_ran():
    namespace = {"torch": torch}
    exec(  # the learner's cell, calling their `softmax`, whose cell they skipped
        "def dot_product_attention(q, k, v):\n    return softmax(q @ k.transpose(-1, -2)) @ v\n", namespace
    )
    from attn_course.checks import check_dot_product_attention

    with pytest.raises(CheckFailed, match="Run the cell that defines `softmax` first"):
        check_dot_product_attention(namespace["dot_product_attention"])


def test_a_missing_exercise_is_named_and_any_other_name_is_left_alone():
    message = missing_exercise_message(NameError("name 'block_forward' is not defined", name="block_forward"))
    assert message is not None and "run the cell that defines `block_forward` first" in message
    assert missing_exercise_message(NameError("name 'np' is not defined", name="np")) is None
