"""Python functions that launch the course's Triton kernels: allocate the output, pick the grid, launch.

Each function takes tensors on a CUDA GPU (the kernel is compiled) or on the CPU (the kernel runs
through Triton's interpreter, see `attn_course.triton_flash.runtime`). Where Triton is not installed
they raise a RuntimeError that says how to get it.

Introduced in 08_triton_flash_attention (the backward, `triton_flash_attention_backward`, in 09_backward).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Literal, overload

import torch

from attn_course.exercise import exercise
from attn_course.triton_flash.runtime import require_device, require_triton


@exercise("08_triton_flash_attention", 1)
def triton_add(x: torch.Tensor, y: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """x + y of two tensors of one shape, by `add_kernel` with one program per `block` elements.

    Introduced in 08_triton_flash_attention.
    """
    require_triton()
    from attn_course.triton_flash.kernels import add_kernel, triton

    require_device(x)
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, block),)
    add_kernel[grid](x, y, out, n, BLOCK=block)
    return out


@exercise("08_triton_flash_attention", 2)
def triton_softmax(x: torch.Tensor, block_size: int = 64) -> torch.Tensor:
    """softmax(x) over the last axis, one program per row streaming it in blocks of `block_size`.

    `block_size` must be a power of two (Triton's blocks are). Accumulates in float32 and returns
    x's dtype.

    Introduced in 08_triton_flash_attention.
    """
    require_triton()
    from attn_course.triton_flash.kernels import softmax_kernel

    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two, got {block_size}")
    require_device(x)
    rows = x.reshape(-1, x.shape[-1])  # (R, N): a view when it can be
    if rows.shape[-1] > 0 and rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty_like(rows)  # (R, N)
    if rows.numel():
        softmax_kernel[(rows.shape[0],)](
            rows, out, rows.shape[1], rows.stride(0), out.stride(0), BLOCK=block_size
        )
    return out.reshape(x.shape)


@exercise("08_triton_flash_attention", 3)
def triton_scores(q: torch.Tensor, k: torch.Tensor, block_m: int = 32, block_n: int = 32) -> torch.Tensor:
    """The scaled scores QKᵀ/√d, (B, H, T_q, T_k) in float32, one program per block_m × block_n tile.

    q (B, H, T_q, d) and k (B, H, T_k, d), any strides with the head dim contiguous; d a power of
    two, at least 16 (what `tl.dot` takes unpadded). The grid is (⌈T_q / block_m⌉, ⌈T_k / block_n⌉, B·H).

    Introduced in 08_triton_flash_attention.
    """
    require_triton()
    from attn_course.triton_flash.kernels import scores_kernel, triton

    if q.dim() != 4 or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q (B, H, T_q, d) and k (B, H, T_k, d) do not fit: {q.shape}, {k.shape}")
    b, h, t_q, d = q.shape
    t_k = k.shape[2]
    if d < 16 or d & (d - 1):
        raise ValueError(f"the head dim must be a power of two, at least 16; got {d}")
    require_device(q)
    q, k = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k))
    scores = torch.empty(b, h, t_q, t_k, device=q.device, dtype=torch.float32)  # (B, H, T_q, T_k)
    grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)
    if scores.numel():
        scores_kernel[grid](
            q, k, scores, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            scores.stride(0), scores.stride(1), scores.stride(2), h, t_q, t_k, 1.0 / math.sqrt(d),
            HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
        )  # fmt: skip
    return scores


@dataclass(frozen=True)
class KernelConfig:
    """Block sizes and launch settings of one FlashAttention launch."""

    block_m: int
    """Queries per program."""
    block_n: int
    """Keys per step of a program's loop."""
    num_warps: int = 4
    """Warps (32 threads each) per program, on a GPU."""
    num_stages: int = 2
    """Software-pipelining depth of the key loop, on a GPU."""


def forward_config(
    head_dim: int, device: torch.device | str, capability: tuple[int, int] | None = None
) -> KernelConfig:
    """Block sizes that work well enough without autotuning: by GPU generation, 32 on the CPU.

    The interpreter's cost is per operation, not per element, so on the CPU fewer and larger
    blocks run faster; 32 keeps the causal diagonal visible at the notebook's small sizes. Before
    Ampere (compute capability 8.0; Colab's T4 is 7.5) a program may use 64 KiB of shared memory
    and loads are not pipelined, so the blocks are smaller there: compiled for sm_75, 128×64 blocks
    of d = 128 need 96 KiB (tests/test_triton_compile.py compiles each choice without a GPU).
    `capability` defaults to the device's.

    >>> forward_config(64, "cpu")
    KernelConfig(block_m=32, block_n=32, num_warps=4, num_stages=2)
    >>> forward_config(128, "cuda", capability=(7, 5))
    KernelConfig(block_m=64, block_n=32, num_warps=4, num_stages=2)
    """
    if torch.device(device).type == "cpu":
        return KernelConfig(32, 32)
    capability = capability or torch.cuda.get_device_capability(device)
    if capability < (8, 0):
        return KernelConfig(64, 64 if head_dim <= 64 else 32, num_warps=4, num_stages=2)
    if head_dim <= 64:
        return KernelConfig(128, 64, num_warps=4, num_stages=3)
    return KernelConfig(128, 32, num_warps=8, num_stages=3)


def triton_flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention forward by `flash_attention_kernel`: (out (B, H, T_q, d), lse (B, H, T_q) in float32).

    q (B, H, T_q, d), k and v (B, H, T_k, d); any strides with the head dim contiguous. With
    `is_causal` the mask is bottom-right aligned, as in `attn_course.attention.attention`.

    Introduced in 08_triton_flash_attention.
    """
    require_triton()
    from attn_course.triton_flash.kernels import flash_attention_kernel, triton

    args, constants, (out, lse) = flash_attention_launch(q, k, v, is_causal)
    b, h, t_q, d = out.shape
    config = config or forward_config(d, q.device)
    grid = (triton.cdiv(t_q, config.block_m), b * h)
    flash_attention_kernel[grid](
        *args, **constants, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    return out, lse


def flash_attention_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool
) -> tuple[tuple, dict, tuple[torch.Tensor, torch.Tensor]]:
    """(arguments, constexprs but the block sizes, (out, lse)) of one flash_attention_kernel launch.

    Checks the shapes and device, makes the head dim contiguous where it is not, and allocates
    out (B, H, T_q, d) and lse (B, H, T_q) in float32. Shared by the plain and autotuned launches.
    """
    from attn_course.triton_flash.kernels import triton

    _require_same_layout(q, k, v)
    require_device(q)
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    b, h, t_q, d = q.shape
    out = torch.empty_like(q)  # (B, H, T_q, d)
    lse = torch.empty(b, h, t_q, device=q.device, dtype=torch.float32)  # (B, H, T_q)
    args = (
        q, k, v, out, lse,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        h, t_q, k.shape[2], 1.0 / math.sqrt(d),
    )  # fmt: skip
    constants = {"HEAD_DIM": d, "BLOCK_D": max(16, triton.next_power_of_2(d)), "IS_CAUSAL": is_causal}
    return args, constants, (out, lse)


@overload
def triton_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = ..., return_lse: Literal[False] = ...
) -> torch.Tensor: ...
@overload
def triton_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = ..., *, return_lse: Literal[True]
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def triton_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = ..., return_lse: bool = ...
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...


@exercise("08_triton_flash_attention", 4)
def triton_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, return_lse: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(QKᵀ/√d) V by the FlashAttention Triton kernel, (B, H, T_q, d); bottom-right causal mask.

    With return_lse, (out, lse): lse (B, H, T_q) in float32, each query row's natural log-sum-exp of
    its scaled, masked scores (torch.logsumexp of QKᵀ/√d), as notebook 09's backward pass reads it.
    A query row that sees no key (causal with T_q > T_k) gets output 0, as SDPA and the course's
    `attention` give it, and lse -inf.

    Introduced in 08_triton_flash_attention.
    """
    out, lse = triton_flash_attention_forward(q, k, v, is_causal=is_causal)
    return (out, lse) if return_lse else out


@exercise("08_triton_flash_attention", 5)
def fast_flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, return_lse: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`triton_flash_attention`, faster: unmasked full key blocks, masked diagonal ones, exp2, one scale.

    The package's `flash_attention_kernel` is written so already; notebook 08's stretch exercise
    has the learner turn their kernel of Exercise 4 into it.

    Introduced in 08_triton_flash_attention.
    """
    return triton_flash_attention(q, k, v, is_causal=is_causal, return_lse=return_lse)


def backward_config(
    head_dim: int, device: torch.device | str, capability: tuple[int, int] | None = None
) -> KernelConfig:
    """Block sizes of the backward kernels: at most 64×64, as each program holds more than the forward's.

    A backward program keeps two (BLOCK, d) accumulators and loads four (BLOCK, d) tiles per step
    (q, dO and k, v), against the forward's one and two: 32×32 on the CPU (as the forward), 64×64 on
    a GPU, but 32×32 for d = 128 on a T4 (sm_75, 64 KiB of shared memory per program). Compiled
    offline, they need 48 KiB on a T4, 32 / 72 KiB (d = 64 / 128) on an A100 and 48 / 96 KiB on an
    H100 (tests/test_triton_compile.py checks each against its GPU's limit).

    >>> backward_config(64, "cpu")
    KernelConfig(block_m=32, block_n=32, num_warps=4, num_stages=2)
    >>> backward_config(128, "cuda", capability=(9, 0))
    KernelConfig(block_m=64, block_n=64, num_warps=8, num_stages=2)

    Introduced in 09_backward.
    """
    if torch.device(device).type == "cpu":
        return KernelConfig(32, 32)
    capability = capability or torch.cuda.get_device_capability(device)
    if capability < (8, 0):
        return KernelConfig(64, 64, num_warps=4, num_stages=1) if head_dim <= 64 else KernelConfig(32, 32)
    if head_dim <= 64:
        return KernelConfig(64, 64, num_warps=4, num_stages=2)
    return KernelConfig(64, 64, num_warps=8, num_stages=2)


class CourseKernel:
    """One of the course's Triton kernels, in `attn_course.reference` without importing Triton.

    `attn_course.reference` imports every topic module, also where Triton is missing and before a
    notebook's `setup_triton()`; this stand-in imports `attn_course.triton_flash.kernels` only when
    it is launched (`CourseKernel(name)[grid](...)`) or asked for its `kernel`.

    >>> CourseKernel("flash_attention_backward_dq_kernel")
    CourseKernel('flash_attention_backward_dq_kernel')

    Introduced in 09_backward.
    """

    def __init__(self, name: str) -> None:
        self.__name__ = name

    @property
    def kernel(self) -> Any:
        """The `@triton.jit` kernel of that name in `attn_course.triton_flash.kernels`."""
        require_triton()
        from attn_course.triton_flash import kernels

        return getattr(kernels, self.__name__)

    @property
    def fn(self) -> Any:
        """The kernel's Python function once Triton is imported, else None (importing it costs seconds).

        The grader compares code by it, to refuse the course's kernel handed in as the learner's.
        """
        if "triton" not in sys.modules:
            return None
        return self.kernel.fn

    def __getitem__(self, grid: Any) -> Any:
        return self.kernel[grid]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.__name__} is a Triton kernel: launch it as {self.__name__}[grid](...)")

    def __repr__(self) -> str:
        return f"CourseKernel({self.__name__!r})"


flash_attention_backward_dkdv_kernel = exercise("09_backward", 5)(
    CourseKernel("flash_attention_backward_dkdv_kernel")
)
"""Notebook 09's Exercise 5a: dK and dV, one program per (key block, batch·head)."""

flash_attention_backward_dq_kernel = exercise("09_backward", 6)(
    CourseKernel("flash_attention_backward_dq_kernel")
)
"""Notebook 09's Exercise 5b: dQ, one program per (query block, batch·head)."""


@exercise("09_backward", 7)
def triton_flash_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool = False,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention's backward by two Triton kernels: (dq, dk, dv), each like its input.

    q (B, H, T_q, d), k and v (B, H, T_k, d), out and grad_out (B, H, T_q, d) and lse (B, H, T_q) from
    the forward (`triton_flash_attention_forward` or `attn_course.flash.flash_attention_forward`).
    D = rowsum(dO ∘ O) is computed here in float32; `flash_attention_backward_dkdv_kernel` then
    writes dK and dV, one program per key block, and `flash_attention_backward_dq_kernel` writes dQ,
    one program per query block. Bottom-right causal mask. A query row that sees no key (lse -inf,
    output 0) gets dq 0 and adds nothing to dk and dv, as autograd through SDPA gives.

    Introduced in 09_backward.
    """
    require_triton()
    from attn_course.triton_flash import kernels

    _require_same_layout(q, k, v)
    require_device(q)
    if out.shape != q.shape or grad_out.shape != q.shape or lse.shape != q.shape[:-1]:
        raise ValueError(
            f"out and grad_out must be shaped like q {tuple(q.shape)} and lse like {tuple(q.shape[:-1])}; "
            f"got out {tuple(out.shape)}, grad_out {tuple(grad_out.shape)}, lse {tuple(lse.shape)}"
        )
    return launch_backward(
        q, k, v, out, lse, grad_out, is_causal, config,
        kernels.flash_attention_backward_dkdv_kernel, kernels.flash_attention_backward_dq_kernel,
    )  # fmt: skip


def launch_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
    config: KernelConfig | None,
    dkdv_kernel: Any | None,
    dq_kernel: Any | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) by the given dK/dV and dQ kernels, with the arguments the course's kernels take.

    The course's wrapper passes its own two kernels; the checks of notebook 09's Exercises 5a and
    5b pass the learner's kernel for one and None for the other, whose launch is then skipped (its
    gradients are left as torch.empty made them). Shapes are not checked here.
    """
    from attn_course.triton_flash.kernels import triton

    q, k, v, grad_out = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v, grad_out))
    b, h, t_q, d = q.shape
    t_k = k.shape[2]
    delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()  # (B, H, T_q): D = rowsum(dO ∘ O)
    lse = lse.float().contiguous()  # (B, H, T_q)
    dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)  # (B, H, T_q, d), contiguous
    dk = torch.empty(k.shape, device=q.device, dtype=q.dtype)  # (B, H, T_k, d)
    dv = torch.empty(k.shape, device=q.device, dtype=q.dtype)  # (B, H, T_k, d), strides of dk
    config = config or backward_config(d, q.device)
    common = (
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), grad_out.stride(0), grad_out.stride(1), grad_out.stride(2),
    )  # fmt: skip
    sizes = (h, t_q, t_k, 1.0 / math.sqrt(d))
    constants = dict(
        HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, IS_CAUSAL=is_causal, num_warps=config.num_warps,
        num_stages=config.num_stages,
    )  # fmt: skip
    if t_k and dkdv_kernel is not None:
        dkdv_kernel[(triton.cdiv(t_k, config.block_n), b * h)](
            q, k, v, grad_out, lse, delta, dk, dv, *common, dk.stride(0), dk.stride(1), dk.stride(2),
            *sizes, **constants,
        )  # fmt: skip
    if t_q and dq_kernel is not None:
        dq_kernel[(triton.cdiv(t_q, config.block_m), b * h)](
            q, k, v, grad_out, lse, delta, dq, *common, dq.stride(0), dq.stride(1), dq.stride(2),
            *sizes, **constants,
        )  # fmt: skip
    return dq, dk, dv


def _require_same_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-D: (batch, heads, length, head dim)")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "(q (B, H, T_q, d), k and v (B, H, T_k, d))"
        )
    if len({q.device, k.device, v.device}) != 1 or len({q.dtype, k.dtype, v.dtype}) != 1:
        raise ValueError("q, k and v must share one device and one dtype")


__all__ = [
    "CourseKernel",
    "KernelConfig",
    "backward_config",
    "forward_config",
    "flash_attention_backward_dkdv_kernel",
    "flash_attention_backward_dq_kernel",
    "flash_attention_launch",
    "launch_backward",
    "triton_add",
    "triton_flash_attention",
    "triton_flash_attention_backward",
    "triton_flash_attention_forward",
    "triton_scores",
    "triton_softmax",
]
