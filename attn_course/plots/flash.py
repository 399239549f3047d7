"""Plots of notebook 06: which causal tiles a tiled pass computes, and time and memory against T, log-log.

Introduced in 06_flash_attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

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


SKIPPED, MASKED, FULL = 0, 1, 2
"""The states of a causal tile: never computed, computed and masked inside, computed as it is."""


def causal_tiles(t_q: int, t_k: int, block_size: int) -> torch.Tensor:
    """(query blocks, key blocks) of SKIPPED, MASKED or FULL: a causal pass's tiles, bottom-right aligned.

    >>> causal_tiles(10, 16, 4).tolist()
    [[2.0, 1.0, 1.0, 0.0], [2.0, 2.0, 1.0, 1.0], [2.0, 2.0, 2.0, 1.0]]

    Introduced in 06_flash_attention.
    """
    offset = t_k - t_q  # query i sits at key position i + offset
    n_q, n_k = math.ceil(t_q / block_size), math.ceil(t_k / block_size)
    states = torch.zeros(n_q, n_k)  # (query blocks, key blocks)
    for r in range(n_q):
        first = r * block_size + offset  # the position of the block's first row
        last = min((r + 1) * block_size, t_q) - 1 + offset  # and of its last row
        for c in range(n_k):
            ks, last_key = c * block_size, min((c + 1) * block_size, t_k) - 1
            states[r, c] = SKIPPED if ks > last else (FULL if last_key <= first else MASKED)
    return states


def plot_causal_tiles(t_q: int, t_k: int, block_size: int) -> Axes:
    """Draw `causal_tiles(t_q, t_k, block_size)`: one labelled cell per (query block, key block).

    Introduced in 06_flash_attention.
    """
    states = causal_tiles(t_q, t_k, block_size)  # (query blocks, key blocks)
    n_q, n_k = states.shape
    _, ax = plt.subplots(figsize=(1 + 0.9 * n_k, 0.6 + 0.8 * n_q))
    ax.imshow(states.numpy(), cmap="Greens", vmin=-0.5, vmax=2)
    for r in range(n_q):
        for c in range(n_k):
            state = int(states[r, c])
            colour = "white" if state == FULL else "black"  # readable on the darkest green
            ax.text(c, r, ("skip", "mask", "full")[state], ha="center", va="center", color=colour)
    ax.set_xticks(range(n_k), [_span("keys", c, block_size, t_k) for c in range(n_k)], fontsize=7)
    ax.set_yticks(range(n_q), [_span("queries", r, block_size, t_q) for r in range(n_q)], fontsize=7)
    ax.set_title(f"causal tiles, T_q={t_q}, T_k={t_k}, block {block_size}", fontsize=9)
    return ax


def _span(what: str, block: int, block_size: int, length: int) -> str:
    return f"{what} {block * block_size}-{min((block + 1) * block_size, length) - 1}"


def label_log_axis(ax: Axes, axis: str = "y") -> None:
    """Label a log axis at 1, 2 and 5 times each power of ten, as plain numbers (0.2, 5, 50).

    A line that stays within one decade then still crosses labelled ticks.

    Introduced in 06_flash_attention.
    """
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_formatter(FuncFormatter(lambda value, _: ""))
