"""`attn_course/checks/_contracts.py`: contracts as data, the cases generated from them, and each
declared contract held against its exercise's text (issue 44)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from check_assertions import assert_rejected

from attn_course import reference
from attn_course.checks import attention as attention_checks
from attn_course.checks import check_dot_product_scores, triton_backward, triton_fast, triton_flash
from attn_course.checks import flash as flash_checks
from attn_course.checks import heads as heads_checks
from attn_course.checks import masking as masking_checks
from attn_course.checks import rope as rope_checks
from attn_course.checks import triton as triton_checks
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


CONTRACTS = {
    "triton_add": triton_checks.ADD_CONTRACT,
    "triton_scores": triton_flash.SCORES_CONTRACT,
    "triton_flash_attention": triton_flash.CONTRACT,
    "triton_flash_attention_backward": triton_backward.CONTRACT,
    "flash_attention": flash_checks.ATTENTION_CONTRACT,
    "dot_product_scores": attention_checks.SCORES_CONTRACT,
    "softmax": attention_checks.SOFTMAX_CONTRACT,
    "dot_product_attention": attention_checks.DOT_PRODUCT_ATTENTION_CONTRACT,
    "scaled_dot_product_attention": attention_checks.SCALED_CONTRACT,
    "score_variance": attention_checks.SCORE_VARIANCE_CONTRACT,
    "causal_mask": masking_checks.CAUSAL_CONTRACT,
    "padding_mask": masking_checks.PADDING_CONTRACT,
    "attention": masking_checks.ATTENTION_CONTRACT,
    "split_heads": heads_checks.SPLIT_CONTRACT,
    "merge_heads": heads_checks.MERGE_CONTRACT,
    "MultiHeadAttention": heads_checks.MHA_CONTRACT,
    "rope_frequencies": rope_checks.FREQUENCIES_CONTRACT,
    "apply_rope": rope_checks.ROPE_CONTRACT,
    "RotaryMultiHeadAttention": rope_checks.ROTARY_CONTRACT,
    # 06 (flash_attention above) and 08's stretch exercise
    "online_softmax": flash_checks.SOFTMAX_CONTRACT,
    "flash_attention_query_block": flash_checks.QUERY_BLOCK_CONTRACT,
    "fast_flash_attention": triton_fast.CONTRACT,
}

# What each contract demands beyond the shapes, and the words of the exercise's text that state it.
STATED = {
    "triton_add": ["make them contiguous first"],
    "triton_scores": ["The check passes views", "power of two, at least 16"],
    "triton_flash_attention": ["pads the head dim to `BLOCK_D`", "a row that saw no key"],
    "triton_flash_attention_backward": [
        "allocates `dq`, `dk`, `dv` like q, k, v",
        "makes float32 and contiguous",
        "BLOCK_D = max(16, next_power_of_2(d))",
        "strided inputs",
    ],
    "flash_attention": [
        "`q`, `k` and `v` may be views (transposed, sliced, expanded), in float32 or float64",
        "out and lse have the inputs' dtype and device",
        "q `(..., T_q, d)`, k `(..., T_k, d)`, v `(..., T_k, d_v)`",
        "the last of each may be shorter",
        "a row that may attend no key (causal with $T_q > T_k$: the first $T_q - T_k$ rows) gets output 0",
        "($-\\infty$ for a row that may attend no key)",
    ],
    "dot_product_scores": [
        "Any number of batch axes may come first",
        "`q` and `k` may be views of other tensors (transposed, sliced, expanded)",
        "the result has the inputs' dtype and device",
    ],
    "softmax": ["`x` may be a view (transposed, sliced, expanded)", "the result has the inputs' dtype"],
    "dot_product_attention": [
        "`q`, `k` and `v` may be views (transposed, sliced, expanded)",
        "both results have the inputs' dtype and device",
    ],
    "scaled_dot_product_attention": [
        "Leading batch dimensions must pass through",
        "`q`, `k` and `v` may be views (transposed, sliced, expanded)",
        "both results have the inputs' dtype and device",
    ],
    "causal_mask": [
        "a bool tensor of shape `(t_q, t_k)`",
        "either may be larger: with `t_q > t_k` the first `t_q - t_k` queries come before every key",
        "`torch.arange(..., device=device)`",
    ],
    "padding_mask": [
        "return a bool tensor `(B, t)`",
        "Create new tensors on `lengths.device`",
        "`lengths` may be a view (a slice of a longer tensor, one length expanded over the batch), of any "
        "integer dtype",
    ],
    "attention": [
        "broadcastable to `(..., T_q, T_k)`",
        "AND-ed with your `causal_mask(T_q, T_k)`",
        "`q`, `k`, `v` (of any float dtype) and `mask` may be views (transposed, sliced, expanded)",
        "both results have the inputs' dtype and device",
        "A row that allows **no key at all**",
    ],
    "split_heads": ["`(b, t, h·d)` → `(b, h, t, d)`", "`x` may be a view (transposed, sliced, expanded)"],
    "merge_heads": ["`(b, h, t, d)` → `(b, t, h·d)`", "`x` may be a view (transposed, sliced, expanded)"],
    "MultiHeadAttention": [
        "With a `context` of shape `(b, t_k, d_model)`",
        "`x` and `context` may be views (transposed, sliced, expanded)",
        "the output has `x`'s dtype and device",
    ],
    "rope_frequencies": ["the `(d/2,)` tensor", "in float64 (or float32)"],
    "apply_rope": [
        "for `x` of shape `(..., T, d)`, `d` even",
        "`x` and `positions` may be views (transposed, sliced, expanded)",
        "the output has x's shape and dtype. Create new tensors on `x.device`",
    ],
    "RotaryMultiHeadAttention": [
        "a `mask` that broadcasts to `(b, t, t)` (a `(b, t, t)` mask, one `(t, t)` mask for the whole batch, "
        "or a padding mask `(b, 1, t)`)",
        "`x`, `mask` and `positions` may be views (transposed, sliced, expanded)",
        "the output has `x`'s dtype and device",
    ],
    "score_variance": [
        "It returns the estimate as a Python float",
        "not the score of every query against every key",
    ],
    # 06 (flash_attention above) and 08's stretch exercise
    "online_softmax": [
        "`x` may be a view (transposed, sliced, expanded), with any batch axes before the last, in float32 "
        "or float64: the result has `x`'s dtype and device",
        "the last may be shorter",
    ],
    "flash_attention_query_block": [
        "q_blk` `(..., B_q, d)`",
        "`q_blk`, `k` and `v` may be views (transposed, sliced, expanded), in float32 or float64: both "
        "results have the inputs' dtype and device",
        "(the last may be shorter)",
    ],
    "fast_flash_attention": [
        "the same results as `triton_flash_attention`, output and lse, on every input its check tries (the "
        "check runs those of Exercise 4 first)",
    ],
}


def _exercise_text(name: str) -> str:
    """The Markdown of the solution notebook cells before the exercise's code cell, from its heading."""
    notebook = next(stem for stem, names in reference.EXERCISES.items() if name in names)
    cells = json.loads(Path(f"solutions/{notebook}.ipynb").read_text())["cells"]
    text = ""
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            text = source if "### Exercise" in source else text + "\n" + source
        elif f"def {name}(" in source or f"class {name}(" in source:
            return " ".join(text.split())
    raise AssertionError(f"no cell defines {name}")


@pytest.mark.parametrize("name", CONTRACTS)
def test_each_contract_is_its_exercises_and_its_text_states_its_demands(name):
    contract = CONTRACTS[name]
    assert contract.exercise == name
    exercise = getattr(reference, name)
    code = exercise.forward.__code__ if isinstance(exercise, type) else exercise.__code__
    signature = code.co_varnames[: code.co_argcount]
    names = [arg.name for arg in contract.args]
    assert names == [name for name in signature if name in names], "the contract's arguments, in order"
    text = _exercise_text(name)
    for phrase in STATED[name]:
        assert " ".join(phrase.split()) in text, f"the text of {name} does not say {phrase!r}"


def scores_reading_k_as_contiguous(q, k):
    """kᵀ by strides worked out for a contiguous k: right until k is laid out otherwise."""
    t_k, d = k.shape[-2:]
    k_t = torch.as_strided(k, (*k.shape[:-2], d, t_k), (*k.stride()[:-2], 1, d))  # (..., d, T_k)
    return q @ k_t


def test_a_generated_view_case_says_what_it_observed(capsys):
    phrase = (
        "Your `scores` is right for the same values made contiguous, but wrong with `k` passed as a "
        "transposed view, (T_k, B, d).transpose(0, 1), strides (6, 12, 1) (the other inputs contiguous)"
    )
    assert_rejected(check_dot_product_scores, scores_reading_k_as_contiguous, phrase, capsys)
