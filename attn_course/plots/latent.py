"""Drawings for notebook 11's latent attention: KV cache bytes per token, model by model.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes

KIND_COLOURS = {"MHA": "#c6dbef", "GQA": "#6baed6", "MQA": "#2171b5", "MLA": "#e6550d"}
"""Bar colour by how the model caches keys and values."""


def cache_bars(rows: Sequence[tuple[str, float]], ax: Axes) -> Axes:
    """Horizontal bars of KiB per token (log axis), one per (model name, KiB), coloured by the kind named in
    the model's name ("(MHA)", "(GQA)", "(MQA)", "(MLA)"), each labelled with its value.

    Introduced in 11_attention_at_scale.
    """
    names = [name for name, _ in rows]
    values = [kib for _, kib in rows]
    colours = [
        next((c for kind, c in KIND_COLOURS.items() if f"({kind})" in name), "#999999") for name in names
    ]
    bars = ax.barh(range(len(rows)), values, color=colours)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()  # the first row on top
    ax.bar_label(bars, labels=[f"{v:,.1f} KiB" for v in values], fontsize=7, padding=2)
    ax.set_xlabel("KV cache per token, whole model, bfloat16 (KiB, log scale)", fontsize=8)
    ax.set_xlim(right=max(values) * 8)  # room for the labels
    ax.tick_params(axis="x", labelsize=7)
    return ax
