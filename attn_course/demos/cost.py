"""Measuring what attention costs: time and memory of the T×T score matrix as T grows.

Memory is measured, not computed: while the measured call runs, a `TorchDispatchMode` sees
every tensor operation and records the bytes of each new tensor it returns (views and in-place
results share storage with an input and are not counted).

Introduced in 01_dot_product_attention.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from attn_course.device import torch_threads

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any]
"""A function of (q, k, v), each of shape (T, d), such as `dot_product_attention`."""


@dataclass(frozen=True)
class CostRow:
    """What one call of an attention function cost at one sequence length."""

    t: int
    """Sequence length T (as many queries as keys)."""
    d: int
    """Width of the queries, keys and values."""
    seconds: float
    """Median wall-clock time of one call, after warm-up."""
    allocated_bytes: int
    """Bytes of all the new tensors the call allocated, summed (a measurement)."""
    largest_bytes: int
    """Bytes of the largest single tensor the call allocated: the T×T matrix (a measurement)."""
    score_bytes: int
    """What one T×T matrix of the inputs' dtype takes by the formula: 4·T² for float32."""


class AllocationTracker(TorchDispatchMode):
    """Record the size in bytes of every new tensor that tensor operations return while active.

    An output that shares its storage with an input (a view such as a transpose, or the result
    of an in-place operation) allocates nothing and is not recorded.

    >>> with AllocationTracker() as tracker:
    ...     _ = torch.ones(3, 4) @ torch.ones(4, 5)
    >>> tracker.allocations
    [48, 80, 60]

    Introduced in 01_dot_product_attention.
    """

    def __init__(self) -> None:
        super().__init__()
        self.allocations: list[int] = []
        """Bytes of each new tensor, in the order they were created."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {_storage_ptr(x) for x in tree_flatten((args, kwargs))[0] if _is_tensor(x)}
        new: set[int] = set()
        for x in tree_flatten(out)[0]:
            if not _is_tensor(x):
                continue
            ptr = _storage_ptr(x)
            if ptr in inputs or ptr in new:
                continue
            new.add(ptr)
            self.allocations.append(x.untyped_storage().nbytes())
        return out


def _is_tensor(x: object) -> bool:
    return isinstance(x, torch.Tensor)


def _storage_ptr(x: torch.Tensor) -> int:
    return x.untyped_storage().data_ptr()


def score_matrix_bytes(t_q: int, t_k: int | None = None, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one (t_q, t_k) score matrix by the formula: element size · t_q · t_k.

    >>> score_matrix_bytes(1024)  # 4 · 1024², 4 MiB
    4194304

    Introduced in 01_dot_product_attention.
    """
    t_k = t_q if t_k is None else t_k
    return torch.empty((), dtype=dtype).element_size() * t_q * t_k


def median_seconds(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of `fn()` over `repeats` calls, after `warmup` untimed calls.

    Introduced in 01_dot_product_attention.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _call_and_wait(attention_fn: AttentionFn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """One call; on a GPU, wait until the GPU has finished it (kernels run asynchronously)."""
    attention_fn(q, k, v)
    if q.device.type == "cuda":
        torch.cuda.synchronize(q.device)


def measure_cost(
    attention_fn: AttentionFn,
    lengths: Sequence[int],
    *,
    d: int = 64,
    repeats: int = 5,
    warmup: int = 1,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    threads: int | None = 1,
    device: torch.device | str = "cpu",
) -> list[CostRow]:
    """Time and memory of `attention_fn(q, k, v)` on random (T, d) inputs, for each T.

    Each row holds the median time over `repeats` calls after `warmup` calls, and the bytes the
    call allocated, measured with an `AllocationTracker` on one more call. torch runs on
    `threads` threads meanwhile (restored afterwards; None keeps the current setting): one thread
    keeps timings steady on a shared machine, where a second thread often waits for a busy core.
    The inputs live on `device`; on a GPU each timed call waits for the GPU to finish.

    >>> from attn_course.attention import dot_product_attention
    >>> rows = measure_cost(dot_product_attention, [16, 32], d=8, repeats=1)
    >>> [(row.t, row.largest_bytes, row.score_bytes) for row in rows]
    [(16, 1024, 1024), (32, 4096, 4096)]

    Introduced in 01_dot_product_attention.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch_threads(threads):
        rows = []
        for t in lengths:
            q, k, v = torch.randn(3, t, d, generator=generator, dtype=dtype).to(device)  # 3 × (T, d)
            with torch.no_grad():
                call = functools.partial(_call_and_wait, attention_fn, q, k, v)
                seconds = median_seconds(call, repeats=repeats, warmup=warmup)
                with AllocationTracker() as tracker:
                    attention_fn(q, k, v)
            rows.append(
                CostRow(
                    t=t,
                    d=d,
                    seconds=seconds,
                    allocated_bytes=sum(tracker.allocations),
                    largest_bytes=max(tracker.allocations, default=0),
                    score_bytes=score_matrix_bytes(t, t, dtype),
                )
            )
    return rows


@dataclass(frozen=True)
class PowerLaw:
    """A fitted power law y ≈ prefactor · x**exponent (a straight line on log-log axes)."""

    exponent: float
    """The slope on log-log axes: 2 for a cost that grows like T²."""
    prefactor: float
    """The value of the fit at x = 1."""

    def __call__(self, x: float) -> float:
        """The fitted y at x."""
        return self.prefactor * x**self.exponent


def fit_power_law(x: Sequence[float], y: Sequence[float]) -> PowerLaw:
    """Least-squares fit of log y against log x: exponent p when y grows like x**p.

    >>> round(fit_power_law([1, 2, 4, 8], [3, 12, 48, 192]).exponent, 6)
    2.0

    Introduced in 01_dot_product_attention.
    """
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"need at least two (x, y) pairs of equal length, got {len(x)} and {len(y)}")
    if min(x) <= 0 or min(y) <= 0:
        raise ValueError("a log-log fit needs positive x and y")
    log_x = [math.log(value) for value in x]
    log_y = [math.log(value) for value in y]
    mean_x = statistics.fmean(log_x)
    mean_y = statistics.fmean(log_y)
    spread = sum((a - mean_x) ** 2 for a in log_x)
    if spread == 0:
        raise ValueError("a log-log fit needs at least two different x values")
    slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(log_x, log_y, strict=True)) / spread
    return PowerLaw(exponent=slope, prefactor=math.exp(mean_y - slope * mean_x))
