"""The attention benchmark: its formulas, its memory tracker, and `attn-course bench` at small sizes."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from attn_course.cli import main
from attn_course.demos import attention_bench as bench


def test_peak_tflops_by_device_name_and_dtype():
    assert bench.peak_tflops("Tesla T4", torch.float16) == 65.0
    assert bench.peak_tflops("NVIDIA A100-SXM4-80GB", "bfloat16") == 312.0
    assert bench.peak_tflops("NVIDIA H100 80GB HBM3", "float32") == 67.0
    assert bench.peak_tflops("NVIDIA H100 PCIe", "float16") == 756.0
    assert bench.peak_tflops("NVIDIA H200", "float16") == 989.0
    assert bench.peak_tflops("NVIDIA L4", "float16") == 121.0
    assert bench.peak_tflops("NVIDIA L40S", "float16") is None
    assert bench.peak_tflops("Intel(R) Xeon(R)", "float32") is None


def test_attention_flops_halved_when_causal():
    assert bench.attention_flops(2, 3, 10, 4) == 4 * 2 * 3 * 100 * 4
    assert bench.attention_flops(2, 3, 10, 4, causal=True) == 2 * 2 * 3 * 100 * 4


def test_peak_memory_tracker_follows_frees_and_views():
    with bench.PeakMemoryTracker() as tracker:
        a = torch.ones(1000)  # 4000 bytes
        view = a[10:]  # no new storage
        del a
        b = torch.ones(250)  # 1000 bytes; a's storage is still alive through the view
        del view, b
    assert tracker.allocations == [4000, 1000]
    assert tracker.peak == 5000 and tracker.live == 0


def test_naive_memory_grows_quadratically_and_tiled_linearly():
    config = bench.BenchConfig(lengths=(128, 256, 512), head_dims=(32,), causal=(True,), heads=1,
                               providers=("naive", "tiled"), block_size=32, repeats=1)  # fmt: skip
    rows = bench.run_bench(config)
    slopes = bench.memory_slopes(rows)
    assert slopes[("naive", "float32", 32, True)] == pytest.approx(2.0, abs=0.15)
    # The tiled peak is a constant (its tiles) plus, per query, one output row and one log-sum-exp:
    # exactly affine in T, so its log-log slope only tends to 1 as T grows.
    tiled = [row.peak_bytes for row in rows if row.provider == "tiled"]
    per_token = [(later - earlier) / (t_later - t_earlier) for earlier, later, t_earlier, t_later
                 in zip(tiled, tiled[1:], config.lengths, config.lengths[1:], strict=False)]  # fmt: skip
    assert per_token == [(32 + 1) * 4] * 2, per_token


def test_a_refused_backend_is_skipped_with_its_reason():
    config = bench.BenchConfig(dtypes=("float32",), lengths=(64,), head_dims=(16,), causal=(False,), heads=2,
                               providers=("sdpa-efficient", "sdpa-math"), repeats=1)  # fmt: skip
    rows = bench.run_bench(config)
    efficient, math_row = rows
    assert efficient.skipped and efficient.seconds is None  # no memory-efficient kernel on the CPU
    assert not math_row.skipped and math_row.seconds > 0 and math_row.peak_bytes > 0
    assert "skipped: " in bench.format_table(rows)


def test_unknown_provider_is_an_error():
    with pytest.raises(ValueError, match="unknown provider"):
        bench.make_provider("fast")


def test_bench_command_writes_table_json_csv_and_plots(tmp_path, capsys):
    args = "bench --device cpu --lengths 64 128 --head-dims 16 --causal both --heads 2 --block-size 32"
    code = main([*args.split(), "--repeats", "1", "--threads", "1", "--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    for provider in ("naive", "tiled", "sdpa-flash", "sdpa-math"):
        assert provider in printed
    assert "naive / tiled peak memory" in printed
    rows = bench.read_json(tmp_path / "bench.json")
    assert len(rows) == 4 * 2 * 2  # providers × lengths × causal
    assert {r.t for r in rows} == {64, 128} and all(r.h == 2 and r.d == 16 for r in rows)
    with (tmp_path / "bench.csv").open() as file:
        assert len(list(csv.DictReader(file))) == len(rows)
    assert json.loads((tmp_path / "bench.json").read_text())[0]["provider"] == "naive"
    for name in ("bench_time.png", "bench_memory.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")


def test_bench_command_measures_the_providers_asked_for(tmp_path, capsys):
    args = "bench --device cpu --lengths 64 --head-dims 16 --causal no --heads 1 --repeats 1"
    assert main([*args.split(), "--providers", "tiled", "sdpa-math", "--out", str(tmp_path)]) == 0
    assert [row.provider for row in bench.read_json(tmp_path / "bench.json")] == ["tiled", "sdpa-math"]
    assert main([*args.split(), "--providers", "fast", "--out", str(tmp_path)]) == 2
    assert "unknown provider 'fast'" in capsys.readouterr().err


def test_target_summary_reads_the_ratios():
    def row(provider, seconds, peak):
        return bench.BenchRow(provider, "cpu", "float32", 1, 8, 4096, 64, True, seconds, 1.0, None, peak)

    rows = [
        row("naive", 2.0, 3200),
        row("tiled", 0.15, 100),
        row("sdpa-flash", 0.1, 50),
        row("sdpa-math", 0.5, 900),
    ]
    summary = bench.target_summary(rows)
    assert "tiled / sdpa-flash time = 1.50×" in summary
    assert "naive / tiled peak memory = 32.0×" in summary


def test_each_backward_provider_gives_attentions_gradients():
    q, k, v = (torch.randn(1, 2, 40, 16, dtype=torch.float64) for _ in range(3))
    results = {name: bench.prepare_backward(name, q, k, v, True, block_size=16)()
               for name in ("naive", "tiled", "sdpa-math")}  # fmt: skip
    for name in ("tiled", "sdpa-math"):
        for mine, ref in zip(results[name], results["naive"], strict=True):
            torch.testing.assert_close(mine, ref, atol=1e-10, rtol=1e-8)


def test_bench_backward_times_the_backward_and_sees_naive_memory_grow_twice_as_fast(tmp_path, capsys):
    args = "bench --backward --device cpu --lengths 64 128 256 --head-dims 16 --causal yes --heads 1"
    args += " --block-size 32"
    code = main([*args.split(), "--repeats", "1", "--providers", "naive", "tiled", "sdpa-flash",
                 "--out", str(tmp_path)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "backward, causal, d=16, T=256, float32" in printed
    assert (
        "naive / tiled largest tensor" in printed and "tiled backward / sdpa-flash backward time" in printed
    )
    rows = bench.read_json(tmp_path / "bench.json")
    assert all(r.backward and r.seconds > 0 and r.largest_bytes > 0 for r in rows)
    naive = {r.t: r for r in rows if r.provider == "naive"}
    tiled = {r.t: r for r in rows if r.provider == "tiled"}
    assert naive[256].largest_bytes == 4 * 256 * 256  # the probabilities autograd keeps
    assert tiled[256].largest_bytes * 16 <= naive[256].largest_bytes
    slopes = bench.memory_slopes(rows)
    assert slopes[("naive", "float32", 16, True)] == pytest.approx(2.0, abs=0.2)
    assert "tiled peak memory is affine in T" in printed


def test_backward_flops_are_two_and_a_half_forwards():
    assert bench.attention_flops(2, 3, 64, 16, backward=True) == 2.5 * bench.attention_flops(2, 3, 64, 16)


@pytest.mark.parametrize(
    ("backends", "expected"),
    [
        (("flash", "efficient", "cudnn", "math"), "sdpa-flash"),  # an A100 or an H100
        (("efficient", "math"), "sdpa-efficient"),  # a T4: flash and cuDNN need compute capability 8.0
        (("math",), "sdpa-math"),
    ],
)
def test_fastest_sdpa_never_names_a_backend_the_card_lacks(backends, expected):
    assert bench.fastest_sdpa(backends) == expected
