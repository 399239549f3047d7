"""Check for notebook 10's last exercise: Mistral's attention layer (grouped heads, RoPE, a window)."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Case,
    Contract,
    Exercise,
    Returns,
    contract_cases,
    expect_contract_cases,
    expect_inputs_device,
)
from attn_course.checks._harness import (
    Mistake,
    call,
    check,
    expect_close,
    expect_tensor,
    is_close,
    randn,
)
from attn_course.checks._probe import Heads, diagnose_heads, merged_input
from attn_course.flex import untraced
from attn_course.gqa import GroupedQueryAttention
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope, apply_rope_rotate_half
from attn_course.rotary_window import rotary_window_dense

_GAPPED = torch.tensor([0, 1, 2, 9, 10, 11, 12])
"""Positions with a gap (as after a skipped stretch of text): RoPE must use them, not 0 … t-1."""

_CONFIGS: list[tuple[int, int, int, int, int, torch.Tensor | None, str]] = [
    (32, 4, 2, 7, 3, None, "4 query heads sharing 2, T=7, window 3"),
    (48, 6, 3, 6, 2, None, "6 query heads sharing 3, T=6, window 2"),
    (16, 2, 1, 5, 5, None, "one key/value head (MQA), T=5, window 5: plain causal attention"),
    (32, 4, 4, 6, 1, None, "4 heads of their own, window 1: each token sees itself only"),
    (32, 4, 2, 7, 3, _GAPPED, f"positions {_GAPPED.tolist()}, window 3"),
]
"""(d_model, n_heads, n_kv_heads, t, window, positions, what it tests); every head 8 numbers wide."""

CONTRACT = Contract(
    "rotary_window_attention",
    args=(
        Arg("x", ("b", "t", "h·d"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1),
        Arg("positions", ("t",), views=("sliced", "expanded"), slice_axis=0),
    ),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("t", (6, 1), "a single token"),
        Axis("h", (6,), "a head count that is not a power of two"),
        Axis("h_kv", (3, 1, 6), "one key/value head for all (MQA), and one each (MHA)"),
        Axis("d", (6,), "a head width that is not a power of two"),
        Axis("W", (3, 1, 9), "a window of one key, and one larger than the text"),
    ),
    returns=(Returns("output", ("b", "t", "h·d")),),
    dtypes=(torch.float32, torch.float64),
    notes=("layer is a GroupedQueryAttention(h·d, h, h_kv); W is the window, passed after x",),
)
"""Exercise 7 of 10: any batch, any t (one token too), query and key/value head counts that are not powers
of two (MQA and MHA too), a window of 1 and one larger than t, x and positions each alone a view (x
transposed, sliced, expanded; the positions sliced, or one position expanded over the tokens), float32 and
float64, the output in x's dtype on x's device."""


def _window_allowed(t: int, window: int, kind: str) -> torch.Tensor:
    """(t, t) the keys each query may see, the right way and the ways learners get it wrong."""
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]  # query and key indices
    return {
        "window": (i >= j) & (i - j < window),
        "window+1": (i >= j) & (i - j <= window),
        "two-sided": (i - j).abs() < window,
        "causal": i >= j,
        "none": torch.ones(t, t, dtype=torch.bool),
        "first keys": (i >= j) & (j < window),
    }[kind]


@dataclass(frozen=True)
class RotaryWindowVariant:
    """How one rotary window layer is written: the right one with the defaults, each other value a named
    mistake (`_dense` computes what it gives; `_MISTAKES` names each)."""

    rope: str = "qk"
    """What RoPE turns: "qk" (right), "q", "k", "" (nothing), "qkv", or "qk-before-split" (the whole
    projection, d_model channels, before the split into heads)."""
    pairing: str = "neighbours"
    """Which channels RoPE pairs: "neighbours" (2i, 2i + 1: right) or "rotate-half" (i, i + d/2)."""
    use_positions: bool = True
    """False: RoPE by 0 … t-1 whatever `positions` says."""
    grouping: str = "grouped"
    """How the key/value heads line up with the query heads: "grouped" (right) or "interleaved"."""
    mask: str = "window"
    """Which keys each query sees: a kind of `_window_allowed` ("window" is right)."""
    scale: str = "d_head"
    """What the scores are divided by: "d_head" (√d_head, right), "d_model" (√d_model), "none", "twice"
    (d_head)."""
    out_proj: bool = True
    """False: the merged heads returned without layer.out."""


def _dense(
    layer: GroupedQueryAttention,
    x: torch.Tensor,
    window: int,
    positions: torch.Tensor | None,
    variant: RotaryWindowVariant | None = None,
) -> torch.Tensor:
    """The layer, every score built, written as `variant`; the default variant is right."""
    w = variant or RotaryWindowVariant()
    n_heads, n_kv_heads = layer.n_heads, layer.n_kv_heads
    t, n_rep = x.shape[-2], n_heads // n_kv_heads
    rotate = apply_rope if w.pairing == "neighbours" else apply_rope_rotate_half
    at = positions if w.use_positions else None
    if w.rope == "qk-before-split":  # the rotation over the whole projection, d_model channels
        q = split_heads(rotate(layer.q(x), at), n_heads)  # (b, h, t, d)
        k = split_heads(rotate(layer.k(x), at), n_kv_heads)  # (b, h_kv, t, d)
    else:
        q, k = split_heads(layer.q(x), n_heads), split_heads(layer.k(x), n_kv_heads)  # (b, h | h_kv, t, d)
        q = rotate(q, at) if "q" in w.rope else q
        k = rotate(k, at) if "k" in w.rope else k
    v = split_heads(layer.v(x), n_kv_heads)  # (b, h_kv, t, d)
    v = rotate(v, at) if "v" in w.rope else v
    if w.grouping == "grouped":
        k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d)
    else:  # interleaved
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)  # (b, h, t, d)
    d = q.shape[-1]
    divisor = {"d_head": math.sqrt(d), "d_model": math.sqrt(x.shape[-1]), "none": 1.0, "twice": d}[w.scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (b, h, t, t)
    allowed = _window_allowed(t, window, w.mask).to(x.device)  # (t, t)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (b, h, t, t)
    merged = merge_heads(weights @ v)  # (b, t, d_model)
    return layer.out(merged) if w.out_proj else merged


_GROUPED = (
    "shares the key/value heads interleaved instead of grouped: query head j reads key/value head "
    "j // (n_heads // n_kv_heads), as repeat_kv (or enable_gqa=True) does, not j % n_kv_heads "
    "(x.repeat(1, n_rep, 1, 1))."
)
_MISTAKES: list[tuple[str, RotaryWindowVariant]] = [
    (
        "applies RoPE before the split into heads, on the whole projection: the frequencies then run over "
        "all its channels instead of each head's d, and each head gets a slice of them. Split into heads "
        "first, (b, h, t, d), then rotate q and k.",
        RotaryWindowVariant(rope="qk-before-split"),
    ),
    (
        "has no rotary positions: apply apply_rope to the queries and the keys of every head, after "
        "split_heads and before attending.",
        RotaryWindowVariant(rope=""),
    ),
    (
        "rotates the queries but not the keys: RoPE turns both, so that the score of query i and key j "
        "depends on i - j only. Apply apply_rope to k too.",
        RotaryWindowVariant(rope="q"),
    ),
    (
        "rotates the keys but not the queries: RoPE turns both, so that the score of query i and key j "
        "depends on i - j only. Apply apply_rope to q too.",
        RotaryWindowVariant(rope="k"),
    ),
    (
        "rotates the values too: RoPE turns queries and keys, which make the scores; the values are "
        "mixed as the projection makes them.",
        RotaryWindowVariant(rope="qkv"),
    ),
    (
        "pairs channel i with channel i + d/2 (rotate-half, GPT-NeoX's layout): the same rotation on "
        "other pairs of channels, which weights trained for neighbouring pairs (2i, 2i + 1) do not expect. "
        "Use the course's apply_rope from notebook 05.",
        RotaryWindowVariant(pairing="rotate-half"),
    ),
    (
        "ignores `positions`: it rotates by 0 … t-1 whatever it is given. Pass positions on to apply_rope "
        "for q and k (a cache, or packed text, gives positions that are not 0 … t-1).",
        RotaryWindowVariant(use_positions=False),
    ),
    (
        "admits window + 1 keys: q_idx - kv_idx <= window counts the query and `window` keys before it. "
        "A window of W is W keys, the query's own included: q_idx - kv_idx < window (section 4, 'Which "
        "window').",
        RotaryWindowVariant(mask="window+1"),
    ),
    (
        "lets each query see up to window - 1 keys after it: the window is causal too, "
        "(q_idx >= kv_idx) & (q_idx - kv_idx < window).",
        RotaryWindowVariant(mask="two-sided"),
    ),
    (
        "applies the causal mask without the window: every query sees all the keys before it. Add "
        "q_idx - kv_idx < window.",
        RotaryWindowVariant(mask="causal"),
    ),
    (
        "attends every key, before and after the query: no mask reaches the attention. Give "
        "flex_attention the block_mask of (q_idx >= kv_idx) & (q_idx - kv_idx < window).",
        RotaryWindowVariant(mask="none"),
    ),
    (
        "keeps the first `window` keys of the sequence (kv_idx < window) for every query: the window "
        "slides with the query, its last `window` keys, q_idx - kv_idx < window.",
        RotaryWindowVariant(mask="first keys"),
    ),
    (_GROUPED, RotaryWindowVariant(grouping="interleaved")),
    (
        "looks like the scores were divided by √d_model: each head's scores are dot products of "
        "d_head = d_model / n_heads numbers, so divide by √d_head (flex_attention does it for you).",
        RotaryWindowVariant(scale="d_model"),
    ),
    ("looks like the scores were not scaled: divide them by √d_head.", RotaryWindowVariant(scale="none")),
    (
        "scales the scores twice (by d_head instead of √d_head): flex_attention and "
        "scaled_dot_product_attention already divide by √d_head, so do not scale q yourself.",
        RotaryWindowVariant(scale="twice"),
    ),
    (
        "forgets the output projection: after merging the heads, apply layer.out.",
        RotaryWindowVariant(out_proj=False),
    ),
]
"""Each mistake declared once, (message, variant): `_dense` with that variant is what it computes."""


def _layer(d_model: int, n_heads: int, n_kv_heads: int) -> GroupedQueryAttention:
    """The course's GroupedQueryAttention in float64, weights seeded large enough to matter."""
    layer = GroupedQueryAttention(d_model, n_heads, n_kv_heads).double().eval()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(randn(*parameter.shape) * (1.5 / math.sqrt(parameter.shape[-1])))
    return layer


def _run(
    candidate: Callable[..., Any],
    layer: GroupedQueryAttention,
    x: torch.Tensor,
    window: int,
    positions: torch.Tensor | None,
    what: str,
) -> torch.Tensor:
    given: dict[str, Any] = {} if positions is None else {"positions": positions}
    with torch.no_grad(), warnings.catch_warnings():  # FlexAttention has no backward on a CPU
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        result = call(
            "rotary_window_attention",
            candidate,
            layer,
            x,
            window,
            **given,
            hint="The signature is rotary_window_attention(layer, x, window, positions=None); use "
            "layer.q, layer.k, layer.v, layer.out, layer.n_heads and layer.n_kv_heads.",
        )
    return expect_tensor(result, x.shape, what, finite=False)


def _properties(
    candidate: Callable[..., Any], layer: GroupedQueryAttention, t: int, window: int, what: str
) -> str | None:
    """Which property of the layer fails, by changing one input and watching the outputs, or None."""
    x = randn(2, t, layer.q.in_features)
    base = _run(candidate, layer, x, window, None, what)  # (b, t, d_model)
    later = x.clone()
    later[:, -1] += randn(2, x.shape[-1])
    moved = (_run(candidate, layer, later, window, None, what) - base).abs().amax(dim=(0, 2))  # (t,)
    if bool((moved[:-1] > 1e-9).any()):
        first = int((moved[:-1] > 1e-9).nonzero()[0])
        return (
            f"lets the output at position {first} change when the last token ({t - 1}) changes: queries see "
            "keys after them. The window is causal: q_idx >= kv_idx."
        )
    first_token = x.clone()
    first_token[:, 0] += randn(2, x.shape[-1])
    moved = (_run(candidate, layer, first_token, window, None, what) - base).abs().amax(dim=(0, 2))  # (t,)
    seen = [p for p in range(t) if moved[p] > 1e-9]
    expected = list(range(min(window, t)))
    if seen != expected:
        reach = {
            window + 1: " one position too far, as `q_idx - kv_idx <= window` does;",
            window - 1: " one position short, as `q_idx - kv_idx < window - 1` does;",
            t: " to the end of the sequence, as no window does;",
        }.get(len(seen) if seen == list(range(len(seen))) else -1, "")
        return (
            f"lets the token at position 0 change the outputs at positions {seen}, where a window of "
            f"{window} keys reaches positions {expected}:{reach} query p sees keys p - {window - 1} … p, "
            "(q_idx >= kv_idx) & (q_idx - kv_idx < window)."
        )
    shifted = _run(candidate, layer, x, window, torch.arange(t) + 1000, what)
    if not is_close(shifted, base):
        return (
            "changes when every position is shifted by 1000: with RoPE on q and k the score of query i and "
            "key j depends on the difference of their positions only, and the window on q_idx - kv_idx. "
            "Something uses the absolute position (rotated values, or positions added elsewhere)."
        )
    if window > 1 and is_close(_run(candidate, layer, x, window, torch.arange(t) * 3, what), base):
        return (
            "does not change when the positions are spread out (0, 3, 6, …): RoPE is not applied to q "
            "and k, or `positions` is not passed on to apply_rope."
        )
    return None


def _probe_heads(
    candidate: Callable[..., Any], layer: GroupedQueryAttention, x: torch.Tensor, window: int, what: str
) -> str | None:
    """Read the learner's merged heads (the input of layer.out) against the reference's heads."""
    n_heads, n_kv_heads = layer.n_heads, layer.n_kv_heads
    n_rep, t = n_heads // n_kv_heads, x.shape[-2]
    with torch.no_grad():
        q = apply_rope(split_heads(layer.q(x), n_heads))  # (b, h, t, d)
        k = apply_rope(split_heads(layer.k(x), n_kv_heads))  # (b, h_kv, t, d)
        v = split_heads(layer.v(x), n_kv_heads)  # (b, h_kv, t, d)
    allowed = _window_allowed(t, window, "window").expand(x.shape[0], n_heads, t, t)  # (b, h, t, t)
    plain_k = split_heads(layer.k(x), n_kv_heads).detach()  # (b, h_kv, t, d): before RoPE
    others = (
        ("mixes the keys instead of the values: out = weights @ v.", k.repeat_interleave(n_rep, dim=1)),
        (
            "takes the values from the key projection, layer.k(x), where layer.v(x) belongs: "
            "out = weights @ v.",
            plain_k.repeat_interleave(n_rep, dim=1),
        ),
        ("rotates the values too: RoPE turns q and k only.", apply_rope(v).repeat_interleave(n_rep, dim=1)),
        (_GROUPED, v.repeat(1, n_rep, 1, 1)),
    )
    heads = Heads(
        q,
        k.repeat_interleave(n_rep, dim=1),
        v.repeat_interleave(n_rep, dim=1),
        allowed,
        _window_allowed(t, window, "causal"),
        others,
    )
    merged = merged_input(layer, lambda: _run(candidate, layer, x, window, None, what))
    return diagnose_heads(merged, heads, out_name="layer.out")


_LAYERS = ("known-mistake", "property", "repair", "where-wrong")
"""The diagnosis layers this check runs (`_diagnosis.LAYERS`), in their order."""


def _reading(
    actual: torch.Tensor,
    expected: torch.Tensor,
    candidate: Any,
    layer: Any,
    x: torch.Tensor,
    window: int,
    what: str,
) -> str | None:
    """What property of the window or the heads fails, read by calling the learner's code again."""
    return _properties(candidate, layer, x.shape[1], window, what) or _probe_heads(
        candidate, layer, x, window, what
    )


def _contract_values(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """Seeded numbers for x; scattered positions from 7 on, three apart."""
    if arg.name == "positions":
        return lambda *shape: torch.arange(math.prod(shape)).reshape(shape) * 3 + 7
    return lambda *shape: randn(*shape, dtype=case.dtype)


def _no_grad(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` run as the notebook runs the layer: under torch.no_grad(), FlexAttention's warning off."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return function(*args, **kwargs)

    return run


def _expect_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases, each on a seeded layer of its own head counts in its dtype; then
    the base case on the meta device (what the learner's code makes on the CPU meets x there)."""

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        size = case.size
        layer = _layer(size["h"] * size["d"], size["h"], size["h_kv"]).to(case.dtype)
        if case.changed == "meta":
            layer = layer.to("meta")
        learner = _no_grad(functools.partial(candidate, layer))
        return learner, _no_grad(functools.partial(rotary_window_dense, layer))

    exercise = Exercise(
        "rotary_window_attention",
        functions,
        positional=1,
        after=lambda case: (case.size["W"],),
        alloc=_contract_values,
    )
    ran = expect_contract_cases(CONTRACT, exercise, contract_cases(CONTRACT, one_kind_each=True))
    bare = Exercise("rotary_window_attention", functions, positional=1, after=lambda case: (case.size["W"],))
    return ran + expect_inputs_device(CONTRACT, bare)


@check
def check_rotary_window_attention(candidate: Callable[..., Any]) -> str:
    """Seeded float64 layers; grouped, odd and single key/value heads, windows of 1 to T, gapped positions.

    flex_attention runs untraced (`flex.untraced`: the same numbers, a third of the CPU)."""
    with untraced():
        return _check(candidate)


def _check(candidate: Callable[..., Any]) -> str:
    """check_rotary_window_attention's cases, in order."""
    for d_model, n_heads, n_kv_heads, t, window, positions, label in _CONFIGS:
        layer = _layer(d_model, n_heads, n_kv_heads)
        x = randn(2, t, d_model)  # (b, t, d_model)
        what = f"Your rotary_window_attention output ({label})"
        out = _run(candidate, layer, x, window, positions, what)
        with torch.no_grad():
            expected = _dense(layer, x, window, positions)  # (b, t, d_model)
        if is_close(out, expected):
            continue
        mistakes = [
            Mistake(message, functools.partial(_dense, layer, x, window, positions, variant))
            for message, variant in _MISTAKES
        ]
        reading = functools.partial(_reading, candidate=candidate, layer=layer, x=x, window=window, what=what)
        # the one pipeline (_diagnosis.py), without the reference layer's mutants (each compiles a block mask)
        expect_close(
            out, expected, what, mistakes=mistakes, diagnose=reading, called_as="", only=_LAYERS,
            own_line_with_property=True,
        )  # fmt: skip
    generated = _expect_contract(candidate)
    return (
        "grouped (2 of 4, 3 of 6) and single key/value heads, windows of 1, 2, 3 and T, RoPE on q and k "
        f"at default and gapped positions, against every score built densely, and {generated} cases from "
        "the exercise's contract (6 heads of 6 sharing 3, 1 or 6, one token, a window past the text, x or "
        "the positions a view, float32, x's device)"
    )
