"""The check of notebook 09's Triton backward names learner-like mistakes and accepts right kernels.

Every variant is the solution notebook's two kernels and wrapper (`backward_variants.TRITON_BACKWARD`)
with one or two lines changed, run through Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before triton is imported).
"""

from __future__ import annotations

import pytest
from backward_variants import TRITON_BACKWARD
from check_assertions import assert_accepted, assert_rejected
from triton_variants import variant

from attn_course.checks import check_triton_flash_attention_backward
from attn_course.triton_flash import launchers

pytest.importorskip("triton")

NAME = "triton_flash_attention_backward"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("triton_backward_variants")


ACCEPTED = {
    "template, blocks of 32": [],
    "blocks of 16 by 64": [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 16, 64")],
    # dQ added atomically into a zeroed buffer is right (issue 27, family 7): by the dq kernel itself,
    "dq kernel adds atomically into zeros": [
        ("tl.store(dq_ptrs, (dq * sm_scale)", "tl.atomic_add(dq_ptrs, (dq * sm_scale)"),
        ("dq = torch.empty(q.shape", "dq = torch.zeros(q.shape"),
    ],
    # or by the dK/dV kernel, one tile of dQ per (key block, query block), with no dq kernel at all.
    "dq added atomically by the dkdv kernel": [
        ("lse_ptr, delta_ptr, dk_ptr, dv_ptr,\n",
         "lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr, stride_dqb, stride_dqh, stride_dqm,\n"),
        ("        dk += tl.dot(ds_t.to(q.dtype), q)\n",
         "        dk += tl.dot(ds_t.to(q.dtype), q)\n"
         "        dq_part = tl.dot(tl.trans(ds_t).to(k.dtype), k) * sm_scale\n"
         "        dq_ptrs = dq_ptr + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqm\n"
         "        dq_ptrs = dq_ptrs + offs_d[None, :]\n"
         "        tl.atomic_add(dq_ptrs, dq_part, mask=q_mask)\n"),
        ("dq = torch.empty(q.shape", "dq = torch.zeros(q.shape"),
        ("q, k, v, grad_out, lse, delta, dk, dv, *strides,",
         "q, k, v, grad_out, lse, delta, dk, dv, dq, dq.stride(0), dq.stride(1), dq.stride(2), *strides,"),
        ("    flash_attention_backward_dq_kernel[grid_q](\n"
         "        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),\n"
         "        H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n", ""),
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepts_right_kernels(name, folder, capsys):
    candidate = variant(TRITON_BACKWARD, folder, NAME, *ACCEPTED[name])
    assert_accepted(check_triton_flash_attention_backward, candidate, capsys)


def test_accepts_the_package_backward(capsys):
    assert_accepted(check_triton_flash_attention_backward, launchers.triton_flash_attention_backward, capsys)


REJECTED = {
    "no D term": (
        [
            ("ds_t = tl.where(allowed, p_t * (dp_t - delta[None, :]), 0.0)", "ds_t = p_t * dp_t"),
            ("ds = tl.where(allowed, p * (dp - delta[:, None]), 0.0)", "ds = p * dp"),
        ],
        "leaves out the D term",
    ),
    "no scale in dQ": (
        [("(dq * sm_scale).to(", "dq.to(")],
        "forgets the 1/√d scale in dQ",
    ),
    "exp(S) instead of P": (
        [("tl.exp(s_t - lse[None, :])", "tl.exp(s_t)"), ("tl.exp(s - lse[:, None])", "tl.exp(s)")],
        "uses exp(S) instead of the probabilities",
    ),
    "dQ not accumulated": (
        [("dq += tl.dot(ds.to(k.dtype), k)", "dq = tl.dot(ds.to(k.dtype), k)")],
        "does not accumulate dQ over the key blocks",
    ),
    "store past the end": (
        [("tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)",
          "tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty))")],
        "wrote to memory outside its tensors",
    ),
    "grid rounds down": (
        [("grid_q = (triton.cdiv(T_q, BLOCK_M), B * H)", "grid_q = (max(1, T_q // BLOCK_M), B * H)")],
        "That is dq",
    ),
    "dv scaled like dk (blind set A, #88)": (
        [("tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)",
          "tl.store(dv_ptrs, (dv * sm_scale).to(dv_ptr.dtype.element_ty), mask=kv_mask)")],
        "dv is 1/√d = ",
    ),
    "wrong dv, located": (
        [("dv += tl.dot(p_t.to(do.dtype), do)", "dv += 0.5 * tl.dot(p_t.to(do.dtype), do)")],
        "gives the wrong dv (dq and dk are right)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", REJECTED)
def test_names_each_mistake(name, folder, capsys):
    pairs, phrase = REJECTED[name]
    candidate = variant(TRITON_BACKWARD, folder, NAME, *pairs)
    assert_rejected(check_triton_flash_attention_backward, candidate, phrase, capsys)
