"""Probing a learner's attention module to say which part is wrong, when no known mistake matches.

An attention layer ends with `self.out(merged heads)`. A forward pre-hook on the learner's `out`
gives their merged heads; split into heads, each row of a head's output should be a weighted
average of that head's values. With at least as many value dimensions as keys (the probe's layer
is built so), the weights the learner's code used can be solved for, `W = o @ pinv(v)`, and then
read: do their rows sum to 1, is weight put on keys the mask hides, are they a softmax of q·kᵀ at
another scale? When the outputs are not mixtures of the values at all, the values are wrong.
Used by every attention-layer check (MultiHeadAttention, its cross-attention, RotaryMultiHeadAttention,
GroupedQueryAttention) after its table of known mistakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from einops import rearrange
from torch import nn

from attn_course.checks._harness import _ranges


@dataclass
class Heads:
    """The reference's per-head tensors of one call (keys and values already shared per query head)."""

    q: torch.Tensor
    """(b, h, t_q, d) queries, as the scores use them (rotated, for RoPE)."""
    k: torch.Tensor
    """(b, h, t_k, d) keys, as the scores use them."""
    v: torch.Tensor
    """(b, h, t_k, d) values."""
    allowed: torch.Tensor
    """(b, h, t_q, t_k) the keys each query may attend (mask and causal mask together)."""
    causal: torch.Tensor | None = None
    """(t_q, t_k) the causal part alone, when is_causal."""
    others: tuple[tuple[str, torch.Tensor], ...] = ()
    """Other tensors the outputs might mix by mistake, each with the sentence that names the mistake."""
    other_scores: tuple[tuple[str, torch.Tensor, torch.Tensor], ...] = ()
    """Other (queries, keys) the scores might come from by mistake, each with its sentence."""

    def scores(self) -> torch.Tensor:
        return self.q @ self.k.transpose(-2, -1) / math.sqrt(self.q.shape[-1])  # (b, h, t_q, t_k)

    def weights(self) -> torch.Tensor:
        return torch.softmax(self.scores().masked_fill(~self.allowed, float("-inf")), dim=-1)

    def out(self) -> torch.Tensor:
        return self.weights() @ self.v  # (b, h, t_q, d)


def merged_input(layer: nn.Module, run: Callable[[], Any], name: str = "out") -> torch.Tensor | None:
    """What the learner's `layer.NAME` (their output projection) was given in `run()`, the last time."""
    out = getattr(layer, name, None)
    if not isinstance(out, nn.Module):
        return None
    seen: list[torch.Tensor] = []

    def keep(module: nn.Module, args: tuple[Any, ...]) -> None:
        if args and isinstance(args[0], torch.Tensor):
            seen.append(args[0].detach())

    handle = out.register_forward_pre_hook(keep)
    try:
        with torch.no_grad():
            run()
    except Exception:  # the call itself was checked before; a probe that cannot run says nothing
        return None
    finally:
        handle.remove()
    return seen[-1] if seen else None


def read_on(found: str | None, built: str, same_size: bool) -> str | None:
    """A probe's reading, said of the layer it was read on: the learner's class built at another size than
    the call that failed (8 features per head) is named as such, not left to a "(Seen on ...)" that would
    follow a sentence about the call's own layer."""
    if found is None or same_size:
        return found
    return (
        f"is wrong. Built as {built}, 8 features per head so that each head can be read, your layer {found}"
    )


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=tol, rtol=1e-4))


def diagnose_heads(merged: torch.Tensor | None, ref: Heads, out_name: str = "self.out") -> str | None:
    """Which part of the attention the learner's merged heads get wrong, in the exercise's words, or None."""
    if merged is None:
        return (
            f"never calls {out_name}: the heads' outputs, merged back to (b, t, d_model), go through "
            f"{out_name} last."
        )
    h = ref.q.shape[1]
    expected = ref.out()  # (b, h, t_q, d)
    b, _, t_q, d = expected.shape
    if merged.shape != (b, t_q, h * d):
        return None
    o = rearrange(merged.to(expected.dtype), "b t (h d) -> b h t d", h=h)  # (b, h, t_q, d)
    if layout := _merge_layout(merged.to(expected.dtype), expected, out_name):
        return layout
    if _close(o, expected):
        return (
            f"is right up to {out_name}: the merged heads it is given are the right ones. What goes wrong "
            f"is {out_name} itself or what is done with its result (apply it once, and return it)."
        )
    wrong_heads = [i for i in range(h) if not _close(o[:, i], expected[:, i])]
    heads = ""
    if 0 < len(wrong_heads) < h:
        heads = f" Only head(s) {_ranges(wrong_heads)} of {h} are wrong."
    t_k = ref.v.shape[-2]
    if t_k > d:
        return None
    found_in: str | None = ""
    weights = o
    for words, values in ((None, ref.v), *ref.others):
        weights = o @ torch.linalg.pinv(values)  # (b, h, t_q, t_k)
        if _close(weights @ values, o, 1e-6):
            found_in = words
            break
    if found_in == "" and (other_count := _other_head_count(merged.to(expected.dtype), ref)):
        return other_count
    if found_in == "" and (moved := _values_of_other_heads(o, ref.v)):
        return moved
    if found_in == "":
        return (
            "gives per-head outputs that are not weighted averages of the values at all: each head's "
            "output is weights @ v, with v the head's own slice of the value projection." + heads
        )
    if found_in is not None:
        return found_in + heads
    found = _read_weights(weights, ref)
    return found + heads if found else None


def _values_of_other_heads(o: torch.Tensor, v: torch.Tensor) -> str | None:
    """Each head's output a weighted average of another head's values: the heads' values reordered."""
    h = v.shape[1]
    sources = []
    for i in range(h):
        found = [
            j for j in range(h)
            if _close((o[:, i] @ torch.linalg.pinv(v[:, j])) @ v[:, j], o[:, i], 1e-6)
        ]  # fmt: skip
        if not found:
            return None
        sources.append(found[0])
    if sources == list(range(h)):
        return None
    return (
        f"gives each head the values of another head: heads 0 … {h - 1} mix the values of heads {sources}. "
        "Query head j reads its own value head (j // (n_heads // n_kv_heads) when they are shared): keep "
        "the values in head order, as the keys are."
    )


def _other_head_count(merged: torch.Tensor, ref: Heads) -> str | None:
    """The merged heads are attention with another head count: the width taken for the count."""
    b, h, t_q, d = ref.q.shape
    if d == h or ref.k.shape[1] != h or ref.v.shape[-1] != d:
        return None
    whole = [rearrange(x, "b h t d -> b t (h d)") for x in (ref.q, ref.k, ref.v)]  # each (b, t, h·d)
    q, k, v = (rearrange(x, "b t (g e) -> b g t e", g=d) for x in whole)  # (b, d, t, h): d heads of h
    allowed = ref.allowed[:, :1]  # (b, 1, t_q, t_k): the same for every head
    scores = q @ k.transpose(-2, -1) / math.sqrt(h)  # (b, d, t_q, t_k)
    out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v  # (b, d, t_q, h)
    if not _close(rearrange(out, "b g t e -> b t (g e)"), merged):
        return None
    return (
        f"splits the heads into {d} heads of {h} instead of {h} heads of {d}: the count and the width "
        f"are swapped. split_heads takes the number of heads, n_heads = {h}, and the width "
        "d_k = d_model // n_heads follows."
    )


def _merge_layout(merged: torch.Tensor, expected: torch.Tensor, out_name: str) -> str | None:
    """The heads' outputs right, but merged back in another layout than (h d) after the tokens."""
    b, h, t_q, d = expected.shape
    if h == 1:
        return None
    readings = (
        (rearrange(merged, "b t (d h) -> b h t d", h=h), "(d h), feature i of every head, then i + 1"),
        (merged.reshape(b, h, t_q, d), "straight from (b, h, t, d), the heads still before the tokens"),
    )
    for read, words in readings:
        if _close(read, expected):
            return (
                f"computes every head right, then merges them as {words}. Before {out_name} the heads go "
                "back behind the tokens, head 0's d features, then head 1's, …: rearrange(out, "
                '"b h t d -> b t (h d)"), or out.transpose(1, 2).reshape(b, t, h * d).'
            )
    return None


def _read_weights(weights: torch.Tensor, ref: Heads) -> str | None:
    """What is wrong with the attention weights the learner's heads used (b, h, t_q, t_k)."""
    tol = 1e-6
    sums = weights.sum(-1)
    if (weights < -tol).any():
        return "uses weights with negative entries: the weights are a softmax over the keys (dim=-1)."
    hidden = ~ref.allowed
    if ref.causal is not None:
        if bool((weights.abs() > tol)[..., ~ref.causal].any()):
            return (
                "puts weight on keys after their query: with is_causal=True query i attends keys 0 … i only "
                "(the lower triangle, torch.tril, with the diagonal)."
            )
    if bool((weights.abs() > tol)[hidden].any()):
        return (
            "puts weight on keys the mask hides: masked scores become -inf before the softmax, for every "
            "head (mask.unsqueeze(-3))."
        )
    right = ref.weights()
    starved = (weights.abs() <= tol) & ref.allowed & (right > 1e-3)
    if bool(starved.any()):
        diagonal = torch.eye(*weights.shape[-2:], dtype=torch.bool)
        if ref.causal is not None and not bool(starved[..., ~diagonal].any()):
            return (
                "gives no weight to each query's own key: the causal mask keeps the diagonal (key j <= "
                "query i), torch.tril with diagonal=0."
            )
        return "gives no weight to keys the query may see: check which keys the mask hides, and its polarity."
    if not bool(((sums - 1).abs() <= 1e-5).all()):
        if weights.shape[-2] > 1 and bool(((weights.sum(-2) - 1).abs() <= 1e-5).all()):
            return (
                "normalises the weights over the queries (softmax over dim=-2): each query's weights over "
                "the keys sum to 1, softmax(dim=-1)."
            )
        if float(sums.max() - sums.min()) <= 1e-5:
            return (
                f"gives {float(sums.mean()):.4g} times a weighted average of the values: the weights sum to "
                "1 over the keys, and the values are the projection as it is, with no factor."
            )
        return (
            f"uses weights whose rows do not sum to 1 (they sum to {float(sums.min()):.4g} … "
            f"{float(sums.max()):.4g}): the weights are a softmax over the keys."
        )
    scores = ref.q @ ref.k.transpose(-2, -1)  # (b, h, t_q, t_k), unscaled
    logs = torch.log(weights.clamp_min(1e-300)).masked_fill(~ref.allowed, 0.0)
    count = ref.allowed.sum(-1, keepdim=True).clamp_min(1)

    def centred(s: torch.Tensor) -> torch.Tensor:
        s = s.masked_fill(~ref.allowed, 0.0)
        return (s - s.sum(-1, keepdim=True) / count).masked_fill(~ref.allowed, 0.0)

    s, w = centred(scores), centred(logs)
    if float((s * s).sum()) > 0:
        factor = float((s * w).sum() / (s * s).sum())  # learner's scores ≈ factor · q·kᵀ
        if _close(w, factor * s, 1e-4):
            d = ref.q.shape[-1]
            if factor <= 0:
                return "uses scores of the opposite sign: scores = q @ k.transpose(-2, -1) / √d_k."
            divisor = 1 / factor
            d_model = d * ref.q.shape[1]
            named = {1.0: "does not scale the scores", float(d): "divides the scores by d_k itself",
                     math.sqrt(d_model): "divides the scores by √d_model"}  # fmt: skip
            said = next((words for value, words in named.items() if abs(divisor / value - 1) < 1e-3), None)
            said = said or f"divides the scores by {divisor:.4g}"
            return (
                f"{said} (on a layer with d_k = {d}, the divisor is {divisor:.4g}) instead of √d_k = "
                f"{math.sqrt(d):.4g}: d_k is the width of one head's queries and keys, q.shape[-1] after "
                "the split."
            )
    for sentence, q, k in ref.other_scores:
        other = centred(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        if _close(w, other, 1e-4):
            return sentence
    return (
        "uses weights that sum to 1 over the keys but are not the softmax of q·kᵀ/√d_k: check which "
        "part of the projection q and k are, how they are split into heads, and their scores."
    )
