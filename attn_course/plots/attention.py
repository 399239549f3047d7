"""Drawing attention: heatmaps of weights with token labels, bars, the convex hull, and what attention costs.

Introduced in 01_dot_product_attention.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes

from attn_course.demos.cost import CostRow, fit_power_law

SMALL_FONT = 9
"""Points of the smallest text (cell values, bar labels, legends): readable at a laptop's notebook width."""


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
    label_queries_and_keys(ax, query_labels, key_labels, title)
    if annotate and matrix.numel() <= 144:
        for (i, j), value in _cells(matrix):
            colour = "white" if value < (vmin + vmax) / 2 else "black"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=SMALL_FONT, color=colour)
    return ax


def label_queries_and_keys(
    ax: Axes, query_labels: Sequence[str] | None, key_labels: Sequence[str] | None, title: str | None
) -> None:
    """Name a heatmap's axes (queries down, keys across), tick them with the tokens, and title it."""
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), labels=list(query_labels))
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), labels=list(key_labels), rotation=45, ha="right")
    if title:
        ax.set_title(title)


def feature_heatmap(
    matrix: torch.Tensor,
    token_labels: Sequence[str],
    feature_labels: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw a (T, n_features) matrix such as the queries, keys or values of the example sentence.

    One row per token, one column per named feature.

    Introduced in 01_dot_product_attention.
    """
    ax = attention_heatmap(matrix, token_labels, feature_labels, ax=ax, title=title)
    ax.set_xlabel("feature")
    ax.set_ylabel("token")
    return ax


def token_bars(
    values: torch.Tensor,
    labels: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str = "score",
    highlight: int | None = None,
) -> Axes:
    """Draw one value per token as a bar (a query's scores or weights over the keys).

    `highlight` colours one bar (the token being looked at) differently.

    Introduced in 01_dot_product_attention.
    """
    heights = values.detach().to("cpu", torch.float64)
    if heights.dim() != 1 or heights.numel() != len(labels):
        raise ValueError(f"expected one value per label ({len(labels)}), got shape {tuple(heights.shape)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * len(labels) + 2, 2.8))
    colours = ["tab:blue"] * len(labels)
    if highlight is not None:
        colours[highlight] = "tab:orange"
    positions = range(len(labels))
    bars = ax.bar(positions, heights.tolist(), color=colours)
    ax.bar_label(bars, fmt="%.2f", fontsize=SMALL_FONT)
    ax.set_xticks(positions, labels=list(labels), rotation=45, ha="right")
    if ax.xaxis.get_tick_params(which="major").get("labelbottom", True):  # not an inner row of shared x
        ax.set_xlabel("key (token)")
    ax.set_ylabel(ylabel)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.margins(y=0.15)
    if title:
        ax.set_title(title)
    return ax


def convex_hull_plot(
    values: torch.Tensor,
    outputs: torch.Tensor,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw 2-D value vectors, their convex hull, and attention outputs (which lie inside it).

    `values` is (T_k, 2), `outputs` is (T_q, 2).

    Introduced in 01_dot_product_attention.
    """
    points = values.detach().to("cpu", torch.float64)
    outs = outputs.detach().to("cpu", torch.float64)
    if points.dim() != 2 or points.shape[1] != 2 or outs.dim() != 2 or outs.shape[1] != 2:
        raise ValueError(
            "expected (T_k, 2) values and (T_q, 2) outputs, "
            f"got {tuple(points.shape)} and {tuple(outs.shape)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    hull = _convex_hull(points.tolist())
    if len(hull) >= 3:
        xs, ys = zip(*hull, strict=True)
        ax.fill(xs, ys, color="tab:blue", alpha=0.12, label="convex hull of the values")
    ax.scatter(points[:, 0], points[:, 1], s=60, color="tab:blue", label="values $v_j$", zorder=3)
    ax.scatter(outs[:, 0], outs[:, 1], s=30, marker="x", color="tab:red", label="outputs $o_i$", zorder=4)
    ax.set_xlabel("value dimension 0")
    ax.set_ylabel("value dimension 1")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=SMALL_FONT)
    if title:
        ax.set_title(title)
    return ax


def cost_plot(rows: Sequence[CostRow], *, axes: tuple[Axes, Axes] | None = None) -> tuple[Axes, Axes]:
    """Draw measured time and memory against T on log-log axes, each with its fitted slope.

    Left: median time per call. Right: the largest tensor allocated (the T×T score matrix)
    against the formula, and all bytes allocated. Slope 2 means the cost grows like T².

    Introduced in 01_dot_product_attention.
    """
    if len(rows) < 2:
        raise ValueError(f"need at least two measured rows to fit a slope, got {len(rows)}")
    if axes is None:
        _, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    else:
        time_ax, memory_ax = axes
    lengths = [row.t for row in rows]
    millis = [row.seconds * 1e3 for row in rows]
    mebi = 2.0**20
    largest = [row.largest_bytes / mebi for row in rows]
    allocated = [row.allocated_bytes / mebi for row in rows]
    formula = [row.score_bytes / mebi for row in rows]

    time_fit = fit_power_law(lengths, millis)
    time_ax.plot(lengths, millis, "o", color="tab:blue", label="measured (median)")
    time_ax.plot(
        lengths,
        [time_fit(t) for t in lengths],
        "--",
        color="tab:blue",
        alpha=0.6,
        label=f"fit: slope {time_fit.exponent:.2f}",
    )
    time_ax.set_ylabel("time per call (ms)")
    time_ax.set_title("Time")

    memory_fit = fit_power_law(lengths, largest)
    memory_ax.plot(lengths, allocated, "s", color="tab:purple", label="all tensors allocated")
    memory_ax.plot(lengths, largest, "o", color="tab:orange", label="largest tensor (measured)")
    memory_ax.plot(lengths, formula, "-", color="black", alpha=0.5, linewidth=1, label="formula: 4·T² bytes")
    memory_ax.set_ylabel("memory (MiB)")
    memory_ax.set_title("Memory")

    for ax, fit in ((time_ax, time_fit), (memory_ax, memory_fit)):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, labels=[str(t) for t in lengths])
        ax.minorticks_off()
        ax.set_xlabel("sequence length T")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="lower right", fontsize=SMALL_FONT)
        ax.text(
            0.04,
            0.95,
            f"fitted slope ≈ {fit.exponent:.2f}",
            transform=ax.transAxes,
            va="top",
            fontsize=11,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8},
        )
    return time_ax, memory_ax


def _convex_hull(points: list[list[float]]) -> list[tuple[float, float]]:
    """Vertices of the 2-D convex hull, counter-clockwise (Andrew's monotone chain)."""
    unique = sorted({(float(x), float(y)) for x, y in points})
    if len(unique) <= 2:
        return unique

    def cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def chain(ordered: list[tuple[float, float]]) -> list[tuple[float, float]]:
        hull: list[tuple[float, float]] = []
        for p in ordered:
            while len(hull) >= 2 and cross(hull[-2], hull[-1], p) <= 0:
                hull.pop()
            hull.append(p)
        return hull[:-1]

    return chain(unique) + chain(unique[::-1])


def _cells(matrix: torch.Tensor):
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            yield (i, j), matrix[i, j].item()
