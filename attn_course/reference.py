"""Reference implementations of every exercise, by exercise name (the autograder contract).

For each exercise NAME, `attn_course.reference.NAME` is the reference and
`attn_course.checks.check_NAME` checks a learner's implementation against it.
"""

from attn_course.attention import (
    attention,
    dot_product_attention,
    dot_product_scores,
    scaled_dot_product_attention,
    softmax,
)
from attn_course.experiments import score_variance
from attn_course.flash import flash_attention, online_softmax
from attn_course.flex import alibi_score_mod, document_ids_from_lengths, document_mask_mod
from attn_course.gqa import GroupedQueryAttention, repeat_kv
from attn_course.heads import MultiHeadAttention, merge_heads, split_heads
from attn_course.kv_cache import KVCache, cached_attention
from attn_course.masking import causal_mask, padding_mask
from attn_course.rope import RotaryMultiHeadAttention, apply_rope, rope_frequencies
from attn_course.triton_ops import triton_add, triton_flash_attention, triton_softmax
from attn_course.window import sliding_window_flash_attention, sliding_window_mask

EXERCISES: dict[str, tuple[str, ...]] = {
    "01_dot_product_attention": ("dot_product_scores", "softmax", "dot_product_attention"),
    "02_scaling": ("score_variance", "scaled_dot_product_attention"),
    "03_causal_masking": ("causal_mask", "padding_mask", "attention"),
    "04_multi_head_attention": ("split_heads", "merge_heads", "MultiHeadAttention"),
    "05_rope": ("rope_frequencies", "apply_rope", "RotaryMultiHeadAttention"),
    "06_flash_attention": ("online_softmax", "flash_attention"),
    "07_kv_cache": ("KVCache", "cached_attention"),
    "08_triton_flash_attention": ("triton_add", "triton_softmax", "triton_flash_attention"),
    "10_modern_attention": (
        "repeat_kv",
        "GroupedQueryAttention",
        "sliding_window_mask",
        "sliding_window_flash_attention",
        "alibi_score_mod",
        "document_mask_mod",
    ),
}
"""The exercises of each notebook, in the order they appear."""

__all__ = [
    "EXERCISES",
    "alibi_score_mod",
    "apply_rope",
    "attention",
    "cached_attention",
    "causal_mask",
    "document_ids_from_lengths",
    "document_mask_mod",
    "dot_product_attention",
    "dot_product_scores",
    "flash_attention",
    "GroupedQueryAttention",
    "KVCache",
    "merge_heads",
    "MultiHeadAttention",
    "online_softmax",
    "padding_mask",
    "repeat_kv",
    "rope_frequencies",
    "RotaryMultiHeadAttention",
    "scaled_dot_product_attention",
    "score_variance",
    "sliding_window_flash_attention",
    "sliding_window_mask",
    "softmax",
    "split_heads",
    "triton_add",
    "triton_flash_attention",
    "triton_softmax",
]
