"""Pictures of notebook 11's paged KV cache: the pool's blocks, coloured by the sequences holding them.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from attn_course.paged_cache import PagedKVCache

_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
_SHARED = "tab:gray"


def block_table_plot(
    cache: PagedKVCache, names: Mapping[str, int], *, ax: Axes | None = None, title: str | None = None
) -> Axes:
    """Draw the pool's blocks (top row) and each sequence's block table (one row each), linked.

    A block is coloured by the one sequence holding it, grey where several share it, white where free;
    its slots are drawn filled up to what the sequences holding it use. `names` maps a label to each
    sequence id of `cache`.

    Introduced in 11_attention_at_scale.
    """
    pool, size = cache.pool, cache.pool.block_size
    n_blocks = len(pool.refcount)
    if ax is None:
        _, ax = plt.subplots(
            figsize=(max(6.0, 0.75 * n_blocks + 1.5), 1.3 + 0.75 * len(names)), layout="constrained"
        )
    colour = {label: _COLOURS[i % len(_COLOURS)] for i, label in enumerate(names)}
    holders: dict[int, list[str]] = {}
    used: dict[int, int] = {}  # block -> slots the sequences holding it use
    for label, seq in names.items():
        length, table = cache.lengths[seq], cache.tables[seq]
        for i, block in enumerate(table):
            holders.setdefault(block, []).append(label)
            used[block] = max(used.get(block, 0), min(size, length - i * size))
    for block in range(n_blocks):
        held = holders.get(block, [])
        face = "white" if not held else colour[held[0]] if len(held) == 1 else _SHARED
        for slot in range(size):
            filled = slot < used.get(block, 0)
            ax.add_patch(
                Rectangle(
                    (block + 0.05 + 0.9 * slot / size, 0.0), 0.9 / size, 0.8,
                    facecolor=face if filled else "white", edgecolor="black", linewidth=0.5,
                    alpha=0.85 if filled else 1.0,
                )
            )  # fmt: skip
        label = f"{block}" + (f"\nshared ×{len(held)}" if len(held) > 1 else "")
        ax.text(block + 0.5, 0.95, label, ha="center", va="bottom", fontsize=8)
    for row, (label, seq) in enumerate(names.items(), start=1):
        y = -1.1 * row
        ax.text(-0.2, y + 0.3, f"{label} ({cache.lengths[seq]})", ha="right", va="center", fontsize=9)
        for i, block in enumerate(cache.tables[seq]):
            shared = len(holders.get(block, [])) > 1
            ax.add_patch(
                Rectangle((i + 0.1, y), 0.8, 0.6, facecolor=_SHARED if shared else colour[label],
                          edgecolor="black", alpha=0.85, zorder=2)
            )  # fmt: skip
            ax.text(
                i + 0.5, y + 0.3, str(block), ha="center", va="center", fontsize=8, color="white", zorder=3
            )
            ax.plot(
                [i + 0.5, block + 0.5],
                [y + 0.6, 0.0],
                color=colour[label],
                linewidth=0.8,
                alpha=0.6,
                zorder=1,
            )
    ax.set_xlim(-2.2, n_blocks + 0.2)
    ax.set_ylim(-1.1 * len(names) - 0.2, 1.6)
    ax.set_axis_off()
    ax.set_title(title or "the pool (top: physical blocks and their slots) and each sequence's block table")
    return ax
