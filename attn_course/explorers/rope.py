"""The RoPE explorer: one pair of a query and a key turning with position, and the score it gives.

The compute part (`pair_view`, `score_curve`) is pure functions of a query q (d,) and a key k
(d,). The display part (`RopeExplorer`) has sliders for the frequency index i, the relative
distance Δ = m - n and a shift of both positions; it draws with matplotlib into an
`ipywidgets.Image` through the Agg canvas, like the scaling explorer. `rope_pair_grid` draws
the same pictures for a few indices and distances as small multiples, where widgets do not render.

>>> q, k = torch.ones(8), torch.ones(8)
>>> pair_view(q, k, index=0, distance=1).angle
1.0

Introduced in 05_rope.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attn_course.rope import apply_rope, rope_frequencies

Rope = Callable[..., torch.Tensor]
"""A RoPE function with the signature of `apply_rope(x, positions=None, base=10000.0)`."""

_QUERY = "tab:orange"
_KEY = "tab:blue"


@dataclass(frozen=True)
class PairView:
    """What the explorer shows for one pair index, one relative distance and one shift."""

    index: int
    """The pair i: channels (2i, 2i+1), turning at θ_i = base^(-2i/d) radians per position."""
    distance: int
    """Δ = m - n: the query sits at position m = shift + Δ, the key at n = shift."""
    shift: int
    """The key's position n; moving it moves both and changes no score."""
    theta: float
    """θ_i, radians per position."""
    angle: float
    """Δ·θ_i: how much further the query's pair has turned than the key's."""
    q_pair: torch.Tensor
    """(2,) pair i of the query, rotated to position m."""
    k_pair: torch.Tensor
    """(2,) pair i of the key, rotated to position n."""
    pair_score: float
    """q_pair · k_pair: this pair's share of the score."""
    score: float
    """The whole score: the sum of the shares of all d/2 pairs (unscaled, q·k)."""


def _check_vectors(q: torch.Tensor, k: torch.Tensor) -> None:
    if q.dim() != 1 or q.shape != k.shape or q.shape[0] % 2:
        raise ValueError(
            f"need one query and one key of the same even size d, got {tuple(q.shape)} and {tuple(k.shape)}"
        )


def pair_view(
    q: torch.Tensor,
    k: torch.Tensor,
    index: int,
    distance: int,
    shift: int = 0,
    base: float = 10000.0,
    rope: Rope = apply_rope,
) -> PairView:
    """Pair `index` of q at position shift + distance and of k at position shift, and their scores.

    `rope` rotates them (the course's `apply_rope` by default; a notebook passes the learner's).

    >>> view = pair_view(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]), index=0, distance=2)
    >>> round(view.pair_score, 4) == round(math.cos(2.0), 4)
    True

    Introduced in 05_rope.
    """
    _check_vectors(q, k)
    d = q.shape[0]
    if not 0 <= index < d // 2:
        raise ValueError(f"the pair index must be in 0 … {d // 2 - 1}, got {index}")
    q64, k64 = q.detach().to(torch.float64), k.detach().to(torch.float64)  # (d,) each
    rotated_q = rope(q64[None], torch.tensor([shift + distance]), base)[0]  # (d,)
    rotated_k = rope(k64[None], torch.tensor([shift]), base)[0]  # (d,)
    theta = rope_frequencies(d, base)[index].item()
    q_pair, k_pair = rotated_q[2 * index : 2 * index + 2], rotated_k[2 * index : 2 * index + 2]  # (2,) each
    return PairView(
        index=index,
        distance=distance,
        shift=shift,
        theta=theta,
        angle=distance * theta,
        q_pair=q_pair,
        k_pair=k_pair,
        pair_score=float(q_pair @ k_pair),
        score=float(rotated_q @ rotated_k),
    )


def score_curve(
    q: torch.Tensor,
    k: torch.Tensor,
    distances: torch.Tensor,
    index: int | None = None,
    base: float = 10000.0,
    rope: Rope = apply_rope,
) -> torch.Tensor:
    """Scores q·k (n,) with the query Δ positions after the key, for each Δ in `distances` (n,).

    With `index`, only pair `index`'s share of each score. The key sits at position 0; by RoPE's
    relative invariance any other common shift gives the same curve. `rope` rotates q and k (the
    course's `apply_rope` by default; a notebook passes the learner's).

    >>> score_curve(torch.ones(4), torch.ones(4), torch.tensor([0, 1])).shape
    torch.Size([2])

    Introduced in 05_rope.
    """
    _check_vectors(q, k)
    d = q.shape[0]
    q64, k64 = q.detach().to(torch.float64), k.detach().to(torch.float64)  # (d,) each
    rotated_q = rope(q64.expand(len(distances), d), distances, base)  # (n, d)
    rotated_k = rope(k64[None], None, base)  # (1, d): the key at position 0
    products = rotated_q * rotated_k  # (n, d)
    if index is not None:
        return products[:, 2 * index : 2 * index + 2].sum(dim=-1)  # (n,)
    return products.sum(dim=-1)  # (n,)


def _draw_pair(ax: Axes, view: PairView, *, title: bool = True, legend: bool = True) -> None:
    """Both rotated pairs as arrows in their plane, and the angle between them."""
    radius = max(view.q_pair.norm().item(), view.k_pair.norm().item(), 1e-6) * 1.2
    circle = torch.linspace(0, 2 * math.pi, 100)
    for pair in (view.q_pair, view.k_pair):
        r = pair.norm().item()
        ax.plot((r * circle.cos()).tolist(), (r * circle.sin()).tolist(), color="0.85", linewidth=0.8)
    for pair, colour, label in ((view.q_pair, _QUERY, "query pair"), (view.k_pair, _KEY, "key pair")):
        x, y = pair.tolist()
        ax.annotate("", xy=(x, y), xytext=(0, 0), arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2})
        ax.plot([], [], color=colour, linewidth=2, label=label)
    ax.set_xlim(-radius, radius)
    ax.set_ylim(-radius, radius)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.7", linewidth=0.6)
    ax.axvline(0, color="0.7", linewidth=0.6)
    ax.set_xticks([])
    ax.set_yticks([])
    if legend:
        ax.legend(loc="lower left", fontsize=7, frameon=False)
    if title:
        ax.set_title(
            f"pair {view.index}, Δ = {view.distance}: turned {math.degrees(view.angle) % 360:.0f}° more\n"
            f"pair score {view.pair_score:+.2f}",
            fontsize=9,
        )


class RopeExplorer:
    """Sliders for the pair index, the distance Δ and a common shift, driving two pictures.

    Left: pair i of the query (at position shift + Δ) and of the key (at position shift) as
    arrows in their plane. Right: the whole score and pair i's share against Δ, with the
    current Δ marked. `widget` is what to display; `view` is the `PairView` on show. `rope`
    rotates the vectors (the course's `apply_rope` by default; a notebook passes the learner's).

    >>> explorer = RopeExplorer(torch.ones(8), torch.ones(8))
    >>> explorer.distance_slider.value = 3
    >>> explorer.view.distance
    3

    Introduced in 05_rope.
    """

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        base: float = 10000.0,
        index: int = 0,
        distance: int = 1,
        max_distance: int = 64,
        max_shift: int = 1000,
        rope: Rope = apply_rope,
    ) -> None:
        _check_vectors(q, k)
        self.rope = rope
        self.q = q.detach().to(torch.float64)  # (d,)
        self.k = k.detach().to(torch.float64)  # (d,)
        self.base = base
        d = q.shape[0]
        self.distances = torch.arange(-max_distance, max_distance + 1)  # (n,)
        self.scores = score_curve(self.q, self.k, self.distances, base=base, rope=rope)  # (n,)
        self.index_slider = widgets.IntSlider(
            value=index, min=0, max=d // 2 - 1, description="pair i", continuous_update=True
        )
        self.distance_slider = widgets.IntSlider(
            value=distance,
            min=-max_distance,
            max=max_distance,
            description="Δ = m - n",
            continuous_update=True,
        )
        self.shift_slider = widgets.IntSlider(
            value=0, min=0, max=max_shift, description="shift n", continuous_update=True
        )
        for slider in (self.index_slider, self.distance_slider, self.shift_slider):
            slider.layout = widgets.Layout(width="480px")
            slider.style = {"description_width": "80px"}
        self.readout = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.widget = widgets.VBox(
            [self.index_slider, self.distance_slider, self.shift_slider, self.readout, self.image]
        )
        self.figure = Figure(figsize=(9.0, 3.6), dpi=96, layout="constrained")
        FigureCanvasAgg(self.figure)
        self.pair_ax, self.curve_ax = self.figure.subplots(1, 2, width_ratios=[1, 1.8])
        self.view = pair_view(self.q, self.k, index, distance, 0, base, rope)
        self.update()
        for slider in (self.index_slider, self.distance_slider, self.shift_slider):
            slider.observe(self._on_change, names="value")

    def _on_change(self, change: dict) -> None:
        self.update()

    def update(self) -> None:
        """Recompute the view for the sliders' values, and redraw both pictures."""
        index, distance = int(self.index_slider.value), int(self.distance_slider.value)
        self.view = pair_view(
            self.q, self.k, index, distance, int(self.shift_slider.value), self.base, self.rope
        )
        self.pair_ax.clear()
        _draw_pair(self.pair_ax, self.view)
        self.curve_ax.clear()
        share = score_curve(self.q, self.k, self.distances, index, self.base, self.rope)  # (n,)
        self.curve_ax.plot(self.distances.tolist(), self.scores.tolist(), color="black", label="score q·k")
        self.curve_ax.plot(
            self.distances.tolist(), share.tolist(), color=_QUERY, label=f"share of pair {index}"
        )
        self.curve_ax.axvline(distance, color="0.5", linestyle=":")
        self.curve_ax.plot([distance, distance], [self.view.score, self.view.pair_score], "o", color="0.3")
        self.curve_ax.axhline(0, color="0.7", linewidth=0.6)
        self.curve_ax.set_xlabel("relative distance Δ = m - n")
        self.curve_ax.set_ylabel("score")
        self.curve_ax.legend(
            loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, fontsize=8, frameon=False
        )  # above the axes, off the curves
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        self.image.value = buffer.getvalue()
        wavelength = 2 * math.pi / self.view.theta
        self.readout.value = (
            f"pair {index}: θ = {self.view.theta:.3g} rad per position (one turn every {wavelength:,.0f} "
            f"positions) · query at m = {self.view.shift + distance}, key at n = {self.view.shift} · "
            f"pair score {self.view.pair_score:+.3f} · score {self.view.score:+.3f}"
        )

    def _repr_mimebundle_(self, **kwargs: object) -> dict | None:
        return self.widget._repr_mimebundle_(**kwargs)


def rope_pair_grid(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    indices: Sequence[int] = (0, 4, 16),
    distances: Sequence[int] = (0, 1, 4, 16),
    base: float = 10000.0,
    rope: Rope = apply_rope,
) -> Figure:
    """Small multiples of the explorer's pair picture: one row per pair index, one column per Δ.

    >>> len(rope_pair_grid(torch.ones(64), torch.ones(64)).axes)
    12

    Introduced in 05_rope.
    """
    fig, axes = plt.subplots(
        len(indices),
        len(distances),
        figsize=(2.3 * len(distances), 2.4 * len(indices)),
        layout="constrained",
        squeeze=False,
    )
    for row, index in enumerate(indices):
        for column, distance in enumerate(distances):
            view = pair_view(q, k, index, distance, 0, base, rope)
            _draw_pair(axes[row, column], view, title=False, legend=row == column == 0)
            axes[row, column].set_title(
                f"i = {index}, Δ = {distance}: {view.pair_score:+.2f}\nscore {view.score:+.1f}", fontsize=8
            )
    fig.suptitle("query pair (orange) and key pair (blue); titles: pair score, whole score", fontsize=10)
    return fig
