"""Drawing the attention weights of several heads side by side.

Introduced in 04_multi_head_attention.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes

from attn_course.plots.attention import attention_heatmap


def head_heatmaps(
    weights: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    titles: Sequence[str] | None = None,
    annotate: bool = False,
) -> list[Axes]:
    """Draw the (h, T_q, T_k) attention weights of h heads side by side, one heatmap per head.

    Every head shares the colour scale 0 … 1 of `attention_heatmap`, so the maps compare.

    Introduced in 04_multi_head_attention.
    """
    if weights.dim() != 3:
        raise ValueError(f"expected (h, T_q, T_k) weights of h heads, got shape {tuple(weights.shape)}")
    n_heads, t_q, t_k = weights.shape
    titles = list(titles) if titles is not None else [f"head {i}" for i in range(n_heads)]
    if len(titles) != n_heads:
        raise ValueError(f"expected one title per head ({n_heads}), got {len(titles)}")
    size = (n_heads * (0.45 * t_k + 2.2), 0.45 * t_q + 1.8)
    _, axes = plt.subplots(1, n_heads, figsize=size, layout="constrained", squeeze=False)
    for i, ax in enumerate(axes[0]):
        attention_heatmap(weights[i], query_labels, key_labels, ax=ax, title=titles[i], annotate=annotate)
        if i > 0:
            ax.set_ylabel("")
    return list(axes[0])
