"""Drawings for notebook 11's merging: each part's share of a merged row, and a GPU's busy SMs by chunks.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes

from attn_course.merging import sm_busy_share

PART_COLOURS = {"A": "#2c5d8f", "B": "#e08214"}
"""The colour of each part's share of a row."""


def share_plot(
    lse_a: torch.Tensor, lse_b: torch.Tensor, *, ax: Axes | None = None, title: str | None = None
) -> Axes:
    """Stacked bars per query row: the share exp(lse_x - lse) of part A and of part B in the merged row.

    lse_a, lse_b (T_q,). A row that saw no key in a part (lse -inf) has no bar of that colour; a row that
    saw no key at all has none, and is marked "no key".

    Introduced in 11_attention_at_scale.
    """
    a = lse_a.detach().to("cpu", torch.float64)
    b = lse_b.detach().to("cpu", torch.float64)
    if a.dim() != 1 or a.shape != b.shape:
        raise ValueError(f"expected two (T_q,) lse of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    lse = torch.logaddexp(a, b)  # (T_q,)
    seen = torch.isfinite(lse)
    safe = torch.where(seen, lse, 0.0)
    share_a, share_b = torch.exp(a - safe), torch.exp(b - safe)  # (T_q,), (T_q,): 0 for a part with no key
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * len(a) + 2.5, 2.8))
    rows = list(range(len(a)))
    ax.bar(rows, share_a.tolist(), color=PART_COLOURS["A"], label="share of part A")
    ax.bar(rows, share_b.tolist(), bottom=share_a.tolist(), color=PART_COLOURS["B"], label="share of part B")
    for row in rows:
        if not bool(seen[row]):
            ax.text(row, 0.5, "no key", rotation=90, ha="center", va="center", fontsize=8)
    ax.set_xticks(rows)
    ax.set_xlabel("query row")
    ax.set_ylabel("share of the merged row")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if title is not None:
        ax.set_title(title, fontsize=10)
    return ax


def occupancy_plot(
    programs_per_chunk: int, gpus: Mapping[str, int], max_chunks: int, *, ax: Axes | None = None
) -> Axes:
    """The share of each GPU's SMs busy against the number of chunks the cache is split into.

    One program per (batch entry, head, chunk): `programs_per_chunk` = B·H; `gpus` maps a name to its
    number of SMs.

    Introduced in 11_attention_at_scale.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.2))
    chunks = list(range(1, max_chunks + 1))
    for name, sms in gpus.items():
        shares = [sm_busy_share(programs_per_chunk * n, sms) for n in chunks]
        ax.plot(chunks, shares, "o-", markersize=3, label=f"{name} ({sms} SMs)")
    ax.set_xlabel(f"chunks per (batch entry, head); {programs_per_chunk} × chunks programs")
    ax.set_ylabel("share of SMs busy")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"B·H = {programs_per_chunk}: one program per (batch entry, head, chunk)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return ax
