"""Tests for attn_course/plots/latent.py: one labelled bar per model, coloured by its kind."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.colors import to_hex

from attn_course.plots.latent import KIND_COLOURS, cache_bars


def test_cache_bars_draws_one_bar_per_model_on_a_log_axis() -> None:
    rows = [("Llama-2-7B (MHA)", 512.0), ("Mistral-7B (GQA)", 128.0), ("DeepSeek-V2 (MLA)", 67.5)]
    _, ax = plt.subplots()
    try:
        cache_bars(rows, ax)
        assert [patch.get_width() for patch in ax.patches] == [512.0, 128.0, 67.5]
        assert [label.get_text() for label in ax.get_yticklabels()] == [name for name, _ in rows]
        assert ax.get_xscale() == "log"
        assert to_hex(ax.patches[2].get_facecolor()) == KIND_COLOURS["MLA"]
        assert "67.5 KiB" in [text.get_text() for text in ax.texts]
    finally:
        plt.close("all")
