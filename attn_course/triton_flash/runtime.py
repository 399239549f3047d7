"""Where Triton kernels run here: compiled on a CUDA GPU, or through Triton's interpreter on the CPU.

Triton compiles `@triton.jit` kernels for NVIDIA (and AMD) GPUs. With `TRITON_INTERPRET=1` set
before a kernel is defined, `@triton.jit` instead makes a kernel that Triton runs in Python with
numpy, one program after another, on CPU tensors: slowly, but with the same results. Notebook 08
calls `setup_triton()` first, which turns the interpreter on when there is no GPU Triton can use,
so that every kernel the learner writes can be run and checked on any machine.

>>> status = triton_status()
>>> status.installed in (True, False), status.device in ("cpu", "cuda")
(True, True)

Introduced in 08_triton_flash_attention.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from attn_course.device import FMA, TRITON_MIN_CAPABILITY, gpu_paths

INTERPRET_VARIABLE = "TRITON_INTERPRET"
"""Environment variable that, set to 1 before kernels are defined, makes `@triton.jit` interpret them."""

MIN_COMPUTE_CAPABILITY = TRITON_MIN_CAPABILITY
"""The oldest compute capability the course compiles Triton kernels for (7.5, Turing: Colab's T4).

Triton 3.9 itself lists 8.0 (Ampere) as its minimum: below it, it still compiles, but turns `tl.dot`
into float32 multiply-adds on the CUDA cores instead of tensor-core instructions, and does not
pipeline loads. So on a T4 the kernels are compiled and exact, but several times slower than on the
tensor cores; `triton_gpu_note` says so. Older cards get the interpreter (docs/gpu-support.md)."""


@dataclass(frozen=True)
class TritonStatus:
    """Whether Triton is installed, and whether kernels are compiled for a GPU or interpreted on the CPU."""

    installed: bool
    """Whether `import triton` works here."""
    version: str | None
    """triton.__version__, when installed."""
    interpreted: bool
    """Whether `@triton.jit` kernels defined from now on run through the interpreter."""
    device: str
    """Where kernel inputs must live: "cuda" for compiled kernels, "cpu" for interpreted ones."""
    reason: str
    """One sentence for the learner: why kernels run where they do."""
    problem: str | None = None
    """Why kernels cannot run here as things stand, and what to install (None when they can)."""
    note: str | None = None
    """What compiled kernels lack on this GPU (a T4: tensor cores), and the speed to expect; else None."""

    def __str__(self) -> str:
        if not self.installed:
            return f"Triton is not installed: {self.reason}"
        how = "interpreted on the CPU (TRITON_INTERPRET=1)" if self.interpreted else "compiled for the GPU"
        problem = f"\n⚠️ {self.problem}" if self.problem else ""
        note = f"\nℹ️ {self.note}" if self.note else ""
        return f"Triton {self.version}: kernels are {how}. {self.reason}{problem}{note}"


@functools.cache
def _triton_version() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return None
    try:  # not `import triton`: that would fix compiled-or-interpreted before setup_triton()
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string such as "3.9.0" or "2.4.0rc1"."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def interpreter_problem(triton_version: str | None = None, numpy_version: str | None = None) -> str | None:
    """Why Triton's interpreter cannot run here (None when it can): Triton before 3.7 with numpy 2.4.

    Before 3.7 the interpreter hands scalar arguments to kernels as one-element numpy arrays, and
    `range(0, n, BLOCK)` turns them into integers, which numpy 2.4 no longer does.

    >>> interpreter_problem("3.5.1", "2.4.0") is not None, interpreter_problem("3.5.1", "2.3.5")
    (True, None)
    """
    import numpy

    triton_version = triton_version or _triton_version()
    numpy_version = numpy_version or numpy.__version__
    if triton_version in (None, "unknown"):
        return None
    if _release(triton_version) < (3, 7) and _release(numpy_version) >= (2, 4):
        return (
            f"Triton {triton_version}'s interpreter cannot run with numpy {numpy_version}: it passes "
            "scalars to kernels as one-element arrays, which numpy 2.4 no longer turns into integers. "
            "Install numpy<2.4 (pip install 'numpy<2.4') or Triton 3.7 or newer, then restart."
        )
    return None


def capability_problem(capability: tuple[int, int], name: str) -> str | None:
    """Why the course does not compile Triton kernels for a CUDA card of `capability` (None when it does).

    >>> capability_problem((7, 5), "Tesla T4") is None, capability_problem((9, 0), "NVIDIA H100") is None
    (True, True)
    >>> print(capability_problem((6, 0), "Tesla P100-PCIE-16GB"))
    Tesla P100-PCIE-16GB (compute capability 6.0) is older than the Turing architecture (7.5),
    the oldest the course compiles Triton kernels for
    """
    if capability >= MIN_COMPUTE_CAPABILITY:
        return None
    return (
        f"{name} (compute capability {capability[0]}.{capability[1]}) is older than the Turing "
        "architecture (7.5), the oldest the course compiles Triton kernels for"
    )


def triton_gpu_note(capability: tuple[int, int], name: str) -> str | None:
    """What compiled Triton kernels lack on a CUDA card of `capability`, and the speed to expect.

    None where they lack nothing (Ampere, 8.0, and newer) or are not compiled at all.

    >>> triton_gpu_note((8, 0), "NVIDIA A100-SXM4-80GB") is None
    True
    >>> "tensor cores" in triton_gpu_note((7, 5), "Tesla T4")
    True
    """
    triton = gpu_paths(capability, name)[0]
    if triton.how != FMA:
        return None
    return triton.why


def gpu_problem() -> str | None:
    """Why Triton cannot compile kernels for this machine's GPU (None when it can)."""
    try:
        if not torch.cuda.is_available():
            return "there is no CUDA GPU here"
        if torch.version.hip is None:
            return capability_problem(torch.cuda.get_device_capability(), torch.cuda.get_device_name())
    except Exception as error:  # a broken driver is reported, not raised
        return f"CUDA is not usable ({type(error).__name__}: {error})"
    return None


def gpu_note() -> str | None:
    """`triton_gpu_note` for this machine's CUDA GPU (None without one, on AMD, or when CUDA fails)."""
    try:
        if not torch.cuda.is_available() or torch.version.hip is not None:
            return None
        return triton_gpu_note(torch.cuda.get_device_capability(), torch.cuda.get_device_name())
    except Exception:  # gpu_problem() reports a broken driver
        return None


def triton_status() -> TritonStatus:
    """Describe how Triton kernels defined from now on will run here, without changing anything."""
    version = _triton_version()
    if version is None:
        system = platform.system()
        why = (
            "Triton's wheels exist for Linux only. On Colab it comes with PyTorch; elsewhere run "
            "`pip install triton` on Linux, or work through this notebook on Colab."
            if system != "Linux"
            else "install it with `pip install triton` (it comes with PyTorch's CUDA builds)."
        )
        return TritonStatus(False, None, False, "cpu", why)
    interpreted = os.environ.get(INTERPRET_VARIABLE, "").strip() == "1"
    problem = gpu_problem()
    if interpreted:
        reason = (
            f"{INTERPRET_VARIABLE}=1 is set"
            + (f" because {problem}" if problem else " (by you: unset it and restart to compile for the GPU)")
            + "; kernels take CPU tensors and run program by program in numpy, exactly but slowly."
        )
        return TritonStatus(True, version, True, "cpu", reason, interpreter_problem())
    if problem is not None:
        reason = f"but {problem}: call setup_triton() before defining kernels to use the interpreter."
        return TritonStatus(True, version, False, "cuda", reason)
    reason = f"Kernels take tensors on {torch.cuda.get_device_name()}."
    return TritonStatus(True, version, False, "cuda", reason, note=gpu_note())


def setup_triton() -> TritonStatus:
    """Turn Triton's interpreter on when no GPU can run compiled kernels; call before importing triton.

    Whether a kernel is compiled or interpreted is fixed when `@triton.jit` runs, for Triton's
    own library functions when triton is imported, so this must come first. A GPU machine is
    left as it is, and so is a `TRITON_INTERPRET` the learner set. Too late, it warns.
    """
    wants_interpreter = INTERPRET_VARIABLE not in os.environ and gpu_problem() is not None
    if _triton_version() is not None and wants_interpreter:
        if "triton" in sys.modules:
            warnings.warn(
                "triton was imported before setup_triton(), so its kernels are compiled for a GPU "
                "this machine cannot use. Restart the kernel and run setup_triton() first.",
                stacklevel=2,
            )
        os.environ[INTERPRET_VARIABLE] = "1"
    return triton_status()


def require_triton() -> None:
    """Raise a RuntimeError saying what to install when Triton is missing or cannot run kernels here."""
    status = triton_status()
    if not status.installed:
        raise RuntimeError(str(status))
    if status.problem:
        raise RuntimeError(status.problem)


def is_interpreted(kernel: Any) -> bool:
    """Whether a Triton kernel (possibly autotuned or heuristics-wrapped) runs through the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    while not isinstance(kernel, InterpretedFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return isinstance(kernel, InterpretedFunction)


def require_device(tensor: torch.Tensor) -> None:
    """Raise a ValueError when `tensor` is on the CPU but Triton compiles kernels for the GPU."""
    if tensor.device.type == "cpu" and not triton_status().interpreted:
        raise ValueError(
            "Triton kernels are compiled for the GPU here, so their tensors must be on it: "
            "move them with .to('cuda'), or set TRITON_INTERPRET=1 before importing triton "
            "to run kernels on the CPU."
        )


__all__ = [
    "INTERPRET_VARIABLE",
    "MIN_COMPUTE_CAPABILITY",
    "TritonStatus",
    "capability_problem",
    "gpu_note",
    "gpu_problem",
    "interpreter_problem",
    "is_interpreted",
    "require_device",
    "require_triton",
    "setup_triton",
    "triton_gpu_note",
    "triton_status",
]
