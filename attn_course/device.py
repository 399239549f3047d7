"""What this machine offers: CPU or GPU, its memory, and which attention kernels run here.

Every notebook prints `describe_device()` in its first code cell and picks its sizes with
`device_summary().pick(cpu=..., gpu=...)`, so that one notebook runs in seconds on a laptop CPU
and uses a GPU when there is one.

>>> summary = device_summary("cpu")
>>> summary.kind, summary.is_gpu, "math" in summary.sdpa_backends
('cpu', False, True)
>>> summary.pick(cpu=1024, gpu=8192)
1024

On a CUDA GPU it also says how each of the course's GPU paths runs on that card (`gpu_paths`): a
T4 (compute capability 7.5, Colab's free GPU) compiles Triton kernels without tensor cores, has no
SDPA flash or cuDNN backend and no fast bfloat16. docs/gpu-support.md holds the evidence.

>>> [(path.name, path.how) for path in gpu_paths((7, 5))][:2]
[('triton', 'compiled, no tensor cores (FMA)'), ('sdpa-flash', 'refused')]

Introduced in 01_dot_product_attention.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F

Size = TypeVar("Size")

SDPA_BACKEND_MEMBERS = {  # our short name -> torch.nn.attention.SDPBackend member (the name of)
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}

TENSOR_CORES = "compiled, tensor cores"
"""How a path runs: compiled (or a fused CUDA kernel) with its matrix products on the tensor cores."""
FMA = "compiled, no tensor cores (FMA)"
"""Compiled, but its matrix products are fused multiply-adds on the CUDA cores, in float32."""
INTERPRETED = "interpreted on the CPU"
"""Triton's interpreter (TRITON_INTERPRET=1): exact, program by program in numpy, slow."""
EAGER = "eager, unfused"
"""Not compiled: torch's unfused operations (every score built, T² memory per head)."""
REFUSED = "refused"
"""Not available on this card: torch skips it (SDPA picks another backend) or raises when forced."""

TRITON_MIN_CAPABILITY = (7, 5)
"""The oldest compute capability the course compiles Triton kernels for (Turing: Colab's T4).

Triton 3.9 lists 8.0 as its minimum and lowers `tl.dot` to FMA below it (docs/gpu-support.md); the
course compiles on 7.5 all the same, as that is still far faster than the interpreter. Older cards
are untested, so the course interprets there."""

TENSOR_CORE_CAPABILITY = (8, 0)
"""From Ampere on, Triton's `tl.dot` uses tensor cores and bfloat16 is native."""

SDPA_FUSED_RANGE = {  # backend -> (oldest, newest) compute capability PyTorch's sdp_utils.cpp accepts
    "flash": ((8, 0), (12, 1)),
    "efficient": ((5, 0), (12, 1)),
    "cudnn": ((8, 0), (12, 1)),
}

T4_SHARED_MEMORY_PER_BLOCK = 64 * 1024
"""Shared memory one thread block may use on compute capability 7.5 (CUDA C++ Programming Guide)."""


@dataclass(frozen=True)
class GpuPath:
    """How one of the course's GPU paths runs on one CUDA card: a fact with its reason, no GPU needed.

    >>> triton = gpu_paths((9, 0))[0]
    >>> triton.how, triton.dtypes
    ('compiled, tensor cores', ('float16', 'bfloat16', 'float32'))
    """

    name: str
    """"triton", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "flex" or "bfloat16"."""
    label: str
    """What a learner calls it: "Triton kernels (08, 09)", "SDPA flash", …"""
    how: str
    """TENSOR_CORES, FMA, INTERPRETED, EAGER or REFUSED (for "bfloat16": "native" or "emulated")."""
    dtypes: tuple[str, ...]
    """The dtypes it accepts here ("float16", "bfloat16", "float32"); empty when refused, and for bfloat16."""
    why: str
    """One sentence: why, and what speed to expect."""

    def __str__(self) -> str:
        dtypes = f" ({', '.join(self.dtypes)})" if self.dtypes and self.how != REFUSED else ""
        return f"{self.label}: {self.how}{dtypes}"


def _in_range(capability: tuple[int, int], bounds: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    return bounds[0] <= capability <= bounds[1]


def gpu_paths(capability: tuple[int, int], name: str = "this GPU") -> tuple[GpuPath, ...]:
    """How each GPU path of the course runs on a CUDA card of `capability` (Triton 3.9, torch 2.13).

    A plain function of the card's compute capability, so that every branch is tested on a CPU
    with a T4's (7.5), an A100's (8.0) or an H100's (9.0) substituted; docs/gpu-support.md gives
    the file and line in Triton and torch behind each rule.

    >>> [str(path) for path in gpu_paths((8, 0))][:2]
    ['Triton kernels (08, 09): compiled, tensor cores (float16, bfloat16, float32)',
     'SDPA flash: compiled, tensor cores (float16, bfloat16)']
    """
    cc = f"{capability[0]}.{capability[1]}"
    tensor_cores = capability >= TENSOR_CORE_CAPABILITY
    all_dtypes = ("float16", "bfloat16", "float32")
    paths = []
    if tensor_cores:
        paths.append(GpuPath("triton", "Triton kernels (08, 09)", TENSOR_CORES, all_dtypes,
                             "tl.dot becomes mma.sync (8.x) or wgmma (9.0); float32 as tf32."))  # fmt: skip
    elif capability >= TRITON_MIN_CAPABILITY:
        paths.append(GpuPath(
            "triton", "Triton kernels (08, 09)", FMA, all_dtypes,
            f"Triton 3.9 supports compute capability 8.0 and newer; on {name} ({cc}) it still compiles, "
            "but turns tl.dot into float32 multiply-adds on the CUDA cores and does not pipeline loads "
            "(num_stages is ignored): exact, a few TFLOP/s at best (a T4 peaks at 8.1 in float32 against "
            "65 on its float16 tensor cores), several times slower than SDPA's fused kernels here.",
        ))  # fmt: skip
    else:
        paths.append(GpuPath(
            "triton", "Triton kernels (08, 09)", INTERPRETED, ("float32",),
            f"{name} ({cc}) is older than the Turing architecture (7.5), the oldest the course compiles "
            "Triton kernels for: setup_triton() turns the interpreter on (exact, slow, on the CPU).",
        ))  # fmt: skip
    for backend, label in (("flash", "SDPA flash"), ("efficient", "SDPA efficient"), ("cudnn", "SDPA cuDNN")):
        bounds = SDPA_FUSED_RANGE[backend]
        if not _in_range(capability, bounds):
            low, high = (f"{b[0]}.{b[1]}" for b in bounds)
            why = f"torch's {backend} kernel needs compute capability {low} to {high}; {name} is {cc}."
            paths.append(GpuPath(f"sdpa-{backend}", label, REFUSED, (), why))
        elif backend == "efficient":
            dtypes = all_dtypes if tensor_cores else ("float16", "float32")
            how = TENSOR_CORES if capability >= (7, 0) else FMA
            why = "Memory-efficient attention (xFormers' CUTLASS kernels): the fused kernel SDPA picks " + (
                "after flash."
                if tensor_cores
                else f"on {name}, its fastest; float16 on tensor cores, no bf16."
            )
            paths.append(GpuPath("sdpa-efficient", label, how, dtypes, why))
        else:
            paths.append(GpuPath(f"sdpa-{backend}", label, TENSOR_CORES, ("float16", "bfloat16"),
                                 f"torch's {backend} kernel, float16 and bfloat16 only."))  # fmt: skip
    every_score = "Every score built in T×T matrices: runs everywhere, slowest, most memory."
    paths.append(GpuPath("sdpa-math", "SDPA math", EAGER, all_dtypes, every_score))
    if tensor_cores:
        paths.append(GpuPath(
            "flex", "FlexAttention compiled (10)", TENSOR_CORES, all_dtypes,
            "torch.compile writes a Triton kernel with the mods fused in; float32 inputs run as float32 "
            "multiply-adds unless torch.backends.cuda.matmul.fp32_precision is 'tf32'.",
        ))  # fmt: skip
    elif capability >= (7, 0):
        paths.append(GpuPath(
            "flex", "FlexAttention compiled (10)", FMA, ("float16", "float32"),
            f"torch.compile compiles it with Triton, so on {name} ({cc}) without tensor cores, at "
            f"torch's baseline blocks (64×64 forward, 16×16 backward); a kernel that needs more than the "
            f"{T4_SHARED_MEMORY_PER_BLOCK // 1024} KiB of shared memory a block may have here fails to "
            "launch, and flex.Flex then runs the unfused version and says why. bfloat16 inputs are "
            "not compiled at all here (torch skips the compile and runs them eager).",
        ))  # fmt: skip
    else:
        paths.append(GpuPath(
            "flex", "FlexAttention compiled (10)", EAGER, all_dtypes,
            f"torch.compile needs Triton, which torch allows from compute capability 7.0; {name} is {cc}, "
            "so flex.Flex runs the unfused version.",
        ))  # fmt: skip
    if tensor_cores:
        paths.append(GpuPath("bfloat16", "bfloat16", "native", (),
                             "bfloat16 tensor cores: every fused kernel above takes it."))  # fmt: skip
    else:
        paths.append(GpuPath(
            "bfloat16", "bfloat16", "emulated", (),
            f"{name} ({cc}) has no bfloat16 tensor cores: torch.cuda.is_bf16_supported() still says True "
            "(it counts emulation), but SDPA's fused kernels refuse bfloat16 here and fall back to math; "
            "the course uses float16 on this card.",
        ))  # fmt: skip
    return tuple(paths)


@dataclass(frozen=True)
class DeviceSummary:
    """One device torch can compute on, described for a learner."""

    kind: str
    """"cuda", "mps" or "cpu"."""
    index: int | None
    """The device's index for "cuda" (None otherwise)."""
    name: str
    """The GPU's name, or the CPU's model where the system tells it."""
    compute_capability: tuple[int, int] | None
    """CUDA compute capability (major, minor), e.g. (9, 0) for an H100; None off CUDA."""
    memory_bytes: int | None
    """The GPU's memory, or the machine's RAM for the CPU; None where unknown."""
    threads: int
    """Threads torch uses for CPU operations."""
    torch_version: str
    """torch.__version__."""
    sdpa_backends: tuple[str, ...]
    """The scaled_dot_product_attention backends that ran a tiny call here, in
    ("flash", "efficient", "cudnn", "math") order; probed in float16 on CUDA, float32 elsewhere."""

    @property
    def device(self) -> torch.device:
        """The torch.device to put tensors on."""
        return torch.device(self.kind if self.index is None else f"{self.kind}:{self.index}")

    @property
    def is_gpu(self) -> bool:
        """Whether this is a GPU (CUDA or Apple's MPS)."""
        return self.kind in ("cuda", "mps")

    def pick(self, *, cpu: Size, gpu: Size) -> Size:
        """`gpu` on a GPU, `cpu` otherwise: the size (or list of sizes) to use here.

        >>> device_summary("cpu").pick(cpu=[128, 256], gpu=[1024, 4096])
        [128, 256]
        """
        return gpu if self.is_gpu else cpu

    @property
    def paths(self) -> tuple[GpuPath, ...]:
        """How each GPU path of the course runs on this CUDA card (`gpu_paths`); empty off CUDA."""
        if self.kind != "cuda" or self.compute_capability is None:
            return ()
        return gpu_paths(self.compute_capability, self.name)

    @property
    def supports_bf16(self) -> bool:
        """Whether bfloat16 is native here (CUDA from Ampere, 8.0, on), not only emulated.

        `torch.cuda.is_bf16_supported()` also says True on a T4, where bfloat16 is emulated.
        """
        return any(path.name == "bfloat16" and path.how == "native" for path in self.paths)

    def pre_ampere_note(self) -> str | None:
        """What a CUDA card before Ampere (8.0) changes for the course, in one sentence; None otherwise."""
        if not self.paths or self.supports_bf16:
            return None
        cc = "{}.{}".format(*self.compute_capability or (0, 0))
        triton = self.paths[0]
        kernels = (
            "Triton's kernels compile, but tl.dot runs on the CUDA cores, not the tensor cores (a few "
            "TFLOP/s, slower than SDPA here)"
            if triton.how == FMA
            else "Triton's kernels run through the interpreter"
        )
        return (
            f"{self.name} predates Ampere (compute capability {cc} < 8.0): {kernels}; SDPA has no flash "
            "or cuDNN kernel; bfloat16 is emulated, so the course uses float16. Every notebook runs, "
            "slower (docs/gpu-support.md)."
        )

    def __str__(self) -> str:
        parts = [str(self.device), self.name]
        if self.compute_capability is not None:
            parts.append("compute capability {}.{}".format(*self.compute_capability))
        if self.memory_bytes is not None:
            parts.append(f"{self.memory_bytes / 2**30:.1f} GiB")
        if self.kind == "cpu":
            parts.append(f"{self.threads} threads")
        backends = ", ".join(self.sdpa_backends) or "none found"
        first = " · ".join(parts)
        lines = [first, f"torch {self.torch_version} · scaled_dot_product_attention backends: {backends}"]
        if self.paths:
            shown = [str(path) for path in self.paths if path.name in ("triton", "flex", "bfloat16")]
            lines.append(" · ".join(shown))
        note = self.pre_ampere_note()
        if note:
            lines.append(f"⚠️ {note}")
        return "\n".join(lines)


def default_device() -> torch.device:
    """The best device here: the first CUDA GPU, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def sdpa_backends(device: torch.device | str, dtype: torch.dtype | None = None) -> tuple[str, ...]:
    """The scaled_dot_product_attention backends that run a tiny call on `device` in `dtype`.

    Each backend is tried alone (with `torch.nn.attention.sdpa_kernel`) on a (1, 2, 16, 64)
    input; a backend that is missing from this torch, or refuses the device or dtype, is left out.
    `dtype` defaults to float16 on CUDA (what the fused kernels are made for) and float32 elsewhere.

    >>> "math" in sdpa_backends("cpu")
    True
    """
    device = torch.device(device)
    if dtype is None:
        dtype = torch.float16 if device.type == "cuda" else torch.float32
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch < 2.3
        return ()
    found = []
    for name, member in SDPA_BACKEND_MEMBERS.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            continue
        try:
            q = torch.randn(1, 2, 16, 64, device=device, dtype=dtype)  # (B, H, T, d)
            with warnings.catch_warnings(), sdpa_kernel(backend):
                warnings.simplefilter("ignore")  # torch warns about each kernel it cannot use
                out = F.scaled_dot_product_attention(q, q, q)  # (B, H, T, d)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if bool(torch.isfinite(out).all()):
                found.append(name)
        except Exception:  # any refusal (RuntimeError, NotImplementedError, ...) means: not here
            continue
    return tuple(found)


def cpu_name() -> str:
    """The CPU's model name where the system tells it (Linux: /proc/cpuinfo), else the platform's."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


@functools.cache
def _summary(kind: str, index: int | None) -> DeviceSummary:
    name, capability, memory = cpu_name(), None, _ram_bytes()
    if kind == "cuda":
        properties = torch.cuda.get_device_properties(index)
        name, memory = properties.name, properties.total_memory
        capability = (properties.major, properties.minor)
    elif kind == "mps":
        name = f"Apple GPU (MPS) on {platform.machine()}"
        recommended = getattr(getattr(torch, "mps", None), "recommended_max_memory", None)
        try:
            memory = int(recommended()) if recommended is not None else None
        except RuntimeError:
            memory = None
    return DeviceSummary(
        kind=kind,
        index=index,
        name=name,
        compute_capability=capability,
        memory_bytes=memory,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        sdpa_backends=sdpa_backends(torch.device(kind if index is None else f"{kind}:{index}")),
    )


def device_summary(device: torch.device | str | None = None) -> DeviceSummary:
    """Describe `device` (default: the best one here, see `default_device`); cached per device.

    Introduced in 01_dot_product_attention.
    """
    device = default_device() if device is None else torch.device(device)
    index = None
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
    return _summary(device.type, index)


def describe_device(device: torch.device | str | None = None) -> None:
    """Print `device_summary(device)` (every notebook's setup cell does): two lines, and on a CUDA GPU
    how the course's kernels run on it, with a warning line on a card older than Ampere (a T4).

    Introduced in 01_dot_product_attention.
    """
    print(device_summary(device))


@contextlib.contextmanager
def torch_threads(threads: int | None = 1) -> Iterator[None]:
    """Run the block on `threads` torch threads (None: as set), restored afterwards, also on Ctrl-C.

    One thread keeps a small model's training and a timing steady on a busy laptop: with two
    threads on two cores, each operation waits for the slower one to get a core.

    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True

    Introduced in 09_backward.
    """
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
