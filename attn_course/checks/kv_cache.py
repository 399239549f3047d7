"""Checks for notebook 07: the KV cache and one cached decoding step of rotary attention."""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attn_course import reference
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
    CheckFailed,
    Mistake,
    call,
    check,
    cuda_device,
    expect_close,
    expect_tensor,
    is_close,
    randn,
)
from attn_course.heads import merge_heads
from attn_course.rope import RotaryMultiHeadAttention

# ---------------------------------------------------------------------------------------------
# The contracts of notebook 07's cache exercises: what each must accept and return.

KV_CACHE_CONTRACT = Contract(
    "KVCache",
    args=(
        Arg("k", ("b", "h", "t_new", "d_k"), views=VIEW_KINDS, swap=(1, 2), slice_axis=-2, expand_axis=0),
        Arg("v", ("b", "h", "t_new", "d_k"), views=VIEW_KINDS, swap=(1, 2), slice_axis=-2, expand_axis=0),
    ),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("h", (3,), "a head count that is not a power of two"),
        Axis("t_past", (5, 0), "nothing cached before: the first append"),
        Axis("t_new", (1, 4), "a chunk of several new positions after the cached ones"),
        Axis("d_k", (6,), "a head width that is not a power of two"),
    ),
    returns=(
        Returns("keys", ("b", "h", "t_past+t_new", "d_k")),
        Returns("values", ("b", "h", "t_past+t_new", "d_k")),
    ),
    dtypes=(torch.float32, torch.float64, torch.float16),
    notes=("a case is two calls on a new cache: an append of t_past positions, then k and v appended",),
)
"""Exercise 3 of 07's append, after a prefill of t_past positions (none, or 5): one token or a chunk of 4,
k or v alone a view (a multi-head layer's k is (b, t, h, d).transpose(1, 2)), any float dtype kept, on
k's device."""

CACHED_CONTRACT = Contract(
    "cached_attention",
    args=(Arg("x", ("b", "t_new", "h·d"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1, expand_axis=0),),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("t_past", (5, 0), "an empty cache: a prefill"),
        Axis("t_new", (3, 1), "one new token, as a decoding step has"),
        Axis("h", (3,), "a head count that is not a power of two"),
        Axis("d", (4, 6), "a head width that is not a power of two"),
    ),
    returns=(Returns("output", ("b", "t_new", "h·d")),),
    dtypes=(torch.float64, torch.float32),
    notes=(
        "the cache holds t_past positions of the same layer, filled as a right cached_attention fills it",
    ),
)
"""Exercise 4 of 07: x (b, t_new, d_model) after t_past cached positions (none, or 5), a chunk of 3 or
one token, 3 heads of d_k = 4 or 6, x a view, float32, on x's device."""


# ---------------------------------------------------------------------------------------------
# KVCache

_B, _H, _D = 2, 3, 6
"""Batch, heads and head size of the cache check: all different from each other and from every t_new."""

_APPENDS = [(0, 4), (1, 1), (0, 1), (2, 5), (1, 4), (0, 1), (2, 1), (0, 4)]
"""(layer, t_new) of each append: layers interleaved, single tokens and prefill chunks."""

_APPEND_HINT = (
    "append(layer, k, v) gets k and v of shape (b, h, t_new, d_k); store them for `layer` the first "
    "time, and afterwards concatenate along the time axis: torch.cat([old, new], dim=-2)."
)


def _as_int(value: Any) -> int | None:
    try:
        return operator.index(value)
    except TypeError:
        return None


@check
def check_KVCache(candidate: Any) -> str:  # noqa: N802 (exercise name)
    """Interleaved appends to three layers; every returned tensor, and length(), against the history."""
    if not isinstance(candidate, type):
        raise CheckFailed(
            "check_KVCache expects your class KVCache itself, not a cache made from it: call "
            "check_KVCache(KVCache)."
        )
    cache = call("KVCache", candidate, hint="KVCache() takes no arguments: define __init__(self).")
    history: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {0: [], 1: [], 2: []}
    returned: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    appends = {0: 0, 1: 0, 2: 0}
    log: list[tuple[int, int, torch.Tensor, torch.Tensor]] = []  # (append number, layer, k, v) of each
    _expect_length(cache, 0, history, appends, "before any append")
    for step, (layer, t_new) in enumerate(_APPENDS):
        k, v = randn(_B, _H, t_new, _D, dtype=torch.float32), randn(_B, _H, t_new, _D, dtype=torch.float32)
        shown = f"cache.append({layer}, k, v) with k, v of shape {(_B, _H, t_new, _D)} (append {step + 1})"
        result = call("KVCache.append", cache.append, layer, k, v, hint=_APPEND_HINT)
        history[layer].append((k, v))
        log.append((step + 1, layer, k, v))
        appends[layer] += 1
        keys, values = _expect_pair(result, shown)
        all_keys = torch.cat([pair[0] for pair in history[layer]], dim=-2)  # (b, h, t, d_k)
        all_values = torch.cat([pair[1] for pair in history[layer]], dim=-2)  # (b, h, t, d_k)
        _expect_cached(keys, all_keys, "keys", k, v, history, layer, shown, log)
        _expect_cached(values, all_values, "values", v, k, history, layer, shown, log)
        returned.append((layer, keys, values, all_keys, all_values))
        for other in history:
            _expect_length(cache, other, history, appends, f"after {shown}")
    for layer, keys, values, all_keys, all_values in returned:
        if not (is_close(keys, all_keys) and is_close(values, all_values)):
            raise CheckFailed(
                f"The keys or values that an earlier cache.append({layer}, …) returned changed after later "
                "appends: writing into a tensor you returned before (an in-place update of a stored "
                "tensor, or a buffer that is reused) changes what the caller holds. Build new tensors "
                "with torch.cat, or return views of a buffer that later appends only extend."
            )
    if _as_int(call("KVCache.length", cache.length, 7)) != 0:
        raise CheckFailed("cache.length(7), for a layer that never had an append, should be 0.")
    _expect_separate_instances(candidate)
    generated = _expect_cache_contract(candidate)
    return (
        f"{len(_APPENDS)} appends to 3 interleaved layers (t_new of 1, 4 and 5), lengths, earlier results, "
        f"and {generated} cases from the exercise's contract (a first append or one after 5 positions, "
        "k or v a view, float64 and float16, k's device)"
    )


def _prefilled_append(cache_class: Any, t_past: int) -> Callable[..., Any]:
    """append(layer, k, v) on a new cache that already holds t_past seeded positions of that layer (k's
    dtype and device), as a prefill leaves it."""

    def append(k: torch.Tensor, v: torch.Tensor, layer: int = 0) -> Any:
        cache = cache_class()
        if t_past:
            seeded = torch.Generator().manual_seed(t_past)
            shape = (*k.shape[:-2], t_past, k.shape[-1])
            past_k = k.new_empty(shape).normal_(generator=seeded)  # (b, h, t_past, d_k), made where k is
            past_v = v.new_empty(shape).normal_(generator=seeded)  # (b, h, t_past, d_k)
            cache.append(layer, past_k, past_v)
        return cache.append(layer, k, v)

    return append


def _expect_cache_contract(candidate: type) -> int:
    """The contract's generated cases (each on two new caches, the learner's and the course's), then one
    with k and v on another device; how many ran."""

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        t_past = case.size["t_past"]
        return _prefilled_append(candidate, t_past), _prefilled_append(reference.KVCache, t_past)

    exercise = Exercise(
        "KVCache.append",
        functions,
        unpack=lambda result, expected: tuple(result) if isinstance(result, tuple | list) else (result,),
        positional=0,  # shown as KVCache.append(k=..., v=..., layer=0), the second append to its cache
        extra=lambda case, tensors: {"layer": 0},
    )
    ran = expect_contract_cases(KV_CACHE_CONTRACT, exercise, contract_cases(KV_CACHE_CONTRACT))
    return ran + expect_inputs_device(KV_CACHE_CONTRACT, exercise)


def _expect_separate_instances(candidate: type) -> None:
    """Two caches (two generations, two models) must not share what they hold."""
    first = call("KVCache", candidate)
    k = randn(_B, _H, 3, _D, dtype=torch.float32)
    call("KVCache.append", first.append, 0, k, k)
    second = call("KVCache", candidate)
    length = _as_int(call("KVCache.length", second.length, 0))
    if length != 0:
        raise CheckFailed(
            f"A new KVCache() already holds {length} positions for layer 0, appended to ANOTHER cache: "
            "every instance shares the same dicts or lists. Create them in __init__ (self.keys = {} "
            "and self.values = {}), not as class attributes (keys = {} in the class body) or default "
            "arguments."
        )


def _expect_pair(result: Any, shown: str) -> tuple[Any, Any]:
    if isinstance(result, torch.Tensor) or not isinstance(result, tuple | list) or len(result) != 2:
        if isinstance(result, torch.Tensor):
            what = f"one tensor of shape {tuple(result.shape)}"
        else:
            what = repr(result)
        raise CheckFailed(
            f"{shown} should return a tuple (keys, values) of all the layer's keys and values so far, "
            f"but returned {what:.100}. End append with `return keys, values`."
        )
    return result[0], result[1]


def _expect_cached(
    got: Any,
    expected: torch.Tensor,
    name: str,
    new: torch.Tensor,
    other_new: torch.Tensor,
    history: dict[int, list[tuple[torch.Tensor, torch.Tensor]]],
    layer: int,
    shown: str,
    log: list[tuple[int, int, torch.Tensor, torch.Tensor]],
) -> None:
    """The returned keys (or values) are exactly the layer's history along dim -2; else name the mistake."""
    index = 0 if name == "keys" else 1
    what = f"The {name} returned by {shown}"
    t_new, t_all = new.shape[-2], expected.shape[-2]
    if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(new.shape) and t_new != t_all:
        if is_close(got, new):
            fix = (
                "store them for the layer and return all of them: the values must be cached like the keys "
                "(torch.cat([old_values, v], dim=-2)), or each new token sees only its own value."
                if name == "values"
                else "store them for the layer and return all of them (torch.cat([old_keys, k], dim=-2))."
            )
            raise CheckFailed(f"{what} are only this step's {name}, {tuple(new.shape)}: {fix}")
    total = sum(pair[index].shape[-2] for step in history.values() for pair in step)
    hints = {
        (_B, _H, total, _D): "It holds the positions appended to every layer: each layer has its own keys "
        "and values (a dict or list indexed by `layer`).",
        (*expected.shape[:-1], 2 * _D): "Concatenate along the time axis, dim=-2, not the last axis.",
        (expected.shape[0] * 2, *expected.shape[1:]): "Concatenate along the time axis, dim=-2, not dim=0.",
    }
    got = expect_tensor(got, expected.shape, what, hints=hints)
    past = [pair[index] for pair in history[layer][:-1]]
    other = torch.cat([pair[1 - index] for pair in history[layer]], dim=-2)  # (b, h, t, d_k)
    swap = "values where the keys belong" if name == "keys" else "keys where the values belong"
    mistakes = [
        Mistake(
            "put the new positions before the old ones: the time axis runs from the first position to "
            "the newest, torch.cat([old, new], dim=-2).",
            lambda: torch.cat([new, *past], dim=-2),
        ),
        Mistake(
            f"are the {swap}: return (keys, values), each cached separately. (One dict for both, "
            "self.values = self.keys, makes the values overwrite the keys.)",
            lambda: other,
        ),
    ]
    diagnose = functools.partial(_diagnose_sources, name=name, layer=layer, log=log)
    expect_close(got, expected, what, mistakes=mistakes, diagnose=diagnose, called_as="")


def _diagnose_sources(
    actual: torch.Tensor,
    expected: torch.Tensor,
    name: str,
    layer: int,
    log: list[tuple[int, int, torch.Tensor, torch.Tensor]],
) -> str | None:
    """Name where the wrong positions come from: the other kind of tensor, or another layer's appends."""
    a, e = actual.detach().cpu(), expected.detach().cpu()
    kind = 0 if name == "keys" else 1
    wrong: list[int] = []
    sources: set[tuple[str, int, int]] = set()  # (keys or values, layer, append number)
    for position in range(a.shape[-2]):
        row = a[..., position, :]  # (b, h, d_k)
        if is_close(row, e[..., position, :]):
            continue
        wrong.append(position)
        found = [
            (("keys", "values")[which], appended_to, number)
            for number, appended_to, *pair in log
            for which in (0, 1)
            for new in range(pair[which].shape[-2])
            if torch.equal(row, pair[which][..., new, :])
        ]
        if not found:
            return None
        sources.add(found[0])
    if not wrong:
        return None
    rows = f"{wrong[0]}–{wrong[-1]}" if wrong == list(range(wrong[0], wrong[-1] + 1)) else str(wrong)
    numbers = ", ".join(str(n) for n in sorted({n for *_, n in sources}))
    other = ("keys", "values")[1 - kind]
    if {source[0] for source in sources} == {other}:
        return (
            f"hold, at positions {rows} (axis -2), the {other} appended (append {numbers}), not the {name}: "
            f"the {name} are kept where the {other} go (one dict or list for both, e.g. self.values = "
            "self.keys), so one overwrites the other. Keep keys and values in separate stores."
        )
    layers = {source[1] for source in sources} - {layer}
    if {source[0] for source in sources} == {name} and layers:
        return (
            f"hold, at positions {rows} (axis -2), the {name} appended to layer "
            f"{', '.join(map(str, sorted(layers)))} (append {numbers}), not to layer {layer}: each layer "
            f"needs its own {name} (a dict or list indexed by `layer`)."
        )
    return None


def _expect_length(
    cache: Any,
    layer: int,
    history: dict[int, list[tuple[torch.Tensor, torch.Tensor]]],
    appends: dict[int, int],
    when: str,
) -> None:
    expected = sum(pair[0].shape[-2] for pair in history[layer])
    others = sorted(other for other, pairs in history.items() if pairs and other != layer)
    hint = (
        f"Layer {layer} has nothing cached yet ({'layers' if len(others) > 1 else 'layer'} "
        f"{', '.join(map(str, others))} {'have' if len(others) > 1 else 'has'}): its length is 0, so look a "
        "layer's tensors up only once it holds some."
        if not expected and others
        else ""
    )
    got = call("KVCache.length", cache.length, layer, hint=hint)
    value = _as_int(got)
    if value == expected:
        return
    shown = f"cache.length({layer}) {when}"
    if value is None:
        raise CheckFailed(
            f"{shown} should be an int, the number of cached positions, but it is {got!r:.80}: "
            "for example keys.shape[-2]."
        )
    total = sum(pair[0].shape[-2] for step in history.values() for pair in step)
    if value == total:
        raise CheckFailed(
            f"{shown} is {value}, the positions of all layers together, but layer {layer} has {expected}: "
            "count the positions of that layer only."
        )
    if expected == 0:
        raise CheckFailed(f"{shown} is {value}, but nothing was appended to layer {layer} yet: it must be 0.")
    if value == appends[layer]:
        raise CheckFailed(
            f"{shown} is {value}, the number of appends, but {expected} positions are cached: count "
            "positions, the size of the time axis, keys.shape[-2]."
        )
    if value in (_B, _H, _D):
        raise CheckFailed(
            f"{shown} is {value}, the size of another axis, but {expected} positions are cached: the time "
            "axis of (b, h, t, d_k) is dim -2, keys.shape[-2]."
        )
    raise CheckFailed(f"{shown} is {value}, but {expected} positions were appended to that layer.")


# ---------------------------------------------------------------------------------------------
# cached_attention


@dataclass(frozen=True)
class CachedVariant:
    """How one cached decoding step is written: the right one with the defaults, each other value a named
    mistake (`_cached_attention` computes what it gives; `_CACHED_MISTAKES` names each)."""

    positions: str = "absolute"
    """Where the new tokens are rotated: "absolute" (t_past …, right), "zero" (0 …), "after-append"
    (t_past + t_new …, the length read after appending)."""
    rotate: str = "qk"
    """Which of q and k are rotated: "qk" (right), "q" or "k"."""
    base: float | None = None
    """The RoPE base: None (attn.base, right) or another number."""
    attend_to: str = "cache"
    """What the queries attend to: "cache" (right), "new" (the new keys and values only),
    "keys-as-values" (the cached keys as values)."""
    alignment: str = "bottom-right"
    """The causal mask: "bottom-right" (right), "top-left" or "none"."""
    rerotate_cached: bool = False
    """True: the keys cache.append returns rotated a second time."""
    out_proj: bool = True
    """False: attn.out left out."""


_RIGHT_STEP = CachedVariant()


def _cached_attention(
    attn: RotaryMultiHeadAttention,
    x: torch.Tensor,
    cache: Any,
    layer: int,
    variant: CachedVariant = _RIGHT_STEP,
) -> torch.Tensor:
    """A cached decoding step written as `variant`; the defaults are right."""
    w = variant
    t_past, t_new = cache.length(layer), x.shape[-2]
    start = {"absolute": t_past, "zero": 0, "after-append": t_past + t_new}[w.positions]
    pos = torch.arange(start, start + t_new, device=x.device)  # (t_new,)
    base = attn.base if w.base is None else w.base
    q, k, v = attn.project(x)  # each (b, h, t_new, d_k)
    q = reference.apply_rope(q, pos, base) if "q" in w.rotate else q  # (b, h, t_new, d_k)
    k = reference.apply_rope(k, pos, base) if "k" in w.rotate else k  # (b, h, t_new, d_k)
    keys, values = cache.append(layer, k, v)  # each (b, h, t_past + t_new, d_k)
    if w.attend_to == "new":
        keys, values = k, v  # (b, h, t_new, d_k): the cache ignored
    if w.attend_to == "keys-as-values":
        values = keys
    if w.rerotate_cached:
        keys = reference.apply_rope(keys, None, base)  # (b, h, t, d_k): rotated a second time
    t_k = keys.shape[-2]
    allowed = {
        "bottom-right": reference.causal_mask(t_new, t_k, device=x.device),
        "top-left": torch.ones(t_new, t_k, dtype=torch.bool, device=x.device).tril(),
        "none": torch.ones(t_new, t_k, dtype=torch.bool, device=x.device),
    }[w.alignment]  # (t_new, t_k)
    out, _ = reference.attention(q, keys, values, mask=allowed)  # (b, h, t_new, d_k)
    merged = merge_heads(out)  # (b, t_new, d_model)
    return attn.out(merged) if w.out_proj else merged  # (b, t_new, d_model)


_CACHED_MISTAKES: list[tuple[str, CachedVariant]] = [
    (
        "rotates the new tokens as if they started at position 0: they sit at the absolute positions "
        "t_past … t_past + t_new - 1, with t_past = cache.length(layer) read before appending. Pass "
        "positions=torch.arange(t_past, t_past + t_new) to apply_rope for q and k.",
        CachedVariant(positions="zero"),
    ),
    (
        "rotates the new tokens t_new positions too far: read t_past = cache.length(layer) before "
        "cache.append, which already counts the new tokens.",
        CachedVariant(positions="after-append"),
    ),
    (
        "aligns the causal mask top-left: new query i may see every cached position and the new keys "
        "up to its own, keys j ≤ i + t_past (bottom-right alignment). Use the course's "
        "attention(q, keys, values, is_causal=True), or causal_mask(t_new, t_k); note that "
        "F.scaled_dot_product_attention(is_causal=True) aligns top-left when t_new ≠ t_k.",
        CachedVariant(alignment="top-left"),
    ),
    (
        "has no causal mask: within a chunk of several new tokens, each may see only itself and the "
        "tokens before it. Pass is_causal=True to attention (bottom-right aligned).",
        CachedVariant(alignment="none"),
    ),
    (
        "attends only to the new tokens: attend to everything cached, the keys and values that "
        "cache.append(layer, k, v) returns.",
        CachedVariant(attend_to="new"),
    ),
    (
        "uses the cached keys as values: cache.append returns (keys, values); attend with both.",
        CachedVariant(attend_to="keys-as-values"),
    ),
    (
        "rotates only q: rotate the new keys too, at the same positions, before appending them.",
        CachedVariant(rotate="q"),
    ),
    (
        "rotates only k: rotate the new queries too, at the same positions.",
        CachedVariant(rotate="k"),
    ),
    (
        "rotates the cached keys a second time: the keys are appended already rotated at their "
        "positions; attend with them as they come back from cache.append.",
        CachedVariant(rerotate_cached=True),
    ),
    (
        "ignores attn.base: pass base=attn.base to apply_rope (this layer was built with base=50).",
        CachedVariant(base=10000.0),
    ),
    (
        "forgets the output projection: after merging the heads, apply attn.out.",
        CachedVariant(out_proj=False),
    ),
]

_CHUNKS = [4, 1, 3, 1, 1]
"""New positions per call: a prefill, single tokens, and a chunk of 3 after 5 cached positions."""
_STARTS = [sum(_CHUNKS[:i]) for i in range(len(_CHUNKS))]

_SIGNATURE = (
    "The signature is cached_attention(attn, x, cache, layer); x (b, t_new, d_model) are the new "
    "positions. The new queries (b, h, t_new, d_k) attend to all the keys and values that "
    "cache.append(layer, k, v) returns, (b, h, t_past + t_new, d_k): attention(q, keys, values, "
    "is_causal=True)."
)


def _replay(
    attn: RotaryMultiHeadAttention, xs: list[torch.Tensor], upto: int, variant: CachedVariant
) -> torch.Tensor:
    """What a learner making this mistake returns on call `upto` (its cache filled its own way)."""
    cache = reference.KVCache()
    out = torch.empty(0)
    for x in xs[: upto + 1]:
        out = _cached_attention(attn, x, cache, 0, variant)  # (b, t_new, d_model)
    return out


@check
def check_cached_attention(candidate: Callable[..., Any]) -> str:
    """Two layers fed chunks [4, 1, 3, 1, 1] through one KVCache, against each on the whole sequence."""
    d_model, n_heads, t = 12, 3, sum(_CHUNKS)
    layers = [reference.RotaryMultiHeadAttention(d_model, n_heads, base=50.0).double() for _ in range(2)]
    sequences = [randn(2, t, d_model) for _ in layers]  # each (b, t, d_model)
    expected = [attn(x, is_causal=True) for attn, x in zip(layers, sequences, strict=True)]  # (b, t, d_model)
    cache = reference.KVCache()
    start = 0
    with torch.no_grad():
        for index, t_new in enumerate(_CHUNKS):
            for layer, (attn, x, full) in enumerate(zip(layers, sequences, expected, strict=True)):
                chunk = x[:, start : start + t_new]  # (b, t_new, d_model)
                shown = (
                    f"cached_attention(attn, x, cache, layer={layer}) for {t_new} new position"
                    f"{'s' if t_new > 1 else ''} ({start} … {start + t_new - 1}) after {start} cached"
                )
                got = call("cached_attention", candidate, attn, chunk, cache, layer, hint=_SIGNATURE)
                _expect_cache_lengths(cache, layer, start, t_new, shown)
                out = expect_tensor(got, (2, t_new, d_model), f"The output of {shown}")
                want = full[:, start : start + t_new]  # (b, t_new, d_model)
                chunks = [x[:, a : a + n] for a, n in zip(_STARTS, _CHUNKS, strict=True)]
                mistakes = [
                    Mistake(message, functools.partial(_replay, attn, chunks, index, variant))
                    for message, variant in _CACHED_MISTAKES
                ]
                diagnose = functools.partial(_diagnose_rotation, candidate, attn)
                expect_close(
                    out, want, f"The output of {shown}", mistakes=mistakes, diagnose=diagnose, called_as=""
                )
            start += t_new
    _expect_cached_attention_on_cuda(candidate)
    generated = _expect_cached_contract(candidate)
    return (
        "2 layers in chunks of 4, 1, 3, 1, 1 (RoPE base 50) match the layers on the whole sequence, and "
        f"{generated} cases from the exercise's contract (one sequence, an empty cache, one token, d_k = 6, "
        "x a view, float32, x's device)"
    )


def _after_prefill(
    step: Callable[..., Any], attn: RotaryMultiHeadAttention, t_past: int
) -> Callable[[torch.Tensor], Any]:
    """Two calls of `step` on a new course cache: a prefill of t_past seeded positions (none for 0, made in
    x's dtype and on its device), then `step(attn, x, cache, 0)`, whose output it returns. The prefill is
    the step's own, so that the cache holds what the step itself stores (rotated keys or not)."""

    def run(x: torch.Tensor) -> Any:
        cache = reference.KVCache()
        if t_past:
            seeded = torch.Generator().manual_seed(t_past)
            prefix = x.new_empty(x.shape[0], t_past, x.shape[-1]).normal_(
                generator=seeded
            )  # (b, t_past, d_model)
            step(attn, prefix, cache, 0)
        return step(attn, x, cache, 0)

    return run


def _expect_cached_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases on layers of h heads of d, base 50, in each case's dtype; then one
    with x and the layer on another device (what the learner makes on the CPU meets x there)."""
    layers: dict[tuple[int, int], RotaryMultiHeadAttention] = {}

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        h, d = case.size["h"], case.size["d"]
        if (h, d) not in layers:
            layers[h, d] = reference.RotaryMultiHeadAttention(h * d, h, base=50.0)
        attn = copy.deepcopy(layers[h, d]).to("meta" if case.changed == "meta" else case.dtype)
        t_past = case.size["t_past"]
        return _after_prefill(candidate, attn, t_past), _after_prefill(
            reference.cached_attention, attn, t_past
        )

    exercise = Exercise("cached_attention", functions)
    ran = expect_contract_cases(CACHED_CONTRACT, exercise, contract_cases(CACHED_CONTRACT))
    return ran + expect_inputs_device(CACHED_CONTRACT, exercise)


class _SpyCache:
    """A right cache that records what the learner appends and what cache.append gives back."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.appended: list[torch.Tensor] = []  # the k of each append
        self.returned: list[tuple[torch.Tensor, torch.Tensor]] = []  # (keys, values) of each append

    def length(self, layer: int) -> int:
        return self.inner.length(layer)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.inner.append(layer, k, v)  # each (b, h, t_past + t_new, d_k)
        self.appended.append(k.detach().clone())
        self.returned.append((keys.detach().clone(), values.detach().clone()))
        return keys, values

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _diagnose_rotation(
    candidate: Callable[..., Any], attn: RotaryMultiHeadAttention, actual: Any = None, expected: Any = None
) -> str | None:
    """Where the rotation goes wrong: seen on a prefill of 4 positions, then on one new token after them.

    For the second call the check fills the cache itself, with keys rotated at their positions 0 … 3
    as a right cached_attention leaves them. What the learner appends, and which way of rotating q
    and the returned keys its output matches, tell apart no rotation at all, keys rotated again after
    cache.append, and the new token rotated at another position. (With one new token, rotating q and
    every key by one angle gives what no rotation gives: the prefill tells them apart.)
    """
    t_past = 4
    x = randn(2, t_past + 1, attn.qkv.in_features)  # (b, t_past + 1, d_model)

    def learners(chunk: torch.Tensor, cache: _SpyCache) -> torch.Tensor | None:
        try:
            got = call("cached_attention", candidate, attn, chunk, cache, 0)
        except CheckFailed:
            return None
        ok = isinstance(got, torch.Tensor) and got.shape == chunk.shape and len(cache.appended) == 1
        return got if ok else None

    def attended(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        out, _ = reference.attention(query, keys, values, is_causal=True)  # (b, h, t_new, d_k)
        return attn.out(merge_heads(out))  # (b, t_new, d_model)

    def at(z: torch.Tensor, position: int | None) -> torch.Tensor:
        return reference.apply_rope(z, None if position is None else torch.tensor([position]), attn.base)

    with torch.no_grad():
        first = _SpyCache(reference.KVCache())
        prefill = learners(x[:, :t_past], first)
        if prefill is None:
            return None
        q, k, v = attn.project(x[:, :t_past])  # each (b, h, t_past, d_k), not rotated
        if not is_close(prefill, reference.cached_attention(attn, x[:, :t_past], reference.KVCache(), 0)):
            if is_close(prefill, attended(q, k, v)):
                return (
                    "matches attention that does not rotate q and k (or rotates q and every key by one same "
                    "angle, which cancels in q·k): rotate the new queries and keys at their positions t_past "
                    "… (base=attn.base) before appending the keys and attending."
                )
            return _wrong_key_positions(first.appended[0], k, 0, attn.base)
        inner = reference.KVCache()
        reference.cached_attention(attn, x[:, :t_past], inner, 0)  # keys rotated at 0 … t_past - 1
        spy = _SpyCache(inner)
        got = learners(x[:, t_past:], spy)
        if got is None:
            return None
        q, k, _ = attn.project(x[:, t_past:])  # each (b, h, 1, d_k), not rotated
        appended, (keys, values) = spy.appended[0], spy.returned[0]
        if is_close(got, attended(q, keys, values)):  # = q and every returned key rotated at t_past
            return (
                "is right for a prefill, but for a new token after cached ones it is what rotating q and "
                "every key cache.append returns at the new token's position gives (as if nothing were "
                "rotated): a cached key keeps the rotation of its own position. Rotate only the new k, "
                "before cache.append, and attend with the keys it returns."
            )
        twice = attended(at(q, t_past), at(keys, None), values)  # the returned keys rotated at 0 … t_past
        if is_close(appended, at(k, t_past)) and is_close(got, twice):
            return (
                "rotates the cached keys a second time: the keys are appended already rotated at their "
                "positions; attend with them as they come back from cache.append."
            )
        return _wrong_key_positions(appended, k, t_past, attn.base)


def _wrong_key_positions(appended: torch.Tensor, k: torch.Tensor, t_past: int, base: float) -> str | None:
    """The positions at which each new key was rotated, when they are found and are not t_past …."""
    t_new = k.shape[-2]
    positions = []
    for j in range(t_new):
        key = k[..., j : j + 1, :]  # (b, h, 1, d_k), not rotated
        found = [
            p
            for p in range(4 * (t_past + t_new))
            if is_close(appended[..., j : j + 1, :], reference.apply_rope(key, torch.tensor([p]), base))
        ]
        if not found:
            return None
        positions.append(found[0])
    right = list(range(t_past, t_past + t_new))
    if positions == right:
        return None
    shown = str(positions[0]) if t_new == 1 else str(positions)
    where = str(t_past) if t_new == 1 else f"{t_past} … {t_past + t_new - 1}"
    return (
        f"rotates the new keys at position{'s' if t_new > 1 else ''} {shown}, but they sit at {where} "
        "(t_past = cache.length(layer), read before cache.append, then one position per new token): rotate "
        "the new q and k at torch.arange(t_past, t_past + t_new)."
    )


def _expect_cache_lengths(cache: Any, layer: int, start: int, t_new: int, shown: str) -> None:
    """After the call, `layer` holds start + t_new positions and the other layer is untouched."""
    other = 1 - layer
    other_expected = start + t_new if other < layer else start
    got, other_got = cache.length(layer), cache.length(other)
    if got == start + 2 * t_new:
        raise CheckFailed(
            f"After {shown}, the cache holds {got} positions for that layer, {start + t_new} expected: "
            "the new keys and values were appended twice. Call cache.append(layer, k, v) once, and "
            "attend with the keys and values it returns."
        )
    if got == start and other_got == other_expected:
        raise CheckFailed(
            f"After {shown}, the cache still holds {got} positions for that layer: append the new keys "
            "and values with cache.append(layer, k, v), and attend with what it returns."
        )
    if got != start + t_new or other_got != other_expected:
        raise CheckFailed(
            f"After {shown}, the cache holds {got} positions for layer {layer} ({start + t_new} expected) "
            f"and {other_got} for layer {other} ({other_expected} expected): pass `layer` on to "
            "cache.length(layer) and cache.append(layer, k, v)."
        )


def _expect_cached_attention_on_cuda(candidate: Callable[..., Any]) -> None:
    """Where there is a GPU: positions and masks are created on x's device."""
    device = cuda_device()
    if device is None:
        return
    attn = reference.RotaryMultiHeadAttention(12, 3).to(device)
    x = randn(2, 6, 12, dtype=torch.float32).to(device)  # (b, t, d_model)
    cache = reference.KVCache()
    hint = "Create new tensors (positions) on x.device: torch.arange(start, stop, device=x.device)."
    with torch.no_grad():
        call("cached_attention", candidate, attn, x[:, :5], cache, 0, hint=hint)
        got = call("cached_attention", candidate, attn, x[:, 5:], cache, 0, hint=hint)
        what = f"The output of cached_attention on {device.type}"
        out = expect_tensor(got, (2, 1, 12), what, device=device)
        want = attn(x, is_causal=True)[:, 5:]  # (b, 1, d_model)
    expect_close(out, want, what, called_as="")
