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
from attn_course.masking import causal_mask, padding_mask

EXERCISES: dict[str, tuple[str, ...]] = {
    "01_dot_product_attention": ("dot_product_scores", "softmax", "dot_product_attention"),
    "02_scaling": ("score_variance", "scaled_dot_product_attention"),
    "03_causal_masking": ("causal_mask", "padding_mask", "attention"),
}
"""The exercises of each notebook, in the order they appear."""

__all__ = [
    "EXERCISES",
    "attention",
    "causal_mask",
    "dot_product_attention",
    "dot_product_scores",
    "padding_mask",
    "scaled_dot_product_attention",
    "score_variance",
    "softmax",
]
