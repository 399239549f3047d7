"""The "triton" provider of the attention benchmark: timed on a GPU only, skipped with a reason elsewhere."""

from __future__ import annotations

import pytest
import torch

from attn_course.demos import attention_bench as bench
from attn_course.triton_flash.runtime import TritonStatus

TINY = dict(dtypes=("float32",), lengths=(32,), head_dims=(16,), causal=(False, True), heads=2, repeats=1)


def test_triton_is_skipped_on_the_cpu_with_the_reason():
    config = bench.BenchConfig(providers=("triton", "naive"), **TINY)
    rows = bench.run_bench(config)
    triton_rows = [r for r in rows if r.provider == "triton"]
    assert len(triton_rows) == 2
    for row in triton_rows:
        assert row.skipped == "Triton runs interpreted on the CPU: not timed"
        assert row.seconds is None and row.tflops is None and row.peak_bytes is None
    assert all(not r.skipped for r in rows if r.provider == "naive")
    assert "skipped: Triton runs interpreted on the CPU: not timed" in bench.format_table(rows)


def test_triton_is_skipped_with_how_to_get_it_where_it_is_not_installed(monkeypatch):
    missing = TritonStatus(False, None, False, "cpu", "install it with `pip install triton`.")
    monkeypatch.setattr("attn_course.triton_flash.runtime.triton_status", lambda: missing)
    rows = bench.run_bench(bench.BenchConfig(providers=("triton",), **TINY))
    assert [r.skipped for r in rows] == ["Triton is not installed: install it with `pip install triton`."] * 2


def test_triton_is_not_timed_through_the_interpreter_on_gpu_tensors():
    # The test session sets TRITON_INTERPRET=1 (conftest), so even CUDA tensors are not timed.
    fn = bench.make_provider("triton")
    q = torch.zeros(1, 1, 4, 16, device="meta")  # a non-CPU device without a GPU
    with pytest.raises(NotImplementedError, match=r"interpreted here \(TRITON_INTERPRET=1\): not timed"):
        fn(q, q, q, False)


def test_attn_course_bench_times_triton_on_a_gpu_and_notebook_06_does_not():
    cuda = bench.default_bench_config("cuda", with_triton=True)  # built without running anything: no GPU
    assert "triton" in cuda.providers and "triton" in bench.providers_for(cuda)
    assert "triton" in bench.default_bench_config("cuda", quick=True, with_triton=True).providers
    assert "triton" not in bench.default_bench_config("cuda").providers  # notebook 06 comes before Triton
    assert "triton" not in bench.default_bench_config("cpu", with_triton=True).providers
    assert "triton" not in bench.providers_for(bench.default_bench_config("cpu", quick=True))


def test_the_bench_command_asks_for_triton_on_cuda(monkeypatch):
    from attn_course.cli import main

    seen = []
    monkeypatch.setattr(bench, "run_and_save", lambda config, out: seen.append(config))
    assert main(["bench", "--device", "cuda", "--quick"]) == 0
    assert main(["bench", "--device", "cuda", "--providers", "naive", "sdpa-flash"]) == 0
    assert "triton" in seen[0].providers and seen[1].providers == ("naive", "sdpa-flash")


def test_an_unknown_provider_lists_triton():
    with pytest.raises(ValueError, match="triton"):
        bench.make_provider("cuda-kernel")


def _row(provider: str, seconds: float) -> bench.BenchRow:
    return bench.BenchRow(provider, "NVIDIA H100 80GB HBM3", "float16", 1, 8, 4096, 64, True,
                          seconds, 1.0, None, 0)  # fmt: skip


def test_target_summary_reports_triton_against_sdpa_flash():
    rows = [_row("sdpa-flash", 2e-3), _row("triton", 2.5e-3), _row("naive", 20e-3)]
    summary = bench.target_summary(rows, t=4096, d=64)
    assert "triton / sdpa-flash throughput = 0.80× (GPU target ≥ 0.8×)" in summary
    assert "triton" not in bench.target_summary(rows[::2], t=4096, d=64)


def test_a_triton_error_on_a_gpu_becomes_a_skipped_row(monkeypatch):
    class OutOfResources(Exception):  # stands for triton.runtime.errors.OutOfResources
        __module__ = "triton.runtime.errors"

    def refuse(q, k, v, is_causal=False):
        raise OutOfResources("out of resource: shared memory, Required: 98304, Hardware limit: 65536")

    compiled = TritonStatus(True, "3.9.0", False, "cuda", "Kernels take tensors on Tesla T4.")
    monkeypatch.setattr("attn_course.triton_flash.runtime.triton_status", lambda: compiled)
    monkeypatch.setattr("attn_course.triton_flash.launchers.triton_flash_attention", refuse)
    q = torch.zeros(1, 1, 4, 16, device="meta")
    with pytest.raises(RuntimeError, match="OutOfResources: out of resource: shared memory"):
        bench.make_provider("triton")(q, q, q, True)
