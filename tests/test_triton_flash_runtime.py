"""Tests of attn_course/triton_flash/runtime.py's GPU rules, with a T4's, an A100's and an H100's capability.

No GPU and no Triton import: `capability_problem` and `triton_gpu_note` are plain functions of the
card's compute capability and name, the seam `gpu_problem()` and `triton_status()` read torch.cuda through.
"""

from __future__ import annotations

import pytest

from attn_course.triton_flash.runtime import (
    MIN_COMPUTE_CAPABILITY,
    TritonStatus,
    capability_problem,
    triton_gpu_note,
)

CARDS = {
    "T4": ("Tesla T4", (7, 5)),
    "A100": ("NVIDIA A100-SXM4-80GB", (8, 0)),
    "H100": ("NVIDIA H100 80GB HBM3", (9, 0)),
}


@pytest.mark.parametrize("key", ["T4", "A100", "H100"])
def test_the_course_compiles_triton_kernels_for_a_t4_an_a100_and_an_h100(key: str) -> None:
    name, capability = CARDS[key]
    assert capability >= MIN_COMPUTE_CAPABILITY
    assert capability_problem(capability, name) is None


def test_a_t4_is_told_its_kernels_compile_without_tensor_cores_and_why() -> None:
    note = triton_gpu_note((7, 5), "Tesla T4")
    assert note is not None
    for phrase in ("Triton 3.9 supports compute capability 8.0", "Tesla T4 (7.5)", "CUDA cores",
                   "does not pipeline loads", "slower than SDPA"):  # fmt: skip
        assert phrase in note, phrase


@pytest.mark.parametrize("key", ["A100", "H100"])
def test_ampere_and_hopper_get_no_note(key: str) -> None:
    name, capability = CARDS[key]
    assert triton_gpu_note(capability, name) is None


@pytest.mark.parametrize("capability", [(6, 0), (6, 1), (7, 0), (7, 2)])
def test_cards_older_than_turing_are_interpreted_with_a_reason(capability: tuple[int, int]) -> None:
    problem = capability_problem(capability, "Old GPU")
    assert problem is not None and "older than the Turing architecture (7.5)" in problem
    assert f"{capability[0]}.{capability[1]}" in problem
    assert triton_gpu_note(capability, "Old GPU") is None  # interpreted: nothing compiled to describe


def test_status_prints_the_note_under_the_reason() -> None:
    status = TritonStatus(True, "3.9.0", False, "cuda", "Kernels take tensors on Tesla T4.",
                          note=triton_gpu_note((7, 5), "Tesla T4"))  # fmt: skip
    first, second = str(status).splitlines()
    assert first == "Triton 3.9.0: kernels are compiled for the GPU. Kernels take tensors on Tesla T4."
    assert second.startswith("ℹ️ Triton 3.9 supports compute capability 8.0 and newer")
    plain = TritonStatus(True, "3.9.0", False, "cuda", "Kernels take tensors on NVIDIA H100 80GB HBM3.")
    assert "\n" not in str(plain)
