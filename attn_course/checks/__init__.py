"""Autograder checks: `check_NAME(candidate)` for every exercise NAME.

A check prints one pass line when the learner's function is right, and otherwise raises
`CheckFailed` (an AssertionError) whose message names the mistake. In IPython and Jupyter,
importing this package shows a failed check as its message alone, without a traceback.
"""

from attn_course.checks._harness import CheckFailed
from attn_course.checks._notebook import show_failures_without_traceback
from attn_course.checks.basics import (
    check_dot_product_attention,
    check_dot_product_scores,
    check_scaled_dot_product_attention,
    check_score_variance,
    check_softmax,
)
from attn_course.checks.flash import check_flash_attention, check_online_softmax
from attn_course.checks.heads import check_merge_heads, check_MultiHeadAttention, check_split_heads
from attn_course.checks.kv_cache import check_cached_attention, check_KVCache
from attn_course.checks.masking import check_attention, check_causal_mask, check_padding_mask
from attn_course.checks.modern import (
    check_alibi_score_mod,
    check_document_mask_mod,
    check_GroupedQueryAttention,
    check_repeat_kv,
    check_sliding_window_flash_attention,
    check_sliding_window_mask,
)
from attn_course.checks.rope import check_apply_rope, check_rope_frequencies, check_RotaryMultiHeadAttention
from attn_course.checks.triton import check_triton_add, check_triton_softmax
from attn_course.checks.triton_flash import check_triton_flash_attention

__all__ = [
    "check_sliding_window_mask",
    "check_sliding_window_flash_attention",
    "check_repeat_kv",
    "check_GroupedQueryAttention",
    "check_document_mask_mod",
    "check_alibi_score_mod",
    "CheckFailed",
    "check_apply_rope",
    "check_attention",
    "check_cached_attention",
    "check_causal_mask",
    "check_dot_product_attention",
    "check_dot_product_scores",
    "check_flash_attention",
    "check_KVCache",
    "check_merge_heads",
    "check_online_softmax",
    "check_MultiHeadAttention",
    "check_padding_mask",
    "check_rope_frequencies",
    "check_RotaryMultiHeadAttention",
    "check_scaled_dot_product_attention",
    "check_score_variance",
    "check_softmax",
    "check_split_heads",
    "check_triton_add",
    "check_triton_flash_attention",
    "check_triton_softmax",
]

show_failures_without_traceback()
