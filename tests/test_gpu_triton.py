"""The GPU tier: the course's Triton kernels compiled for the GPU, against SDPA in float16 and bfloat16.

Marked `gpu`: skipped unless `make test-gpu` (ATTN_COURSE_GPU_TIER=1) runs them on a CUDA GPU.
Notebook 09's backward (`launchers.triton_flash_attention_backward`) is tested here as soon as
the package has it.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_course.masking import causal_mask
from tools.gpu_tier import bf16_problem

pytestmark = pytest.mark.gpu

DTYPES = [torch.float16, torch.bfloat16]
TOLERANCE = {torch.float16: dict(atol=1e-2, rtol=1e-2), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def _on_gpu(dtype: torch.dtype) -> torch.device:
    """The GPU, after skipping with the reason where it has no `dtype` tensor-core products."""
    problem = bf16_problem(torch.cuda.get_device_capability()) if dtype == torch.bfloat16 else None
    if problem is not None:
        pytest.skip(problem)
    return torch.device("cuda")


def _reference(q, k, v, is_causal):
    """(out, lse) in float32: SDPA with the bottom-right causal mask, torch.logsumexp of the scores."""
    q, k, v = (x.float() for x in (q, k, v))
    t_q, t_k, d = q.shape[2], k.shape[2], q.shape[3]
    mask = causal_mask(t_q, t_k, device=q.device) if is_causal else None  # (T_q, T_k) or None
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, H, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), scores.logsumexp(dim=-1)


def test_kernels_are_compiled_for_the_gpu_in_the_tier():
    from attn_course.triton_flash import kernels
    from attn_course.triton_flash.runtime import is_interpreted, triton_status

    status = triton_status()
    assert status.installed and not status.interpreted and status.device == "cuda", str(status)
    jitted = (kernels.add_kernel, kernels.softmax_kernel, kernels.flash_attention_kernel)
    assert not any(is_interpreted(k) for k in jitted)


@pytest.mark.parametrize("dtype", [torch.float32, *DTYPES])
def test_add_and_softmax_on_the_gpu(dtype):
    from attn_course.triton_flash.launchers import triton_add, triton_softmax

    device = _on_gpu(dtype)
    x, y = (torch.randn(3, 1001, device=device, dtype=dtype) for _ in range(2))
    torch.testing.assert_close(triton_add(x, y), x + y, atol=0, rtol=0)
    scores = 30 * torch.randn(5, 333, device=device, dtype=dtype)  # (5, 333): ragged last block
    expected = torch.softmax(scores.float(), dim=-1).to(dtype)
    torch.testing.assert_close(triton_softmax(scores, 64), expected, **TOLERANCE.get(dtype, {}))


CASES = [  # (B, H, T_q, T_k, d, is_causal)
    (2, 3, 37, 37, 32, False),
    (2, 3, 37, 37, 32, True),
    (1, 2, 50, 50, 48, True),  # head dim padded to 64
    (1, 2, 20, 70, 64, True),  # T_q < T_k: queries at the end
    (1, 2, 70, 20, 64, False),  # T_q > T_k
    (2, 4, 1000, 1000, 64, True),
    (1, 2, 513, 513, 128, True),
    (1, 4, 4096, 4096, 64, True),  # the benchmark's length
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("b", "h", "t_q", "t_k", "d", "is_causal"), CASES)
def test_compiled_flash_attention_matches_sdpa(b, h, t_q, t_k, d, is_causal, dtype):
    from attn_course.triton_flash.launchers import triton_flash_attention_forward

    device = _on_gpu(dtype)
    torch.manual_seed(t_q + t_k + d)
    q = torch.randn(b, h, t_q, d, device=device, dtype=dtype)
    k, v = (torch.randn(b, h, t_k, d, device=device, dtype=dtype) for _ in range(2))
    out, lse = triton_flash_attention_forward(q, k, v, is_causal=is_causal)  # default blocks for this GPU
    ref_out, ref_lse = _reference(q, k, v, is_causal)
    assert out.dtype == dtype and lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref_out, **TOLERANCE[dtype])
    torch.testing.assert_close(lse, ref_lse, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_flash_attention_agrees_with_sdpa_in_the_same_dtype(dtype):
    from attn_course.triton_flash.launchers import triton_flash_attention

    device = _on_gpu(dtype)
    q, k, v = (torch.randn(2, 8, 1024, 64, device=device, dtype=dtype) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # square: both masks agree
    torch.testing.assert_close(triton_flash_attention(q, k, v, is_causal=True), expected, **TOLERANCE[dtype])


def test_the_autotuned_kernel_picks_a_config_and_agrees():
    from attn_course.triton_flash import autotune

    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out, best = autotune.autotuned_flash_attention(q, k, v, is_causal=True)
    assert best.startswith("BLOCK_M=")
    torch.testing.assert_close(out.float(), _reference(q, k, v, True)[0], **TOLERANCE[torch.float16])


def test_a_cpu_tensor_is_refused_with_how_to_move_it():
    from attn_course.triton_flash.launchers import triton_flash_attention

    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(ValueError, match=r"\.to\('cuda'\)"):
        triton_flash_attention(q, q, q)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_the_triton_backward_gives_sdpas_gradients(dtype, is_causal):
    from attn_course.triton_flash import launchers

    backward = getattr(launchers, "triton_flash_attention_backward", None)
    if backward is None:
        pytest.skip("notebook 09's triton_flash_attention_backward is not in the package yet")
    device = _on_gpu(dtype)
    q, k, v = (torch.randn(2, 4, 300, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad_out = torch.randn_like(q)
    out, lse = launchers.triton_flash_attention_forward(q.detach(), k.detach(), v.detach(), is_causal)
    dq, dk, dv = backward(q.detach(), k.detach(), v.detach(), out, lse, grad_out, is_causal=is_causal)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=is_causal)
    expected.backward(grad_out.float())
    for mine, ref in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(mine.float(), ref.float(), atol=5e-2, rtol=5e-2)


def test_the_device_summary_describes_the_gpu():
    from attn_course.device import device_summary, sdpa_backends

    summary = device_summary()
    assert summary.kind == "cuda" and summary.is_gpu and summary.device.type == "cuda"
    assert summary.compute_capability == torch.cuda.get_device_capability()
    assert summary.memory_bytes == torch.cuda.get_device_properties(summary.index).total_memory
    assert summary.pick(cpu=1, gpu=2) == 2
    assert summary.name in str(summary) and "compute capability" in str(summary)
    assert "math" in summary.sdpa_backends
    if summary.compute_capability >= (8, 0):
        assert "flash" in summary.sdpa_backends
    assert "math" in sdpa_backends("cuda", torch.float32)


def test_the_card_runs_what_gpu_paths_says_of_it():
    # docs/gpu-support.md was written without a GPU: on the lent card, the rules meet the card.
    from attn_course.device import FMA, REFUSED, TENSOR_CORES, device_summary
    from attn_course.triton_flash.runtime import gpu_note

    summary = device_summary()
    paths = {path.name: path for path in summary.paths}
    refused = {name.removeprefix("sdpa-") for name, path in paths.items() if path.how == REFUSED}
    assert not refused & set(summary.sdpa_backends), (refused, summary.sdpa_backends)
    if summary.compute_capability >= (8, 0):
        assert {"flash", "efficient"} <= set(summary.sdpa_backends)
    else:
        assert "efficient" in summary.sdpa_backends  # a T4's fused kernel
    assert summary.supports_bf16 == torch.cuda.is_bf16_supported(including_emulation=False)
    note = gpu_note()  # what triton_status() adds where kernels are compiled
    assert (note is not None) == (paths["triton"].how == FMA), note
    assert paths["triton"].how in (TENSOR_CORES, FMA)
    print(summary)  # the lines a learner sees on this card, in the tier's log


def test_setup_triton_leaves_a_gpu_machine_compiled():
    import subprocess
    import sys

    code = (
        "from attn_course.triton_flash.runtime import setup_triton as s; "
        "s = s(); print(s.interpreted, s.device)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "cuda"]
