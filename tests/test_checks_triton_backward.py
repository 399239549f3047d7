"""The checks of notebook 09's Triton backward name learner-like mistakes and accept right kernels.

Every variant is the solution notebook's two kernels and wrapper (`backward_variants.TRITON_BACKWARD`)
with one or two lines changed, run through Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before triton is imported). Exercise 5a's check takes the dK/dV kernel and 5b's
the dQ kernel (each launched by the check); 5c's takes the wrapper, which launches both.
"""

from __future__ import annotations

import pytest
from backward_variants import TRITON_BACKWARD
from check_assertions import assert_accepted, assert_rejected
from triton_variants import variant

from attn_course import reference
from attn_course.checks import (
    CheckFailed,
    check_flash_attention_backward_dkdv_kernel,
    check_flash_attention_backward_dq_kernel,
    check_triton_flash_attention_backward,
    triton_backward,
)
from attn_course.progress import forget_passes
from attn_course.triton_flash import launchers

pytest.importorskip("triton")

NAME = "triton_flash_attention_backward"
DKDV = "flash_attention_backward_dkdv_kernel"
DQ = "flash_attention_backward_dq_kernel"
KERNEL_CHECKS = {
    DKDV: check_flash_attention_backward_dkdv_kernel,
    DQ: check_flash_attention_backward_dq_kernel,
}


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


# Exercise 5c's wrapper, with dQ added atomically by the dK/dV kernel into a zeroed float32 buffer
# (FlashAttention-2's one-pass backward): no dQ kernel is launched.
ATOMIC_DQ = [
    ("dk_ptr, dv_ptr,\n", "dk_ptr, dv_ptr, dq_ptr,\n"),
    ("    stride_dkb, stride_dkh, stride_dkn,\n",
     "    stride_dkb, stride_dkh, stride_dkn, stride_dqb, stride_dqh, stride_dqm,\n"),
    ("        dk += tl.dot(ds_t.to(q.dtype), q)\n",
     "        dk += tl.dot(ds_t.to(q.dtype), q)\n"
     "        dq_ptrs = dq_ptr + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqm\n"
     "        dq_ptrs += offs_d[None, :]\n"
     "        tl.atomic_add(dq_ptrs, tl.dot(tl.trans(ds_t).to(k.dtype), k) * sm_scale, mask=q_mask)\n"),
    ("    dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)\n",
     "    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)\n"),
    ("dk, dv, *strides, dk.stride(0), dk.stride(1), dk.stride(2),",
     "dk, dv, dq, *strides, dk.stride(0), dk.stride(1), dk.stride(2),\n"
     "        dq.stride(0), dq.stride(1), dq.stride(2),"),
    ("    grid_q = (triton.cdiv(T_q, BLOCK_M), B * H)\n    flash_attention_backward_dq_kernel[grid_q](\n"
     "        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),\n"
     "        H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n    return dq, dk, dv",
     "    return dq.to(q.dtype), dk, dv"),
]  # fmt: skip


def test_accepts_dq_added_atomically_by_the_dkdv_kernel(folder, capsys):
    """A right backward that adds dQ atomically into a zeroed buffer (issue 27, point 7): the trace records
    tl.atomic_add as a store that adds, so no false "no program wrote dq"."""
    candidate = variant(TRITON_BACKWARD, folder, NAME, *ATOMIC_DQ)
    assert_accepted(check_triton_flash_attention_backward, candidate, capsys)


# Exercises 5a and 5b: each kernel alone, launched by its check

KERNELS_ACCEPTED = {
    "dkdv: template": (DKDV, []),
    "dkdv: tiles of S, not Sᵀ, and transposed products": (DKDV, [
        ("        s_t = tl.dot(k, tl.trans(q)) * sm_scale\n",
         "        s = tl.dot(q, tl.trans(k)) * sm_scale\n"),
        ("        allowed = (offs_n[:, None] < t_k) & (rows[None, :] < t_q)\n        if IS_CAUSAL:\n"
         "            allowed = allowed & (offs_n[:, None] <= rows[None, :] + offset)\n"
         "        p_t = tl.where(allowed, tl.exp(s_t - lse[None, :]), 0.0)\n"
         "        dv += tl.dot(p_t.to(do.dtype), do)\n        dp_t = tl.dot(v, tl.trans(do))\n"
         "        ds_t = tl.where(allowed, p_t * (dp_t - delta[None, :]), 0.0)\n"
         "        dk += tl.dot(ds_t.to(q.dtype), q)\n",
         "        allowed = (offs_n[None, :] < t_k) & (rows[:, None] < t_q)\n        if IS_CAUSAL:\n"
         "            allowed = allowed & (offs_n[None, :] <= rows[:, None] + offset)\n"
         "        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)\n"
         "        dv += tl.dot(tl.trans(p).to(do.dtype), do)\n        dp = tl.dot(do, tl.trans(v))\n"
         "        ds = tl.where(allowed, p * (dp - delta[:, None]), 0.0)\n"
         "        dk += tl.dot(tl.trans(ds).to(q.dtype), q)\n"),
    ]),
    "dkdv: no causal skip, the mask alone": (DKDV, [
        ("        lo = tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M\n", "        lo = 0\n"),
    ]),
    "dkdv: causal start not rounded to a block": (DKDV, [
        ("tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M",
         "tl.maximum(pid_n * BLOCK_N - offset, 0)"),
    ]),
    "dq: template": (DQ, []),
    "dq: queries pre-scaled, no causal bound": (DQ, [
        ("    q = tl.load(q_ptrs, mask=q_mask, other=0.0)\n    do",
         "    q = tl.load(q_ptrs, mask=q_mask, other=0.0)\n    qs = q * sm_scale\n    do"),
        ("        s = tl.dot(q, tl.trans(k)) * sm_scale\n",
         "        s = tl.dot(qs.to(k.dtype), tl.trans(k))\n"),
        ("        hi = tl.maximum(tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset), 0)\n",
         "        hi = t_k\n"),
    ]),
}  # fmt: skip


@pytest.mark.parametrize("name", KERNELS_ACCEPTED)
def test_kernel_checks_accept_right_kernels(name, folder, capsys):
    kernel, pairs = KERNELS_ACCEPTED[name]
    candidate = variant(TRITON_BACKWARD, folder, kernel, *pairs)
    assert_accepted(KERNEL_CHECKS[kernel], candidate, capsys)


@pytest.mark.parametrize("kernel", [DKDV, DQ])
def test_kernel_checks_accept_the_course_kernels(kernel, capsys):
    assert_accepted(KERNEL_CHECKS[kernel], getattr(reference, kernel), capsys)
    assert_accepted(KERNEL_CHECKS[kernel], getattr(reference, kernel).kernel, capsys)


KERNELS_REJECTED = {
    "dkdv: no D term": (DKDV, [
        ("ds_t = tl.where(allowed, p_t * (dp_t - delta[None, :]), 0.0)",
         "ds_t = tl.where(allowed, p_t * dp_t, 0.0)"),
    ], "leaves out the D term"),
    "dkdv: exp(S) instead of P": (DKDV, [("tl.exp(s_t - lse[None, :])", "tl.exp(s_t)")],
                                  "uses exp(S) instead of the probabilities"),
    "dkdv: scale applied in the loop too": (DKDV, [
        ("dk += tl.dot(ds_t.to(q.dtype), q)", "dk += tl.dot(ds_t.to(q.dtype), q) * sm_scale"),
    ], "applies the 1/√d scale twice in dK"),
    "dkdv: accumulators replaced": (DKDV, [
        ("dv += tl.dot(p_t.to(do.dtype), do)", "dv = tl.dot(p_t.to(do.dtype), do)"),
        ("dk += tl.dot(ds_t.to(q.dtype), q)", "dk = tl.dot(ds_t.to(q.dtype), q)"),
    ], "does not accumulate dK and dV over the query blocks"),
    "dkdv: no causal mask inside the tile": (DKDV, [
        ("            allowed = allowed & (offs_n[:, None] <= rows[None, :] + offset)\n",
         "            pass\n"),
    ], "applies the causal mask in the forward but masks no key in the recomputation"),
    "dkdv: queries loaded without a mask": (DKDV, [
        ("q = tl.load(q_head + rows[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)",
         "q = tl.load(q_head + rows[:, None] * stride_qm + offs_d[None, :])"),
    ], "read from memory outside its tensors"),
    "dkdv: causal start without the offset": (DKDV, [
        ("tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M",
         "pid_n * BLOCK_N // BLOCK_M * BLOCK_M"),
    ], "gives the wrong dk and dv"),
    "dkdv: contiguous rows assumed": (DKDV, [
        ("q = tl.load(q_head + rows[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)",
         "q = tl.load(q_head + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)"),
        ("do = tl.load(do_head + rows[:, None] * stride_dom + offs_d[None, :], mask=q_mask, other=0.0)",
         "do = tl.load(do_head + rows[:, None] * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)"),
    ], "look at the strides"),
    "dq: no scale": (DQ, [("(dq * sm_scale).to(", "dq.to(")], "forgets the 1/√d scale in dQ"),
    "dq: not accumulated": (DQ, [("dq += tl.dot(ds.to(k.dtype), k)", "dq = tl.dot(ds.to(k.dtype), k)")],
                            "does not accumulate dQ over the key blocks"),
    "dq: no D term": (DQ, [("ds = tl.where(allowed, p * (dp - delta[:, None]), 0.0)", "ds = p * dp")],
                      "leaves out the D term"),
    "dq: causal mask top-left": (DQ, [
        ("allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)",
         "allowed = allowed & (cols[None, :] <= offs_m[:, None])"),
    ], "aligns the causal mask top-left"),
    "dq: store without a mask": (DQ, [
        ("tl.store(dq_ptrs, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=q_mask)",
         "tl.store(dq_ptrs, (dq * sm_scale).to(dq_ptr.dtype.element_ty))"),
    ], "wrote to memory outside its tensors"),
    "dq: offsets without the block size": (DQ, [
        ("    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n",
         "    offs_m = pid_m + tl.arange(0, BLOCK_M)\n"),
    ], "overlap"),
}  # fmt: skip


@pytest.mark.parametrize("name", KERNELS_REJECTED)
def test_kernel_checks_name_each_mistake(name, folder, capsys):
    kernel, pairs, phrase = KERNELS_REJECTED[name]
    candidate = variant(TRITON_BACKWARD, folder, kernel, *pairs)
    assert_rejected(KERNEL_CHECKS[kernel], candidate, phrase, capsys)


def test_kernel_checks_say_a_function_is_not_a_kernel(capsys):
    def flash_attention_backward_dkdv_kernel(*args):
        return None

    assert_rejected(check_flash_attention_backward_dkdv_kernel, flash_attention_backward_dkdv_kernel,
                    "should be a Triton kernel", capsys)  # fmt: skip


def test_kernel_checks_say_not_implemented_yet_for_the_stub(folder, capsys):
    stub = [("    # the learner's part of Exercise 5a, from here\n",
             "    raise NotImplementedError(\"Exercise: replace this line with your code\")\n")]  # fmt: skip
    candidate = variant(TRITON_BACKWARD, folder, DKDV, *stub)
    assert_rejected(check_flash_attention_backward_dkdv_kernel, candidate, "is not implemented yet", capsys)


# Exercise 5c once 5a and 5b passed: a wrapper mistake is pointed at the wrapper

WRAPPER_REJECTED = {
    "dk and dv returned the other way round": (
        [("        H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n    return dq, dk, dv",
          "        H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n    return dq, dv, dk")],
        "gives dk and dv in each other's place",
    ),
    "the scale squared": (
        [("T_k, 1 / math.sqrt(d), **blocks)\n    grid_q", "T_k, d ** -1, **blocks)\n    grid_q"),
         ("T_k, 1 / math.sqrt(d), **blocks)\n    return", "T_k, d ** -1, **blocks)\n    return")],
        "gives the kernels sm_scale = 1/d",
    ),
    "lse handed over in base 2": (
        [("lse = lse.float().contiguous()", "lse = (lse.float() / math.log(2)).contiguous()")],
        "hands the kernels the lse already in base 2",
    ),
    "D from dO alone": (
        [("delta = (grad_out.float() * out.float()).sum(-1).contiguous()",
          "delta = grad_out.float().sum(-1).contiguous()")],
        "D = (grad_out * out).sum(-1) in float32",
    ),
    "D from the output alone": (
        [("delta = (grad_out.float() * out.float()).sum(-1).contiguous()",
          "delta = out.float().sum(-1).contiguous()")],
        "Yours is rowsum(O): dO is left out of dO ∘ O",
    ),
    "D summed over the rows": (
        [("delta = (grad_out.float() * out.float()).sum(-1).contiguous()",
          "delta = (grad_out.float() * out.float()).sum(-2).contiguous()")],
        "read from 1 element(s) past the end of `delta_ptr`",
    ),
    "lengths swapped in one launch": (
        [("dk, dv, *strides, dk.stride(0), dk.stride(1), dk.stride(2),\n        H, T_q, T_k,",
          "dk, dv, *strides, dk.stride(0), dk.stride(1), dk.stride(2),\n        H, T_k, T_q,")],
        "Your two kernels passed their own checks (Exercises 5a and 5b), so look at what the wrapper",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", WRAPPER_REJECTED)
def test_the_wrapper_check_points_at_the_wrapper_once_the_kernels_passed(name, folder, capsys):
    pairs, phrase = WRAPPER_REJECTED[name]
    wrapper = variant(TRITON_BACKWARD, folder, NAME, *pairs)
    try:
        for kernel, check in KERNEL_CHECKS.items():
            assert_accepted(check, wrapper.__globals__[kernel], capsys)
        assert_rejected(check_triton_flash_attention_backward, wrapper, phrase, capsys)
    finally:
        forget_passes()


# ---------------------------------------------------------------------------------------------
# The cases generated from the wrapper's contract (checks/_contracts.py, issue 44): a head dim that is
# not a power of two, float16 inputs, and each of q, k, v, out, lse, grad_out alone a view.

CONTRACT_REJECTED = {
    "strides of q passed for k and v": (
        [("k.stride(0), k.stride(1), k.stride(2),\n               v.stride(0), v.stride(1), v.stride(2)",
          "q.stride(0), q.stride(1), q.stride(2),\n               q.stride(0), q.stride(1), q.stride(2)")],
        "reads `k` and `v` with `q`'s strides: with `q` passed as a transposed view",
    ),
    "dq allocated in float32": (
        [("dq = torch.empty(q.shape, device=q.device, dtype=q.dtype)",
          "dq = torch.empty(q.shape, device=q.device, dtype=torch.float32)")],
        "returned dq as torch.float32 on cpu; the inputs are torch.float16",
    ),
    "the lse passed on as it comes": (
        [("lse = lse.float().contiguous()", "lse = lse.float()")],
        "wrong with `lse` passed as a slice of a longer tensor along T_q",
    ),
    "the padded width passed as the head dim": (
        [("HEAD_DIM=d,", "HEAD_DIM=max(16, triton.next_power_of_2(d)),")],
        "The head dim here is d = 24, not a power of two: pass HEAD_DIM = d (24)",
    ),
    "the head dim not padded": (
        [("BLOCK_D=max(16, triton.next_power_of_2(d))", "BLOCK_D=d")],
        "The head dim here is d = 24, not a power of two",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CONTRACT_REJECTED)
def test_contract_cases_name_what_the_hand_picked_cases_let_through(name, folder, capsys):
    pairs, phrase = CONTRACT_REJECTED[name]
    assert_rejected(
        check_triton_flash_attention_backward, variant(TRITON_BACKWARD, folder, NAME, *pairs), phrase, capsys
    )


KERNEL_CONTRACT_REJECTED = {
    "dkdv: dO stepped by q's row stride": (DKDV, [
        ("do = tl.load(do_head + rows[:, None] * stride_dom",
         "do = tl.load(do_head + rows[:, None] * stride_qm"),
    ], ["past the end of `do_ptr`", "Only one input is a view here, q (`q_ptr`) passed as a transposed view",
        "Step each pointer by its own tensor's strides"]),
    "dkdv: queries loaded without d_inside": (DKDV, [
        ("q = tl.load(q_head + rows[:, None] * stride_qm + offs_d[None, :], mask=q_mask, other=0.0)",
         "q = tl.load(q_head + rows[:, None] * stride_qm + offs_d[None, :],\n"
         "                    mask=rows[:, None] < t_q, other=0.0)"),
    ], ["read from memory outside its tensors", "The head dim here is d = 24, not a power of two",
        "offs_d < HEAD_DIM (d_inside)"]),
    "dkdv: P and dS not cast before tl.dot": (DKDV, [
        ("dv += tl.dot(p_t.to(do.dtype), do)", "dv += tl.dot(p_t, do)"),
        ("dk += tl.dot(ds_t.to(q.dtype), q)", "dk += tl.dot(ds_t, q)"),
    ], ["Both operands must be same dtype", "The inputs here are float16: cast P and dS"]),
    "dq: v stepped by k's strides": (DQ, [
        ("v_ptrs = v_ptr + b * stride_vb + h * stride_vh + cols[:, None] * stride_vn",
         "v_ptrs = v_ptr + b * stride_kb + h * stride_kh + cols[:, None] * stride_kn"),
    ], ["past the end of `v_ptr`", "k (`k_ptr`) passed as a slice of a longer tensor along T_k"]),
    "dq: keys loaded without d_inside": (DQ, [
        ("        kv_mask = (cols[:, None] < t_k) & d_inside\n", "        kv_mask = cols[:, None] < t_k\n"),
    ], ["read from memory outside its tensors", "The head dim here is d = 24, not a power of two"]),
}  # fmt: skip
"""Wrong kernels that pass every hand-picked case (d = 16 and 32, float32, every input laid out alike)
and fail one that the exercise's contract generates, with the phrases of the message."""


@pytest.mark.parametrize("name", KERNEL_CONTRACT_REJECTED)
def test_kernel_contract_cases_name_what_the_hand_picked_cases_let_through(name, folder, monkeypatch, capsys):
    kernel, pairs, phrases = KERNEL_CONTRACT_REJECTED[name]
    candidate = variant(TRITON_BACKWARD, folder, kernel, *pairs)
    with pytest.raises(CheckFailed) as failure:  # one run: the interpreter is slow
        KERNEL_CHECKS[kernel](candidate)
    assert all(phrase in str(failure.value) for phrase in phrases), str(failure.value)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    monkeypatch.setattr(triton_backward, "_expect_kernel_contract_cases", lambda *args: 0)
    assert_accepted(KERNEL_CHECKS[kernel], candidate, capsys)  # the hand-picked cases alone pass it
