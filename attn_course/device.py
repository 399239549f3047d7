"""What this machine offers: CPU or GPU, its memory, and which attention kernels run here.

Every notebook prints `describe_device()` in its first code cell and picks its sizes with
`device_summary().pick(cpu=..., gpu=...)`, so that one notebook runs in seconds on a laptop CPU
and uses a GPU when there is one.

>>> summary = device_summary("cpu")
>>> summary.kind, summary.is_gpu, "math" in summary.sdpa_backends
('cpu', False, True)
>>> summary.pick(cpu=1024, gpu=8192)
1024

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
        return f"{first}\ntorch {self.torch_version} · scaled_dot_product_attention backends: {backends}"


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
    """Print `device_summary(device)` in two lines (every notebook's setup cell does).

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
