"""`attn_course/checks/_contracts.py`: contracts as data and the cases generated from them (issue 44)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Case,
    Contract,
    Returns,
    contiguous_strides,
    make_arg,
    read_as,
    size_cases,
    view_cases,
    view_words,
)

TOY = Contract(
    "toy",
    args=(
        Arg("q", ("B", "H", "T", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T", "d"), views=("sliced",)),
    ),
    axes=(Axis("B", (2,)), Axis("H", (2, 3)), Axis("T", (9, 17)), Axis("d", (4, 6))),
    returns=(Returns("out", ("B", "H", "T", "d")),),
)


def test_size_cases_change_one_axis_at_a_time():
    cases = list(size_cases(TOY))
    assert [case.describe() for case in cases] == [
        "B=2, H=2, T=9, d=4",
        "B=2, H=3, T=9, d=4",
        "B=2, H=2, T=17, d=4",
        "B=2, H=2, T=9, d=6",
    ]
    assert [case.changed for case in cases] == ["", "H", "T", "d"]


def test_view_cases_make_one_argument_a_view_each():
    views = [case.view for case in view_cases(TOY)]
    assert views == [("q", "transposed"), ("q", "sliced"), ("q", "expanded"), ("k", "sliced")]
    one_each = [case.view for case in view_cases(TOY, one_kind_each=True)]
    assert one_each == [("q", "transposed"), ("k", "sliced")]


@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_make_arg_gives_the_shape_and_values_in_another_layout(kind):
    case = replace(next(view_cases(TOY)), view=("q", kind))
    q = make_arg(TOY.args[0], case, torch.randn)
    k = make_arg(TOY.args[1], case, torch.randn)
    assert tuple(q.shape) == tuple(k.shape) == (2, 2, 9, 4)
    assert k.is_contiguous() and not q.is_contiguous()
    assert q.stride(-1) == 1  # the head dim stays contiguous: what every kernel of the course assumes
    assert "`q` passed as" in view_words(q, TOY.args[0], kind)


def test_read_as_is_what_a_kernel_reads_with_other_strides():
    x = torch.arange(24.0).reshape(4, 6)[:, :3]  # (4, 3), rows 6 apart
    assert read_as(x, contiguous_strides((4, 3))).flatten().tolist() == list(range(12))
    with pytest.raises(RuntimeError):
        read_as(x, (100, 1))  # past the storage: the kernel's trace names that instead


def test_a_case_describes_its_dtype_and_view():
    case = Case((("T", 3),), torch.float16, ("k", "expanded"))
    assert case.describe() == "T=3, float16 inputs, k an expanded view"
