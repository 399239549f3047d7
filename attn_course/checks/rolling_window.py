"""Check for notebook 10's rolling buffer: Mistral's layer decoded one token at a time in W slots.

The learner's `rolling_window_step(layer, x, buffer, position)` is fed a sequence token by token
through one fresh `RollingBuffer`, and each position's output is compared with the whole layer's
(`rotary_window_attention` on the whole sequence), as notebook 07's `chunk_differences` does. The
mistakes learners make show in *where* the outputs go wrong: from position W on (the first wrap:
a slot's number read as a position), or only while the buffer fills (slots not written yet).
"""

from __future__ import annotations

import functools
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
from attn_course.checks._harness import CheckFailed, Mistake, call, check, expect_close, expect_tensor, randn
from attn_course.checks.rotary_window import _GROUPED, _dense, _layer
from attn_course.gqa import GroupedQueryAttention
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope
from attn_course.rotary_window import RollingBuffer, rotary_window_dense

_CONFIGS: list[tuple[int, int, int, int, int, str]] = [
    (32, 4, 2, 11, 4, "4 query heads sharing 2, a window of 4, 11 tokens"),
    (48, 6, 3, 8, 3, "6 query heads sharing 3, a window of 3, 8 tokens"),
    (16, 2, 1, 5, 1, "one key/value head, a window of 1, 5 tokens"),
    (32, 4, 4, 6, 8, "4 heads of their own, a window of 8, 6 tokens: the buffer never fills"),
]
"""(d_model, n_heads, n_kv_heads, t, window, what it tests); every head 8 numbers wide."""

CONTRACT = Contract(
    "rolling_window_step",
    args=(Arg("x", ("b", "t", "h·d"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1),),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("t", (7,)),
        Axis("h", (6,), "a head count that is not a power of two"),
        Axis("h_kv", (3, 1, 6), "one key/value head for all (MQA), and one each (MHA)"),
        Axis("d", (6,), "a head width that is not a power of two"),
        Axis("W", (3, 1, 9), "a buffer of one slot, and one the text never fills"),
    ),
    returns=(Returns("output", ("b", "t", "h·d")),),
    dtypes=(torch.float32, torch.float64),
    notes=(
        "x is the whole text, decoded token by token (x[:, p : p + 1] at position p) through one fresh "
        "RollingBuffer.for_layer(layer, b, W) in x's dtype; layer is a GroupedQueryAttention(h·d, h, h_kv)",
    ),
)
"""Exercise 8 of 10: any batch, head counts that are not powers of two (MQA and MHA too), a window of 1
and one larger than the text, the text a view (each token then a view of it), float32 and float64 (the
buffer in that dtype), each output in x's dtype on x's device."""

_SIGNATURE = (
    "The signature is rolling_window_step(layer, x, buffer, position): x (b, 1, d_model) is the token "
    "at `position`; write its key and value into buffer.keys and buffer.values (b, h_kv, W, d_head) "
    "at slot position % W, in place, and return (b, 1, d_model)."
)


@dataclass(frozen=True)
class RollingVariant:
    """How one rolling decoding step is written: the right one with the defaults, each other value a named
    mistake (`_decode` computes what it gives; `_MISTAKES` names each)."""

    query_at: str = "position"
    """What the query is rotated by: "position" (right), "slot" (position % W) or "zero"."""
    keys_at: str = "written"
    """How the keys carry their positions: "written" (rotated by their position when written: right),
    "written-at-zero" (rotated by 0), "slot-number" (stored raw, rotated by slot number when read),
    "time-order" (stored raw, rotated as if slot 0 held the oldest)."""
    read: str = "filled"
    """Which slots the query attends: "filled" (the first min(p + 1, W): right), "all", "before-write",
    "old-and-new" (the buffer before the write and the new key besides), "up-to-slot", "one-short"."""
    grouping: str = "grouped"
    """How the key/value heads line up with the query heads: "grouped" (right) or "interleaved"."""
    rope: bool = True
    """False: no RoPE at all."""


def _decode(
    layer: GroupedQueryAttention, x: torch.Tensor, window: int, variant: RollingVariant | None = None
) -> torch.Tensor:
    """Every position decoded through a rolling buffer, written as `variant`; the default variant is
    right. (b, t, d_model)."""
    w = variant or RollingVariant()
    b, t, _ = x.shape
    buffer = RollingBuffer.for_layer(layer, b, window, dtype=x.dtype)
    n_rep, outs = layer.n_heads // layer.n_kv_heads, []
    for p in range(t):
        slot, filled = p % window, min(p + 1, window)
        token = x[:, p : p + 1]  # (b, 1, d_model)
        q = split_heads(layer.q(token), layer.n_heads)  # (b, h, 1, d)
        k = split_heads(layer.k(token), layer.n_kv_heads)  # (b, h_kv, 1, d)
        v = split_heads(layer.v(token), layer.n_kv_heads)  # (b, h_kv, 1, d)
        at = {"position": [p], "slot": [slot], "zero": [0]}[w.query_at]
        q = apply_rope(q, torch.tensor(at)) if w.rope else q
        if w.keys_at in ("written", "written-at-zero") and w.rope:
            k = apply_rope(k, torch.tensor([p if w.keys_at == "written" else 0]))  # stored rotated
        old_k, old_v = buffer.keys.clone(), buffer.values.clone()  # (b, h_kv, W, d)
        buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
        keys, values = buffer.keys, buffer.values  # (b, h_kv, W, d)
        if w.read == "filled":
            keys, values = keys[:, :, :filled], values[:, :, :filled]
        elif w.read == "before-write":  # attended before the new token was written
            keys, values = old_k[:, :, : min(p, window)], old_v[:, :, : min(p, window)]
        elif w.read == "old-and-new":  # the buffer as it was, and the new key besides
            keys = torch.cat([old_k[:, :, : min(p, window)], k], dim=-2)
            values = torch.cat([old_v[:, :, : min(p, window)], v], dim=-2)
        elif w.read == "up-to-slot":  # slots after the newest taken for the future
            keys, values = keys[:, :, : slot + 1], values[:, :, : slot + 1]
        elif w.read == "one-short":  # the count before the write (at least one slot, or nothing to attend)
            keys, values = keys[:, :, : max(min(p, window), 1)], values[:, :, : max(min(p, window), 1)]
        # read == "all": every slot, written or not
        if w.keys_at == "slot-number" and w.rope:  # stored unrotated, rotated by slot number when read
            keys = apply_rope(keys, torch.arange(keys.shape[-2]))
        elif w.keys_at == "time-order" and w.rope:  # stored unrotated, slot 0 taken for the oldest
            n = keys.shape[-2]
            keys = apply_rope(keys, torch.arange(p - n + 1, p + 1))
        if w.grouping == "grouped":
            keys, values = keys.repeat_interleave(n_rep, dim=1), values.repeat_interleave(n_rep, dim=1)
        else:
            keys, values = keys.repeat(1, n_rep, 1, 1), values.repeat(1, n_rep, 1, 1)
        scores = q @ keys.transpose(-2, -1) / q.shape[-1] ** 0.5  # (b, h, 1, n)
        outs.append(layer.out(merge_heads(torch.softmax(scores, dim=-1) @ values)))  # (b, 1, d_model)
    return torch.cat(outs, dim=1)  # (b, t, d_model)


_AFTER_WRAP = "right until the buffer wraps (position W), wrong from there on"
_MISTAKES: list[tuple[str, RollingVariant]] = [
    (
        "rotates the query by its slot, position % W, instead of its position: "
        f"{_AFTER_WRAP}. RoPE needs where the token stands in the text; the slot only says where it "
        "is stored.",
        RollingVariant(query_at="slot"),
    ),
    (
        "rotates the new token at position 0 (apply_rope's default for one token is positions 0 … t-1, "
        "that is [0]): pass positions=torch.tensor([position]) for q and k.",
        RollingVariant(query_at="zero", keys_at="written-at-zero"),
    ),
    (
        "rotates the cached keys by their slot numbers 0 … W-1, as if the slots were in time order: "
        f"{_AFTER_WRAP}, when slot position % W holds the newest token and the slot after it the "
        "oldest. Rotate each key by its own position when you write it, and store it rotated.",
        RollingVariant(keys_at="slot-number"),
    ),
    (
        "rotates the cached keys as if slot 0 held the oldest token and the last slot the newest: "
        f"{_AFTER_WRAP}, when the newest sits in slot position % W and the oldest right after it. "
        "Rotate each key by its own position when you write it, and store it rotated.",
        RollingVariant(keys_at="time-order"),
    ),
    (
        "attends all W slots from the first token on: while the buffer fills (positions 0 … W-2) the "
        "slots not written yet hold zeros, and their keys still get weight. Attend the first "
        "min(position + 1, W) slots only.",
        RollingVariant(read="all"),
    ),
    (
        "attends the buffer before writing the new token into it: the query misses its own key and, "
        "once the buffer is full, sees the token at position - W, which its slot should no longer hold. "
        "Write slot position % W first, then attend.",
        RollingVariant(read="before-write"),
    ),
    (
        "attends the buffer and the new key besides (a torch.cat): once the buffer is full that is "
        "W + 1 keys, positions p - W … p, one more than the window. Write the new key into slot "
        "position % W, over position p - W, and attend the buffer alone.",
        RollingVariant(read="old-and-new"),
    ),
    (
        "attends slots 0 … position % W only, as if the slots after the newest were in the future: "
        f"{_AFTER_WRAP}, when the slots after position % W hold the oldest tokens of the window, which "
        "the query must still see. Once the buffer is full, attend all W slots.",
        RollingVariant(read="up-to-slot"),
    ),
    (
        "attends min(position, W) slots: while the buffer fills that leaves out the slot just written, "
        "the token's own key. After writing, slots 0 … min(position + 1, W) - 1 hold the window.",
        RollingVariant(read="one-short"),
    ),
    (
        "has no rotary positions: rotate the query and the key of each new token with apply_rope at "
        "its position, as in Exercise 7.",
        RollingVariant(rope=False),
    ),
    (_GROUPED, RollingVariant(grouping="interleaved")),
]
"""Each mistake declared once, (message, variant): `_decode` with that variant is what it computes."""


def _wrong_positions(actual: torch.Tensor, expected: torch.Tensor) -> list[int]:
    """The positions (axis 1) where actual and expected differ, NaN included."""
    gap = (actual.detach() - expected.detach()).abs().nan_to_num(nan=1.0, posinf=1.0)  # (b, t, d)
    return [p for p in range(actual.shape[1]) if float(gap[:, p].amax()) > 1e-6]


def _reading(actual: torch.Tensor, expected: torch.Tensor, window: int) -> str | None:
    """Where the outputs go wrong, read against the window: after the first wrap, or while filling."""
    wrong, t = _wrong_positions(actual, expected), actual.shape[1]
    if not wrong:
        return None
    shown = ", ".join(map(str, wrong))
    if wrong[0] >= window:
        return (
            f"is right at positions 0 … {window - 1} and wrong at {shown}: from position W = {window} "
            "on, where the buffer wraps. Slot position % W then holds the newest token and the slots are "
            "no longer in time order: nothing may read a slot's number as a position (RoPE of the query "
            "or of the cached keys, a mask over the slots)."
        )
    if wrong[-1] < window - 1 and t >= window:
        return (
            f"is wrong at positions {shown}, while the buffer fills, and right once all {window} slots are "
            "written: before that, the slots past the written ones hold nothing the query may attend "
            "(attend the first min(position + 1, W) slots)."
        )
    if 0 not in wrong and wrong == list(range(1, t)):
        return (
            f"is right at position 0, where one key takes all the weight whatever its score, and wrong at "
            f"{shown}, where several keys share it: the weights among the keys are off (the scale of the "
            "scores, 1/√d_head, or the softmax's axis), not which keys are read."
        )
    if len(wrong) == t:
        return None
    return f"is wrong at positions {shown} and right at the others, against the whole layer at each position."


def _run(
    candidate: Callable[..., Any], layer: GroupedQueryAttention, x: torch.Tensor, window: int, label: str
) -> torch.Tensor:
    """The learner's step over every position of x through one fresh buffer: (b, t, d_model)."""
    b, t, _ = x.shape
    buffer = RollingBuffer.for_layer(layer, b, window, dtype=x.dtype)
    shape = tuple(buffer.keys.shape)
    with torch.no_grad():
        v_all = split_heads(layer.v(x), layer.n_kv_heads)  # (b, h_kv, t, d)
    outs = []
    for p in range(t):
        what = f"Your rolling_window_step at position {p} ({label})"
        try:
            with torch.no_grad():
                token = x[:, p : p + 1]  # (b, 1, d_model)
                out = call("rolling_window_step", candidate, layer, token, buffer, p, hint=_SIGNATURE)
        except CheckFailed as failed:
            if p == window and p > 0:  # every position with a slot of its own ran; the first wrap did not
                raise CheckFailed(
                    f"{what} raised, after positions 0 … {window - 1} ran: position {p} is the first with no "
                    f"slot of its own in a buffer of W = {window} slots (0 … {window - 1}). Position p goes "
                    f"to slot p % W ({p} % {window} = {p % window}), over the token W positions before it.\n"
                    f"{failed}"
                ) from None
            raise
        outs.append(expect_tensor(out, (b, 1, layer.q.in_features), what, finite=False))
        _expect_buffer(buffer, shape, v_all[:, :, p], p, what)
    return torch.cat(outs, dim=1)  # (b, t, d_model)


def _expect_buffer(
    buffer: RollingBuffer, shape: tuple[int, ...], value: torch.Tensor, p: int, what: str
) -> None:
    """The buffer keeps its W slots, and the value of position p went into slot p % W."""
    for name in ("keys", "values"):
        held = getattr(buffer, name)
        if not isinstance(held, torch.Tensor) or tuple(held.shape) != shape:
            got = tuple(held.shape) if isinstance(held, torch.Tensor) else type(held).__name__
            raise CheckFailed(
                f"{what} left buffer.{name} as {got}, where the buffer has {shape}: its W = {shape[-2]} "
                "slots never grow (that is notebook 07's cache). Write the new token into slot "
                "position % W in place: buffer.keys[:, :, slot] = ..."
            )
    window = shape[-2]
    slots = [s for s in range(window) if torch.allclose(buffer.values[:, :, s], value, atol=1e-9)]
    if slots and p % window not in slots:
        raise CheckFailed(
            f"{what} wrote the value of position {p} to slot {slots[0]}, where it belongs in slot "
            f"{p} % {window} = {p % window}: the token at position p goes to slot p % W, over the one "
            "W positions before it."
        )


def _decoder(step: Callable[..., Any], layer: GroupedQueryAttention) -> Callable[..., torch.Tensor]:
    """x (b, t, d_model) decoded by `step` token by token through one fresh buffer of W slots."""

    def decode(x: torch.Tensor, window: int) -> torch.Tensor:
        buffer = RollingBuffer.for_layer(layer, x.shape[0], window, dtype=x.dtype)
        with torch.no_grad():
            outs = [step(layer, x[:, p : p + 1], buffer, p) for p in range(x.shape[1])]  # (b, 1, d_model)
        return torch.cat(outs, dim=1)  # (b, t, d_model)

    return decode


def _expect_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases, each a text decoded on a seeded layer of its own head counts in its
    dtype against the whole layer; then the base case on the meta device."""

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        size = case.size
        layer = _layer(size["h"] * size["d"], size["h"], size["h_kv"]).to(case.dtype)
        if case.changed == "meta":
            layer = layer.to("meta")
        whole = functools.partial(rotary_window_dense, layer)
        return _decoder(candidate, layer), lambda x, window: whole(x, window).detach()

    exercise = Exercise("rolling_window_step", functions, after=lambda case: (case.size["W"],))
    ran = expect_contract_cases(CONTRACT, exercise, contract_cases(CONTRACT, one_kind_each=True))
    return ran + expect_inputs_device(CONTRACT, exercise)


@check
def check_rolling_window_step(candidate: Callable[..., Any]) -> str:
    """Seeded float64 layers decoded token by token; windows of 1, 3, 4 and one longer than the text."""
    for d_model, n_heads, n_kv_heads, t, window, label in _CONFIGS:
        layer = _layer(d_model, n_heads, n_kv_heads)
        x = randn(2, t, d_model)  # (b, t, d_model)
        actual = _run(candidate, layer, x, window, label)  # (b, t, d_model)
        with torch.no_grad():
            expected = _dense(layer, x, window, None)  # (b, t, d_model): the whole layer
        what = f"Your rolling_window_step, decoding {label} one token at a time,"
        mistakes = [
            Mistake(message, functools.partial(_decode, layer, x, window, variant))
            for message, variant in _MISTAKES
        ]
        with torch.no_grad():
            expect_close(
                actual, expected, what, mistakes=mistakes, called_as="",
                diagnose=functools.partial(_reading, window=window),
                only=("known-mistake", "property", "non-finite", "where-wrong"),
            )  # fmt: skip
    generated = _expect_contract(candidate)
    return (
        "token by token against the whole layer: grouped and single key/value heads, windows of 1, 3 "
        f"and 4 wrapping up to twice, and one the text never fills, and {generated} cases from the "
        "exercise's contract (6 heads of 6 sharing 3, 1 or 6, one sequence, the text a view, float32, "
        "x's device)"
    )
