"""The attention benchmark of notebook 06 and of `attn-course bench`: time, TFLOP/s and peak memory.

Providers, all on (B, H, T, d) inputs: "naive" (the course's `attention`, which writes the T×T
scores and probabilities), "tiled" (the course's `flash_attention`, timed
in its CPU-tuned form `flash_fast.flash_attention_fast`), "triton" (notebook 08's Triton
kernel, timed only where it is compiled for a GPU) and "sdpa-<backend>", torch's
`F.scaled_dot_product_attention` forced to one backend with `torch.nn.attention.sdpa_kernel`
(CPU: flash and math; CUDA: flash, efficient, cudnn and math). A provider that cannot run (a
backend this GPU or dtype lacks, out of memory) gives a row with the reason instead of a time.

Peak memory is what the call allocates beyond its inputs: on CUDA from
`torch.cuda.max_memory_allocated`, on the CPU from a `PeakMemoryTracker`, which follows every
tensor the call creates until it is freed.

With `BenchConfig.backward` (`attn-course bench --backward`, notebook 09) each provider's backward
pass is timed instead, from the same forward: autograd through naive attention ("naive") and
through SDPA ("sdpa-<backend>"), `flash_attention_backward` from the forward's out and lse
("tiled"), and notebook 09's Triton backward ("triton", compiled only). Peak memory and the largest
tensor are then those of a whole training step's attention, forward and backward.

Introduced in 06_flash_attention (the backward in 09_backward).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar, cast

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from attn_course.attention import attention
from attn_course.demos.cost import AllocationTracker, fit_power_law
from attn_course.device import SDPA_BACKEND_MEMBERS, cpu_name, torch_threads
from attn_course.flash import flash_attention_backward, flash_attention_forward
from attn_course.flash_fast import flash_attention_fast

PEAK_TFLOPS: dict[str, dict[str, float]] = {
    # dense tensor-core peaks (no sparsity) from the vendors' data sheets; float32 without TF32
    "T4": {"float16": 65.0, "float32": 8.1},
    "L4": {"float16": 121.0, "bfloat16": 121.0, "float32": 30.3},
    "A100": {"float16": 312.0, "bfloat16": 312.0, "float32": 19.5},
    "H100 PCIe": {"float16": 756.0, "bfloat16": 756.0, "float32": 51.0},
    "H100": {"float16": 989.0, "bfloat16": 989.0, "float32": 67.0},
    "H200": {"float16": 989.0, "bfloat16": 989.0, "float32": 67.0},
}
"""Peak TFLOP/s of the GPUs learners meet, by name (as in torch.cuda.get_device_name) and dtype."""

SDPA_BACKENDS = {"cpu": ("flash", "math"), "cuda": ("flash", "efficient", "cudnn", "math")}
"""The scaled_dot_product_attention backends the benchmark tries on each kind of device."""


def peak_tflops(device_name: str, dtype: torch.dtype | str) -> float | None:
    """The device's peak TFLOP/s in `dtype` where `PEAK_TFLOPS` knows it, else None.

    >>> peak_tflops("NVIDIA H100 80GB HBM3", torch.float16), peak_tflops("NVIDIA H100 PCIe", "bfloat16")
    (989.0, 756.0)
    >>> peak_tflops("Tesla T4", torch.bfloat16) is None, peak_tflops("NVIDIA L40S", "float16") is None
    (True, True)

    Introduced in 06_flash_attention.
    """
    name = str(dtype).removeprefix("torch.")
    for gpu, peaks in PEAK_TFLOPS.items():  # "H100 PCIe" is listed before "H100"
        if re.search(rf"\b{re.escape(gpu)}\b", device_name):
            return peaks.get(name)
    return None


def attention_flops(b: int, h: int, t: int, d: int, causal: bool = False, backward: bool = False) -> int:
    """FLOPs of attention's two matrix products, 4·B·H·T²·d, halved when causal.

    The backward's five products (dV = PᵀdO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀQ and recomputing
    S = QKᵀ) count 2.5 times the forward's two: 10·B·H·T²·d with `backward`.

    >>> attention_flops(1, 8, 4096, 64, causal=True) / 1e9
    17.179869184
    >>> attention_flops(1, 8, 4096, 64, causal=True, backward=True) / 1e9
    42.94967296

    Introduced in 06_flash_attention.
    """
    flops = (10 if backward else 4) * b * h * t * t * d
    return flops // 2 if causal else flops


class PeakMemoryTracker(AllocationTracker):
    """An `AllocationTracker` that also follows when each new tensor is freed: `peak` bytes live at once.

    >>> with PeakMemoryTracker() as tracker:
    ...     x = torch.ones(1000)  # 4000 bytes
    ...     del x
    ...     y = torch.ones(500)  # 2000 bytes, after x was freed
    >>> tracker.peak, tracker.live
    (4000, 2000)

    Introduced in 06_flash_attention.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        """Bytes of the tracked tensors that are still alive."""
        self.peak = 0
        """The most bytes alive at once while the tracker was active."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {x.untyped_storage().data_ptr() for x in tree_flatten((args, kwargs))[0] if _is_tensor(x)}
        for x in tree_flatten(out)[0]:
            if not _is_tensor(x):
                continue
            ptr = x.untyped_storage().data_ptr()
            if ptr in inputs:
                continue
            inputs.add(ptr)
            nbytes = x.untyped_storage().nbytes()
            self.allocations.append(nbytes)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(x, self._free, nbytes)  # a view keeps its base, hence its storage, alive
        return out

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes


def _is_tensor(x: object) -> bool:
    return isinstance(x, torch.Tensor)


@dataclass(frozen=True)
class BenchRow:
    """One provider at one size: its median time, throughput and peak memory, or why it was skipped."""

    provider: str
    """"naive", "tiled", "triton" or "sdpa-<backend>"."""
    device: str
    """The device's name (GPU model or CPU)."""
    dtype: str
    """"float32", "float16" or "bfloat16"."""
    b: int
    """Batch size."""
    h: int
    """Heads."""
    t: int
    """Sequence length (as many queries as keys)."""
    d: int
    """Head dimension."""
    causal: bool
    """Whether the causal mask was applied."""
    seconds: float | None
    """Median time of one call after warm-up; None when skipped."""
    tflops: float | None
    """Achieved TFLOP/s: attention_flops / seconds."""
    percent_of_peak: float | None
    """tflops as a percentage of the device's peak in this dtype, where `PEAK_TFLOPS` knows it."""
    peak_bytes: int | None
    """Peak memory the call allocated beyond its inputs."""
    skipped: str = ""
    """Why the provider did not run here (empty when it ran)."""
    backward: bool = False
    """Whether the backward pass was timed (then peak_bytes covers forward and backward)."""
    largest_bytes: int | None = None
    """The largest single tensor the call created (CPU only; None where not measured)."""


class _RowFields(TypedDict):
    """The fields that say what a BenchRow measured, shared by its measured and skipped rows."""

    provider: str
    device: str
    dtype: str
    b: int
    h: int
    t: int
    d: int
    causal: bool


_T = TypeVar("_T")


def measured_value(value: _T | None) -> _T:
    """A measured row's seconds, tflops or peak_bytes: only skipped rows have None there.

    >>> measured_value(0.5)
    0.5

    Introduced in 06_flash_attention.
    """
    if value is None:
        raise ValueError("a skipped row has no measurements")
    return value


@dataclass(frozen=True)
class BenchConfig:
    """What `run_bench` measures: every combination of dtype, head dim, causal and length."""

    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32",)
    lengths: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    head_dims: tuple[int, ...] = (64, 128)
    causal: tuple[bool, ...] = (False, True)
    batch: int = 1
    heads: int = 8
    providers: tuple[str, ...] = ("naive", "tiled", "sdpa")
    """"sdpa" stands for every backend of SDPA_BACKENDS on the device; "sdpa-flash" for one."""
    block_size: int = 256
    """Block size of the tiled version."""
    repeats: int = 5
    """Timed calls per row at most (after one warm-up call) ..."""
    max_seconds: float = 1.0
    """... and fewer when they would take longer than this, at least one."""
    threads: int | None = None
    """CPU threads torch uses meanwhile (None: as set); 1 keeps timings steady on a shared machine."""
    backward: bool = False
    """Time each provider's backward pass instead of its forward (notebook 09)."""


def providers_for(config: BenchConfig) -> list[str]:
    """The provider names of a config, "sdpa" expanded to the device's backends."""
    kind = torch.device(config.device).type
    names: list[str] = []
    for name in config.providers:
        if name == "sdpa":
            names.extend(f"sdpa-{backend}" for backend in SDPA_BACKENDS.get(kind, ("math",)))
        else:
            names.append(name)
    return names


def fastest_sdpa(backends: Sequence[str]) -> str:
    """The provider of SDPA's fastest fused backend among `backends` (a DeviceSummary's sdpa_backends).

    Flash where the card has it (compute capability 8.0 on), else memory-efficient (a T4), else math:
    forcing "sdpa-flash" on a T4 raises "No available kernel".

    >>> fastest_sdpa(("flash", "efficient", "cudnn", "math")), fastest_sdpa(("efficient", "math"))
    ('sdpa-flash', 'sdpa-efficient')

    Introduced in 09_backward.
    """
    for backend in ("flash", "efficient"):
        if backend in backends:
            return f"sdpa-{backend}"
    return "sdpa-math"


def make_provider(name: str, block_size: int = 256) -> Callable[..., torch.Tensor]:
    """The function (q, k, v, is_causal) -> out that a provider name stands for."""
    if name == "naive":
        return lambda q, k, v, is_causal: attention(q, k, v, is_causal=is_causal)[0]
    if name == "tiled":
        return lambda q, k, v, is_causal: cast(
            torch.Tensor, flash_attention_fast(q, k, v, is_causal=is_causal, block_size=block_size)
        )
    if name.startswith("sdpa-") and name[5:] in SDPA_BACKEND_MEMBERS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, SDPA_BACKEND_MEMBERS[name[5:]])

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

        return sdpa
    if name == "triton":
        return _triton_attention
    backends = "|".join(SDPA_BACKEND_MEMBERS)
    raise ValueError(f"unknown provider {name!r}: naive, tiled, triton, sdpa or sdpa-<{backends}>")


def _triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """The "triton" provider: notebook 08's kernel where it is compiled; else a reason to skip the row."""
    from attn_course.triton_flash.runtime import triton_status

    status = triton_status()
    if not status.installed:
        raise RuntimeError(str(status))
    if q.device.type == "cpu":
        raise NotImplementedError("Triton runs interpreted on the CPU: not timed")
    if status.interpreted:
        raise NotImplementedError("Triton runs interpreted here (TRITON_INTERPRET=1): not timed")
    from attn_course.triton_flash.launchers import triton_flash_attention

    try:
        return triton_flash_attention(q, k, v, is_causal=is_causal)
    except Exception as error:
        if type(error).__module__.startswith("triton"):  # e.g. OutOfResources: too little shared memory
            raise RuntimeError(f"{type(error).__name__}: {error}") from error
        raise


def prepare_backward(
    name: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int = 256,
    triton_backward: Callable[..., Any] | None = None,
) -> Callable[[], Any]:
    """Run `name`'s forward on (q, k, v) once; return a call that runs its backward pass, again and again.

    The gradient of the output is a fixed random tensor. "naive" and "sdpa-<backend>" go back
    through autograd's graph (kept for the next call), "tiled" calls `flash_attention_backward`
    with the forward's out and lse, "triton" notebook 09's kernels (compiled only):
    `triton_backward(q, k, v, out, lse, grad_out, is_causal=...)`, the package's
    `triton_flash_attention_backward` by default (notebook 09 passes the learner's).

    Introduced in 09_backward.
    """
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(q.device, q.dtype)
    if name == "tiled":
        with torch.no_grad():
            out, lse = flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)
        return lambda: flash_attention_backward(q, k, v, out, lse, grad_out, is_causal, block_size)
    if name == "triton":
        _triton_attention(q, k, v, is_causal)  # the reasons to skip, where it cannot be timed
        from attn_course.triton_flash.launchers import (
            triton_flash_attention_backward,
            triton_flash_attention_forward,
        )

        backward = triton_backward or triton_flash_attention_backward
        out, lse = triton_flash_attention_forward(q, k, v, is_causal=is_causal)
        return lambda: backward(q, k, v, out, lse, grad_out, is_causal=is_causal)
    forward = make_provider(name, block_size)
    leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
    with torch.enable_grad():
        out = forward(*leaves, is_causal)
    return lambda: torch.autograd.grad(out, leaves, grad_out, retain_graph=True)


def measure_backward(
    name: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int = 256,
    repeats: int = 5,
    max_seconds: float = 1.0,
    triton_backward: Callable[..., Any] | None = None,
) -> tuple[float, int, int | None]:
    """(median seconds of one backward after a warm-up, peak bytes, largest tensor of forward and backward).

    The memory is measured on a fresh forward and one backward, so that it counts what a training
    step's attention holds: for autograd through naive attention the saved probabilities, for the
    tiled backward its tiles and the lse. The largest tensor is measured on the CPU only.
    `triton_backward`: the backward that "triton" times (`prepare_backward`).

    Introduced in 09_backward.
    """
    device = q.device
    backward = prepare_backward(name, q, k, v, is_causal, block_size, triton_backward)
    start = time.perf_counter()
    backward()
    _sync(device)
    first = time.perf_counter() - start
    times = []
    for _ in range(max(1, min(repeats, int(max_seconds / max(first, 1e-9))))):
        start = time.perf_counter()
        backward()
        _sync(device)
        times.append(time.perf_counter() - start)
    del backward
    largest = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        prepare_backward(name, q, k, v, is_causal, block_size, triton_backward)()
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        with PeakMemoryTracker() as tracker:
            prepare_backward(name, q, k, v, is_causal, block_size, triton_backward)()
        peak, largest = tracker.peak, max(tracker.allocations, default=0)
    times.sort()
    return times[len(times) // 2], peak, largest


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    fn: Callable[..., torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    repeats: int = 5,
    max_seconds: float = 1.0,
) -> tuple[float, int]:
    """(median seconds after one warm-up call, peak bytes beyond the inputs) of fn(q, k, v, is_causal)."""
    device = q.device
    with torch.no_grad():
        start = time.perf_counter()
        fn(q, k, v, is_causal)
        _sync(device)
        first = time.perf_counter() - start
        times = []
        for _ in range(max(1, min(repeats, int(max_seconds / max(first, 1e-9))))):
            start = time.perf_counter()
            fn(q, k, v, is_causal)
            _sync(device)
            times.append(time.perf_counter() - start)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            fn(q, k, v, is_causal)
            _sync(device)
            peak = torch.cuda.max_memory_allocated(device) - before
        else:
            with PeakMemoryTracker() as tracker:
                fn(q, k, v, is_causal)
            peak = tracker.peak
    times.sort()
    return times[len(times) // 2], peak


def _reason(error: BaseException, caught: Sequence[warnings.WarningMessage]) -> str:
    """A one-line reason from an exception and the warnings torch gave about refused kernels."""
    if isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower():
        return "out of memory"
    messages = [str(w.message).splitlines()[0] for w in caught if str(w.message).strip()]
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return "; ".join(dict.fromkeys([*messages[:2], first]))[:300]


def run_bench(config: BenchConfig, progress: Callable[[BenchRow], None] | None = None) -> list[BenchRow]:
    """Measure every provider of `config` at every size; skipped providers get a row with the reason.

    Once a provider runs out of memory at some length it is skipped, with that reason, at the
    longer ones. `progress`, when given, is called with each row as it is measured.

    Introduced in 06_flash_attention.
    """
    device = torch.device(config.device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    with torch_threads(config.threads):
        return _run(config, device, device_name, progress)


def _run(
    config: BenchConfig,
    device: torch.device,
    device_name: str,
    progress: Callable[[BenchRow], None] | None,
) -> list[BenchRow]:
    rows: list[BenchRow] = []
    generator = torch.Generator(device="cpu").manual_seed(0)
    for dtype_name in config.dtypes:
        dtype = getattr(torch, dtype_name)
        for d in config.head_dims:
            for causal in config.causal:
                out_of_memory: dict[str, int] = {}
                for t in config.lengths:
                    shape = (config.batch, config.heads, t, d)
                    q, k, v = (torch.randn(shape, generator=generator).to(device, dtype) for _ in range(3))
                    for name in providers_for(config):
                        base = _RowFields(provider=name, device=device_name, dtype=dtype_name, b=config.batch,
                                          h=config.heads, t=t, d=d, causal=causal)  # fmt: skip
                        if name in out_of_memory:
                            reason = f"out of memory at T={out_of_memory[name]}"
                            row = BenchRow(**base, seconds=None, tflops=None, percent_of_peak=None,
                                           peak_bytes=None, skipped=reason,
                                           backward=config.backward)  # fmt: skip
                        else:
                            row = _measure_row(name, config, q, k, v, causal, base, device_name, dtype)
                            if row.skipped == "out of memory":
                                out_of_memory[name] = t
                        rows.append(row)
                        if progress is not None:
                            progress(row)
                    del q, k, v
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
    return rows


def _measure_row(
    name: str,
    config: BenchConfig,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    base: _RowFields,
    device_name: str,
    dtype: torch.dtype,
) -> BenchRow:
    largest = None
    fn = make_provider(name, config.block_size)  # an unknown name is an error, not a skipped row
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if config.backward:
                seconds, peak, largest = measure_backward(
                    name, q, k, v, causal, config.block_size, config.repeats, config.max_seconds
                )
            else:
                seconds, peak = measure(fn, q, k, v, causal, config.repeats, config.max_seconds)
        except (RuntimeError, NotImplementedError, ValueError) as error:  # a refused backend, OOM
            if q.device.type == "cuda":
                torch.cuda.empty_cache()
            return BenchRow(**base, seconds=None, tflops=None, percent_of_peak=None, peak_bytes=None,
                            skipped=_reason(error, caught), backward=config.backward)  # fmt: skip
    b, h, t, d = q.shape
    tflops = attention_flops(b, h, t, d, causal, backward=config.backward) / seconds / 1e12
    peak_device = peak_tflops(device_name, dtype) if q.device.type == "cuda" else None
    percent = 100 * tflops / peak_device if peak_device else None
    return BenchRow(**base, seconds=seconds, tflops=tflops, percent_of_peak=percent, peak_bytes=peak,
                    largest_bytes=largest, backward=config.backward)  # fmt: skip


def format_table(rows: Sequence[BenchRow]) -> str:
    """The rows as an aligned text table; skipped rows show their reason.

    Introduced in 06_flash_attention.
    """
    header = f"{'provider':<15} {'dtype':<9} {'d':>4} {'causal':<6} {'T':>6} {'ms':>10} {'TFLOP/s':>8} " \
             f"{'% peak':>7} {'peak MiB':>9}"  # fmt: skip
    lines = [header, "-" * len(header)]
    for r in rows:
        start = f"{r.provider:<15} {r.dtype:<9} {r.d:>4} {r.causal!s:<6} {r.t:>6}"
        if r.skipped:
            lines.append(f"{start} skipped: {r.skipped}")
            continue
        percent = f"{r.percent_of_peak:6.1f}%" if r.percent_of_peak is not None else f"{'–':>7}"
        seconds, peak_bytes = measured_value(r.seconds), measured_value(r.peak_bytes)
        lines.append(f"{start} {seconds * 1e3:>10.2f} {r.tflops:>8.3f} {percent} {peak_bytes / 2**20:>9.1f}")
    return "\n".join(lines)


def write_json(rows: Sequence[BenchRow], path: Path) -> None:
    """Write the rows as a JSON list of objects."""
    path.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8")


def write_csv(rows: Sequence[BenchRow], path: Path) -> None:
    """Write the rows as CSV, one column per BenchRow field."""
    fields = [f.name for f in dataclasses.fields(BenchRow)]
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in rows)


def read_json(path: Path) -> list[BenchRow]:
    """Rows written by `write_json`."""
    return [BenchRow(**item) for item in json.loads(path.read_text(encoding="utf-8"))]


def memory_slopes(rows: Sequence[BenchRow]) -> dict[tuple[str, str, int, bool], float]:
    """Log-log slope of peak memory against T per (provider, dtype, d, causal), from 2+ measured rows.

    Introduced in 06_flash_attention.
    """
    groups: dict[tuple[str, str, int, bool], list[BenchRow]] = {}
    for r in rows:
        if not r.skipped and r.peak_bytes:
            groups.setdefault((r.provider, r.dtype, r.d, r.causal), []).append(r)
    return {
        key: fit_power_law([r.t for r in group], [measured_value(r.peak_bytes) for r in group]).exponent
        for key, group in groups.items()
        if len({r.t for r in group}) >= 2
    }


def find_row(rows: Sequence[BenchRow], provider: str, **fields: Any) -> BenchRow | None:
    """The first measured row of `provider` whose fields equal `fields` (t=4096, d=64, ...), or None."""
    for r in rows:
        if r.provider == provider and not r.skipped and all(getattr(r, f) == v for f, v in fields.items()):
            return r
    return None


def target_summary(rows: Sequence[BenchRow], t: int | None = None, d: int | None = None) -> str:
    """The performance targets of notebook 06, read off the rows (causal, d=64 if measured, longest T).

    CPU: tiled within 2× the time of SDPA (its flash backend, else the fastest), and at least 16×
    less peak memory than naive. GPU: SDPA's flash backend at least 5× faster than naive, and its
    share of the device's peak; where the Triton kernel of notebook 08 was timed, at least 0.8× the
    throughput of that SDPA backend.

    Introduced in 06_flash_attention.
    """
    causal = [r for r in rows if r.causal and not r.skipped]
    if d is None:
        d = 64 if any(r.d == 64 for r in causal) else min((r.d for r in causal), default=64)
    measured = [r for r in causal if r.d == d]
    if not measured:
        return f"targets: no measured causal rows with d={d}"
    t = t or max(r.t for r in measured)
    lines = []
    for dtype in dict.fromkeys(r.dtype for r in measured):
        at = {r.provider: r for r in measured if r.t == t and r.dtype == dtype}
        head = f"causal, d={d}, T={t}, {dtype}:"
        sdpa = at.get("sdpa-flash") or min(
            (r for n, r in at.items() if n.startswith("sdpa-")),
            key=lambda r: measured_value(r.seconds),
            default=None,
        )
        naive, tiled, kernel = at.get("naive"), at.get("tiled"), at.get("triton")
        parts = []
        if any(r.backward for r in at.values()):
            head = f"backward, causal, d={d}, T={t}, {dtype}:"
            parts = _backward_targets(naive, tiled, kernel, sdpa, rows, d, dtype)
            lines.append(head + ("\n  " + "\n  ".join(parts) if parts else " nothing to compare"))
            continue
        if tiled and sdpa:
            ratio = measured_value(tiled.seconds) / measured_value(sdpa.seconds)
            parts.append(f"tiled / {sdpa.provider} time = {ratio:.2f}× (target ≤ 2×)")
        if naive and tiled and tiled.peak_bytes:
            ratio = measured_value(naive.peak_bytes) / tiled.peak_bytes
            parts.append(f"naive / tiled peak memory = {ratio:.1f}× (target ≥ 16×)")
        if naive and sdpa:
            ratio = measured_value(naive.seconds) / measured_value(sdpa.seconds)
            parts.append(f"naive / {sdpa.provider} time = {ratio:.1f}× (GPU target ≥ 5×)")
        if kernel and sdpa:
            ratio = measured_value(sdpa.seconds) / measured_value(kernel.seconds)
            parts.append(f"triton / {sdpa.provider} throughput = {ratio:.2f}× (GPU target ≥ 0.8×)")
        if sdpa and sdpa.percent_of_peak is not None:
            parts.append(f"{sdpa.provider} at {sdpa.percent_of_peak:.1f}% of the device's peak")
        lines.append(head + ("\n  " + "\n  ".join(parts) if parts else " nothing to compare"))
    return "\n".join(lines)


def _backward_targets(
    naive: BenchRow | None, tiled: BenchRow | None, kernel: BenchRow | None, sdpa: BenchRow | None,
    rows: Sequence[BenchRow], d: int, dtype: str,
) -> list[str]:  # fmt: skip
    """Notebook 09's targets: the tiled backward against SDPA's, its memory against naive autograd's."""
    parts = []
    if tiled and sdpa:
        ratio = measured_value(tiled.seconds) / measured_value(sdpa.seconds)
        parts.append(f"tiled backward / {sdpa.provider} backward time = {ratio:.2f}× (target ≤ 2×)")
    if naive and naive.largest_bytes is not None and tiled and tiled.largest_bytes:
        ratio = naive.largest_bytes / tiled.largest_bytes
        parts.append(f"naive / tiled largest tensor = {ratio:.1f}× (target ≥ 16×)")
    if naive and tiled and tiled.peak_bytes:
        ratio = measured_value(naive.peak_bytes) / tiled.peak_bytes
        parts.append(f"naive / tiled peak memory = {ratio:.1f}×")
    measured = [r for r in rows if r.causal and r.d == d and r.dtype == dtype]
    slopes = memory_slopes(measured)
    for provider in ("tiled", "naive"):
        slope = slopes.get((provider, dtype, d, True))
        if slope is not None:
            parts.append(f"{provider} peak memory slope in T = {slope:.2f} (target: tiled 1, naive 2)")
    tiled_rows = sorted((r for r in measured if r.provider == "tiled" and r.peak_bytes), key=lambda r: r.t)
    pairs = zip(tiled_rows, tiled_rows[1:], strict=False)
    steps = {(measured_value(b.peak_bytes) - measured_value(a.peak_bytes)) // (b.t - a.t) for a, b in pairs}
    if len(tiled_rows) >= 3 and len(steps) == 1:  # the tiles are a constant: slope 1 once it is taken off
        parts.append(f"tiled peak memory is affine in T: {steps.pop():,} bytes more per token (slope 1 above "
                     "its constant tiles)")  # fmt: skip
    if kernel and sdpa:
        ratio = measured_value(sdpa.seconds) / measured_value(kernel.seconds)
        parts.append(f"triton / {sdpa.provider} backward throughput = {ratio:.2f}× (GPU target ≥ 0.6×)")
    return parts


def default_bench_config(
    device: torch.device | str, quick: bool = False, with_triton: bool = False
) -> BenchConfig:
    """The comparison of notebook 06 on `device`: to T=4096 on a CPU, 16384 on a GPU; tiny when quick.

    With `with_triton`, on a GPU it also times notebook 08's Triton kernel ("triton"), as
    `attn-course bench` does; the interpreter is never timed.

    >>> default_bench_config("cpu", quick=True).lengths
    (256, 512)

    Introduced in 06_flash_attention.
    """
    kind = torch.device(device).type
    if kind == "cuda":
        # not emulated: torch.cuda.is_bf16_supported() alone also says True on a T4
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
        config = BenchConfig(device=str(device), dtypes=("float16", "bfloat16") if bf16 else ("float16",),
                             lengths=(256, 512, 1024, 2048, 4096, 8192, 16384), block_size=1024,
                             providers=("naive", "tiled", "triton", "sdpa") if with_triton else
                             ("naive", "tiled", "sdpa"))  # fmt: skip
    else:
        config = BenchConfig(device=str(device))
    if quick:
        config = dataclasses.replace(config, lengths=(256, 512), head_dims=(64,), dtypes=config.dtypes[:1],
                                     repeats=1, max_seconds=0.1)  # fmt: skip
    return config


def run_and_save(config: BenchConfig, out: Path | None, progress: bool = True) -> list[BenchRow]:
    """Run the benchmark, print the table, and write bench.json, bench.csv and the plots into `out`.

    This is what `attn-course bench` does.

    Introduced in 06_flash_attention.
    """

    def show(row: BenchRow) -> None:
        state = row.skipped or f"{measured_value(row.seconds) * 1e3:.2f} ms"
        print(f"  {row.provider} {row.dtype} d={row.d} causal={row.causal} T={row.t}: {state}", flush=True)

    rows = run_bench(config, progress=show if progress else None)
    print(format_table(rows))
    print(target_summary(rows))
    if out is not None:
        from attn_course.plots.flash import plot_bench

        out.mkdir(parents=True, exist_ok=True)
        write_json(rows, out / "bench.json")
        write_csv(rows, out / "bench.csv")
        for kind, figure in plot_bench(rows).items():
            figure.savefig(out / f"bench_{kind}.png", dpi=100, bbox_inches="tight")
        print(f"wrote bench.json, bench.csv, bench_time.png and bench_memory.png into {out}")
    return rows


__all__ = [
    "PEAK_TFLOPS",
    "BenchConfig",
    "BenchRow",
    "PeakMemoryTracker",
    "attention_flops",
    "default_bench_config",
    "fastest_sdpa",
    "format_table",
    "measure_backward",
    "measured_value",
    "memory_slopes",
    "peak_tflops",
    "prepare_backward",
    "run_and_save",
    "run_bench",
    "target_summary",
]
