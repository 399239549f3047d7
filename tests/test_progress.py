"""Later cells run the learner's function once its check passed, the reference until then."""

from __future__ import annotations

import pytest
import torch

from attn_course import reference
from attn_course.checks import CheckFailed, check_softmax
from attn_course.progress import forget_passes, has_passed, yours_if_passed


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
