"""Profile one call of an attention function: which operations (or GPU kernels) it runs, how many, how long.

`profile_call` runs the call once under `torch.profiler` and keeps, per operation, its calls and
time: on a CPU the PyTorch operations the function calls itself (``aten::matmul``, ``aten::exp``, …;
what each one calls inside is counted in its time, not as an operation of its own), on a GPU the
kernels launched. The time of the call that no operation accounts for is spent between them, in
Python. `profile_table` sets several calls side by side.

>>> import torch.nn.functional as F
>>> q = k = v = torch.randn(1, 2, 64, 16)  # (B, H, T, d)
>>> profile = profile_call("SDPA", F.scaled_dot_product_attention, q, k, v)
>>> profile.launches >= 1 and profile.seconds > 0
True

Introduced in 06_flash_attention.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

_CALL = "attn_course.profiled_call"
"""The name of the profiler range around the profiled call: its children are the call's operations."""


@dataclass(frozen=True)
class OpStat:
    """One operation (or GPU kernel) of a profiled call: how often it ran and for how long in all."""

    name: str
    """``aten::exp`` on a CPU; the kernel's name on a GPU."""
    calls: int
    """How many times the call ran it."""
    seconds: float
    """Its total time: on a CPU including what it calls inside, on a GPU the kernels' own time."""


@dataclass(frozen=True)
class CallProfile:
    """What one call of an attention function ran, on which device, and how long it took."""

    label: str
    """The name the call is shown under ("naive", "yours", "SDPA")."""
    device: str
    """"cpu": `ops` are the PyTorch operations called; "cuda": `ops` are the kernels launched."""
    seconds: float
    """The call's wall-clock time under the profiler (which slows each operation a little)."""
    ops: tuple[OpStat, ...]
    """Its operations or kernels, the longest first."""

    @property
    def launches(self) -> int:
        """How many operations (CPU) or kernels (GPU) the call ran."""
        return sum(op.calls for op in self.ops)

    @property
    def op_seconds(self) -> float:
        """The time spent inside those operations or kernels."""
        return sum(op.seconds for op in self.ops)


def profile_call(
    label: str, fn: Callable[..., Any], *args: Any, warmup: int = 1, **kwargs: Any
) -> CallProfile:
    """Run `fn(*args, **kwargs)` `warmup` times, then once under torch.profiler; what that call ran.

    On a GPU (when the first tensor argument is on one) the kernels launched are counted, with
    ProfilerActivity.CUDA; on a CPU the PyTorch operations `fn` calls.
    """
    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
    on_gpu = device == "cuda" and torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args, **kwargs)
        if on_gpu:
            torch.cuda.synchronize()
        with _quiet_stderr(), profile(activities=activities) as prof:
            start = time.perf_counter()
            with record_function(_CALL):
                fn(*args, **kwargs)
            if on_gpu:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
    events, kinds = prof.events(), torch.autograd.DeviceType
    if on_gpu:
        timed = [(e.name, e.device_time_total) for e in events if e.device_type == kinds.CUDA]
    else:
        calls = [e for e in events if e.name == _CALL and e.device_type == kinds.CPU]
        timed = [(child.name, child.cpu_time_total) for e in calls for child in e.cpu_children]
    return CallProfile(label, "cuda" if on_gpu else "cpu", seconds, _grouped(timed))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ start and stop lines); Python's sys.stderr stays."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to silence
        yield
        return
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _grouped(timed: Sequence[tuple[str, float]]) -> tuple[OpStat, ...]:
    """(name, microseconds) pairs summed per name into OpStats, the longest first."""
    calls: dict[str, int] = {}
    micros: dict[str, float] = {}
    for name, us in timed:
        calls[name] = calls.get(name, 0) + 1
        micros[name] = micros.get(name, 0.0) + us
    stats = (OpStat(name, calls[name], micros[name] / 1e6) for name in calls)
    return tuple(sorted(stats, key=lambda op: op.seconds, reverse=True))


def profile_table(profiles: Sequence[CallProfile], top: int = 5, width: int = 48) -> str:
    """A text table: per call its launches, time in operations and between them; then each one's top ops.

    >>> op = OpStat("aten::exp", 3, 0.002)
    >>> print(profile_table([CallProfile("yours", "cpu", 0.004, (op,))], top=1))
    call      ops  in ops (ms)  between ops (ms)  total (ms)
    yours       3          2.0               2.0         4.0
    <BLANKLINE>
    yours: the 1 longest of 1 kinds of operation
      aten::exp                                        3 calls     2.0 ms   50%
    """
    kind = "kernels" if any(p.device == "cuda" for p in profiles) else "ops"
    lines = [f"{'call':8} {kind:>5}  in {kind} (ms)  between {kind} (ms)  total (ms)"]
    for p in profiles:
        between = max(p.seconds - p.op_seconds, 0.0) if p.device == "cpu" else p.seconds - p.op_seconds
        times = f"{p.op_seconds * 1e3:11.1f}  {between * 1e3:16.1f}  {p.seconds * 1e3:10.1f}"
        lines.append(f"{p.label:8} {p.launches:5}  {times}")
    for p in profiles:
        shown = p.ops[:top]
        lines += ["", f"{p.label}: the {len(shown)} longest of {len(p.ops)} kinds of {_one(kind)}"]
        for op in shown:
            share = op.seconds / p.seconds if p.seconds else 0.0
            lines.append(
                f"  {op.name[:width]:{width}} {op.calls:5} calls {op.seconds * 1e3:7.1f} ms {share:5.0%}"
            )
    return "\n".join(lines)


def _one(kind: str) -> str:
    return "kernel" if kind == "kernels" else "operation"
