"""The checks of notebook 05 reject known mistakes with the right message, accept right answers."""

# ruff: noqa: E501  (tables of learner code, one case a line)

from __future__ import annotations

import functools
import math

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected, cpu_standing_in_for_cuda
from einops import rearrange
from learner_code import APPLY_ROPE, FREQUENCIES, ROTARY, learner
from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
from torch import nn

from attn_course import reference
from attn_course.attention import attention
from attn_course.checks import check_apply_rope, check_rope_frequencies, check_RotaryMultiHeadAttention
from attn_course.checks.rope import _frequencies, _rope, _rotary_mha
from attn_course.heads import MultiHeadAttention
from attn_course.rope import apply_rope_rotate_half, half_split_permutation


def not_implemented(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# rope_frequencies


def frequencies_float32(d, base=10000.0):
    return 1.0 / (base ** (torch.arange(0, d, 2).float() / d))


def frequencies_exp_log(d, base=10000.0):
    return torch.exp(-math.log(base) * torch.arange(0, d, 2, dtype=torch.float64) / d)


def frequencies_list(d, base=10000.0):
    return torch.tensor([base ** (-2 * i / d) for i in range(d // 2)])


def frequencies_one_per_channel(d, base=10000.0):
    return base ** (-torch.arange(d, dtype=torch.float64) / d)


def frequencies_bfloat16(d, base=10000.0):
    return reference.rope_frequencies(d, base).to(torch.bfloat16)


def frequencies_no_base(d):
    return reference.rope_frequencies(d)


def frequencies_ignore_base(d, base=10000.0):
    return reference.rope_frequencies(d)


# ---------------------------------------------------------------------------------------------
# apply_rope: right answers


def _positions(x, positions):
    return torch.arange(x.shape[-2], device=x.device) if positions is None else positions.to(x.device)


def rope_real(x, positions=None, base=10000.0):
    d = x.shape[-1]
    angles = _positions(x, positions)[:, None] * reference.rope_frequencies(d, base).to(x.device)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def rope_complex_llama(x, positions=None, base=10000.0):
    """LLaMA style: complex64 arithmetic on x.float(), result cast back with type_as."""
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device).float() / d))
    angles = torch.outer(_positions(x, positions).float(), freqs)  # (T, d/2)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)  # (T, d/2) complex64
    x_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # (..., T, d/2)
    return torch.view_as_real(x_complex * freqs_cis).flatten(-2).type_as(x)


def rope_complex_float64(x, positions=None, base=10000.0):
    angles = _positions(x, positions).double()[:, None] * reference.rope_frequencies(x.shape[-1], base).to(
        x.device
    )
    x_complex = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return (
        torch.view_as_real(x_complex * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)
    )


def rope_einops(x, positions=None, base=10000.0):
    angles = rearrange(_positions(x, positions), "t -> t 1") * reference.rope_frequencies(
        x.shape[-1], base
    ).to(x.device)
    cos, sin = angles.cos(), angles.sin()  # (T, d/2), float64
    pairs = rearrange(x.double(), "... (half two) -> two ... half", two=2)  # (2, ..., T, d/2)
    rotated = torch.stack([pairs[0] * cos - pairs[1] * sin, pairs[0] * sin + pairs[1] * cos])
    return rearrange(rotated, "two ... half -> ... (half two)").to(x.dtype)


@functools.lru_cache
def _cos_sin_cache(d, base, max_len=4096):
    positions = torch.arange(max_len, dtype=torch.float32)
    freqs = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    angles = torch.outer(positions, freqs)  # (max_len, d/2)
    return angles.cos(), angles.sin()


def rope_cached(x, positions=None, base=10000.0):
    cos, sin = _cos_sin_cache(x.shape[-1], base)
    index = _positions(x, positions).cpu()
    cos, sin = cos[index].to(x.device, x.dtype), sin[index].to(x.device, x.dtype)  # (T, d/2)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def rope_through_rotate_half(x, positions=None, base=10000.0):
    """Interleaved RoPE computed by the rotate-half code on permuted channels."""
    p = half_split_permutation(x.shape[-1]).to(x.device)
    out = torch.empty_like(x)
    out[..., p] = apply_rope_rotate_half(x[..., p], positions, base)
    return out


def rope_rotary_embedding_torch(x, positions=None, base=10000.0):
    rotary = RotaryEmbedding(dim=x.shape[-1], theta=base).to(x.device)
    freqs = rotary(_positions(x, positions).float())  # (T, d), each θ repeated for its pair
    return apply_rotary_emb(freqs, x)


# ---------------------------------------------------------------------------------------------
# apply_rope: mistakes


def rope_complex_conjugate(x, positions=None, base=10000.0):
    angles = _positions(x, positions).double()[:, None] * reference.rope_frequencies(x.shape[-1], base)
    x_complex = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    rotation = torch.polar(torch.ones_like(angles), angles).conj()
    return torch.view_as_real(x_complex * rotation).flatten(-2).to(x.dtype)


def rope_complex_halves(x, positions=None, base=10000.0):
    """Complex numbers from the two halves: the rotate-half pairing in disguise."""
    angles = _positions(x, positions).double()[:, None] * reference.rope_frequencies(x.shape[-1], base)
    halves = rearrange(x.double(), "... (two half) -> ... half two", two=2).contiguous()
    rotated = torch.view_as_real(torch.view_as_complex(halves) * torch.polar(torch.ones_like(angles), angles))
    return rearrange(rotated, "... half two -> ... (two half)").to(x.dtype)


def rope_real_concatenated(x, positions=None, base=10000.0):
    angles = _positions(x, positions)[:, None] * reference.rope_frequencies(x.shape[-1], base)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rope_float64_output(x, positions=None, base=10000.0):
    angles = _positions(x, positions)[:, None] * reference.rope_frequencies(x.shape[-1], base)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        [x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()], -1
    ).flatten(-2)


def rope_without_positions(x, base=10000.0):
    return reference.apply_rope(x, base=base)


def rope_relative_to_first(x, positions=None, base=10000.0):
    positions = None if positions is None else positions - positions[0]
    return reference.apply_rope(x, positions, base)


def rope_half_channels(x, positions=None, base=10000.0):
    return reference.apply_rope(x, positions, base)[..., 0::2]


def rope_unflattened(x, positions=None, base=10000.0):
    return rearrange(reference.apply_rope(x, positions, base), "... (half two) -> ... half two", two=2)


def rope_in_place(x, positions=None, base=10000.0):
    x.copy_(reference.apply_rope(x, positions, base))
    return x


def rope_detached(x, positions=None, base=10000.0):
    return reference.apply_rope(x.detach(), positions, base)


def rope_positions_from_one(x, positions=None, base=10000.0):
    positions = torch.arange(1, x.shape[-2] + 1) if positions is None else positions
    return reference.apply_rope(x, positions, base)


# ---------------------------------------------------------------------------------------------
# RotaryMultiHeadAttention


class RotaryHandWritten(MultiHeadAttention):
    """Written out with einops and the learner's own (real arithmetic) apply_rope."""

    def __init__(self, d_model, n_heads, bias=True, base=10000.0):
        super().__init__(d_model, n_heads, bias=bias)
        self.base = base

    def forward(self, x, mask=None, is_causal=False, positions=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)
        q, k, v = (rearrange(t, "b t (h d) -> b h t d", h=self.n_heads) for t in (q, k, v))
        q, k = rope_real(q, positions, self.base), rope_real(k, positions, self.base)
        head_mask = None if mask is None else rearrange(mask, "... q k -> ... 1 q k")
        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_k)
        return self.out(rearrange(out, "b h t d -> b t (h d)"))


class RotaryComplex(RotaryHandWritten):
    """The same layer with a complex-number apply_rope."""

    def forward(self, x, mask=None, is_causal=False, positions=None):
        q, k, v = self.project(x)  # each (b, h, t, d_k)
        q, k = rope_complex_llama(q, positions, self.base), rope_complex_llama(k, positions, self.base)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)[0]


class RotaryFromScratch(nn.Module):
    """Not a subclass: its own layers, with the contract's names, and cos/sin caches as buffers."""

    def __init__(self, d_model, n_heads, bias=True, base=10000.0):
        super().__init__()
        self.n_heads, self.base = n_heads, base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        d_k = d_model // n_heads
        angles = torch.outer(torch.arange(256.0), 1.0 / base ** (torch.arange(0, d_k, 2).float() / d_k))
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rotate(self, t, positions):
        index = torch.arange(t.shape[-2]) if positions is None else positions
        cos, sin = self.cos[index], self.sin[index]  # (t, d_k/2)
        even, odd = t[..., 0::2], t[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    def forward(self, x, mask=None, is_causal=False, positions=None):
        q, k, v = rearrange(self.qkv(x), "b t (three h d) -> three b h t d", three=3, h=self.n_heads)
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b, h, t, t)
        allowed = torch.ones_like(scores, dtype=torch.bool)
        if mask is not None:
            allowed = allowed & mask[..., None, :, :]
        if is_causal:
            allowed = allowed & torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return self.out(rearrange(weights @ v, "b h t d -> b t (h d)"))


class RotaryStub(reference.RotaryMultiHeadAttention):
    def forward(self, x, mask=None, is_causal=False, positions=None):
        raise NotImplementedError("Exercise: replace this line with your code.")


class RotaryNoPositionsArgument(RotaryHandWritten):
    def forward(self, x, mask=None, is_causal=False):
        return super().forward(x, mask, is_causal)


class RotaryReturnsWeights(reference.RotaryMultiHeadAttention):
    def forward(self, x, mask=None, is_causal=False, positions=None):
        q, k, v = self.project(x)
        q, k = reference.apply_rope(q, positions, self.base), reference.apply_rope(k, positions, self.base)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal)


class RotaryIgnoresBias(RotaryHandWritten):
    def __init__(self, d_model, n_heads, bias=True, base=10000.0):
        super().__init__(d_model, n_heads, bias=True, base=base)


class RotaryOtherLayerNames(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, base=10000.0):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None, is_causal=False, positions=None):
        return x


class RotaryMaskWithoutHeadAxis(RotaryHandWritten):
    def forward(self, x, mask=None, is_causal=False, positions=None):
        q, k, v = self.project(x)
        q, k = reference.apply_rope(q, positions, self.base), reference.apply_rope(k, positions, self.base)
        return self.out(
            rearrange(attention(q, k, v, mask=mask, is_causal=is_causal)[0], "b h t d -> b t (h d)")
        )


class RotaryDetached(reference.RotaryMultiHeadAttention):
    def forward(self, x, mask=None, is_causal=False, positions=None):
        return super().forward(x.detach(), mask, is_causal, positions)


CORRECT = [
    pytest.param(check_rope_frequencies, reference.rope_frequencies, id="frequencies-reference"),
    pytest.param(check_rope_frequencies, frequencies_float32, id="frequencies-float32"),
    pytest.param(check_rope_frequencies, frequencies_exp_log, id="frequencies-exp-log"),
    pytest.param(check_rope_frequencies, frequencies_list, id="frequencies-list"),
    pytest.param(check_apply_rope, reference.apply_rope, id="rope-reference"),
    pytest.param(check_apply_rope, rope_real, id="rope-real"),
    pytest.param(check_apply_rope, rope_complex_llama, id="rope-complex-llama"),
    pytest.param(check_apply_rope, rope_complex_float64, id="rope-complex-float64"),
    pytest.param(check_apply_rope, rope_einops, id="rope-einops"),
    pytest.param(check_apply_rope, rope_cached, id="rope-cos-sin-cache"),
    pytest.param(check_apply_rope, rope_through_rotate_half, id="rope-rotate-half-on-permuted-channels"),
    pytest.param(check_apply_rope, rope_rotary_embedding_torch, id="rope-rotary-embedding-torch"),
    pytest.param(check_RotaryMultiHeadAttention, reference.RotaryMultiHeadAttention, id="mha-reference"),
    pytest.param(check_RotaryMultiHeadAttention, RotaryHandWritten, id="mha-einops-real"),
    pytest.param(check_RotaryMultiHeadAttention, RotaryComplex, id="mha-complex"),
    pytest.param(check_RotaryMultiHeadAttention, RotaryFromScratch, id="mha-from-scratch-cached"),
]


def rope_complex_in_the_inputs_dtype(x, positions=None, base=10000.0):  # complex numbers of x as it comes
    angles = _positions(x, positions).double()[:, None] * reference.rope_frequencies(x.shape[-1], base)
    x_complex = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())  # (..., T, d/2)
    turned = torch.polar(torch.ones_like(angles), angles).to(x_complex.dtype)  # (T, d/2)
    return torch.view_as_real(x_complex * turned).flatten(-2)


WRONG = [
    pytest.param(
        check_apply_rope,
        rope_complex_in_the_inputs_dtype,
        "torch's complex numbers have no bfloat16",
        id="rope-complex-bfloat16",
    ),
    pytest.param(check_rope_frequencies, not_implemented, "is not implemented yet", id="frequencies-stub"),
    pytest.param(
        check_rope_frequencies,
        frequencies_one_per_channel,
        "One frequency per PAIR",
        id="frequencies-length-d",
    ),
    pytest.param(
        check_rope_frequencies, frequencies_bfloat16, "has dtype bfloat16", id="frequencies-bfloat16"
    ),
    pytest.param(
        check_rope_frequencies,
        frequencies_no_base,
        "def rope_frequencies(d, base=10000.0)",
        id="frequencies-no-base-argument",
    ),
    pytest.param(
        check_rope_frequencies, frequencies_ignore_base, "ignores `base`", id="frequencies-ignore-base"
    ),
    pytest.param(check_apply_rope, not_implemented, "is not implemented yet", id="rope-stub"),
    pytest.param(
        check_apply_rope, rope_complex_halves, "rotate-half (GPT-NeoX) pairing", id="rope-complex-halves"
    ),
    pytest.param(check_apply_rope, rope_real_concatenated, "one after the other", id="rope-real-torch-cat"),
    pytest.param(
        check_apply_rope, rope_complex_conjugate, "rotates the wrong way", id="rope-complex-conjugate"
    ),
    pytest.param(
        check_apply_rope, rope_relative_to_first, "ignores `positions`", id="rope-positions-from-first"
    ),
    pytest.param(
        check_apply_rope, rope_positions_from_one, "counts positions from 1", id="rope-positions-from-one"
    ),
    pytest.param(
        check_apply_rope,
        rope_without_positions,
        "unexpected keyword argument 'positions'",
        id="rope-no-positions-argument",
    ),
    pytest.param(
        check_apply_rope,
        rope_float64_output,
        "has dtype float64, but x is float32",
        id="rope-float64-output",
    ),
    pytest.param(check_apply_rope, rope_half_channels, "half the channels", id="rope-half-channels"),
    pytest.param(check_apply_rope, rope_unflattened, "never flattened back", id="rope-unflattened"),
    pytest.param(
        check_apply_rope, rope_in_place, "changed one of its input tensors in place", id="rope-in-place"
    ),
    pytest.param(check_apply_rope, rope_detached, "No gradient flows", id="rope-detached"),
    pytest.param(check_RotaryMultiHeadAttention, RotaryStub, "is not implemented yet", id="mha-stub"),
    pytest.param(
        check_RotaryMultiHeadAttention,
        RotaryNoPositionsArgument,
        "forward(self, x, mask=None, is_causal=False, positions=None)",
        id="mha-no-positions-argument",
    ),
    pytest.param(
        check_RotaryMultiHeadAttention,
        RotaryReturnsWeights,
        "forward returns the output tensor only",
        id="mha-returns-tuple",
    ),
    pytest.param(
        check_RotaryMultiHeadAttention,
        RotaryIgnoresBias,
        "but it was built with bias=False",
        id="mha-ignores-bias",
    ),
    pytest.param(
        check_RotaryMultiHeadAttention,
        RotaryOtherLayerNames,
        "qkv = nn.Linear(d_model, 3 * d_model)",
        id="mha-other-layer-names",
    ),
    pytest.param(
        check_RotaryMultiHeadAttention,
        RotaryMaskWithoutHeadAxis,
        "mask.unsqueeze(-3)",
        id="mha-mask-without-head-axis",
    ),
    pytest.param(
        check_RotaryMultiHeadAttention,
        RotaryDetached,
        "The gradient of your `RotaryMultiHeadAttention` with respect to x",
        id="mha-detached",
    ),
]


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_check_accepts_correct_implementation(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_check_rejects_mistake_with_its_message(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


def test_every_apply_rope_mistake_differs_from_the_reference_on_some_case():
    """No mistake in the table is unreachable: each gives a wrong answer on at least one case."""
    from attn_course.checks.rope import _rope_cases, _rope_mistakes

    torch.manual_seed(0)
    cases = _rope_cases()
    for mistake in _rope_mistakes():
        differs = False
        for x, positions, base in cases:
            kwargs = {"positions": positions} if positions is not None else {}
            if base is not None:
                kwargs["base"] = base
            wrong = mistake.implementation(x, **kwargs).double()
            right = reference.apply_rope(x, **kwargs).double()
            differs |= not torch.allclose(wrong, right, atol=0.05, rtol=0.05)
        assert differs, mistake.message


# ---------------------------------------------------------------------------------------------
# The GPU case, run here with the CPU standing in for CUDA (no GPU on the test machine)


def test_the_gpu_case_runs_the_rotary_layer_moved_to_the_device(monkeypatch, capsys):
    import attn_course.checks.rope as rope_checks

    calls = cpu_standing_in_for_cuda(monkeypatch, rope_checks)
    assert_accepted(check_RotaryMultiHeadAttention, reference.RotaryMultiHeadAttention, capsys)
    assert calls  # the GPU case ran


# ---------------------------------------------------------------------------------------------
# Notebook 05 no longer gives the arange recipe before rope_frequencies: spellings a learner
# reasons out, edits of the right solution in learner_code.py.

_TWO_I = "i = torch.arange(0, d, 2, dtype=torch.float64)"
_THETA = "return base ** (-i / d)"

REASONED_RIGHT = [
    pytest.param(learner(FREQUENCIES, "rope_frequencies", (_TWO_I, "i = 2 * torch.arange(d // 2)"))),
    pytest.param(learner(FREQUENCIES, "rope_frequencies", (_THETA, "return 1.0 / base ** (i / d)"))),
    pytest.param(
        learner(FREQUENCIES, "rope_frequencies", (_THETA, "return torch.exp(-i / d * math.log(base))"))
    ),
    pytest.param(
        learner(
            FREQUENCIES,
            "rope_frequencies",
            (_THETA, "return torch.tensor([base ** (-j / d) for j in range(0, d, 2)])"),
        ),
        id="frequencies-python-list-float32",
    ),
]

REASONED_WRONG = [
    pytest.param(
        learner(FREQUENCIES, "rope_frequencies", (_THETA, "return base ** (-i // d)")),
        "divides with // (floor division)",
        id="frequencies-floor-division",
    ),
    pytest.param(
        learner(
            FREQUENCIES, "rope_frequencies", (_TWO_I, "i = torch.arange(0, d // 2, 2, dtype=torch.float64)")
        ),
        "only the pairs up to d/4",
        id="frequencies-arange-to-half",
    ),
]


@pytest.mark.parametrize("candidate", REASONED_RIGHT)
def test_reasoned_out_frequencies_pass(candidate, capsys):
    assert_accepted(check_rope_frequencies, candidate, capsys)


@pytest.mark.parametrize(("candidate", "phrase"), REASONED_WRONG)
def test_reasoned_out_frequency_mistakes_are_named(candidate, phrase, capsys):
    assert_rejected(check_rope_frequencies, candidate, phrase, capsys)


# Mistakes as a learner writes them: text edits of right solutions (learner_code.py)

ARANGE = "i = torch.arange(0, d, 2, dtype=torch.float64)"
PAIRS = "x_even, x_odd = x[..., 0::2], x[..., 1::2]"
HALVES = "x_even, x_odd = x[..., : d // 2], x[..., d // 2 :]"
STACK = "return torch.stack([out_even, out_odd], dim=-1).flatten(-2)"
CAT = "return torch.cat([out_even, out_odd], dim=-1)"
ANGLES = "angles = positions.to(torch.float64)[:, None] * theta[None, :]"
COS_SIN = "cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)"
ROPE_Q, ROPE_K = "q = apply_rope(q, positions, self.base)", "k = apply_rope(k, positions, self.base)"
SPLIT = 'q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
MASK_HEADS = "mask.unsqueeze(-3)"
HEAD_AXIS = "its head axis is put in the wrong place"
HALF_PAIRS = "rotates the pairs (x[i], x[i + d/2])"

LEARNER_WRONG = [
    ("rope_frequencies", FREQUENCIES, [(ARANGE, "i = torch.arange(d // 2, dtype=torch.float64)")],
     "uses the exponent -i/d"),
    ("rope_frequencies", FREQUENCIES, [("base ** (-i / d)", "base ** (i / d)")], "grows with i"),
    ("rope_frequencies", FREQUENCIES, [(ARANGE, "i = torch.arange(2, d + 2, 2, dtype=torch.float64)")],
     "starts one pair late"),
    ("rope_frequencies", FREQUENCIES, [(ARANGE, "i = torch.linspace(0, d, d // 2, dtype=torch.float64)")],
     "torch.linspace(0, 1"),
    ("rope_frequencies", FREQUENCIES, [("base ** (-i / d)", "base ** -(i // d)")], "integer division"),
    ("rope_frequencies", FREQUENCIES, [("base ** (-i / d)", "torch.exp(-i / d * math.log10(base))")],
     "it takes log10(base) where exp needs the natural log"),
    ("rope_frequencies", FREQUENCIES, [("base ** (-i / d)", "base ** (-i / (d / 2))")],
     "or the exponent is divided by d/2 instead of d"),
    ("apply_rope", APPLY_ROPE, [(PAIRS, HALVES), (STACK, CAT)],
     "you used the rotate-half (GPT-NeoX) pairing x[i], x[i+d/2]; this exercise uses interleaved pairs"),
    ("apply_rope", APPLY_ROPE, [(STACK, CAT)], "one after the other"),
    ("apply_rope", APPLY_ROPE, [(STACK, "return torch.stack([out_odd, out_even], dim=-1).flatten(-2)")],
     "in swapped order"),
    ("apply_rope", APPLY_ROPE, [(ANGLES, "angles = -positions.to(torch.float64)[:, None] * theta[None, :]")],
     "rotates the wrong way"),
    ("apply_rope", APPLY_ROPE, [(COS_SIN, "sin, cos = angles.cos().to(x.dtype), angles.sin().to(x.dtype)")],
     "swaps cos and sin"),
    ("apply_rope", APPLY_ROPE,
     [("i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)",
       "i = torch.arange(d // 2, dtype=torch.float64, device=x.device)")], "base^(-i/d)"),
    ("apply_rope", APPLY_ROPE, [("theta = base ** (-i / d)", "theta = base ** (i / d)")], "growing frequencies"),
    ("apply_rope", APPLY_ROPE, [("    if positions is None:\n        positions", "    positions")],
     "ignores `positions`"),
    ("apply_rope", APPLY_ROPE, [("theta = base ** (-i / d)", "theta = 10000.0 ** (-i / d)")], "ignores `base`"),
    ("apply_rope", APPLY_ROPE,
     [(ANGLES, "angles = positions.to(x.dtype)[:, None] * theta[None, :].to(x.dtype)")],
     "computes the angles position·θ_i in x's low-precision dtype"),
    ("RotaryMultiHeadAttention", ROTARY, [(f"        {ROPE_Q}\n        {ROPE_K}\n", "")], "without any rotation"),
    ("RotaryMultiHeadAttention", ROTARY, [(ROPE_K, f"{ROPE_K}\n        v = apply_rope(v, positions, self.base)")],
     "also rotates the values"),
    ("RotaryMultiHeadAttention", ROTARY, [(ROPE_K, "v = apply_rope(v, positions, self.base)")],
     "rotates q and v but not k"),
    ("RotaryMultiHeadAttention", ROTARY, [(f"        {ROPE_K}\n", "")], "rotates only q"),
    ("RotaryMultiHeadAttention", ROTARY, [(f"        {ROPE_Q}\n", "")], "rotates only k"),
    ("RotaryMultiHeadAttention", ROTARY,
     [(f"{SPLIT}\n        {ROPE_Q}\n        {ROPE_K}", f"{ROPE_Q}\n        {ROPE_K}\n        {SPLIT}")],
     "before the split into heads"),
    ("RotaryMultiHeadAttention", ROTARY,
     [(SPLIT, SPLIT.replace("b h t d", "b t h d")),
      (ROPE_K, f"{ROPE_K}\n        q, k, v = (z.transpose(1, 2) for z in (q, k, v))")],
     "Rotating (b, t, h, d_k) tensors has the same effect"),
    ("RotaryMultiHeadAttention", ROTARY,
     [(ROPE_Q, "q = apply_rope(q, None, self.base)"), (ROPE_K, "k = apply_rope(k, None, self.base)")],
     "ignores `positions`"),
    ("RotaryMultiHeadAttention", ROTARY,
     [(ROPE_Q, "q = apply_rope(q, positions)"), (ROPE_K, "k = apply_rope(k, positions)")], "ignores `base`"),
    # the pairing is apply_rope's, which the layer calls: that exercise is named, and the layer keeps its point
    ("RotaryMultiHeadAttention", ROTARY, [(PAIRS, HALVES), (STACK, CAT)], "your `apply_rope` (earlier in this notebook) is wrong"),
    # No table entry matches these: the probe reads the layer's merged heads (issue 27, family 1).
    ("RotaryMultiHeadAttention", ROTARY, [(ROPE_K, "k = apply_rope(k, None, self.base)")],
     "rotates k by the positions 0 … t-1 instead of the `positions` given"),
    ("RotaryMultiHeadAttention", ROTARY, [("/ math.sqrt(q.shape[-1])", "/ q.shape[-1]")], "divides the scores by d_k itself"),
    ("RotaryMultiHeadAttention", ROTARY, [("allowed = allowed.tril()", "allowed = allowed.tril(1)")],
     "puts weight on keys after their query"),
    ("RotaryMultiHeadAttention", ROTARY, [("torch.softmax(scores, dim=-1) @ v", "torch.softmax(scores, dim=-1) @ k")],
     "mixes the keys k instead of the values v"),
    # Cases that cover the contract: a (t, t) mask, which broadcasts to (b, t, t), gets its head axis wrong.
    ("RotaryMultiHeadAttention", ROTARY, [(MASK_HEADS, "mask.unsqueeze(1)")], HEAD_AXIS),
    ("RotaryMultiHeadAttention", ROTARY, [(MASK_HEADS, "mask[:, None]")], HEAD_AXIS),
    ("RotaryMultiHeadAttention", ROTARY, [(MASK_HEADS, 'rearrange(mask, "b i j -> b 1 i j")')], HEAD_AXIS),
    ("RotaryMultiHeadAttention", ROTARY, [(MASK_HEADS, "mask.view(b, 1, t, t)")], HEAD_AXIS),
    # The half-split pairs (x[i], x[i + d/2]) rotated, whatever order they are put back in.
    ("apply_rope", APPLY_ROPE, [(PAIRS, HALVES)], HALF_PAIRS),
    ("apply_rope", APPLY_ROPE, [(PAIRS, "x_even, x_odd = x.chunk(2, dim=-1)"),
                                (STACK, "return torch.stack([out_odd, out_even], dim=-1).flatten(-2)")], HALF_PAIRS),
    ("apply_rope", APPLY_ROPE, [(PAIRS, HALVES), (STACK, "return torch.cat([out_odd, out_even], dim=-1)")], HALF_PAIRS),
]  # fmt: skip
"""(exercise, right learner solution, text edits, phrase the message must contain)."""

CHECKS = {
    "rope_frequencies": check_rope_frequencies,
    "apply_rope": check_apply_rope,
    "RotaryMultiHeadAttention": check_RotaryMultiHeadAttention,
}


LEARNER_RIGHT = [
    ("RotaryMultiHeadAttention", ROTARY, [(MASK_HEADS, "mask[..., None, :, :]")]),
    ("RotaryMultiHeadAttention", ROTARY, [(MASK_HEADS, 'rearrange(mask, "... i j -> ... 1 i j")')]),
    ("apply_rope", APPLY_ROPE, [(PAIRS, "x_even, x_odd = x.unflatten(-1, (-1, 2)).unbind(-1)")]),
]  # fmt: skip
"""(exercise, right learner solution, text edits that keep it right)."""


@pytest.mark.parametrize(("exercise", "source", "edits"), LEARNER_RIGHT)
def test_learner_code_spelled_otherwise_passes(exercise, source, edits, capsys):
    assert_accepted(CHECKS[exercise], learner(source, exercise, *edits), capsys)


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), LEARNER_WRONG)
def test_learner_mistakes_are_named(exercise, source, edits, phrase, capsys):
    assert_rejected(CHECKS[exercise], learner(source, exercise, *edits), phrase, capsys)


def test_the_rope_simulators_with_their_default_knobs_are_the_reference():
    torch.manual_seed(0)
    for d in (2, 8, 12):
        torch.testing.assert_close(_frequencies(d, 500.0), reference.rope_frequencies(d, 500.0))
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    for positions in (None, torch.tensor([3, 4, 5, 6, 7]), torch.tensor([9, 2, 0, 7, 1])):
        torch.testing.assert_close(_rope(x, positions, 500.0), reference.apply_rope(x, positions, 500.0))
    layer = reference.RotaryMultiHeadAttention(12, 3, base=500.0)
    x = torch.randn(2, 5, 12)
    mask = torch.ones(2, 5, 5, dtype=torch.bool).tril()
    for kwargs in ({}, {"is_causal": True}, {"mask": mask, "positions": torch.arange(4, 9)}):
        torch.testing.assert_close(
            _rotary_mha(
                layer, x, kwargs.get("mask"), kwargs.get("is_causal", False), kwargs.get("positions")
            ),
            layer(x, **kwargs),
        )


# ---------------------------------------------------------------------------------------------
# The exercises' contracts: wrong programs a learner writes that pass every hand-picked case (the
# checks passed each of them before the contracts) and fail a generated one, with what it observes.

CONTRACT_WRONG = [
    pytest.param(
        check_apply_rope,
        (APPLY_ROPE, "apply_rope", ("dtype=torch.float64, device=x.device)", "dtype=torch.float64)")),
        "Your apply_rope raised RuntimeError: Tensor on device cpu is not on the expected device meta!",
        id="rope-frequencies-on-cpu",
    ),
    pytest.param(
        check_RotaryMultiHeadAttention,
        (ROTARY, "RotaryMultiHeadAttention", ("dtype=torch.bool, device=x.device)", "dtype=torch.bool)")),
        "the first tensor your code makes off that device comes from `torch.ones(…)` at line 36",
        id="rotary-mask-on-cpu",
    ),
]


@pytest.mark.parametrize(("check", "program", "phrase"), CONTRACT_WRONG)
def test_contract_cases_catch_what_the_hand_picked_ones_pass(check, program, phrase, capsys):
    source, name, *edits = program
    assert_rejected(check, learner(source, name, *edits), phrase, capsys)


# ---------------------------------------------------------------------------------------------
# x of shape (..., T, d): the hand-picked cases and the contract's hold a (2, 3, T, d) x transposed
# as split_heads makes it, where a `.view` that merges the batch axes breaks; reshape does not.

SHAPE_LINE = "    t, d = x.shape[-2], x.shape[-1]\n"
FLAT_ROPE = [
    ("    *batch, t, d = x.shape\n    x = x.view(-1, t, d)\n", "flatten(-2).view(*batch, t, d)"),
    ("    b, h, t, d = x.shape\n    x = x.view(b * h, t, d)\n", "flatten(-2).view(b, h, t, d)"),
]

BATCH_AXES_WRONG = [
    ([(SHAPE_LINE, FLAT_ROPE[0][0]), ("flatten(-2)", FLAT_ROPE[0][1])],
     "view needs a contiguous tensor, and a transposed or permuted one is not: use .reshape(...)"),
    ([(SHAPE_LINE, FLAT_ROPE[0][0]), ("flatten(-2)", FLAT_ROPE[0][1])],
     "Your code passes this check without the line `x = x.view(-1, t, d)`."),  # no "line None"
    ([(SHAPE_LINE, FLAT_ROPE[1][0]), ("flatten(-2)", FLAT_ROPE[1][1])],
     "not enough values to unpack (expected 4, got 2)"),
]  # fmt: skip

BATCH_AXES_RIGHT = [
    [(SHAPE_LINE, FLAT_ROPE[0][0].replace(".view(", ".reshape(")), ("flatten(-2)", FLAT_ROPE[0][1])],
    [(SHAPE_LINE, FLAT_ROPE[0][0].replace("x.view(-1, t, d)", "x.reshape(-1, t, d)")),
     ("flatten(-2)", FLAT_ROPE[0][1].replace(".view(", ".reshape("))],
]  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), BATCH_AXES_WRONG)
def test_flattening_batch_axes_with_view_is_caught(edits, phrase, capsys):
    assert_rejected(check_apply_rope, learner(APPLY_ROPE, "apply_rope", *edits), phrase, capsys)


@pytest.mark.parametrize("edits", BATCH_AXES_RIGHT)
def test_flattening_batch_axes_by_reshape_passes(edits, capsys):
    assert_accepted(check_apply_rope, learner(APPLY_ROPE, "apply_rope", *edits), capsys)


def test_each_rotary_variant_is_a_mistake():
    from attn_course.checks.rope import ROTARY_VARIANTS

    torch.manual_seed(0)
    layer = reference.RotaryMultiHeadAttention(12, 3, base=500.0).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.rand(2, 5, 5) > 0.3
    mask[..., 0] = True
    positions = torch.tensor([3, 9, 4, 12, 20])
    right = layer(x, mask=mask, is_causal=True, positions=positions)
    for message, variant in ROTARY_VARIANTS:
        wrong = _rotary_mha(layer, x, mask, True, positions, variant)
        assert not torch.allclose(wrong, right), message
