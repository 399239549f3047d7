"""check_rolling_window_step against right and wrong decoding steps written as learners write them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected
from einops import rearrange

from attn_course import reference
from attn_course.attention import attention
from attn_course.checks import check_rolling_window_step
from attn_course.gqa import repeat_kv
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope


def not_implemented(layer, x, buffer, position):
    raise NotImplementedError


def _qkv(layer, x, position):
    """q, k (both rotated at `position`) and v of the new token, as most learners write it."""
    at = torch.tensor([position])
    q = apply_rope(rearrange(layer.q(x), "b t (h d) -> b h t d", h=layer.n_heads), at)
    k = apply_rope(rearrange(layer.k(x), "b t (h d) -> b h t d", h=layer.n_kv_heads), at)
    v = rearrange(layer.v(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)
    return q, k, v


def _finish(layer, q, keys, values):
    out = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    return layer.out(rearrange(out, "b h t d -> b t (h d)"))


# ---------------------------------------------------------------------------------------------
# Right answers, in the ways people write them


def with_sdpa(layer, x, buffer, position):  # the notebook's solution
    window = buffer.keys.shape[-2]
    q, k, v = _qkv(layer, x, position)
    slot = position % window
    buffer.keys[:, :, slot] = k[:, :, 0]
    buffer.values[:, :, slot] = v[:, :, 0]
    filled = min(position + 1, window)
    return _finish(layer, q, buffer.keys[:, :, :filled], buffer.values[:, :, :filled])


def with_a_slot_mask(layer, x, buffer, position):  # every slot, the empty ones masked out
    window = buffer.window
    q, k, v = _qkv(layer, x, position)
    buffer.keys[:, :, position % window : position % window + 1] = k
    buffer.values[:, :, position % window : position % window + 1] = v
    written = torch.arange(window, device=x.device) <= position  # (W,)
    n_rep = layer.n_heads // layer.n_kv_heads
    out, _ = attention(q, repeat_kv(buffer.keys, n_rep), repeat_kv(buffer.values, n_rep), mask=written)
    return layer.out(merge_heads(out))


def rotated_when_read(layer, x, buffer, position):  # raw keys stored, each slot's own position worked out
    window = buffer.window
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), torch.tensor([position]))
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    buffer.keys.index_copy_(2, torch.tensor([position % window]), k)
    buffer.values.index_copy_(2, torch.tensor([position % window]), v)
    n = min(position + 1, window)
    slots = torch.arange(n)
    positions = position - (position - slots) % window  # slot s holds the latest position ≡ s (mod W)
    keys = apply_rope(buffer.keys[:, :, :n], positions)
    return _finish(layer, q, keys, buffer.values[:, :, :n])


def rolled_into_order(layer, x, buffer, position):  # torch.roll to time order, then a plain softmax
    window = buffer.window
    q, k, v = _qkv(layer, x, position)
    buffer.keys[:, :, position % window] = k.squeeze(2)
    buffer.values[:, :, position % window] = v.squeeze(2)
    if position + 1 >= window:
        keys = torch.roll(buffer.keys, -(position + 1) % window, dims=2)
        values = torch.roll(buffer.values, -(position + 1) % window, dims=2)
    else:
        keys, values = buffer.keys[:, :, : position + 1], buffer.values[:, :, : position + 1]
    n_rep = layer.n_heads // layer.n_kv_heads
    keys, values = keys.repeat_interleave(n_rep, dim=1), values.repeat_interleave(n_rep, dim=1)
    weights = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return layer.out(merge_heads(weights @ values))


def einsum_in_float64(layer, x, buffer, position):  # groups by einsum, scores in float64, view not rearrange
    b, _, d_model = x.shape
    h, h_kv, window = layer.n_heads, layer.n_kv_heads, buffer.window
    d = d_model // h
    at = torch.tensor([position], device=x.device)
    q = apply_rope(layer.q(x).view(b, 1, h, d).transpose(1, 2), at)  # (b, h, 1, d)
    k = apply_rope(layer.k(x).view(b, 1, h_kv, d).transpose(1, 2), at)  # (b, h_kv, 1, d)
    buffer.keys[:, :, position % window] = k[:, :, 0]
    buffer.values[:, :, position % window] = layer.v(x).view(b, h_kv, d)
    n = min(position + 1, window)
    q = q.reshape(b, h_kv, h // h_kv, d).double()  # (b, h_kv, g, d): consecutive query heads share
    scores = torch.einsum("bkgd,bknd->bkgn", q, buffer.keys[:, :, :n].double()) / math.sqrt(d)
    out = torch.einsum("bkgn,bknd->bkgd", scores.softmax(dim=-1), buffer.values[:, :, :n].double())
    return layer.out(out.reshape(b, 1, d_model).to(x.dtype))


CORRECT = [
    pytest.param(reference.rolling_window_step, id="reference"),
    pytest.param(einsum_in_float64, id="einsum-float64"),
    pytest.param(with_sdpa, id="sdpa"),
    pytest.param(with_a_slot_mask, id="slot-mask"),
    pytest.param(rotated_when_read, id="rotated-when-read"),
    pytest.param(rolled_into_order, id="rolled"),
]


@pytest.mark.parametrize("candidate", CORRECT)
def test_accepts_right_answers(candidate, capsys):
    assert_accepted(check_rolling_window_step, candidate, capsys)


# ---------------------------------------------------------------------------------------------
# Wrong answers, as learners write them


def slot_is_position(layer, x, buffer, position):  # notebook 07's habit: position p at index p
    q, k, v = _qkv(layer, x, position)
    buffer.keys[:, :, position] = k[:, :, 0]
    buffer.values[:, :, position] = v[:, :, 0]
    return _finish(layer, q, buffer.keys[:, :, : position + 1], buffer.values[:, :, : position + 1])


def slot_from_the_wrong_axis(layer, x, buffer, position):  # shape[1] is the key/value heads, not W
    q, k, v = _qkv(layer, x, position)
    slot = position % buffer.keys.shape[1]
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    n = min(position + 1, buffer.keys.shape[1])
    return _finish(layer, q, buffer.keys[:, :, :n], buffer.values[:, :, :n])


def query_rotated_by_slot(layer, x, buffer, position):
    slot = position % buffer.window
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), torch.tensor([slot]))
    _, k, v = _qkv(layer, x, position)
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    n = min(position + 1, buffer.window)
    return _finish(layer, q, buffer.keys[:, :, :n], buffer.values[:, :, :n])


def rope_default_positions(layer, x, buffer, position):  # apply_rope(q) on one token: position 0
    q = apply_rope(split_heads(layer.q(x), layer.n_heads))
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads))
    v = split_heads(layer.v(x), layer.n_kv_heads)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    n = min(position + 1, buffer.window)
    return _finish(layer, q, buffer.keys[:, :, :n], buffer.values[:, :, :n])


def forgot_rope(layer, x, buffer, position):
    q = split_heads(layer.q(x), layer.n_heads)
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    n = min(position + 1, buffer.window)
    return _finish(layer, q, buffer.keys[:, :, :n], buffer.values[:, :, :n])


def keys_rotated_by_slot(layer, x, buffer, position):  # raw keys, rotated as if slot = position
    window = buffer.window
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), torch.tensor([position]))
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    buffer.keys[:, :, position % window] = k[:, :, 0]
    buffer.values[:, :, position % window] = v[:, :, 0]
    n = min(position + 1, window)
    keys = apply_rope(buffer.keys[:, :, :n])  # positions 0 … n-1
    return _finish(layer, q, keys, buffer.values[:, :, :n])


def keys_rotated_oldest_first(layer, x, buffer, position):  # raw keys, slot 0 taken for the oldest
    window = buffer.window
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), torch.tensor([position]))
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    buffer.keys[:, :, position % window] = k[:, :, 0]
    buffer.values[:, :, position % window] = v[:, :, 0]
    n = min(position + 1, window)
    keys = apply_rope(buffer.keys[:, :, :n], torch.arange(position - n + 1, position + 1))
    return _finish(layer, q, keys, buffer.values[:, :, :n])


def stale_slots(layer, x, buffer, position):  # the whole buffer from the first token on
    q, k, v = _qkv(layer, x, position)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    return _finish(layer, q, buffer.keys, buffer.values)


def read_then_write(layer, x, buffer, position):  # attends, then stores the new token for next time
    q, k, v = _qkv(layer, x, position)
    n = min(position, buffer.window)
    if n == 0:
        out = torch.zeros_like(q)
    else:
        out = F.scaled_dot_product_attention(
            q, buffer.keys[:, :, :n], buffer.values[:, :, :n], enable_gqa=True
        )
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    return layer.out(rearrange(out, "b h t d -> b t (h d)"))


def cache_plus_new_key(layer, x, buffer, position):  # notebook 07's torch.cat, then the write
    q, k, v = _qkv(layer, x, position)
    n = min(position, buffer.window)
    keys = torch.cat([buffer.keys[:, :, :n], k], dim=2)
    values = torch.cat([buffer.values[:, :, :n], v], dim=2)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    return _finish(layer, q, keys, values)


def up_to_the_slot(layer, x, buffer, position):  # `[: position + 1]` with `% W` added to it
    q, k, v = _qkv(layer, x, position)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    return _finish(layer, q, buffer.keys[:, :, : slot + 1], buffer.values[:, :, : slot + 1])


def counted_before_writing(layer, x, buffer, position):  # the count taken as the cache's old length
    q, k, v = _qkv(layer, x, position)
    filled = min(position, buffer.window)
    if filled == 0:
        filled = 1
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    return _finish(layer, q, buffer.keys[:, :, :filled], buffer.values[:, :, :filled])


def growing_cache(layer, x, buffer, position):  # notebook 07's cache: nothing is ever overwritten
    q, k, v = _qkv(layer, x, position)
    if position == 0:
        buffer.keys, buffer.values = k, v
    else:
        buffer.keys = torch.cat([buffer.keys, k], dim=2)[:, :, -buffer.keys.shape[2] - 1 :]
        buffer.values = torch.cat([buffer.values, v], dim=2)[:, :, -buffer.values.shape[2] - 1 :]
    return _finish(layer, q, buffer.keys, buffer.values)


def tiled_heads(layer, x, buffer, position):  # k.repeat: the interleaved order
    q, k, v = _qkv(layer, x, position)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    n, n_rep = min(position + 1, buffer.window), layer.n_heads // layer.n_kv_heads
    keys = buffer.keys[:, :, :n].repeat(1, n_rep, 1, 1)
    values = buffer.values[:, :, :n].repeat(1, n_rep, 1, 1)
    return layer.out(merge_heads(F.scaled_dot_product_attention(q, keys, values)))


def scores_not_scaled(layer, x, buffer, position):  # nobody listed this one
    q, k, v = _qkv(layer, x, position)
    slot = position % buffer.window
    buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
    n = min(position + 1, buffer.window)
    out = F.scaled_dot_product_attention(
        q, buffer.keys[:, :, :n], buffer.values[:, :, :n], enable_gqa=True, scale=1.0
    )
    return layer.out(merge_heads(out))


# The contract's cases (issue 44): the old check passed this.


def slot_mask_on_the_cpu(layer, x, buffer, position):  # every slot, the empty ones masked by a CPU mask
    window = buffer.window
    q, k, v = _qkv(layer, x, position)
    buffer.keys[:, :, position % window : position % window + 1] = k
    buffer.values[:, :, position % window : position % window + 1] = v
    written = torch.arange(window) <= position  # (W,)
    n_rep = layer.n_heads // layer.n_kv_heads
    out, _ = attention(q, repeat_kv(buffer.keys, n_rep), repeat_kv(buffer.values, n_rep), mask=written)
    return layer.out(merge_heads(out))


def test_the_contract_catches_a_mask_made_on_the_cpu(capsys):
    phrase = (
        "the tensor off that device that the failing operation was given comes from `torch.arange(…)` at line"
    )
    assert_rejected(check_rolling_window_step, slot_mask_on_the_cpu, phrase, capsys)


WRONG = [
    pytest.param(not_implemented, "not implemented yet", id="stub"),
    pytest.param(slot_is_position, "first with no slot of its own", id="slot-p"),
    pytest.param(slot_from_the_wrong_axis, "wrote the value of position 2 to slot 0", id="slot-wrong-axis"),
    pytest.param(query_rotated_by_slot, "rotates the query by its slot", id="query-at-slot"),
    pytest.param(rope_default_positions, "rotates the new token at position 0", id="rope-at-zero"),
    pytest.param(forgot_rope, "has no rotary positions", id="no-rope"),
    pytest.param(keys_rotated_by_slot, "rotates the cached keys by their slot numbers", id="keys-by-slot"),
    pytest.param(keys_rotated_oldest_first, "as if slot 0 held the oldest token", id="keys-time-order"),
    pytest.param(stale_slots, "attends all W slots from the first token on", id="stale-slots"),
    pytest.param(read_then_write, "attends the buffer before writing", id="read-then-write"),
    pytest.param(cache_plus_new_key, "W + 1 keys", id="window-plus-one"),
    pytest.param(up_to_the_slot, "as if the slots after the newest were in the future", id="slots-causal"),
    pytest.param(counted_before_writing, "leaves out the slot just written", id="one-short"),
    pytest.param(growing_cache, "never grow", id="growing"),
    pytest.param(tiled_heads, "interleaved instead of grouped", id="interleaved"),
    pytest.param(scores_not_scaled, "the weights among the keys are off", id="unlisted"),
]


@pytest.mark.parametrize(("candidate", "phrase"), WRONG)
def test_names_each_mistake(candidate, phrase, capsys):
    assert_rejected(check_rolling_window_step, candidate, phrase, capsys)


def test_reading_names_the_wrap_for_an_unlisted_spelling(capsys):
    """A slot's number read as a position in a way no table entry simulates: said by where it breaks."""

    def query_one_slot_ahead(layer, x, buffer, position):
        slot = position % buffer.window
        at = torch.tensor([position if position < buffer.window else slot + buffer.window])
        q = apply_rope(split_heads(layer.q(x), layer.n_heads), at)
        _, k, v = _qkv(layer, x, position)
        buffer.keys[:, :, slot], buffer.values[:, :, slot] = k[:, :, 0], v[:, :, 0]
        n = min(position + 1, buffer.window)
        return _finish(layer, q, buffer.keys[:, :, :n], buffer.values[:, :, :n])

    assert_rejected(check_rolling_window_step, query_one_slot_ahead, "where the buffer wraps", capsys)
