"""Drawing boolean attention masks in two colours, named by a colour bar.

Introduced in 03_causal_masking.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, ListedColormap

from attn_course.plots.attention import label_queries_and_keys

MASK_COLOURS = {"masked": "#e6e6e6", "attends": "#2c5d8f"}
"""The two colours of a boolean mask: False (the query may not attend the key), then True."""


def mask_heatmap(
    mask: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a boolean (T_q, T_k) mask in two colours, named by its colour bar: "attends" and "masked".

    Introduced in 03_causal_masking.
    """
    matrix = mask.detach().to("cpu", torch.bool)
    if matrix.dim() != 2:
        raise ValueError(f"expected a (T_q, T_k) mask, got shape {tuple(matrix.shape)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * matrix.shape[1] + 2, 0.5 * matrix.shape[0] + 1.5))
    colours = ListedColormap(list(MASK_COLOURS.values()))
    image = ax.imshow(matrix.to(torch.float32).numpy(), cmap=colours, norm=BoundaryNorm([0, 0.5, 1], 2))
    legend = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, ticks=[0.25, 0.75])
    legend.ax.set_yticklabels(list(MASK_COLOURS))
    legend.ax.tick_params(length=0)
    ax.set_xticks([x - 0.5 for x in range(1, matrix.shape[1])], minor=True)  # white lines between cells
    ax.set_yticks([y - 0.5 for y in range(1, matrix.shape[0])], minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    label_queries_and_keys(ax, query_labels, key_labels, title)
    return ax
