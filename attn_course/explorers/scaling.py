"""The scaling explorer: one query token's attention weights as the scaling factor moves.

The compute part (`query_weights`) is a pure function. The display part (`ScalingExplorer`)
draws a matplotlib bar chart into an `ipywidgets.Image` through the Agg canvas, so it works in
plain JupyterLab with the default inline backend and in tests without a browser.
`scaling_grid` draws the same bars for a few factors as small multiples, for places where
widgets do not render.

>>> from attn_course.demos.sentence import example_sentence
>>> s = example_sentence(d_k=64)
>>> query_weights(s.q, s.k, query=1, factor=8.0).shape
torch.Size([7])

Introduced in 02_scaling.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from attn_course.attention import dot_product_scores, softmax

_BAR = "tab:blue"
_QUERY_BAR = "tab:orange"


def query_weights(q: torch.Tensor, k: torch.Tensor, query: int, factor: float) -> torch.Tensor:
    """Attention weights softmax(q[query] · kᵀ / factor) of one query token over all keys.

    >>> query_weights(torch.ones(3, 4), torch.eye(4)[:2], query=0, factor=2.0)
    tensor([0.5000, 0.5000])

    Introduced in 02_scaling.
    """
    if factor <= 0:
        raise ValueError(f"the scaling factor must be positive, got {factor}")
    scores = dot_product_scores(q[query : query + 1], k)[0] / factor  # (T_k,)
    return softmax(scores, dim=-1)  # (T_k,)


def figure_png(figure: Figure) -> bytes:
    """The figure rendered as PNG bytes, for an `ipywidgets.Image` (works without a display).

    Introduced in 02_scaling.
    """
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _draw_bars(
    ax: Axes, weights: torch.Tensor, tokens: Sequence[str], query: int, fontsize: float = 8
) -> BarContainer:
    values = weights.detach().to("cpu", torch.float64).tolist()
    colours = [_QUERY_BAR if i == query else _BAR for i in range(len(values))]
    bars = ax.bar(range(len(values)), values, color=colours)
    ax.set_xticks(range(len(tokens)), labels=list(tokens))
    ax.set_ylim(0.0, 1.08)
    ax.axhline(1.0 / len(values), color="grey", linewidth=0.8, linestyle=":")
    ax.bar_label(bars, fmt="%.2f", fontsize=fontsize, padding=1)
    return bars


def token_button_width(tokens: Sequence[str]) -> str:
    """A CSS width for one token's button that shows the longest token whole ("muddy", not "mud…").

    About 9 px a character at the widgets' font size, plus the button's padding.

    >>> token_button_width(["The", "muddy"])
    '75px'

    Introduced in 02_scaling.
    """
    return f"{max(64, 9 * max(map(len, tokens)) + 30)}px"


class ScalingExplorer:
    """A slider for the scaling factor and a token picker driving a bar chart of weights.

    `widget` is what to display; `slider.value` is the factor the scores are divided by,
    `token_picker.value` the index of the query token, `weights` the (T_k,) weights on show.

    >>> from attn_course.demos.sentence import example_sentence
    >>> s = example_sentence(d_k=64)
    >>> explorer = ScalingExplorer(s.q, s.k, s.tokens)
    >>> explorer.slider.value = 1.0
    >>> round(explorer.weights.max().item(), 2)
    1.0

    Introduced in 02_scaling.
    """

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        tokens: Sequence[str],
        *,
        query: int = 1,
        factor: float | None = None,
        min_factor: float = 0.5,
        max_factor: float = 64.0,
    ) -> None:
        if len(tokens) != k.shape[0] or q.shape[0] != k.shape[0]:
            raise ValueError(
                f"need one token per query and key, got {len(tokens)} tokens, "
                f"q of shape {tuple(q.shape)} and k of shape {tuple(k.shape)}"
            )
        self.q = q.detach()  # (T, d_k)
        self.k = k.detach()  # (T, d_k)
        self.tokens = tuple(tokens)
        self.sqrt_d_k = math.sqrt(q.shape[-1])
        start = self.sqrt_d_k if factor is None else factor
        self.slider = widgets.FloatLogSlider(
            value=start,
            base=2,
            min=math.log2(min_factor),
            max=math.log2(max_factor),
            step=0.125,
            description="factor",
            readout_format=".2f",
            continuous_update=True,
            layout=widgets.Layout(width="480px"),
        )
        self.token_picker = widgets.ToggleButtons(
            options=[(token, i) for i, token in enumerate(self.tokens)],
            value=query,
            description="query",
            style={"button_width": token_button_width(self.tokens)},
        )
        self.readout = widgets.HTML()
        # align_self: the picture keeps its own size instead of stretching to the output's width
        self.image = widgets.Image(format="png", layout=widgets.Layout(align_self="flex-start"))
        self.widget = widgets.VBox([self.token_picker, self.slider, self.readout, self.image])

        self.figure = Figure(figsize=(6.4, 3.0), dpi=96, layout="constrained")
        FigureCanvasAgg(self.figure)
        self.ax = self.figure.add_subplot()
        self.weights = torch.empty(0)
        self.update()
        self.slider.observe(self._on_change, names="value")
        self.token_picker.observe(self._on_change, names="value")

    @property
    def factor(self) -> float:
        """The factor the scores are divided by (the slider's value)."""
        return float(self.slider.value)

    @property
    def query(self) -> int:
        """Index of the query token shown (the token picker's value)."""
        return int(self.token_picker.value)

    def _on_change(self, change: dict) -> None:
        self.update()

    def update(self) -> None:
        """Recompute the weights for the current factor and query token, and redraw."""
        self.weights = query_weights(self.q, self.k, self.query, self.factor)  # (T_k,)
        top = int(self.weights.argmax())
        self.ax.clear()
        _draw_bars(self.ax, self.weights, self.tokens, self.query)
        self.ax.set_ylabel("attention weight")
        self.ax.set_title(
            f"query {self.tokens[self.query]!r}: softmax(q·kᵀ / {self.factor:.2f})", fontsize=11
        )
        self.image.value = figure_png(self.figure)
        self.readout.value = (
            f"factor {self.factor:.2f} (√d_k = {self.sqrt_d_k:g}) · largest weight "
            f"{self.weights[top].item():.2f} on {self.tokens[top]!r}"
        )

    def _repr_mimebundle_(self, **kwargs: object) -> dict | None:
        return self.widget._repr_mimebundle_(**kwargs)


def scaling_grid(
    q: torch.Tensor,
    k: torch.Tensor,
    tokens: Sequence[str],
    *,
    query: int = 1,
    factors: Sequence[float] = (1.0, 4.0, 8.0, 32.0),
) -> Figure:
    """Small multiples of one query token's weights, one panel per scaling factor (static).

    >>> from attn_course.demos.sentence import example_sentence
    >>> s = example_sentence(d_k=64)
    >>> len(scaling_grid(s.q, s.k, s.tokens).axes)
    4

    Introduced in 02_scaling.
    """
    fig, axes = plt.subplots(
        1,
        len(factors),
        figsize=(2.9 * len(factors), 2.8),
        sharey=True,
        layout="constrained",
        squeeze=False,
    )
    sqrt_d_k = math.sqrt(q.shape[-1])
    for ax, factor in zip(axes[0], factors, strict=True):
        weights = query_weights(q, k, query, factor)  # (T_k,)
        _draw_bars(ax, weights, tokens, query, fontsize=7)
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
        marker = " = √d_k" if math.isclose(factor, sqrt_d_k) else ""
        ax.set_title(f"factor {factor:g}{marker}", fontsize=10)
    axes[0, 0].set_ylabel("attention weight")
    fig.suptitle(f"query {tokens[query]!r}: softmax(q·kᵀ / factor)", fontsize=11)
    return fig
