"""Plots of the attention benchmark of notebook 06: time and peak memory against T, log-log.

Introduced in 06_flash_attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

if TYPE_CHECKING:  # the benchmark draws with this module: importing it here at run time would be circular
    from attn_course.demos.attention_bench import BenchRow

_STYLE = {"naive": "o-", "tiled": "s-"}


def _measured(value: float | None) -> float:
    """A drawn row's seconds or peak bytes (skipped rows, the only ones with None, are not drawn)."""
    if value is None:
        raise ValueError("a skipped row has no measurements")
    return float(value)


def plot_bench(rows: Sequence[BenchRow]) -> dict[str, Figure]:
    """{"time": figure, "memory": figure}: one panel per (dtype, d, causal), one line per provider.

    Introduced in 06_flash_attention.
    """
    panels = list(dict.fromkeys((r.dtype, r.d, r.causal) for r in rows))
    providers = list(dict.fromkeys(r.provider for r in rows))
    figures = {}
    for kind, label in (("time", "median time (ms)"), ("memory", "peak memory (MiB)")):
        n = max(len(panels), 1)
        cols = min(n, 4)
        figure, axes = plt.subplots(
            (n + cols - 1) // cols, cols, figsize=(3.6 * cols, 3.2 * ((n + cols - 1) // cols)), squeeze=False
        )
        for ax, (dtype, d, causal) in zip(axes.flat, panels, strict=False):
            for provider in providers:
                points = [
                    (
                        r.t,
                        _measured(r.seconds) * 1e3 if kind == "time" else _measured(r.peak_bytes) / 2**20,
                    )  # fmt: skip
                    for r in rows
                    if (r.provider, r.dtype, r.d, r.causal) == (provider, dtype, d, causal)
                    and not r.skipped
                    and (kind == "time" or r.peak_bytes)
                ]
                if points:
                    ts, ys = zip(*points, strict=True)
                    ax.plot(ts, ys, _STYLE.get(provider, ".--"), label=provider)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{dtype}, d={d}, {'causal' if causal else 'not causal'}", fontsize=9)
            ax.set_xlabel("T")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
        for ax in list(axes.flat)[len(panels) :]:
            ax.set_visible(False)
        axes.flat[0].legend(fontsize=8)
        figure.tight_layout()
        figures[kind] = figure
    return figures
