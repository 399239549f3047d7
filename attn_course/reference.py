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
from attn_course.backward import attention_backward, softmax_backward
from attn_course.experiments import score_variance
from attn_course.flash import (
    FlashAttentionFunction,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    online_softmax,
)
from attn_course.heads import MultiHeadAttention, merge_heads, split_heads
from attn_course.kv_cache import KVCache, cached_attention
from attn_course.masking import causal_mask, padding_mask
from attn_course.rope import RotaryMultiHeadAttention, apply_rope, rope_frequencies
from attn_course.triton_ops import (
    triton_add,
    triton_flash_attention,
    triton_flash_attention_backward,
    triton_softmax,
)

EXERCISES: dict[str, tuple[str, ...]] = {
    "01_dot_product_attention": ("dot_product_scores", "softmax", "dot_product_attention"),
    "02_scaling": ("score_variance", "scaled_dot_product_attention"),
    "03_causal_masking": ("causal_mask", "padding_mask", "attention"),
    "04_multi_head_attention": ("split_heads", "merge_heads", "MultiHeadAttention"),
    "05_rope": ("rope_frequencies", "apply_rope", "RotaryMultiHeadAttention"),
    "06_flash_attention": ("online_softmax", "flash_attention"),
    "07_kv_cache": ("KVCache", "cached_attention"),
    "08_triton_flash_attention": ("triton_add", "triton_softmax", "triton_flash_attention"),
    "09_backward": (
        "softmax_backward",
        "attention_backward",
        "flash_attention_backward",
        "FlashAttentionFunction",
        "triton_flash_attention_backward",
    ),
}
"""The exercises of each notebook, in the order they appear."""

__all__ = [
    "EXERCISES",
    "FlashAttentionFunction",
    "KVCache",
    "MultiHeadAttention",
    "RotaryMultiHeadAttention",
    "apply_rope",
    "attention",
    "attention_backward",
    "cached_attention",
    "causal_mask",
    "dot_product_attention",
    "dot_product_scores",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "merge_heads",
    "online_softmax",
    "padding_mask",
    "rope_frequencies",
    "scaled_dot_product_attention",
    "score_variance",
    "softmax",
    "softmax_backward",
    "split_heads",
    "triton_add",
    "triton_flash_attention",
    "triton_flash_attention_backward",
    "triton_softmax",
]
