"""Tests of attn_course/device.py: the device summary, on the CPU every machine has."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_course import device as device_module
from attn_course.demos.cost import measure_cost
from attn_course.device import (
    EAGER,
    FMA,
    INTERPRETED,
    REFUSED,
    TENSOR_CORES,
    DeviceSummary,
    describe_device,
    device_summary,
    gpu_paths,
    sdpa_backends,
)

GIB = 2**30
CARDS = {  # name, compute capability, memory, the SDPA backends torch 2.13 runs there (sdp_utils.cpp)
    "T4": ("Tesla T4", (7, 5), 15 * GIB, ("efficient", "math")),
    "A100": ("NVIDIA A100-SXM4-80GB", (8, 0), 80 * GIB, ("flash", "efficient", "cudnn", "math")),
    "H100": ("NVIDIA H100 80GB HBM3", (9, 0), 80 * GIB, ("flash", "efficient", "cudnn", "math")),
}
"""Colab's free GPU and the two a paid runtime gives, as torch.cuda describes them."""


def card(key: str) -> DeviceSummary:
    """The summary a notebook would print on that card: a DeviceSummary built with its values."""
    name, capability, memory, backends = CARDS[key]
    return DeviceSummary("cuda", 0, name, capability, memory, 8, "2.13.0", backends)


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


def test_str_names_device_memory_backends_and_how_kernels_run() -> None:
    summary = DeviceSummary("cuda", 0, "NVIDIA H100", (9, 0), 80 * 2**30, 8, "2.5.0", ("flash", "math"))
    first, second, third = str(summary).splitlines()
    assert first == "cuda:0 · NVIDIA H100 · compute capability 9.0 · 80.0 GiB"
    assert second == "torch 2.5.0 · scaled_dot_product_attention backends: flash, math"
    assert third.startswith("Triton kernels (08, 09): compiled, tensor cores (float16, bfloat16, float32)")
    assert "none found" in str(DeviceSummary("cpu", None, "cpu", None, None, 2, "2.2.0", ()))
    assert len(str(device_summary("cpu")).splitlines()) == 2  # off CUDA: no kernel line


def how(summary: DeviceSummary) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {path.name: (path.how, path.dtypes) for path in summary.paths}


def test_a_t4_compiles_triton_without_tensor_cores_and_has_no_flash_cudnn_or_fast_bf16() -> None:
    t4 = card("T4")
    paths = how(t4)
    assert paths["triton"] == (FMA, ("float16", "bfloat16", "float32"))
    assert paths["sdpa-flash"] == (REFUSED, ()) and paths["sdpa-cudnn"] == (REFUSED, ())
    assert paths["sdpa-efficient"] == (TENSOR_CORES, ("float16", "float32"))  # no bfloat16 before sm80
    assert paths["sdpa-math"][0] == EAGER
    assert paths["flex"] == (FMA, ("float16", "float32"))  # bfloat16 is not compiled before sm80
    assert paths["bfloat16"] == ("emulated", ())
    assert not t4.supports_bf16
    lines = str(t4).splitlines()
    assert lines[0] == "cuda:0 · Tesla T4 · compute capability 7.5 · 15.0 GiB"
    assert lines[1].endswith("backends: efficient, math")
    assert "Triton kernels (08, 09): compiled, no tensor cores (FMA)" in lines[2]
    assert "bfloat16: emulated" in lines[2]
    warning = lines[3]
    assert warning.startswith("⚠️ Tesla T4 predates Ampere (compute capability 7.5 < 8.0)")
    phrases = ("CUDA cores, not the tensor cores", "no flash or cuDNN kernel", "uses float16", "runs, slower")
    for phrase in phrases:
        assert phrase in warning


@pytest.mark.parametrize("key", ["A100", "H100"])
def test_ampere_and_hopper_run_every_path_on_tensor_cores_with_native_bf16(key: str) -> None:
    summary = card(key)
    paths = how(summary)
    for name in ("triton", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "flex"):
        assert paths[name][0] == TENSOR_CORES, name
        assert "bfloat16" in paths[name][1], name
    assert paths["bfloat16"][0] == "native" and summary.supports_bf16
    assert summary.pre_ampere_note() is None
    assert len(str(summary).splitlines()) == 3 and "⚠️" not in str(summary)


def test_cards_older_than_turing_interpret_triton_and_run_flex_unfused() -> None:
    paths = {path.name: path for path in gpu_paths((6, 0), "Tesla P100-PCIE-16GB")}
    assert paths["triton"].how == INTERPRETED and "older than the Turing architecture" in paths["triton"].why
    assert paths["flex"].how == EAGER and "7.0" in paths["flex"].why
    assert paths["sdpa-efficient"].how == FMA  # CUTLASS without tensor cores, still fused
    assert gpu_paths((7, 0), "Tesla V100")[0].how == INTERPRETED  # Volta: below the course's 7.5
    assert {p.name: p.how for p in gpu_paths((7, 0))}["flex"] == FMA  # torch.compile allows 7.0
    p100 = "Tesla P100-PCIE-16GB"
    summary = DeviceSummary("cuda", 0, p100, (6, 0), 16 * GIB, 8, "2.13.0", ("efficient", "math"))
    assert "Triton's kernels run through the interpreter" in (summary.pre_ampere_note() or "")


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (12, 0)])
def test_every_card_has_one_path_of_each_kind_and_a_reason(capability: tuple[int, int]) -> None:
    paths = gpu_paths(capability, "GPU")
    assert [p.name for p in paths] == [
        "triton", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "flex", "bfloat16"
    ]  # fmt: skip
    assert all(path.why.endswith(".") or path.why.endswith(")") for path in paths)
    assert all((path.how == REFUSED) == (path.dtypes == ()) for path in paths if path.name != "bfloat16")


def test_the_sdpa_backends_a_card_runs_are_those_gpu_paths_does_not_refuse() -> None:
    for key in CARDS:
        summary = card(key)
        refused = {p.name.removeprefix("sdpa-") for p in summary.paths if p.how == REFUSED}
        assert not refused & set(summary.sdpa_backends), key
        sdpa = {p.name.removeprefix("sdpa-") for p in summary.paths if p.name.startswith("sdpa-")}
        assert sdpa - refused == set(summary.sdpa_backends), key


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
