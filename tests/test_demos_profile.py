"""Tests for attn_course/demos/profile.py: the operations of one call, counted and timed."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_course.attention import attention
from attn_course.demos.profile import CallProfile, OpStat, profile_call, profile_table
from attn_course.flash import flash_attention
from attn_course.plots.flash import SKIPPED, causal_tiles


def _qkv(t: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(3, 1, 2, t, 16).unbind(0)  # each (B, H, T, d)


def test_the_fused_kernel_is_one_operation_and_the_loop_one_exp_per_computed_tile():
    q, k, v = _qkv(64)
    fused = profile_call("SDPA", F.scaled_dot_product_attention, q, k, v, is_causal=True)
    loop = profile_call("tiled", flash_attention, q, k, v, is_causal=True, block_size=16)
    tiles = int((causal_tiles(64, 64, 16) > SKIPPED).sum())  # 10 of 16
    assert fused.device == loop.device == "cpu"
    assert [op.name for op in fused.ops] == ["aten::scaled_dot_product_attention"]
    assert fused.launches == 1
    exps = {op.name: op.calls for op in loop.ops}["aten::exp"]
    assert exps == 2 * tiles  # p and alpha: two exps per tile, none for the skipped ones
    assert loop.launches > 10 * tiles  # a dozen operations and more per tile
    assert 0 < loop.op_seconds <= loop.seconds * 1.01


def test_naive_attention_runs_a_handful_of_operations_whatever_t():
    small, large = (profile_call("naive", lambda q, k, v: attention(q, k, v)[0], *_qkv(t)) for t in (32, 128))
    assert small.launches == large.launches < 30
    assert sorted(small.ops, key=lambda op: op.seconds, reverse=True) == list(small.ops)


def test_the_table_shows_each_call_and_its_longest_operations():
    ops = (OpStat("aten::matmul", 4, 0.003), OpStat("aten::exp", 2, 0.001))
    fused = CallProfile("SDPA", "cpu", 0.002, (OpStat("sdpa", 1, 0.002),))
    table = profile_table([CallProfile("yours", "cpu", 0.005, ops), fused], top=1)
    lines = table.splitlines()
    assert lines[0].split() == ["call", "ops", "in", "ops", "(ms)", "between", "ops", "(ms)", "total", "(ms)"]
    assert lines[1].split() == ["yours", "6", "4.0", "1.0", "5.0"]
    assert lines[2].split() == ["SDPA", "1", "2.0", "0.0", "2.0"]
    assert "yours: the 1 longest of 2 kinds of operation" in table
    assert "aten::matmul" in table and "aten::exp" not in table  # top=1
    assert "60%" in table  # 3 ms of the call's 5
