"""The checks' GPU cases, each with a right and a learner-like wrong answer, in the GPU tier.

Every check that runs an extra case on CUDA (`cuda_device()`) must accept the reference there and
reject a learner's version that creates a tensor on the CPU. Those wrong versions are right on
the CPU (tested here in the normal suite), so on the GPU only the device can fail them. The
Triton checks run the learner-like kernels of tests/triton_variants.py compiled, in float16, and
judge them from the numbers alone. The tests marked `gpu` run only in `make test-gpu`.
"""

from __future__ import annotations

import math

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected
from test_checks_backward import flash_backward_query_blocks_outside
from test_checks_flash import einsum_preallocated

from attn_course import checks, reference
from attn_course.checks import CheckFailed
from attn_course.heads import merge_heads
from attn_course.rope import apply_rope


def causal_mask_on_the_cpu(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)  # device=device forgotten


def padding_mask_on_the_cpu(lengths, t):
    return torch.arange(t)[None, :] < lengths[:, None]  # (B, t): arange on the CPU


def attention_with_a_cpu_causal_mask(q, k, v, mask=None, is_causal=False):
    if is_causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        causal = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)  # on the CPU
        mask = causal if mask is None else mask & causal
    return reference.attention(q, k, v, mask=mask)


def scaled_attention_preallocated(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    weights = torch.zeros(scores.shape, dtype=scores.dtype)  # on the CPU
    weights[...] = torch.softmax(scores, dim=-1)
    return weights @ v, weights


class MultiHeadAttentionCpuMask(reference.MultiHeadAttention):
    def forward(self, x, mask=None, is_causal=False, context=None):
        if is_causal:
            causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()  # (t, t) on the CPU
            mask = causal if mask is None else mask & causal
        return super().forward(x, mask=mask, context=context)


def apply_rope_cpu_frequencies(x, positions=None, base=10000.0):
    t, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(t, device=x.device)
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,) on the CPU
    angles = positions.to(torch.float64)[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2)
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)  # (..., T, d)


class RotaryCpuPositions(reference.RotaryMultiHeadAttention):
    def forward(self, x, mask=None, is_causal=False, positions=None):
        if positions is None:
            positions = torch.arange(x.shape[1])  # on the CPU
        return super().forward(x, mask=mask, is_causal=is_causal, positions=positions)


def cached_attention_cpu_positions(attn, x, cache, layer):
    t_past, t_new = cache.length(layer), x.shape[-2]
    positions = torch.arange(t_past, t_past + t_new)  # on the CPU
    q, k, v = attn.project(x)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)
    keys, values = cache.append(layer, k, v)
    out, _ = reference.attention(q, keys, values, is_causal=True)
    return attn.out(merge_heads(out))


ON_THE_CPU = "is on cpu but the inputs are on cuda"
DEVICE_CASES = {  # exercise: (learner-like version that forgets the device, what the GPU case says)
    "scaled_dot_product_attention": (scaled_attention_preallocated, "RuntimeError: Expected all tensors"),
    "causal_mask": (causal_mask_on_the_cpu, ON_THE_CPU),
    "padding_mask": (padding_mask_on_the_cpu, "Create the mask on the inputs' device"),
    "attention": (attention_with_a_cpu_causal_mask, "Create the mask on the inputs' device"),
    "MultiHeadAttention": (MultiHeadAttentionCpuMask, "Create new tensors (a mask, positions) on x.device"),
    "apply_rope": (apply_rope_cpu_frequencies, "Create new tensors on x.device"),
    "RotaryMultiHeadAttention": (RotaryCpuPositions, "Create new tensors (default positions, masks)"),
    "flash_attention": (einsum_preallocated, "Create new tensors (running max, sum, accumulator, masks)"),
    "cached_attention": (cached_attention_cpu_positions, "Create new tensors (positions) on x.device"),
    "flash_attention_backward": (flash_backward_query_blocks_outside, "Create new tensors (dq, dk, dv"),
}
CAUGHT_ON_THE_CPU_TOO = {  # by the meta device: the contracts' run with the inputs on it (issue 44)
    "causal_mask": "pass device=device",
    **{
        name: "Make every new tensor on the inputs' device"
        for name in (
            "scaled_dot_product_attention",
            "padding_mask",
            "attention",
            "MultiHeadAttention",
            "apply_rope",
        )
    },
}


def _check(name: str):
    return getattr(checks, f"check_{name}")


@pytest.mark.parametrize("name", DEVICE_CASES)
def test_each_wrong_version_is_right_but_for_the_device(name, capsys):
    wrong, _ = DEVICE_CASES[name]
    if name in CAUGHT_ON_THE_CPU_TOO:
        assert_rejected(_check(name), wrong, CAUGHT_ON_THE_CPU_TOO[name], capsys)
    else:
        assert_accepted(_check(name), wrong, capsys)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DEVICE_CASES)
def test_the_gpu_case_accepts_the_reference_and_rejects_a_cpu_tensor(name, capsys):
    wrong, phrase = DEVICE_CASES[name]
    assert_accepted(_check(name), getattr(reference, name), capsys)
    with pytest.raises(CheckFailed) as failure:
        _check(name)(wrong)
    assert phrase in str(failure.value)
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------------------------------------
# The Triton checks, compiled


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("triton_variants_gpu")


def _triton_cases() -> dict[str, tuple[str, str, list[tuple[str, str]], str]]:
    """name: (template, function, replacements, phrase); an empty phrase means: accepted."""
    from backward_variants import TRITON_BACKWARD
    from test_checks_triton import UNTRACED_REJECTED
    from triton_variants import ADD, FLASH, SCORES, SOFTMAX

    cases = {
        "add, right": (ADD, "triton_add", [], ""),
        "add, subtracts": (ADD, "triton_add", [("x + y, mask=mask)", "x - y, mask=mask)")], "computes x - y"),
        "softmax, right": (SOFTMAX, "triton_softmax", [], ""),
        "softmax, sum not rescaled": (SOFTMAX, "triton_softmax",
                                      [("total = total * scale + ", "total = total + ")],
                                      "does not rescale the running sum"),
        "scores, right": (SCORES, "triton_scores", [], ""),
        "scores, no scale": (SCORES, "triton_scores", [("T_q, T_k, 1 / math.sqrt(D),", "T_q, T_k, 1.0,")],
                             "does not scale the scores"),
        "flash, stub where the loop goes": (FLASH, "triton_flash_attention",
                                            [("    hi = T_k\n", '    raise NotImplementedError("Do")\n')],
                                            "not implemented yet"),
        "flash, right": (FLASH, "triton_flash_attention", [], ""),
        "flash, blocks of 64×16": (FLASH, "triton_flash_attention",
                                   [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 64, 16")], ""),
    }  # fmt: skip
    for name, (pairs, phrase) in UNTRACED_REJECTED.items():
        cases[f"flash, {name}"] = (FLASH, "triton_flash_attention", pairs, phrase)
    backward = "triton_flash_attention_backward"
    cases["backward, right"] = (TRITON_BACKWARD, backward, [], "")
    cases["backward, no scale in dQ"] = (TRITON_BACKWARD, backward, [("(dq * sm_scale).to(", "dq.to(")],
                                         "forgets the 1/√d scale in dQ")  # fmt: skip
    dkdv, dq = "flash_attention_backward_dkdv_kernel", "flash_attention_backward_dq_kernel"
    cases["dkdv kernel, right"] = (TRITON_BACKWARD, dkdv, [], "")
    cases["dkdv kernel, no D term"] = (TRITON_BACKWARD, dkdv, [
        ("ds_t = tl.where(allowed, p_t * (dp_t - delta[None, :]), 0.0)",
         "ds_t = tl.where(allowed, p_t * dp_t, 0.0)"),
    ], "leaves out the D term")  # fmt: skip
    cases["dq kernel, right"] = (TRITON_BACKWARD, dq, [], "")
    cases["dq kernel, no scale"] = (TRITON_BACKWARD, dq, [("(dq * sm_scale).to(", "dq.to(")],
                                    "forgets the 1/√d scale in dQ")  # fmt: skip
    return cases


TRITON_CASES = [
    "add, right", "add, subtracts", "softmax, right", "softmax, sum not rescaled", "scores, right",
    "scores, no scale", "flash, stub where the loop goes", "flash, right",
    "flash, blocks of 64×16", "flash, accumulator not rescaled, blocks of 64×16 found by search",
    "flash, causal bound one block short", "flash, ragged value loads unmasked read the NaN after the inputs",
    "flash, no scale", "backward, right", "backward, no scale in dQ", "dkdv kernel, right",
    "dkdv kernel, no D term", "dq kernel, right", "dq kernel, no scale",
]  # fmt: skip


def test_the_triton_cases_name_existing_variants():
    pytest.importorskip("triton")
    assert set(TRITON_CASES) <= set(_triton_cases())


@pytest.mark.gpu
@pytest.mark.parametrize("name", TRITON_CASES)
def test_the_triton_checks_judge_compiled_kernels(name, folder, capsys):
    from triton_variants import variant

    from attn_course.checks._triton_harness import kernels_used
    from attn_course.triton_flash.runtime import is_interpreted

    template, function, pairs, phrase = _triton_cases()[name]
    candidate = variant(template, folder, function, *pairs)
    kernels = kernels_used(candidate)
    assert kernels and not any(is_interpreted(k) for k in kernels)
    check = _check(function)
    if phrase:
        assert_rejected(check, candidate, phrase, capsys)
    else:
        assert_accepted(check, candidate, capsys)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        "triton_add",
        "triton_softmax",
        "triton_scores",
        "triton_flash_attention",
        "flash_attention_backward_dkdv_kernel",
        "flash_attention_backward_dq_kernel",
        "triton_flash_attention_backward",
    ],  # fmt: skip
)
def test_the_triton_checks_accept_the_package_kernels_compiled(name, capsys):
    assert_accepted(_check(name), getattr(reference, name), capsys)
