"""Drawing attention: heatmaps of weights and masks with token labels.

Introduced in 01_dot_product_attention.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes


def attention_heatmap(
    weights: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
    cmap: str = "viridis",
) -> Axes:
    """Draw a (T_q, T_k) matrix of attention weights: one row per query, one column per key.

    Introduced in 01_dot_product_attention.
    """
    matrix = weights.detach().to("cpu", torch.float32)
    if matrix.dim() != 2:
        raise ValueError(f"expected a (T_q, T_k) matrix, got shape {tuple(matrix.shape)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * matrix.shape[1] + 2, 0.5 * matrix.shape[0] + 1.5))
    finite = matrix[torch.isfinite(matrix)]
    vmin = 0.0 if finite.numel() == 0 else min(0.0, finite.min().item())
    vmax = 1.0 if finite.numel() == 0 else max(1.0, finite.max().item())
    image = ax.imshow(matrix.numpy(), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), labels=list(query_labels))
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), labels=list(key_labels), rotation=45, ha="right")
    if annotate and matrix.numel() <= 144:
        for (i, j), value in _cells(matrix):
            colour = "white" if value < (vmin + vmax) / 2 else "black"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=colour)
    if title:
        ax.set_title(title)
    return ax


def mask_heatmap(
    mask: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a boolean (T_q, T_k) mask: filled where the query may attend.

    Introduced in 03_causal_masking.
    """
    return attention_heatmap(
        mask.to(torch.float32),
        query_labels,
        key_labels,
        ax=ax,
        title=title,
        annotate=False,
        cmap="Greys",
    )


def _cells(matrix: torch.Tensor):
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            yield (i, j), matrix[i, j].item()
