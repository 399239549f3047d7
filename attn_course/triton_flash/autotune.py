"""The FlashAttention kernel under `triton.autotune`: Triton times block sizes on the GPU, keeps the best.

`triton.autotune` runs every config of `AUTOTUNE_CONFIGS` once per new key (lengths, head dim,
causal, dtypes), times it on the GPU and launches the fastest from then on. The interpreter has
no GPU to time, so on the CPU `autotuned_flash_attention` refuses with a RuntimeError.

Introduced in 08_triton_flash_attention.
"""

from __future__ import annotations

import functools

import torch

from attn_course.triton_flash.kernels import (  # imports triton after setup_triton()
    flash_attention_kernel,
    triton,
)
from attn_course.triton_flash.launchers import flash_attention_launch
from attn_course.triton_flash.runtime import is_interpreted

AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
    for block_m in (64, 128)
    for block_n in (32, 64)
    for warps in (4, 8)
    for stages in (2, 3)
]
"""The 16 launch settings the autotuner times: BLOCK_M × BLOCK_N × num_warps × num_stages."""

AUTOTUNE_KEY = ["t_q", "t_k", "HEAD_DIM", "IS_CAUSAL"]
"""Arguments whose values start a new tuning run (the tensors' dtypes are added by Triton)."""


@functools.cache
def autotuned_kernel() -> triton.runtime.Autotuner:
    """`attn_course.triton_flash.kernels.flash_attention_kernel` under triton.autotune, built on first use.

    Built lazily because Triton before 3.4 asks the GPU driver for a benchmarker when the
    decorator runs, which fails on a machine without a GPU.
    """
    jitted = triton.jit(flash_attention_kernel.fn)  # the package's kernel, with BLOCK_M/N left free
    return triton.autotune(configs=AUTOTUNE_CONFIGS, key=AUTOTUNE_KEY)(jitted)


def describe_config(config: triton.Config) -> str:
    """One line for a triton.Config.

    >>> describe_config(triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3))
    'BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3'
    """
    blocks = ", ".join(f"{name}={value}" for name, value in config.kwargs.items())
    return f"{blocks}, num_warps={config.num_warps}, num_stages={config.num_stages}"


def autotuned_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> tuple[torch.Tensor, str]:
    """(out (B, H, T_q, d), the best config) of the autotuned FlashAttention kernel; GPU only.

    The first call for a new key times every config (seconds); later calls launch the best at once.

    Introduced in 08_triton_flash_attention.
    """
    if is_interpreted(flash_attention_kernel):
        raise RuntimeError(
            "autotuning times each config on the GPU, and Triton runs interpreted here "
            "(TRITON_INTERPRET=1): use triton_flash_attention with a KernelConfig instead"
        )
    args, constants, (out, lse) = flash_attention_launch(q, k, v, is_causal)
    b, h, t_q, _ = out.shape

    def grid(meta: dict) -> tuple[int, int]:
        return (triton.cdiv(t_q, meta["BLOCK_M"]), b * h)

    kernel = autotuned_kernel()
    kernel[grid](*args, **constants)
    return out, describe_config(kernel.best_config)


__all__ = [
    "AUTOTUNE_CONFIGS",
    "AUTOTUNE_KEY",
    "autotuned_flash_attention",
    "autotuned_kernel",
    "describe_config",
]
