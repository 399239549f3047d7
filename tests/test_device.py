"""Tests of attn_course/device.py: the device summary, on the CPU every machine has."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_course import device as device_module
from attn_course.demos.cost import measure_cost
from attn_course.device import DeviceSummary, describe_device, device_summary, sdpa_backends


def test_cpu_summary_describes_this_machine() -> None:
    summary = device_summary("cpu")
    assert summary.kind == "cpu" and summary.index is None and not summary.is_gpu
    assert summary.device == torch.device("cpu")
    assert summary.compute_capability is None
    assert summary.torch_version == torch.__version__
    assert summary.name and summary.threads >= 1
    assert summary.memory_bytes is None or summary.memory_bytes > 2**20
    assert "math" in summary.sdpa_backends  # the math backend runs everywhere
    assert set(summary.sdpa_backends) <= {"flash", "efficient", "cudnn", "math"}


def test_summary_is_cached_per_device() -> None:
    assert device_summary("cpu") is device_summary(torch.device("cpu"))


def test_default_is_the_best_device_here() -> None:
    expected = "cuda" if torch.cuda.is_available() else None
    summary = device_summary()
    if expected:
        assert summary.kind == "cuda" and summary.compute_capability is not None
    elif not (torch.backends.mps.is_available()):
        assert summary == device_summary("cpu")


@pytest.mark.parametrize(("kind", "expected"), [("cpu", 128), ("cuda", 8192), ("mps", 8192)])
def test_pick_takes_the_gpu_size_on_a_gpu_only(kind: str, expected: int) -> None:
    summary = DeviceSummary(kind, 0 if kind == "cuda" else None, "x", None, None, 1, "2", ("math",))
    assert summary.pick(cpu=128, gpu=8192) == expected
    assert summary.is_gpu == (kind != "cpu")


def test_str_is_two_lines_naming_device_memory_and_backends() -> None:
    summary = DeviceSummary("cuda", 0, "NVIDIA H100", (9, 0), 80 * 2**30, 8, "2.5.0", ("flash", "math"))
    first, second = str(summary).splitlines()
    assert first == "cuda:0 · NVIDIA H100 · compute capability 9.0 · 80.0 GiB"
    assert second == "torch 2.5.0 · scaled_dot_product_attention backends: flash, math"
    assert "none found" in str(DeviceSummary("cpu", None, "cpu", None, None, 2, "2.2.0", ()))


def test_describe_device_prints_the_summary(capsys) -> None:
    assert describe_device("cpu") is None
    assert capsys.readouterr().out == f"{device_summary('cpu')}\n"


def test_backends_that_are_listed_really_run_on_cpu() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 16, 64)  # (B, H, T, d)
    reference = F.scaled_dot_product_attention(q, q, q)
    members = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
    for name in sdpa_backends("cpu"):
        with sdpa_kernel(getattr(SDPBackend, members.get(name, "MATH"))):
            out = F.scaled_dot_product_attention(q, q, q)
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


def test_a_backend_that_fails_is_left_out_without_an_error(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise RuntimeError("No available kernel")

    monkeypatch.setattr(device_module.F, "scaled_dot_product_attention", refuse)
    assert sdpa_backends("cpu") == ()
    assert sdpa_backends("cpu", torch.float16) == ()


def test_measure_cost_runs_on_the_picked_device() -> None:
    summary = device_summary()
    rows = measure_cost(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        summary.pick(cpu=[8, 16], gpu=[8, 16]),
        d=4,
        repeats=1,
        device=summary.device,
    )
    assert [row.t for row in rows] == [8, 16]
    assert all(row.seconds > 0 for row in rows)
