"""`attn_course/checks/_contracts.py`: contracts as data, the cases generated from them, and each
declared contract held against its exercise's text (issue 44)."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from check_assertions import assert_rejected

from attn_course import reference
from attn_course.checks import attention as attention_checks
from attn_course.checks import backward as backward_checks
from attn_course.checks import check_dot_product_scores, triton_backward, triton_fast, triton_flash
from attn_course.checks import decoder as decoder_checks
from attn_course.checks import flash as flash_checks
from attn_course.checks import generation as generation_checks
from attn_course.checks import heads as heads_checks
from attn_course.checks import kv_cache as kv_cache_checks
from attn_course.checks import latent as latent_checks
from attn_course.checks import masking as masking_checks
from attn_course.checks import merging as merging_checks
from attn_course.checks import modern as modern_checks
from attn_course.checks import paged_cache as paged_cache_checks
from attn_course.checks import rolling_window as rolling_window_checks
from attn_course.checks import rope as rope_checks
from attn_course.checks import rotary_window as rotary_window_checks
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
    # 07_kv_cache
    "block_forward": decoder_checks.BLOCK_CONTRACT,
    "ablate_heads": decoder_checks.ABLATE_CONTRACT,
    "KVCache": kv_cache_checks.KV_CACHE_CONTRACT,
    "cached_attention": kv_cache_checks.CACHED_CONTRACT,
    # notebook 10 (checks/modern.py)
    "repeat_kv": modern_checks.REPEAT_CONTRACT,
    "GroupedQueryAttention": modern_checks.GQA_CONTRACT,
    "sliding_window_mask": modern_checks.WINDOW_CONTRACT,
    "sliding_window_flash_attention": modern_checks.FLASH_WINDOW_CONTRACT,
    "alibi_score_mod": modern_checks.ALIBI_CONTRACT,
    "document_mask_mod": modern_checks.DOCUMENT_CONTRACT,
    # notebook 09
    "softmax_backward": backward_checks.SOFTMAX_BACKWARD_CONTRACT,
    "attention_backward": backward_checks.ATTENTION_BACKWARD_CONTRACT,
    "flash_attention_backward": backward_checks.FLASH_BACKWARD_CONTRACT,
    "FlashAttentionFunction": backward_checks.FUNCTION_CONTRACT,
    "flash_attention_backward_dkdv_kernel": triton_backward.DKDV_CONTRACT,
    "flash_attention_backward_dq_kernel": triton_backward.DQ_CONTRACT,
    # notebook 08
    "triton_softmax": triton_checks.SOFTMAX_CONTRACT,
    # 07_kv_cache: generation and sampling
    "generate_with_cache": generation_checks.GENERATE_CONTRACT,
    "next_token_probs": generation_checks.PROBS_CONTRACT,
    "sample_next": generation_checks.SAMPLE_CONTRACT,
    # notebook 10
    "rotary_window_attention": rotary_window_checks.CONTRACT,
    "rolling_window_step": rolling_window_checks.CONTRACT,
    # 06 (flash_attention above) and 08's stretch exercise
    "online_softmax": flash_checks.SOFTMAX_CONTRACT,
    "flash_attention_query_block": flash_checks.QUERY_BLOCK_CONTRACT,
    "fast_flash_attention": triton_fast.CONTRACT,
    # notebook 11
    "merge_attention": merging_checks.MERGE_CONTRACT,
    "flash_decode": merging_checks.DECODE_CONTRACT,
    "gather_kv": paged_cache_checks.GATHER_CONTRACT,
    "latent_attention": latent_checks.LATENT_CONTRACT,
    "absorbed_latent_attention": latent_checks.ABSORBED_CONTRACT,
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
    "softmax": [
        "along axis `dim` of an `x` of any shape",
        "`x` may be a view (transposed, sliced, expanded)",
        "the result has the inputs' dtype",
    ],
    "dot_product_attention": [
        "of shape `(..., T_q, d_v)` and the weights of shape `(..., T_q, T_k)`",
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
        "`q` is `(..., T_q, d_k)`, `k` is `(..., T_k, d_k)` and `v` is `(..., T_k, d_v)`: any number of "
        "batch axes may come first",
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
        "It returns the estimate as one number (a Python float; a tensor of one element passes too)",
        "not the score of every query against every key",
    ],
    # 07_kv_cache
    "block_forward": [
        "`x` may be a view (transposed, sliced, expanded), in the block's dtype (float32 or float64), "
        "for any number of heads; the output has `x`'s dtype and device, so a mask you make yourself goes "
        "on `x.device`",
    ],
    "ablate_heads": [
        "read the numbers of layers and heads from `model.config` (not the 4 heads of this notebook's model)",
        "keep the model's dtype and device in the copy",
    ],
    "KVCache": [
        "stores them after the ones already there (along the time axis, `dim=-2`)",
        "`k` and `v` may be views (transposed, sliced, expanded), of any float dtype; the keys and values "
        "returned have their dtype and device",
    ],
    "cached_attention": [
        "whatever `t_new` is (a prefill, one token, a chunk after a cache)",
        "`x` may be a view (transposed, sliced, expanded), in the layer's dtype (float32 or float64); the "
        "output has `x`'s dtype and device: make any tensor you create on `x.device`",
    ],
    # notebook 10 (checks/modern.py)
    "repeat_kv": [
        "x `(b, h_kv, t, d)` → `(b, h_kv · n_rep, t, d)`",
        "`x` may be a view (transposed, sliced, expanded)",
        "in float32 or float64; the result has x's dtype and device",
    ],
    "GroupedQueryAttention": [
        "a `mask` of shape `(b, t, t)` or `(b, 1, t)`",
        "`n_kv_heads` divides `n_heads`, and neither need be a power of two",
        "`x` (in float32 or float64) and `mask` may be views (transposed, sliced, expanded)",
        "the output has `x`'s dtype and device",
    ],
    "sliding_window_mask": [
        "a bool tensor `(t_q, t_k)`",
        "With $W \\ge T_k$ it is the causal mask",
        "Either of `t_q` and `t_k` may be larger",
        "with `t_q > t_k` the first `t_q - t_k` queries come before every key and see none",
    ],
    "sliding_window_flash_attention": [
        "q `(..., T_q, d)`, k `(..., T_k, d)`, v `(..., T_k, d_v)`",
        "for any `T_q <= T_k`",
        "`v` may be views (transposed, sliced, expanded), in float32 or float64; the output has q's dtype",
    ],
    "alibi_score_mod": [
        "with $j$ = `kv_idx`, $i$ = `q_idx`",
        "by the paper's rule for every head count",
    ],
    "document_mask_mod": [
        "`document_ids` may be a view (a slice, an expanded tensor), of any integer dtype, on any device",
        "never a `(T, T)` mask built beforehand",
    ],
    # notebook 09
    "softmax_backward": [
        "Either may be a view (transposed, sliced, expanded)",
        "the result has `p`'s shape, dtype and device",
    ],
    "attention_backward": [
        "Any input may be a view (transposed, sliced, expanded), in float32 or float64",
        "shaped like q, k, v, in their dtype and on their device",
        "`attention` gives them probabilities 0, so their dq is 0",
    ],
    "flash_attention_backward": [
        "Any input may be a view (transposed or sliced; q, k, v and grad_out expanded too)",
        "in float32 or float64",
        "shaped like q, k, v, in their dtype and on their device",
    ],
    "FlashAttentionFunction": [
        "q, k and v may be views (transposed, sliced, expanded)",
        "in float32 or float64",
        "the output and gradients have their dtype and device",
    ],
    "flash_attention_backward_dkdv_kernel": [
        "It also passes d = 24 (HEAD_DIM = 24, BLOCK_D = 32), float16 inputs",
        "each of q, k, v and dO alone a view: step every pointer by its own tensor's strides",
    ],
    "flash_attention_backward_dq_kernel": [
        "on the same inputs as 5a's: d = 24 (HEAD_DIM = 24, BLOCK_D = 32), float16 inputs",
        "each of q, k, v and dO alone a view",
    ],
    # notebook 08
    "triton_softmax": [
        "float16 inputs too (the output in the inputs' dtype)",
        "transposed, a slice of a wider tensor, and expanded (every row the same memory, `x.stride(0) == 0`)",
    ],
    # 07_kv_cache: generation and sampling
    "generate_with_cache": [
        "return all of them, `(b, t + n_new)`",
        "The prompt may be one sequence or one token long (`b` or `t` of 1)",
        "a slice of a longer batch, as `test.tokens[:8, :16]` below, or one prompt expanded over the batch",
        "The result has the prompt's dtype and device",
    ],
    "next_token_probs": [
        "Where several logits tie with the $k$-th largest, **all of them are kept**",
        "The temperature is any number above 0, small ones too",
        "`top_k` is `None` or a whole number from 1 to `vocab_size`",
        "The logits are float32 or float64 and may be a view (a slice of a longer tensor, as "
        "`model.step(...)[:, -1]` gives them, transposed, or one row expanded over the batch",
        "the probabilities have the logits' dtype and device",
    ],
    "sample_next": [
        "returns one token id per row, `(b, 1)` of dtype long",
        "The logits are float32 or float64 and may be a view",
        "with the `generator` it is handed as its only source of randomness",
    ],
    # notebook 10
    "rotary_window_attention": [
        "Any head counts (not only powers of two), any batch, a single token, and a window larger than `t`",
        "`x` and `positions` may be views (transposed, sliced, expanded), and `x` float32 or float64",
        "the output has `x`'s dtype and device",
    ],
    "rolling_window_step": [
        "The token may be a view of the whole text (transposed, sliced, expanded)",
        "float32 or float64 with a buffer of that dtype",
        "each output has `x`'s dtype and device",
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
    # notebook 11
    "merge_attention": [
        "any number of batch axes may come first",
        "one query ($T_q = 1$) is as good as several",
        "comes out as 0 with lse $-\\infty$, never NaN",
        "Each input may be a view (transposed, sliced, expanded), in float32 or float64",
        "out and lse have the inputs' dtype and device",
    ],
    "flash_decode": [
        "the last chunk may be shorter; `chunk_size` may exceed $T_k$, or be 1",
        "never all $T_k$ keys at once",
        "`q`, `k` and `v` may be views (transposed, sliced, expanded), in float32 or float64",
        "the output has the inputs' dtype and device",
    ],
    "gather_kv": [
        "`pool_keys` and `pool_values` may be views (a pool stored `(n_blocks, block_size, H, d)` and "
        "transposed, or a slice of a larger one), of any float dtype",
        "the results have the pool's dtype and device",
        "position $t$ taken from block `block_table[t // block_size]`, slot `t % block_size`",
    ],
    "latent_attention": [
        "`x` a view (transposed, sliced, expanded) in float32 or float64; the output has `x`'s dtype and "
        "device",
    ],
    "absorbed_latent_attention": ["`x` a view in float32; the output has `x`'s dtype and device"],
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
        elif f"def {name}(" in source or f"class {name}(" in source or f"class {name}:" in source:
            return " ".join(text.split())
    raise AssertionError(f"no cell defines {name}")


@pytest.mark.parametrize("name", CONTRACTS)
def test_each_contract_is_its_exercises_and_its_text_states_its_demands(name):
    contract = CONTRACTS[name]
    assert contract.exercise == name
    exercise = getattr(reference, name)
    method = getattr(exercise, "forward", None) or getattr(exercise, "append", None)  # a layer, or the cache
    kernel = getattr(getattr(exercise, "kernel", exercise), "fn", None)  # a Triton kernel's Python function
    code = method.__code__ if isinstance(exercise, type) else inspect.unwrap(kernel or exercise).__code__
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
        "transposed view, (B, T_k, H, d).transpose(1, 2), strides (90, 6, 18, 1) (the other inputs "
        "contiguous)"
    )
    assert_rejected(check_dot_product_scores, scores_reading_k_as_contiguous, phrase, capsys)
