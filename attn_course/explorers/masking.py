"""The mask explorer: toggle the causal and padding masks, pick a length, see mask and weights.

The compute part (`masked_attention`) is a pure function of the controls' values. The display
part (`MaskExplorer`) draws the mask and the attention weights side by side into an
`ipywidgets.Image` through the Agg canvas, like the scaling explorer of notebook 02.
`mask_grid` draws the four combinations of masks at once, for places where widgets do not render.

The sequence is the first `length` tokens of the running example. With padding on, it is padded
to the full sentence, as the shorter sentences of a batch are: the pad positions hold seeded
garbage queries and keys, and the padding mask hides them as keys.

>>> from attn_course.demos.sentence import example_sentence
>>> s = example_sentence(d_k=64)
>>> view = masked_attention(s.q, s.k, s.tokens, length=5, causal=True, padding=True)
>>> view.labels
('The', 'bank', 'of', 'the', 'river', '<pad>', '<pad>')
>>> view.mask.shape, view.weights.shape
(torch.Size([7, 7]), torch.Size([7, 7]))

Introduced in 03_causal_masking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attn_course.attention import attention
from attn_course.explorers.scaling import figure_png
from attn_course.masking import causal_mask, padding_mask
from attn_course.plots.attention import attention_heatmap
from attn_course.plots.masking import mask_heatmap

PAD = "<pad>"
GARBAGE_SCALE = 5.0
"""Pad positions hold GARBAGE_SCALE · N(0, 1) queries and keys (as in notebook 03's batch)."""


@dataclass(frozen=True)
class MaskedAttention:
    """What the mask explorer shows for one setting of its controls."""

    labels: tuple[str, ...]
    """One label per position: the real tokens, then `<pad>` for each pad position."""
    length: int
    """How many positions hold real tokens (the first ones)."""
    mask: torch.Tensor
    """(T, T) boolean, True where query i may attend key j (causal and/or key padding)."""
    weights: torch.Tensor
    """(T, T) attention weights under `mask`: zero wherever the mask forbids."""

    @property
    def allowed_fraction(self) -> float:
        """The fraction of the T² query-key pairs the mask allows."""
        return self.mask.float().mean().item()


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    tokens: Sequence[str],
    *,
    length: int,
    causal: bool,
    padding: bool,
    seed: int = 0,
) -> MaskedAttention:
    """Mask and attention weights of the first `length` tokens, padded to all of them if `padding`.

    q and k are (T_max, d_k), one row per token of `tokens`. Without padding the sequence is the
    first `length` tokens (T = length); with it, it is padded to T = T_max with garbage, and the
    key padding mask forbids the pads. `causal` adds the causal mask (logical AND).

    >>> from attn_course.demos.sentence import example_sentence
    >>> s = example_sentence(d_k=64)
    >>> masked_attention(s.q, s.k, s.tokens, length=3, causal=True, padding=False).mask
    tensor([[ True, False, False],
            [ True,  True, False],
            [ True,  True,  True]])

    Introduced in 03_causal_masking.
    """
    t_max = len(tokens)
    if q.shape[0] != t_max or k.shape[0] != t_max:
        raise ValueError(
            f"need one token per query and key, got {t_max} tokens, "
            f"q of shape {tuple(q.shape)} and k of shape {tuple(k.shape)}"
        )
    if not 1 <= length <= t_max:
        raise ValueError(f"length must be between 1 and {t_max}, got {length}")
    t = t_max if padding else length
    generator = torch.Generator().manual_seed(seed)
    garbage = GARBAGE_SCALE * torch.randn(2, t - length, q.shape[-1], generator=generator, dtype=q.dtype)
    q_seq = torch.cat([q[:length].detach(), garbage[0]])  # (T, d_k)
    k_seq = torch.cat([k[:length].detach(), garbage[1]])  # (T, d_k)

    mask = torch.ones(t, t, dtype=torch.bool)  # (T_q, T_k)
    if padding:
        mask = mask & padding_mask(torch.tensor([length]), t)  # (1, T_k) broadcast over queries
    if causal:
        mask = mask & causal_mask(t)  # (T_q, T_k)
    _, weights = attention(q_seq, k_seq, torch.zeros(t, 1, dtype=q.dtype), mask=mask)  # (T, T)
    labels = tuple(tokens[:length]) + (PAD,) * (t - length)
    return MaskedAttention(labels=labels, length=length, mask=mask, weights=weights)


def _title(causal: bool, padding: bool) -> str:
    return {
        (False, False): "no mask",
        (True, False): "causal",
        (False, True): "padding",
        (True, True): "padding & causal",
    }[(causal, padding)]


def _draw(view: MaskedAttention, mask_ax, weights_ax, title: str) -> None:
    mask_heatmap(view.mask, view.labels, view.labels, ax=mask_ax, title=f"mask: {title}")
    attention_heatmap(view.weights, view.labels, view.labels, ax=weights_ax, title=f"weights: {title}")


class MaskExplorer:
    """Check boxes for the causal and padding masks and a length slider driving two heatmaps.

    `widget` is what to display; `causal.value` and `padding.value` switch the masks,
    `length.value` is the number of real tokens, `view` is the `MaskedAttention` on show.

    >>> from attn_course.demos.sentence import example_sentence
    >>> s = example_sentence(d_k=64)
    >>> explorer = MaskExplorer(s.q, s.k, s.tokens)
    >>> explorer.causal.value = True
    >>> bool(explorer.view.weights.triu(1).eq(0).all())
    True

    Introduced in 03_causal_masking.
    """

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        tokens: Sequence[str],
        *,
        length: int | None = None,
        causal: bool = False,
        padding: bool = False,
    ) -> None:
        self.q = q.detach()  # (T_max, d_k)
        self.k = k.detach()  # (T_max, d_k)
        self.tokens = tuple(tokens)
        start = len(self.tokens) if length is None else length
        self.view = masked_attention(  # also validates the arguments, before any widget is made
            self.q, self.k, self.tokens, length=start, causal=causal, padding=padding
        )
        self.causal = widgets.Checkbox(value=causal, description="causal mask", indent=False)
        self.padding = widgets.Checkbox(value=padding, description=f"pad to {len(self.tokens)}", indent=False)
        for box in (self.causal, self.padding):
            box.layout = widgets.Layout(width="auto", margin="0 24px 0 0")  # as wide as its label
        self.length = widgets.IntSlider(
            value=start,
            min=1,
            max=len(self.tokens),
            description="length",
            continuous_update=True,
            layout=widgets.Layout(width="360px"),
        )
        self.readout = widgets.HTML()
        # align_self: the picture keeps its own size instead of stretching to the output's width
        self.image = widgets.Image(format="png", layout=widgets.Layout(align_self="flex-start"))
        controls = widgets.HBox([self.causal, self.padding, self.length])
        self.widget = widgets.VBox([controls, self.readout, self.image])

        self.figure = Figure(figsize=(8.8, 3.9), dpi=100, layout="constrained")  # 880 px: a laptop's notebook
        FigureCanvasAgg(self.figure)
        self.update()
        for control in (self.causal, self.padding, self.length):
            control.observe(self._on_change, names="value")

    def _on_change(self, change: dict) -> None:
        self.update()

    def update(self) -> None:
        """Recompute mask and weights for the controls' values, and redraw."""
        causal, padding, length = bool(self.causal.value), bool(self.padding.value), int(self.length.value)
        self.view = masked_attention(
            self.q, self.k, self.tokens, length=length, causal=causal, padding=padding
        )
        self.figure.clear()
        mask_ax, weights_ax = self.figure.subplots(1, 2)
        _draw(self.view, mask_ax, weights_ax, _title(causal, padding))
        self.image.value = figure_png(self.figure)
        t = len(self.view.labels)
        allowed = int(self.view.mask.sum())
        self.readout.value = (
            f"T = {t} ({length} real, {t - length} pad) · {allowed} of {t * t} pairs allowed "
            f"({self.view.allowed_fraction:.0%}) · every row sums to 1"
        )

    def _repr_mimebundle_(self, **kwargs: object) -> dict | None:
        return self.widget._repr_mimebundle_(**kwargs)


def mask_grid(q: torch.Tensor, k: torch.Tensor, tokens: Sequence[str], *, length: int = 5) -> Figure:
    """The four combinations of masks (static): one row each, its mask beside its weights.

    Two panels a row keep the figure as wide as a laptop's notebook, so its numbers stay readable.

    >>> from attn_course.demos.sentence import example_sentence
    >>> s = example_sentence(d_k=64)
    >>> len(mask_grid(s.q, s.k, s.tokens).axes)  # 8 heatmaps and their colour bars
    16

    Introduced in 03_causal_masking.
    """
    settings = ((False, False), (True, False), (False, True), (True, True))
    fig, axes = plt.subplots(len(settings), 2, figsize=(9.0, 3.3 * len(settings)), layout="constrained")
    for row, (causal, padding) in enumerate(settings):
        view = masked_attention(q, k, tokens, length=length, causal=causal, padding=padding)
        _draw(view, axes[row, 0], axes[row, 1], _title(causal, padding))
    fig.suptitle(f"The first {length} tokens; with padding, padded to {len(tokens)}", fontsize=12)
    return fig
