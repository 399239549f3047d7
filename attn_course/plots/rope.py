"""Drawing RoPE: the pairs' wavelengths, a score matrix by position, the decay bound, aliasing.

Introduced in 05_rope.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes

from attn_course.plots.attention import attention_heatmap


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def wavelength_plot(freqs: torch.Tensor, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Positions per full turn, 2π/θ_i, of every pair i, on a log scale.

    >>> wavelength_plot(torch.tensor([1.0, 0.1])).get_ylabel()
    'positions per turn (2π/θ_i)'

    Introduced in 05_rope.
    """
    ax = _axes(ax, (6.0, 3.0))
    wavelengths = (2 * math.pi / freqs.detach().to("cpu", torch.float64)).tolist()
    ax.plot(range(len(wavelengths)), wavelengths, "o-", markersize=3)
    ax.set_yscale("log")
    ax.set_xlabel("pair i (channels 2i, 2i+1)")
    ax.set_ylabel("positions per turn (2π/θ_i)")
    ax.grid(True, which="major", alpha=0.3)
    if title:
        ax.set_title(title)
    return ax


def position_score_heatmap(scores: torch.Tensor, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """A (T, T) matrix of scores, row = query position m, column = key position n.

    >>> position_score_heatmap(torch.zeros(4, 4)).get_xlabel()
    'key position n'

    Introduced in 05_rope.
    """
    ax = _axes(ax, (5.0, 4.2))
    attention_heatmap(scores, ax=ax, title=title, annotate=False, cmap="coolwarm")
    ax.set_xlabel("key position n")
    ax.set_ylabel("query position m")
    return ax


def decay_plot(
    distances: torch.Tensor,
    bound: torch.Tensor,
    measured: torch.Tensor | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """RoFormer's decay term of the upper bound against the distance, and optionally a measured curve.

    >>> decay_plot(torch.arange(3), torch.ones(3)).get_xlabel()
    'relative distance |m - n|'

    Introduced in 05_rope.
    """
    ax = _axes(ax, (6.0, 3.2))
    x = distances.tolist()
    ax.plot(
        x, bound.detach().to("cpu", torch.float64).tolist(), color="black", label="decay term (2/d) Σ|S_j|"
    )
    if measured is not None:
        ax.plot(
            x,
            measured.detach().to("cpu", torch.float64).tolist(),
            color="tab:orange",
            alpha=0.8,
            label="measured score",
        )
    ax.set_xlabel("relative distance |m - n|")
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    return ax


def aliasing_plot(
    positions: torch.Tensor,
    exact: torch.Tensor,
    rough: torch.Tensor,
    *,
    rough_label: str = "bfloat16",
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Angles against position, computed exactly and in a low-precision dtype (a staircase).

    >>> aliasing_plot(torch.arange(3), torch.arange(3.0), torch.zeros(3)).get_xlabel()
    'position'

    Introduced in 05_rope.
    """
    ax = _axes(ax, (6.0, 3.2))
    x = positions.tolist()
    ax.plot(x, exact.detach().to("cpu", torch.float64).tolist(), color="black", label="float64")
    ax.step(
        x, rough.detach().to("cpu", torch.float64).tolist(), where="post", color="tab:red", label=rough_label
    )
    ax.set_xlabel("position")
    ax.set_ylabel("angle (radians)")
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    return ax
