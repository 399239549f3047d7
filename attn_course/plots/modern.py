"""Drawings for notebook 10: which (query block, key block) tiles a pass visits.

Introduced in 10_modern_attention.
"""

from __future__ import annotations

import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap

TILE_COLOURS = {"skipped": "#f0f0f0", "masked inside": "#9ecae1", "full": "#08519c"}
"""Colour of a tile by what the pass does with it: state 0, 1 and 2."""


def tile_plot(states: torch.Tensor, ax: Axes, title: str, block_size: int | None = None) -> Axes:
    """Draw per-tile states (n_q, n_k), 0 skipped, 1 masked inside, 2 full, with the share visited.

    Introduced in 10_modern_attention.
    """
    matrix = states.detach().to("cpu", torch.float32)
    ax.imshow(matrix.numpy(), cmap=ListedColormap(list(TILE_COLOURS.values())), vmin=-0.5, vmax=2.5)
    n_q, n_k = matrix.shape
    visited = int((matrix > 0).sum())
    ax.set_title(f"{title}\n{visited} of {n_q * n_k} tiles visited ({visited / (n_q * n_k):.0%})", fontsize=9)
    unit = f" (blocks of {block_size})" if block_size else ""
    ax.set_xlabel("key block" + unit, fontsize=8)
    ax.set_ylabel("query block", fontsize=8)
    ax.tick_params(labelsize=7)
    handles = [ax.scatter([], [], marker="s", color=c, label=name) for name, c in TILE_COLOURS.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper right", framealpha=0.9)
    return ax
