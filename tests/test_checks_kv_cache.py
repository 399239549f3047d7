"""The checks of notebook 07 reject known mistakes with the right message, accept right answers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected, cpu_standing_in_for_cuda
from einops import rearrange
from learner_code import CACHED, KV_CACHE, learner

from attn_course import reference
from attn_course.attention import attention
from attn_course.checks import CheckFailed, check_cached_attention, check_KVCache
from attn_course.checks.kv_cache import _cached_attention
from attn_course.masking import causal_mask
from attn_course.rope import apply_rope


def not_implemented(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# KVCache: right answers


class ListCache:
    """Lists of chunks per layer, joined on every append."""

    def __init__(self):
        self.k, self.v = {}, {}

    def length(self, layer):
        return sum(t.shape[-2] for t in self.k.get(layer, []))

    def append(self, layer, k, v):
        self.k.setdefault(layer, []).append(k)
        self.v.setdefault(layer, []).append(v)
        return torch.cat(self.k[layer], dim=-2), torch.cat(self.v[layer], dim=-2)


class BufferCache:
    """Preallocated buffers that double when full; returns views of the filled part."""

    def __init__(self):
        self.k, self.v, self.n = {}, {}, {}

    def length(self, layer):
        return self.n.get(layer, 0)

    def append(self, layer, k, v):
        b, h, t_new, d = k.shape
        n = self.n.get(layer, 0)
        if layer not in self.k or n + t_new > self.k[layer].shape[-2]:
            capacity = max(2 * (n + t_new), 4)
            new_k, new_v = k.new_zeros(b, h, capacity, d), v.new_zeros(b, h, capacity, d)
            if layer in self.k:
                new_k[..., :n, :], new_v[..., :n, :] = self.k[layer][..., :n, :], self.v[layer][..., :n, :]
            self.k[layer], self.v[layer] = new_k, new_v
        self.k[layer][..., n : n + t_new, :] = k
        self.v[layer][..., n : n + t_new, :] = v
        self.n[layer] = n + t_new
        return self.k[layer][..., : n + t_new, :], self.v[layer][..., : n + t_new, :]


class ListOfLayersCache:
    """A list with one (keys, values) entry per layer, grown as layers appear; length as a tensor dim."""

    def __init__(self):
        self.layers = []

    def length(self, layer):
        if layer >= len(self.layers) or self.layers[layer] is None:
            return 0
        return self.layers[layer][0].size(2)

    def append(self, layer, k, v):
        while len(self.layers) <= layer:
            self.layers.append(None)
        if self.layers[layer] is not None:
            old_k, old_v = self.layers[layer]
            k, v = torch.cat((old_k, k), dim=2), torch.cat((old_v, v), dim=2)
        self.layers[layer] = (k, v)
        return k, v


# ---------------------------------------------------------------------------------------------
# KVCache: mistakes


class OnlyNew(ListCache):
    def append(self, layer, k, v):
        super().append(layer, k, v)
        return k, v


class ValuesNotCached(ListCache):
    def append(self, layer, k, v):
        keys, _ = super().append(layer, k, v)
        return keys, v


class NewFirst(ListCache):
    def append(self, layer, k, v):
        self.k.setdefault(layer, []).insert(0, k)
        self.v.setdefault(layer, []).insert(0, v)
        return torch.cat(self.k[layer], dim=-2), torch.cat(self.v[layer], dim=-2)


class CatLastAxis(ListCache):
    def append(self, layer, k, v):
        self.k.setdefault(layer, []).append(k)
        self.v.setdefault(layer, []).append(v)
        return torch.cat(self.k[layer], dim=-1), torch.cat(self.v[layer], dim=-1)


class CatBatchAxis(ListCache):
    def append(self, layer, k, v):
        self.k.setdefault(layer, []).append(k)
        self.v.setdefault(layer, []).append(v)
        return torch.cat(self.k[layer], dim=0), torch.cat(self.v[layer], dim=0)


class SharedAcrossLayers:
    def __init__(self):
        self.k = self.v = None
        self.n = {}

    def length(self, layer):
        return self.n.get(layer, 0)

    def append(self, layer, k, v):
        self.n[layer] = self.n.get(layer, 0) + k.shape[-2]
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class Swapped(ListCache):
    def append(self, layer, k, v):
        keys, values = super().append(layer, k, v)
        return values, keys


class CountsAppends(ListCache):
    def length(self, layer):
        return len(self.k.get(layer, []))


class LengthOfLastAxis(ListCache):
    def length(self, layer):
        return self.k[layer][0].shape[-1] if layer in self.k else 0


class LengthOfAllLayers(ListCache):
    def length(self, layer):
        return sum(t.shape[-2] for chunks in self.k.values() for t in chunks)


class LengthKeyError(ListCache):
    def length(self, layer):
        return sum(t.shape[-2] for t in self.k[layer])


class ReusedScratch(ListCache):
    """Copies every result into one scratch buffer, reallocated only when the shape changes."""

    scratch = None

    def append(self, layer, k, v):
        keys, values = super().append(layer, k, v)
        both = torch.stack([keys, values])  # (2, b, h, t, d)
        if self.scratch is None or self.scratch.shape != both.shape:
            self.scratch = torch.empty_like(both)
        self.scratch.copy_(both)
        return self.scratch[0], self.scratch[1]


class ReturnsOneTensor(ListCache):
    def append(self, layer, k, v):
        keys, values = super().append(layer, k, v)
        return torch.stack([keys, values])


class NeedsArguments(ListCache):
    def __init__(self, n_layers):
        super().__init__()


class PreallocatedOnDevice:
    """A buffer of 64 positions per layer made like k (dtype and device), written in place; views back."""

    def __init__(self):
        self.k, self.v, self.n = {}, {}, {}

    def length(self, layer):
        return self.n.get(layer, 0)

    def append(self, layer, k, v):
        b, h, t_new, d = k.shape
        if layer not in self.k:
            self.k[layer] = torch.zeros(b, h, 64, d, dtype=k.dtype, device=k.device)
            self.v[layer] = torch.zeros(b, h, 64, d, dtype=v.dtype, device=v.device)
            self.n[layer] = 0
        n = self.n[layer]
        self.k[layer][:, :, n : n + t_new] = k
        self.v[layer][:, :, n : n + t_new] = v
        self.n[layer] = n + t_new
        return self.k[layer][:, :, : n + t_new], self.v[layer][:, :, : n + t_new]


class ContiguousCopies(ListCache):
    """Stores contiguous copies of what it is given (a view's own storage is never kept)."""

    def append(self, layer, k, v):
        return super().append(layer, k.contiguous().clone(), v.contiguous().clone())


class FlattensHeads(ListCache):
    """Keeps (b·h, t, d) tensors, flattened and unflattened with reshape."""

    def append(self, layer, k, v):
        b, h, t_new, d = k.shape
        flat_k, flat_v = k.reshape(b * h, t_new, d), v.reshape(b * h, t_new, d)
        keys, values = super().append(layer, flat_k, flat_v)
        return keys.reshape(b, h, -1, d), values.reshape(b, h, -1, d)


# KVCache: mistakes the contract's cases catch (the interleaved float32 appends passed them)


class FlattensHeadsWithView(FlattensHeads):
    """The same with .view, which needs k laid out as a fresh tensor is."""

    def append(self, layer, k, v):
        b, h, t_new, d = k.shape
        keys, values = ListCache.append(self, layer, k.view(b * h, t_new, d), v.view(b * h, t_new, d))
        return keys.view(b, h, -1, d), values.view(b, h, -1, d)


class PreallocatedFloat32(PreallocatedOnDevice):
    """torch.zeros without dtype= or device=: a float32 buffer on the CPU, whatever k is."""

    def append(self, layer, k, v):
        b, h, t_new, d = k.shape
        if layer not in self.k:
            self.k[layer], self.v[layer] = torch.zeros(b, h, 64, d), torch.zeros(b, h, 64, d)
            self.n[layer] = 0
        return super().append(layer, k, v)


class PreallocatedOnTheCpu(PreallocatedOnDevice):
    """dtype=k.dtype but no device=: the buffer stays on the CPU when k is on a GPU."""

    def append(self, layer, k, v):
        b, h, t_new, d = k.shape
        if layer not in self.k:
            self.k[layer] = torch.zeros(b, h, 64, d, dtype=k.dtype)
            self.v[layer] = torch.zeros(b, h, 64, d, dtype=v.dtype)
            self.n[layer] = 0
        return super().append(layer, k, v)


class StoresFloat32(ListCache):
    """Casts what it stores to float32, "to be safe": half-precision keys come back as float32."""

    def append(self, layer, k, v):
        return super().append(layer, k.float(), v.float())


# ---------------------------------------------------------------------------------------------
# cached_attention: right answers


def cached_einops(attn, x, cache, layer):
    """By hand from attn.qkv with einops, and the course's attention."""
    t_past, t_new = cache.length(layer), x.shape[1]
    q, k, v = attn.qkv(x).chunk(3, dim=-1)  # each (b, t_new, d_model)
    q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=attn.n_heads) for z in (q, k, v))
    positions = torch.arange(t_past, t_past + t_new, device=x.device)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)
    keys, values = cache.append(layer, k, v)
    out, _ = attention(q, keys, values, is_causal=True)
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))


def cached_sdpa_bottom_right(attn, x, cache, layer):
    """attn.project, view/transpose to merge, and F.scaled_dot_product_attention with an explicit mask."""
    b, t_new, d_model = x.shape
    t_past = cache.length(layer)
    q, k, v = attn.project(x)
    positions = torch.arange(t_past, t_past + t_new)
    q, k = apply_rope(q, positions, base=attn.base), apply_rope(k, positions, base=attn.base)
    keys, values = cache.append(layer, k, v)
    mask = causal_mask(t_new, keys.shape[-2], device=x.device)  # bottom-right
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    return attn.out(out.transpose(1, 2).reshape(b, t_new, d_model))


def cached_unrotated_keys(attn, x, cache, layer):
    """Caches keys before RoPE and rotates all of them at 0 … T-1 every step: more work, same result."""
    t_past, t_new = cache.length(layer), x.shape[1]
    q, k, v = attn.project(x)
    q = apply_rope(q, torch.arange(t_past, t_past + t_new), attn.base)
    keys, values = cache.append(layer, k, v)
    out, _ = attention(q, apply_rope(keys, None, attn.base), values, is_causal=True)
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))


def cached_manual_softmax(attn, x, cache, layer):
    """Scores, a bottom-right mask built with triu on x's device, and torch.softmax, in float32."""
    t_past, t_new = cache.length(layer), x.shape[1]
    q, k, v = attn.project(x)
    positions = torch.arange(t_past, t_past + t_new)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)
    keys, values = cache.append(layer, k, v)
    t_k = keys.shape[-2]
    scores = (q.float() @ keys.float().transpose(-2, -1)) / q.shape[-1] ** 0.5
    future = torch.ones(t_new, t_k, dtype=torch.bool, device=x.device).triu(diagonal=t_past + 1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    out = (weights @ values.float()).to(x.dtype)
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))


def cached_einsum_float64(attn, x, cache, layer):
    """einsum scores in float64 against an index comparison for the mask, cast back at the end."""
    t_past, t_new = cache.length(layer), x.shape[-2]
    q, k, v = attn.project(x)
    positions = t_past + torch.arange(t_new, device=x.device)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)
    keys, values = cache.append(layer, k, v)
    scores = torch.einsum("bhqd,bhkd->bhqk", q.double(), keys.double()) / q.shape[-1] ** 0.5
    seen = torch.arange(keys.shape[-2], device=x.device)[None, :] <= positions[:, None]  # (t_new, t_k)
    weights = scores.masked_fill(~seen, float("-inf")).softmax(dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, values.double()).to(x.dtype)
    return attn.out(out.transpose(1, 2).reshape(*x.shape[:-1], -1))


# ---------------------------------------------------------------------------------------------
# cached_attention: mistakes, as a learner would write them


def _rotated(attn, x, cache, layer, start=None):
    t_past, t_new = cache.length(layer), x.shape[1]
    start = t_past if start is None else start
    q, k, v = attn.project(x)
    positions = torch.arange(start, start + t_new)
    return apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base), v


def _finish(attn, out):
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))


def appends_twice(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    cache.append(layer, k, v)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, values, is_causal=True)[0])


def positions_from_zero(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer, start=0)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, values, is_causal=True)[0])


def sdpa_is_causal(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, F.scaled_dot_product_attention(q, keys, values, is_causal=True))


def values_not_cached(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    keys, _ = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, v, is_causal=True)[0])


def keys_not_rotated(attn, x, cache, layer):
    t_past, t_new = cache.length(layer), x.shape[1]
    q, k, v = attn.project(x)
    q = apply_rope(q, torch.arange(t_past, t_past + t_new), attn.base)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, values, is_causal=True)[0])


def no_causal_mask(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, values)[0])


def no_output_projection(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    keys, values = cache.append(layer, k, v)
    return rearrange(attention(q, keys, values, is_causal=True)[0], "b h t d -> b t (h d)")


def default_base(attn, x, cache, layer):
    t_past, t_new = cache.length(layer), x.shape[1]
    q, k, v = attn.project(x)
    positions = torch.arange(t_past, t_past + t_new)
    q, k = apply_rope(q, positions), apply_rope(k, positions)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, values, is_causal=True)[0])


def always_layer_zero(attn, x, cache, layer):
    return reference.cached_attention(attn, x, cache, 0)


def never_appends(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    return _finish(attn, attention(q, k, v, is_causal=True)[0])


def positions_after_append(attn, x, cache, layer):
    t_total = cache.length(layer) + x.shape[1]  # the length after appending, taken as the first position
    q, k, v = _rotated(attn, x, cache, layer, start=t_total)
    keys, values = cache.append(layer, k, v)
    return _finish(attn, attention(q, keys, values, is_causal=True)[0])


def mask_made_on_the_cpu(attn, x, cache, layer):
    """The manual softmax with its bottom-right mask made without device=: fails on a GPU."""
    t_past, t_new = cache.length(layer), x.shape[1]
    q, k, v = _rotated(attn, x, cache, layer)
    keys, values = cache.append(layer, k, v)
    scores = q @ keys.transpose(-2, -1) / q.shape[-1] ** 0.5
    future = torch.ones(t_new, keys.shape[-2], dtype=torch.bool).triu(diagonal=t_past + 1)
    return _finish(attn, torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ values)


def returns_heads(attn, x, cache, layer):
    q, k, v = _rotated(attn, x, cache, layer)
    keys, values = cache.append(layer, k, v)
    return attention(q, keys, values, is_causal=True)[0]


CORRECT = [
    pytest.param(check_KVCache, reference.KVCache, id="cache-reference"),
    pytest.param(check_KVCache, ListCache, id="cache-lists"),
    pytest.param(check_KVCache, BufferCache, id="cache-preallocated-buffer"),
    pytest.param(check_KVCache, ListOfLayersCache, id="cache-list-of-layers"),
    pytest.param(check_KVCache, PreallocatedOnDevice, id="cache-buffer-like-k"),
    pytest.param(check_KVCache, ContiguousCopies, id="cache-contiguous-copies"),
    pytest.param(check_KVCache, FlattensHeads, id="cache-flattens-heads-with-reshape"),
    pytest.param(check_cached_attention, reference.cached_attention, id="cached-reference"),
    pytest.param(check_cached_attention, cached_einops, id="cached-einops"),
    pytest.param(check_cached_attention, cached_sdpa_bottom_right, id="cached-sdpa-explicit-mask"),
    pytest.param(check_cached_attention, cached_unrotated_keys, id="cached-rotates-keys-each-step"),
    pytest.param(check_cached_attention, cached_manual_softmax, id="cached-manual-float32"),
    pytest.param(check_cached_attention, cached_einsum_float64, id="cached-einsum-float64"),
]

WRONG = [
    pytest.param(check_KVCache, NeedsArguments, "takes no arguments", id="cache-constructor-arguments"),
    pytest.param(
        check_KVCache,
        type("Stub", (), {"length": not_implemented, "append": not_implemented}),
        "not implemented yet",
        id="cache-not-implemented",
    ),  # fmt: skip
    pytest.param(check_KVCache, OnlyNew, "are only this step's keys", id="cache-only-new"),
    pytest.param(check_KVCache, ValuesNotCached, "must be cached like the keys", id="cache-values"),
    pytest.param(check_KVCache, NewFirst, "put the new positions before the old ones", id="cache-new-first"),
    pytest.param(check_KVCache, CatLastAxis, "torch.cat([old, new], dim=-2)", id="cache-cat-last-axis"),
    pytest.param(check_KVCache, CatBatchAxis, "torch.cat([old, new], dim=-2)", id="cache-cat-batch-axis"),
    pytest.param(check_KVCache, SharedAcrossLayers, "each layer has its own", id="cache-shared-layers"),
    pytest.param(check_KVCache, Swapped, "are the values where the keys belong", id="cache-swapped"),
    pytest.param(check_KVCache, CountsAppends, "the number of appends", id="cache-length-counts-appends"),
    pytest.param(check_KVCache, LengthOfLastAxis, "the size of another axis", id="cache-length-last-axis"),
    pytest.param(check_KVCache, LengthOfAllLayers, "all layers together", id="cache-length-all-layers"),
    pytest.param(check_KVCache, LengthKeyError, "length` raised KeyError", id="cache-length-keyerror"),
    pytest.param(check_KVCache, ReusedScratch, "changed after later appends", id="cache-aliasing"),
    pytest.param(check_KVCache, ReturnsOneTensor, "return a tuple (keys, values)", id="cache-one-tensor"),
    # Caught by the contract's cases only (issue 44): other dtypes, another device.
    pytest.param(
        check_KVCache,
        PreallocatedFloat32,
        "Your `keys` has dtype float32 for float64 inputs: it must have the inputs' dtype",
        id="cache-buffer-float32",
    ),  # fmt: skip
    pytest.param(
        check_KVCache,
        PreallocatedOnTheCpu,
        "with its inputs on another device than the CPU (PyTorch's meta device, tensors with shapes and no "
        "data; b=2, h=3, t_past=5, t_new=1, d_k=6); the first tensor your code makes off that device comes "
        "from `torch.zeros(…)`",
        id="cache-buffer-on-the-cpu",
    ),  # fmt: skip
    pytest.param(
        check_KVCache,
        FlattensHeadsWithView,
        "view needs a contiguous tensor",
        id="cache-flattens-heads-with-view",
    ),  # fmt: skip
    pytest.param(
        check_KVCache,
        StoresFloat32,
        "has dtype float32 for float64 inputs: it must have the inputs' dtype (seen on b=2, h=3, t_past=5, "
        "t_new=1, d_k=6, float64 inputs). The first float32 tensor your code makes comes from `.float(…)`",
        id="cache-stores-float32",
    ),  # fmt: skip
    pytest.param(check_cached_attention, not_implemented, "not implemented yet", id="cached-not-implemented"),
    pytest.param(check_cached_attention, appends_twice, "appended twice", id="cached-appends-twice"),
    pytest.param(
        check_cached_attention,
        positions_from_zero,
        "as if they started at position 0",
        id="cached-positions-from-zero",
    ),  # fmt: skip
    pytest.param(check_cached_attention, sdpa_is_causal, "mask top-left", id="cached-top-left"),
    pytest.param(
        check_cached_attention,
        values_not_cached,
        "attend to all the keys and values",
        id="cached-values-not-cached",
    ),  # fmt: skip
    pytest.param(check_cached_attention, keys_not_rotated, "rotates only q", id="cached-keys-not-rotated"),
    pytest.param(check_cached_attention, no_causal_mask, "has no causal mask", id="cached-no-causal"),
    pytest.param(
        check_cached_attention, no_output_projection, "forgets the output projection", id="cached-no-out"
    ),  # fmt: skip
    pytest.param(check_cached_attention, default_base, "ignores attn.base", id="cached-default-base"),
    pytest.param(check_cached_attention, always_layer_zero, "pass `layer` on", id="cached-ignores-layer"),
    pytest.param(check_cached_attention, never_appends, "still holds", id="cached-never-appends"),
    pytest.param(
        check_cached_attention,
        positions_after_append,
        "t_new positions too far",
        id="cached-positions-after-append",
    ),  # fmt: skip
    pytest.param(check_cached_attention, returns_heads, "should have shape (2, 4, 12)", id="cached-heads"),
    pytest.param(
        check_cached_attention,
        mask_made_on_the_cpu,
        "with its inputs on another device than the CPU",
        id="cached-mask-on-the-cpu",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_check_accepts_correct_implementation(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_check_rejects_mistake_with_its_message(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


def test_a_cache_instance_is_refused_with_how_to_call_the_check():
    with pytest.raises(CheckFailed, match=r"check_KVCache\(KVCache\)"):
        check_KVCache(ListCache())


def test_the_knob_free_variant_is_the_reference(capsys):
    assert_accepted(check_cached_attention, _cached_attention, capsys)


def test_sdpa_is_causal_really_aligns_top_left():
    q, k = torch.randn(1, 2, 4), torch.randn(1, 5, 4)
    ours = attention(q, k, k, mask=torch.ones(2, 5, dtype=torch.bool).tril())[0]
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, k, is_causal=True), ours)


# ---------------------------------------------------------------------------------------------
# The GPU case, run here with the CPU standing in for CUDA (no GPU on the test machine)


def test_the_gpu_case_runs_cached_attention_on_the_device(monkeypatch, capsys):
    import attn_course.checks.kv_cache as kv_checks

    calls = cpu_standing_in_for_cuda(monkeypatch, kv_checks)
    assert_accepted(check_cached_attention, reference.cached_attention, capsys)
    assert calls  # the GPU case ran


# ---------------------------------------------------------------------------------------------
# cached_attention: mistakes as a learner writes them, text edits of a right solution (learner_code.py)

POSITIONS = "positions = torch.arange(t_past, t_past + t_new, device=x.device)"
ATTEND = "out, _ = attention(q, keys, values, is_causal=True)"
ROTATE_Q, ROTATE_K = "q = apply_rope(q, positions, attn.base)", "k = apply_rope(k, positions, attn.base)"

LEARNER_WRONG = [
    (POSITIONS, "positions = torch.arange(t_new, device=x.device)", "as if they started at position 0"),
    ("    t_past = cache.length(layer)\n    positions",
     "    t_past = cache.length(layer) + t_new\n    positions", "t_new positions too far"),
    (ATTEND, "out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)",
     "aligns the causal mask top-left"),
    (ATTEND, "out, _ = attention(q, keys, values)", "has no causal mask"),
    (ATTEND, "out, _ = attention(q, k, v, is_causal=True)", "attends only to the new tokens"),
    (ATTEND, "out, _ = attention(q, keys, keys, is_causal=True)", "uses the cached keys as values"),
    (f"    {ROTATE_Q}\n    {ROTATE_K}\n", "", "does not rotate q and k"),
    (f"    {ROTATE_K}\n", "", "rotates only q"),
    (f"    {ROTATE_Q}\n", "", "rotates only k"),
    (ATTEND, "out, _ = attention(q, apply_rope(keys, None, attn.base), values, is_causal=True)",
     "rotates the cached keys a second time"),
    (f"{ROTATE_Q}\n    {ROTATE_K}", "q = apply_rope(q, positions)\n    k = apply_rope(k, positions)",
     "ignores attn.base"),
    ("return attn.out(merge_heads(out))", "return merge_heads(out)", "forgets the output projection"),
    # The keys that cache.append returns rotated again (issue 27, family 3): told apart from no rotation.
    (f"    {ROTATE_K}\n    keys, values = cache.append(layer, k, v)\n",
     "    keys, values = cache.append(layer, k, v)\n    keys = apply_rope(keys, positions, attn.base)\n",
     "what rotating q and every key cache.append returns at the new token's position gives"),
    ("    keys, values = cache.append(layer, k, v)\n",
     "    keys, values = cache.append(layer, k, v)\n    keys = apply_rope(keys, positions, attn.base)\n",
     "rotates the cached keys a second time"),
    (f"    {ROTATE_Q}\n    {ROTATE_K}\n    keys, values = cache.append(layer, k, v)\n",
     "    keys, values = cache.append(layer, k, v)\n    same = torch.full((keys.shape[-2],), t_past)\n"
     "    q, keys = apply_rope(q, same[-t_new:], attn.base), apply_rope(keys, same, attn.base)\n",
     "or rotates q and every key by one same angle"),
    (POSITIONS, "positions = 2 * torch.arange(t_past, t_past + t_new, device=x.device)",
     "rotates the new keys at positions [0, 2, 4, 6], but they sit at 0 … 3"),
]  # fmt: skip
"""(old, new, phrase): a text edit of the right learner solution, and the phrase its message needs."""

CACHED_RIGHT = [
    (POSITIONS, "positions = t_past + torch.arange(t_new, device=x.device)"),
    (f"    {ROTATE_Q}\n    {ROTATE_K}\n    keys, values = cache.append(layer, k, v)\n",
     "    keys, values = cache.append(layer, k, v)\n    q = apply_rope(q, positions, attn.base)\n"
     "    keys = apply_rope(keys, torch.arange(keys.shape[-2], device=x.device), attn.base)\n"),
]  # fmt: skip
"""(old, new): text edits that keep the learner solution right (the last caches unrotated keys)."""

KV_CACHE_WRONG = [
    # the cache asked whether it holds anything at all, not this layer: a KeyError for a layer not yet cached
    ([("        if layer not in self.keys:\n", "        if len(self.keys) == 0:\n")],
     "Layer 1 has nothing cached yet (layer 0 has): its length is 0"),
    ([("        self.values = {}\n", "        self.values = self.keys\n")], "self.values = self.keys"),
    ([("        self.values = {}\n", "        self.values = self.keys\n"),
      ("            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)\n"
       "            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)\n"
       "        else:\n            self.keys[layer] = k\n            self.values[layer] = v\n"
       "        return self.keys[layer], self.values[layer]",
       "            k = torch.cat([self.keys[layer], k], dim=-2)\n"
       "            v = torch.cat([self.values[layer], v], dim=-2)\n"
       "        self.keys[layer] = k\n        self.values[layer] = v\n        return k, v")],
     "hold, at positions 0–3 (axis -2), the values appended (append 1), not the keys"),
    ([("        self.keys = {}\n        self.values = {}\n", "        self.keys = self.values = {}\n"),
      ("            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)\n"
       "            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)\n"
       "        else:\n            self.keys[layer] = k\n            self.values[layer] = v\n"
       "        return self.keys[layer], self.values[layer]",
       "            v = torch.cat([self.values[layer], v], dim=-2)\n"
       "            k = torch.cat([self.keys[layer], k], dim=-2)\n"
       "        self.values[layer] = v\n        self.keys[layer] = k\n        return k, v")],
     "hold, at positions 0–3 (axis -2), the keys appended (append 1), not the values"),
]  # fmt: skip
"""(text edits of the right learner KVCache, the phrase its message must contain)."""

KV_CACHE_RIGHT = [
    [("torch.cat([self.keys[layer], k], dim=-2)", "torch.cat((self.keys[layer], k), dim=2)")],
    [("        self.keys = {}\n        self.values = {}\n", "        self.keys, self.values = {}, {}\n")],
]  # fmt: skip


@pytest.mark.parametrize(("old", "new"), CACHED_RIGHT)
def test_learner_code_spelled_otherwise_passes(old, new, capsys):
    assert_accepted(check_cached_attention, learner(CACHED, "cached_attention", (old, new)), capsys)


@pytest.mark.parametrize(("edits", "phrase"), KV_CACHE_WRONG)
def test_kv_cache_learner_mistakes_are_named(edits, phrase, capsys):
    assert_rejected(check_KVCache, learner(KV_CACHE, "KVCache", *edits), phrase, capsys)


@pytest.mark.parametrize("edits", KV_CACHE_RIGHT)
def test_kv_cache_learner_code_spelled_otherwise_passes(edits, capsys):
    assert_accepted(check_KVCache, learner(KV_CACHE, "KVCache", *edits), capsys)


@pytest.mark.parametrize(("old", "new", "phrase"), LEARNER_WRONG)
def test_learner_mistakes_are_named(old, new, phrase, capsys):
    candidate = learner(CACHED, "cached_attention", (old, new))
    assert_rejected(check_cached_attention, candidate, phrase, capsys)


def test_two_caches_do_not_share_state():
    first, second = reference.KVCache(), reference.KVCache()
    first.append(0, torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4))
    assert second.length(0) == 0
