"""Tests of attn_course/checks/_triton_harness.py's Mode: where a compiled check says it ran, per GPU."""

from __future__ import annotations

import pytest
import torch

from attn_course.checks._triton_harness import Mode


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((7, 5), "on cuda in float16, compiled without tensor cores (compute capability 7.5: multiply-adds)"),
        ((8, 0), "on cuda in float16"),  # an A100
        ((9, 0), "on cuda in float16"),  # an H100
    ],
)
def test_a_compiled_check_says_when_the_gpu_has_no_tensor_cores_for_triton(capability, expected):
    mode = Mode(torch.device("cuda"), False, capability)
    assert mode.gpu and not mode.traced
    assert mode.gpu_where == expected


def test_a_mode_without_a_capability_says_only_where_it_ran():
    assert Mode(torch.device("cuda"), False).gpu_where == "on cuda in float16"
