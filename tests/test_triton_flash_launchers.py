"""The course's Triton kernels, run by the interpreter on CPU tensors (conftest sets TRITON_INTERPRET=1)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from attn_course.attention import attention  # noqa: E402
from attn_course.masking import causal_mask  # noqa: E402
from attn_course.triton_flash.launchers import (
    KernelConfig,
    triton_add,
    triton_flash_attention,
    triton_flash_attention_forward,
    triton_scores,
    triton_softmax,
)
from attn_course.triton_flash.runtime import is_interpreted, setup_triton, triton_status  # noqa: E402


@pytest.mark.parametrize("shape", [(1,), (7,), (1023,), (1025,), (3, 5, 7)])
@pytest.mark.parametrize("block", [16, 1024])
def test_triton_add_on_ragged_sizes_and_shapes(shape, block):
    x, y = torch.randn(shape), torch.randn(shape)
    out = triton_add(x, y, block=block)
    assert out.shape == x.shape
    torch.testing.assert_close(out, x + y, atol=0, rtol=0)


@pytest.mark.parametrize("block_size", [1, 2, 16, 128])
@pytest.mark.parametrize("n", [1, 37, 130])
def test_triton_softmax_on_ragged_rows_and_block_sizes(n, block_size):
    x = torch.randn(3, n)
    torch.testing.assert_close(triton_softmax(x, block_size), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


def test_triton_softmax_on_huge_scores_and_minus_infinity():
    x = 1000 * torch.randn(4, 50)  # (4, 50): exp overflows float32 without the running max
    x[0, :17] = -math.inf  # a row whose first blocks are all masked
    x[1, ::3] = -math.inf
    out = triton_softmax(x, 16)  # (4, 50)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)


def test_triton_softmax_on_a_non_contiguous_input_and_batched_rows():
    x = torch.randn(40, 6)
    out = triton_softmax(x.T, 8)  # (6, 40), a transposed view
    torch.testing.assert_close(out, torch.softmax(x.T, dim=-1), atol=1e-6, rtol=1e-5)
    y = torch.randn(2, 3, 20)[:, :, ::2]  # (2, 3, 10): every other column
    torch.testing.assert_close(triton_softmax(y, 4), torch.softmax(y, dim=-1), atol=1e-6, rtol=1e-5)


def test_triton_softmax_refuses_a_block_size_that_is_not_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        triton_softmax(torch.randn(2, 8), 12)


@pytest.mark.parametrize(
    "b, h, t_q, t_k, d, block_m, block_n",
    [(1, 1, 5, 7, 16, 16, 16), (2, 3, 37, 45, 32, 16, 32), (1, 2, 64, 64, 64, 32, 32)],
)
def test_triton_scores_tile_by_tile_match_the_scaled_product(b, h, t_q, t_k, d, block_m, block_n):
    q, k = torch.randn(b, h, t_q, d), torch.randn(b, t_k, h, d).transpose(1, 2)  # k a view
    scores = triton_scores(q, k, block_m, block_n)  # (B, H, T_q, T_k)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, q @ k.transpose(-1, -2) / math.sqrt(d), atol=1e-5, rtol=1e-5)


def test_triton_scores_refuses_a_head_dim_tl_dot_cannot_take_unpadded():
    with pytest.raises(ValueError, match="power of two, at least 16"):
        triton_scores(torch.randn(1, 1, 4, 24), torch.randn(1, 1, 4, 24))


def _reference(q, k, v, is_causal):
    """(out, lse) of SDPA with the bottom-right causal mask, and torch.logsumexp of the scaled scores."""
    t_q, t_k, d = q.shape[2], k.shape[2], q.shape[3]
    mask = causal_mask(t_q, t_k) if is_causal else None  # (T_q, T_k) or None
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, H, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), scores.logsumexp(dim=-1)


CASES = [  # (B, H, T_q, T_k, d, is_causal, config)
    (2, 3, 37, 37, 32, False, KernelConfig(16, 16)),
    (2, 3, 37, 37, 32, True, KernelConfig(16, 16)),
    (1, 2, 50, 50, 16, True, KernelConfig(16, 64)),
    (1, 2, 50, 50, 48, True, KernelConfig(64, 16)),  # head dim padded to 64
    (1, 2, 64, 64, 64, True, KernelConfig(32, 32)),  # full blocks: the unmasked path
    (1, 2, 20, 70, 32, True, KernelConfig(16, 16)),  # T_q < T_k: queries at the end
    (1, 2, 45, 45, 64, False, KernelConfig(32, 32)),
    (1, 1, 33, 90, 16, False, KernelConfig(32, 32)),
    (1, 2, 70, 20, 32, False, KernelConfig(16, 16)),  # T_q > T_k
]


@pytest.mark.parametrize(("b", "h", "t_q", "t_k", "d", "is_causal", "config"), CASES)
def test_flash_attention_forward_matches_sdpa_and_logsumexp(b, h, t_q, t_k, d, is_causal, config):
    torch.manual_seed(t_q + t_k + d)
    q, k, v = torch.randn(b, h, t_q, d), torch.randn(b, h, t_k, d), torch.randn(b, h, t_k, d)
    out, lse = triton_flash_attention_forward(q, k, v, is_causal=is_causal, config=config)
    ref_out, ref_lse = _reference(q, k, v, is_causal)
    assert out.shape == (b, h, t_q, d) and lse.shape == (b, h, t_q) and lse.dtype == torch.float32
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(torch.__version__ < "2.5", reason="SDPA gives 0 for rows without keys from torch 2.5 on")
@pytest.mark.parametrize(("t_q", "t_k", "blocks"), [(7, 3, (16, 16)), (40, 25, (16, 16)), (70, 20, (32, 16))])
def test_queries_that_see_no_key_give_sdpas_zeros_and_gradients(t_q, t_k, blocks):
    # T_q > T_k, causal, bottom-right aligned: the first T_q - T_k queries see no key at all.
    from attn_course.triton_flash.launchers import triton_flash_attention_backward

    q, k, v = torch.randn(1, 2, t_q, 16), torch.randn(1, 2, t_k, 16), torch.randn(1, 2, t_k, 16)
    grad_out = torch.randn(1, 2, t_q, 16)
    empty = t_q - t_k
    out, lse = triton_flash_attention_forward(q, k, v, is_causal=True, config=KernelConfig(*blocks))
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    expected = F.scaled_dot_product_attention(*leaves, attn_mask=causal_mask(t_q, t_k))  # (1, 2, T_q, 16)
    assert torch.equal(out[:, :, :empty], torch.zeros_like(out[:, :, :empty]))
    assert lse[:, :, :empty].eq(-math.inf).all() and lse[:, :, empty:].isfinite().all()
    torch.testing.assert_close(out, expected.detach(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, attention(q, k, v, is_causal=True)[0], atol=1e-5, rtol=1e-4)
    ref_lse = _reference(q, k, v, True)[1]
    torch.testing.assert_close(lse, ref_lse, atol=1e-5, rtol=1e-4)  # torch.logsumexp is -inf there too
    grads = triton_flash_attention_backward(q, k, v, out, lse, grad_out, True, config=KernelConfig(*blocks))
    for mine, ref in zip(grads, torch.autograd.grad(expected, leaves, grad_out), strict=True):
        assert mine.isfinite().all()
        torch.testing.assert_close(mine, ref, atol=2e-5, rtol=1e-4)
    assert torch.equal(grads[0][:, :, :empty], torch.zeros_like(grads[0][:, :, :empty]))  # dq of those rows


def test_flash_attention_on_non_contiguous_inputs():
    x = torch.randn(3, 2, 29, 4, 32)  # (3, B, T, H, d): q, k, v in the layout of a projection
    q, k, v = (t.transpose(1, 2) for t in x.unbind(0))  # each (B, H, T, d), not contiguous
    assert not q.is_contiguous()
    out = triton_flash_attention(q, k, v, is_causal=True)  # (B, H, T, d)
    torch.testing.assert_close(out, _reference(q, k, v, True)[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "message"),
    [
        ((1, 2, 8, 16), (1, 2, 8, 32), "shapes do not fit"),
        ((1, 2, 8, 16), (1, 3, 8, 16), "shapes do not fit"),
        ((2, 8, 16), (2, 8, 16), "must be 4-D"),
    ],
)
def test_mismatched_shapes_raise_a_clear_value_error(q_shape, k_shape, message):
    q, k = torch.randn(q_shape), torch.randn(k_shape)
    with pytest.raises(ValueError, match=message):
        triton_flash_attention(q, k, k)


def test_the_kernels_run_through_the_interpreter_in_the_test_session():
    from attn_course.triton_flash import kernels

    status = triton_status()
    assert status.installed and status.interpreted and status.device == "cpu"
    assert "interpreted on the CPU (TRITON_INTERPRET=1)" in str(status)
    assert all(
        is_interpreted(k)
        for k in (kernels.add_kernel, kernels.softmax_kernel, kernels.flash_attention_kernel)
    )
    assert setup_triton() == status  # the explicit TRITON_INTERPRET=1 of conftest stays as it is


def _status_in_a_fresh_process(**env: str) -> str:
    """str(setup_triton()) and TRITON_INTERPRET afterwards, from a new interpreter with `env` set."""
    clean = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | env
    code = (
        "import os; from attn_course.triton_flash.runtime import setup_triton; status = setup_triton(); "
        "print(status.interpreted, os.environ.get('TRITON_INTERPRET')); print(status)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True
    )
    return result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU setup_triton turns the interpreter on")
def test_setup_triton_turns_the_interpreter_on_without_a_gpu():
    first, description = _status_in_a_fresh_process().splitlines()
    assert first == "True 1"
    assert "because there is no CUDA GPU here" in description


def test_setup_triton_leaves_an_explicit_triton_interpret_alone():
    assert _status_in_a_fresh_process(TRITON_INTERPRET="0").splitlines()[0] == "False 0"


def test_autotuning_lists_its_configs_and_refuses_the_interpreter():
    from attn_course.triton_flash import autotune

    configs = autotune.AUTOTUNE_CONFIGS
    assert len(configs) == 16
    blocks = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in configs}
    assert blocks == {(64, 32), (64, 64), (128, 32), (128, 64)}
    assert {(c.num_warps, c.num_stages) for c in configs} == {(4, 2), (4, 3), (8, 2), (8, 3)}
    assert autotune.describe_config(configs[0]) == "BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2"
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(RuntimeError, match="autotuning times each config on the GPU"):
        autotune.autotuned_flash_attention(q, q, q)


def test_the_autotuned_kernel_is_the_package_kernel_with_free_block_sizes():
    from attn_course.triton_flash import autotune
    from attn_course.triton_flash.kernels import triton

    q, k, v = torch.randn(1, 2, 40, 16), torch.randn(1, 2, 50, 16), torch.randn(1, 2, 50, 16)
    out, lse = torch.empty_like(q), torch.empty(1, 2, 40)
    kernel = autotune.autotuned_kernel().fn  # the jitted kernel under the autotuner
    kernel[(triton.cdiv(40, 16), 2)](
        q, k, v, out, lse, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        2, 40, 50, 0.25, HEAD_DIM=16, BLOCK_D=16, BLOCK_M=16, BLOCK_N=16, IS_CAUSAL=True,
    )  # fmt: skip
    expected, expected_lse = _reference(q, k, v, True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lse, expected_lse, atol=1e-5, rtol=1e-4)


def test_an_old_triton_with_a_new_numpy_is_explained_before_any_kernel_runs(monkeypatch):
    from attn_course.checks import CheckFailed, check_triton_add
    from attn_course.triton_flash import runtime

    monkeypatch.setattr(runtime, "_triton_version", lambda: "3.5.1")
    monkeypatch.setattr("numpy.__version__", "2.4.0")
    status = runtime.triton_status()
    assert status.problem and "pip install 'numpy<2.4'" in status.problem and "⚠️" in str(status)
    with pytest.raises(RuntimeError, match="Triton 3.7 or newer"):
        triton_softmax(torch.randn(2, 8), 4)
    with pytest.raises(CheckFailed, match="numpy 2.4 no longer turns them into integers|numpy<2.4"):
        check_triton_add(lambda x, y: x + y)
    monkeypatch.setattr("numpy.__version__", "2.3.5")
    assert runtime.triton_status().problem is None


# ---------------------------------------------------------------------------------------------
# The backward (notebook 09)


@pytest.mark.parametrize(
    ("b", "h", "t_q", "t_k", "d", "is_causal", "blocks"),
    [
        (1, 2, 64, 64, 32, True, (32, 32)),
        (2, 1, 37, 70, 48, True, (16, 32)),
        (1, 2, 70, 37, 16, False, (32, 16)),
        (1, 1, 50, 50, 64, True, (64, 64)),
    ],
)
def test_the_triton_backward_gives_autograds_gradients(b, h, t_q, t_k, d, is_causal, blocks):
    from attn_course.triton_flash.launchers import (
        KernelConfig,
        triton_flash_attention_backward,
        triton_flash_attention_forward,
    )

    q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for t in (t_q, t_k, t_k))  # (B, H, T, d)
    grad_out = torch.randn(b, h, t_q, d)
    expected = torch.autograd.grad(attention(q, k, v, is_causal=is_causal)[0], (q, k, v), grad_out)
    out, lse = triton_flash_attention_forward(q.detach(), k.detach(), v.detach(), is_causal=is_causal)
    config = KernelConfig(*blocks)
    grads = triton_flash_attention_backward(q.detach(), k.detach(), v.detach(), out, lse, grad_out, is_causal,
                                            config=config)  # fmt: skip
    for mine, ref in zip(grads, expected, strict=True):
        torch.testing.assert_close(mine, ref, atol=2e-5, rtol=1e-4)


def test_the_triton_backward_takes_views_and_refuses_misshapen_arguments():
    from attn_course.triton_flash.launchers import (
        triton_flash_attention_backward,
        triton_flash_attention_forward,
    )

    q, k, v, grad_out = (torch.randn(2, 40, 3, 16).transpose(1, 2) for _ in range(4))  # (B, H, T, d) views
    out, lse = triton_flash_attention_forward(q, k, v, is_causal=True)
    grads = triton_flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=True)
    leaves = [x.contiguous().requires_grad_(True) for x in (q, k, v)]
    expected = torch.autograd.grad(attention(*leaves, is_causal=True)[0], leaves, grad_out)
    for mine, ref in zip(grads, expected, strict=True):
        torch.testing.assert_close(mine, ref, atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="lse like"):
        triton_flash_attention_backward(q, k, v, out, lse[..., :-1], grad_out)
