"""The checks of notebook 08 reject known mistakes with the right message and accept right kernels.

Every variant is a real Triton kernel run through the interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before triton is imported), with one line of a learner-like solution changed.
"""

from __future__ import annotations

import math

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected
from triton_variants import ADD, FLASH, SCORES, SOFTMAX, variant

from attn_course import reference
from attn_course.checks import (
    check_triton_add,
    check_triton_flash_attention,
    check_triton_scores,
    check_triton_softmax,
)

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("triton_variants")


# ---------------------------------------------------------------------------------------------
# triton_add

ADD_ACCEPTED = {
    "template, blocks of 64": [],
    "blocks of 1024": [("BLOCK = 64", "BLOCK = 1024")],
    "blocks of 1": [("BLOCK = 64", "BLOCK = 1")],
    "mask inlined": [
        ("    mask = offsets < n\n", ""),
        ("mask=mask)\n    y", "mask=offsets < n)\n    y"),
        ("y_ptr + offsets, mask=mask)", "y_ptr + offsets, mask=offsets < n)"),
        ("x + y, mask=mask)", "x + y, mask=offsets < n)"),
    ],
    "grid as a lambda": [
        ("grid = (triton.cdiv(n, BLOCK),)", "grid = lambda meta: (triton.cdiv(n, meta['BLOCK']),)"),
    ],
}

ADD_REJECTED = {
    "n from the last axis": (
        [("    n = x.numel()", "    n = x.shape[-1]")],
        "n counts every element, x.numel(), not one axis",
    ),
    "no .contiguous() (blind set A, #72)": (
        [("    x, y = x.contiguous(), y.contiguous()\n", "")],
        "adds x and y in memory order, but x is a transposed view",
    ),
    "only x made contiguous": (
        [("    x, y = x.contiguous(), y.contiguous()\n", "    x = x.contiguous()\n")],
        "is a transposed view (its memory holds it column by column)",
    ),
    "no mask": (
        [("mask = offsets < n", "mask = None")],
        "read from memory outside its tensors",
    ),
    "store unmasked": (
        [("x + y, mask=mask)", "x + y)")],
        "wrote to memory outside its tensors",
    ),
    "grid rounds down": (
        [("grid = (triton.cdiv(n, BLOCK),)", "grid = (max(1, n // BLOCK),)")],
        "triton.cdiv(n, BLOCK), which rounds up",
    ),
    "offsets without the program id": (
        [("offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = tl.arange(0, BLOCK)")],
        "offsets of program pid start at pid * BLOCK",
    ),
    "subtracts": ([("x + y, mask=mask)", "x - y, mask=mask)")], "computes x - y"),
    "multiplies": ([("x + y, mask=mask)", "x * y, mask=mask)")], "computes x * y"),
    "loads x twice": ([("y = tl.load(y_ptr", "y = tl.load(x_ptr")], "computes 2·x"),
    "no return": ([("    return out\n", "")], "returned None"),
    "no kernel": (
        [("    add_kernel[grid](x, y, out, n, BLOCK=BLOCK)\n    return out", "    return x + y")],
        "launched no Triton kernel",
    ),  # fmt: skip
    "writes into x": ([("out = torch.empty_like(x)", "out = x")], "changed one of its input tensors"),
    "not implemented": (
        [("    out = torch.empty_like(x)\n", "    raise NotImplementedError\n")],
        "not implemented",
    ),
}


@pytest.mark.parametrize("name", ADD_ACCEPTED)
def test_check_triton_add_accepts(name, folder, capsys):
    assert_accepted(check_triton_add, variant(ADD, folder, "triton_add", *ADD_ACCEPTED[name]), capsys)


@pytest.mark.parametrize("name", ADD_REJECTED)
def test_check_triton_add_rejects(name, folder, capsys):
    pairs, phrase = ADD_REJECTED[name]
    assert_rejected(check_triton_add, variant(ADD, folder, "triton_add", *pairs), phrase, capsys)


def test_check_triton_add_accepts_the_reference(capsys):
    assert_accepted(check_triton_add, reference.triton_add, capsys)


def test_a_kernel_error_is_shown_at_the_learners_line_without_a_traceback(folder, capsys):
    wrong = variant(ADD, folder, "triton_add", ("x + y, mask=mask)", "x + undefined_name, mask=mask)"))
    with pytest.raises(Exception) as failure:
        check_triton_add(wrong)
    message = str(failure.value)
    assert "NameError" in message and "undefined_name" in message
    assert "tl.store(out_ptr + offsets, x + undefined_name, mask=mask)" in message
    assert "InterpreterError" not in message


def test_a_kernel_compiled_for_a_missing_gpu_is_explained(capsys):
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    def kernel(x_ptr, BLOCK: tl.constexpr):
        pass

    compiled = JITFunction(kernel)

    def triton_add(x, y):
        compiled[(1,)](x, BLOCK=4)
        return x + y

    triton_add.__globals__["compiled"] = compiled  # the wrapper names it as a global, like a notebook
    try:
        assert_rejected(check_triton_add, triton_add, "compiled for a GPU", capsys)
    finally:
        del triton_add.__globals__["compiled"]


# ---------------------------------------------------------------------------------------------
# triton_softmax

SOFTMAX_ACCEPTED = {
    "scalar running max": [],
    "contiguous copy instead of the stride": [
        ("    out = torch.empty_like(x)\n", "    x = x.contiguous()\n    out = torch.empty_like(x)\n")
    ],
    "exp2 with log2(e)": [
        ("scale = tl.exp(m - m_safe)", "scale = tl.exp2((m - m_safe) * 1.4426950408889634)"),
        ("tl.sum(tl.exp(x - m_safe), 0)", "tl.sum(tl.exp2((x - m_safe) * 1.4426950408889634), 0)"),
    ],
}

SOFTMAX_REJECTED = {
    "a transposed x stepped through as rows": (
        [("    x = x if x.stride(1) == 1 else x.contiguous()  # a row's elements next to each other\n", "")],
        "is right for rows stored one after another but wrong for x.t()",
    ),
    "sum not rescaled": (
        [("total = total * scale + ", "total = total + ")],
        "does not rescale the running sum",
    ),
    "sum rescaled the wrong way": (
        [("scale = tl.exp(m - m_safe)", "scale = tl.where(m == float('-inf'), 0.0, tl.exp(m_safe - m))")],
        "the wrong way round",
    ),
    "masked lanes load as 0": (
        [('other=float("-inf"))  # load 1', "other=0.0)")],
        "(a kernel's masked lanes) as entries of value 0",
    ),
    "tail dropped": (
        [("range(0, n_cols, BLOCK):  # pass 1", "range(0, n_cols - BLOCK + 1, BLOCK):")],
        "drops the ragged last block",
    ),
    "no max": (
        [
            ("m_new = tl.maximum(m, tl.max(x, 0))", "m_new = tl.maximum(m, 0.0 * tl.max(x, 0))"),
            ('m = float("-inf")', "m = 0.0"),
        ],
        "gives inf or NaN for large scores",
    ),  # fmt: skip
    "no -inf guard": (
        [('m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_safe = m_new")],
        "exp(-inf - (-inf))",
    ),
    "whole row at once": (
        [("BLOCK=block_size)", "BLOCK=triton.next_power_of_2(n_cols))")],
        "entries of x at once with block_size=16",
    ),
    "row stride ignored": (
        [("n_cols, x.stride(0), out.stride(0)", "n_cols, n_cols, n_cols")],
        "x.stride(0)",
    ),
    "one program for all rows": (
        [
            (
                "    grid = (n_rows,)\n    softmax_kernel[grid](x, out,",
                "    for r in range(n_rows):\n        softmax_kernel[(1,)](x[r:], out[r:],",
            )
        ],
        "one program per row",
    ),
}


@pytest.mark.parametrize("name", SOFTMAX_ACCEPTED)
def test_check_triton_softmax_accepts(name, folder, capsys):
    candidate = variant(SOFTMAX, folder, "triton_softmax", *SOFTMAX_ACCEPTED[name])
    assert_accepted(check_triton_softmax, candidate, capsys)


@pytest.mark.parametrize("name", SOFTMAX_REJECTED)
def test_check_triton_softmax_rejects(name, folder, capsys):
    pairs, phrase = SOFTMAX_REJECTED[name]
    assert_rejected(check_triton_softmax, variant(SOFTMAX, folder, "triton_softmax", *pairs), phrase, capsys)


def test_check_triton_softmax_accepts_the_reference(capsys):
    assert_accepted(check_triton_softmax, reference.triton_softmax, capsys)


def test_the_softmax_contract_catches_an_output_in_float32(folder, monkeypatch, capsys):
    """An output allocated without the inputs' dtype passes every float32 case the check picks by hand;
    the contract's float16 case catches it."""
    from attn_course.checks import triton as triton_checks

    edit = ("    out = torch.empty_like(x)\n", "    out = torch.empty(x.shape, device=x.device)\n")
    candidate = variant(SOFTMAX, folder, "triton_softmax", edit)
    phrase = "with float16 inputs has dtype torch.float32 but the inputs are torch.float16"
    assert_rejected(check_triton_softmax, candidate, phrase, capsys)
    monkeypatch.setattr(triton_checks, "_expect_softmax_contract_cases", lambda *args: 0)
    assert_accepted(check_triton_softmax, candidate, capsys)


# ---------------------------------------------------------------------------------------------
# triton_scores

SCORES_ACCEPTED = {
    "tiles of 16×32": [],
    "tiles of 64×16": [("BLOCK_M, BLOCK_N = 16, 32", "BLOCK_M, BLOCK_N = 64, 16")],
    "key tile loaded transposed, no tl.trans": [
        ("k_ptrs = K + b * skb + h * skh + offs_n[:, None] * skn + offs_d[None, :]",
         "k_ptrs = K + b * skb + h * skh + offs_n[None, :] * skn + offs_d[:, None]"),
        ("k = tl.load(k_ptrs, mask=offs_n[:, None] < T_k, other=0.0)",
         "k = tl.load(k_ptrs, mask=offs_n[None, :] < T_k, other=0.0)"),
        ("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(q, k) * scale"),
    ],
    "scores in q's dtype": [("dtype=torch.float32)", "dtype=q.dtype)")],
    "contiguous copies instead of strides": [
        ("    B, H, T_q, D = q.shape\n",
         "    q, k = q.contiguous(), k.contiguous()\n    B, H, T_q, D = q.shape\n")
    ],
    "q scaled before the product": [
        ("q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0)",
         "q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0) * scale"),
        ("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(q, tl.trans(k))"),
    ],
}  # fmt: skip

SCORES_REJECTED = {
    "no scale": ([("T_q, T_k, 1 / math.sqrt(D),", "T_q, T_k, 1.0,")], "does not scale the scores"),
    "scale 1/d": ([("T_q, T_k, 1 / math.sqrt(D),", "T_q, T_k, 1 / D,")], "scales the scores by 1/d"),
    "key tile not transposed": (
        [("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(q, k) * scale")],
        "tl.dot(q, tl.trans(k))",
    ),
    "k·qᵀ in square tiles": (
        [("BLOCK_M, BLOCK_N = 16, 32", "BLOCK_M, BLOCK_N = 32, 32"),
         ("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(k, tl.trans(q)) * scale")],
        "stores each tile transposed",
    ),
    "query loads unmasked": (
        [("q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0)", "q = tl.load(q_ptrs)")],
        "read from memory outside its tensors",
    ),
    "key loads unmasked": (
        [("k = tl.load(k_ptrs, mask=offs_n[:, None] < T_k, other=0.0)", "k = tl.load(k_ptrs)")],
        "read from memory outside its tensors",
    ),
    "store masked on the rows only": (
        [("mask=(offs_m[:, None] < T_q) & (offs_n[None, :] < T_k))", "mask=offs_m[:, None] < T_q)")],
        "wrote to memory outside its tensors",
    ),
    "row offsets without the block size": (
        [("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", "offs_m = pid_m + tl.arange(0, BLOCK_M)")],
        "the programs' blocks overlap",
    ),
    "column offsets without the block size": (
        [("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", "offs_n = pid_n + tl.arange(0, BLOCK_N)")],
        "the programs' blocks overlap",
    ),
    "grid rounds down": (
        [("grid = (triton.cdiv(T_q, BLOCK_M), triton.cdiv(T_k, BLOCK_N), B * H)",
          "grid = (max(1, T_q // BLOCK_M), max(1, T_k // BLOCK_N), B * H)")],
        "The grid needs (triton.cdiv(T_q, BLOCK_M), triton.cdiv(T_k, BLOCK_N), B * H) programs",
    ),
    "strides ignored": (
        [("q, k, s, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),",
          "q, k, s, H * T_q * D, T_q * D, D, H * T_k * D, T_k * D, D,")],
        "is wrong for inputs that are views",
    ),
    "rows d apart": (
        [("offs_m[:, None] * sqm + offs_d", "offs_m[:, None] * D + offs_d"),
         ("offs_n[:, None] * skn + offs_d", "offs_n[:, None] * D + offs_d")],
        "reads q and k rows d elements apart",
    ),
    "k alone read as contiguous": (
        [("k.stride(0), k.stride(1), k.stride(2),", "H * T_k * D, T_k * D, D,")],
        "as if it were contiguous",  # (naming k)
    ),
    "k read with q's strides": (
        [("k.stride(0), k.stride(1), k.stride(2),", "q.stride(0), q.stride(1), q.stride(2),")],
        "reads k with q's strides",
    ),
    "batch and head swapped": (
        [("    b = pid_bh // H\n    h = pid_bh % H\n", "    b = pid_bh % H\n    h = pid_bh // H\n")],
        "so no mask is missing: its base pointer is off",
    ),
    "scores transposed": (
        [("s = torch.empty(B, H, T_q, T_k,", "s = torch.empty(B, H, T_k, T_q,")],
        "That is (B, H, T_k, T_q)",
    ),
    "no return": ([("    return s\n", "")], "returned None"),
}  # fmt: skip


@pytest.mark.parametrize("name", SCORES_ACCEPTED)
def test_check_triton_scores_accepts(name, folder, capsys):
    candidate = variant(SCORES, folder, "triton_scores", *SCORES_ACCEPTED[name])
    assert_accepted(check_triton_scores, candidate, capsys)


@pytest.mark.parametrize("name", SCORES_REJECTED)
def test_check_triton_scores_rejects(name, folder, capsys):
    pairs, phrase = SCORES_REJECTED[name]
    assert_rejected(check_triton_scores, variant(SCORES, folder, "triton_scores", *pairs), phrase, capsys)


def test_check_triton_scores_accepts_the_reference(capsys):
    assert_accepted(check_triton_scores, reference.triton_scores, capsys)


# ---------------------------------------------------------------------------------------------
# triton_flash_attention

FLASH_ACCEPTED = {
    "blocks of 32×32": [],
    "blocks of 16×16": [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 16, 16")],
    "blocks of 16×64": [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 16, 64")],
    "blocks of 64×16": [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 64, 16")],
    "blocks of 128×128": [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 128, 128")],
    "exp2 with the scale in base 2": [
        ("alpha = tl.exp(m - m_safe)", "alpha = tl.exp2(m - m_safe)"),
        ("p = tl.exp(s - m_safe[:, None])", "p = tl.exp2(s - m_safe[:, None])"),
        ("H, T_q, T_k, 1 / math.sqrt(D),", "H, T_q, T_k, 1.4426950408889634 / math.sqrt(D),"),
        ("lse = m + tl.log(l)", "lse = (m + tl.log2(l)) * 0.6931471805599453"),
    ],
    "exp2, the lse as m·ln 2 + log(l)": [
        ("alpha = tl.exp(m - m_safe)", "alpha = tl.exp2(m - m_safe)"),
        ("p = tl.exp(s - m_safe[:, None])", "p = tl.exp2(s - m_safe[:, None])"),
        ("H, T_q, T_k, 1 / math.sqrt(D),", "H, T_q, T_k, 1.4426950408889634 / math.sqrt(D),"),
        ("lse = m + tl.log(l)", "lse = m * 0.6931471805599453 + tl.log(l)"),
    ],
    "lse stored with the query mask's 2-D layout": [
        (
            "tl.store(L + pid_bh * T_q + offs_m, lse, mask=offs_m < T_q)",
            "tl.store(L + pid_bh * T_q + offs_m[:, None], lse[:, None], mask=offs_m[:, None] < T_q)",
        )
    ],
    "contiguous copies instead of strides": [
        (
            "    B, H, T_q, D = q.shape\n",
            "    q, k, v = (x.contiguous() for x in (q, k, v))\n    B, H, T_q, D = q.shape\n",
        ),
    ],
}

RETURN = "    return (o, lse) if return_lse else o\n"
LSE = "lse = m + tl.log(l)"
EXP2 = [
    ("alpha = tl.exp(m - m_safe)", "alpha = tl.exp2(m - m_safe)"),
    ("p = tl.exp(s - m_safe[:, None])", "p = tl.exp2(s - m_safe[:, None])"),
    ("H, T_q, T_k, 1 / math.sqrt(D),", "H, T_q, T_k, 1.4426950408889634 / math.sqrt(D),"),
]

FLASH_REJECTED = {
    "keys loaded from the value tensor": (
        [
            (
                "k_ptrs = K + b * skb + h * skh + cols[:, None] * skn",
                "k_ptrs = V + b * svb + h * svh + cols[:, None] * svn",
            )
        ],
        "scores the queries against the values",
    ),
    "values loaded from the key tensor": (
        [
            (
                "v_ptrs = V + b * svb + h * svh + cols[:, None] * svn",
                "v_ptrs = K + b * skb + h * skh + cols[:, None] * skn",
            )
        ],
        "mixes the keys instead of the values",
    ),
    "accumulator not rescaled": (
        [("acc = acc * alpha[:, None] + ", "acc = acc + ")],
        "does not rescale the accumulator",
    ),
    "sum not rescaled": ([("l = l * alpha + ", "l = l + ")], "does not rescale the running sum"),
    "neither rescaled": (
        [("acc = acc * alpha[:, None] + ", "acc = acc + "), ("l = l * alpha + ", "l = l + ")],
        "rescales neither",
    ),
    "causal bound one block short": (
        [("(pid_m + 1) * BLOCK_M + offset)", "pid_m * BLOCK_M + offset)")],
        "stops the causal loop one block early",
    ),  # fmt: skip
    "causal bound one block long": (
        [("(pid_m + 1) * BLOCK_M + offset)", "(pid_m + 2) * BLOCK_M + offset)")],
        "still loads key blocks that lie wholly above the diagonal",
    ),  # fmt: skip
    "causal masks without cutting the loop": (
        [("hi = tl.minimum(T_k, (pid_m + 1) * BLOCK_M + offset)", "hi = T_k")],
        "still loads key blocks that lie wholly above the diagonal",
    ),
    "ragged key loads unmasked": (
        [("k = tl.load(k_ptrs, mask=cols[:, None] < T_k, other=0.0)", "k = tl.load(k_ptrs)")],
        "read from memory outside its tensors",
    ),
    "ragged scores unmasked": (
        [('        s = tl.where(cols[None, :] < T_k, s, float("-inf"))\n', "")],
        "a score of 0, so they count in the softmax",
    ),
    "output stored unmasked": (
        [
            (
                "tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < T_q)",
                "tl.store(o_ptrs, out.to(O.dtype.element_ty))",
            )
        ],
        "wrote to memory outside its tensors",
    ),  # fmt: skip
    "no scale": ([("H, T_q, T_k, 1 / math.sqrt(D),", "H, T_q, T_k, 1.0,")], "does not scale the scores"),
    "scale 1/d": ([("H, T_q, T_k, 1 / math.sqrt(D),", "H, T_q, T_k, 1 / D,")], "scales the scores by 1/d"),
    "exp2 without log2(e)": (
        [
            ("alpha = tl.exp(m - m_safe)", "alpha = tl.exp2(m - m_safe)"),
            ("p = tl.exp(s - m_safe[:, None])", "p = tl.exp2(s - m_safe[:, None])"),
        ],
        "uses tl.exp2 without converting",
    ),  # fmt: skip
    "is_causal ignored": (
        [("IS_CAUSAL=is_causal,", "IS_CAUSAL=False,")],
        "ignores is_causal",
    ),  # fmt: skip
    "strict causal mask": (
        [("cols[None, :] <= offs_m[:, None] + offset", "cols[None, :] < offs_m[:, None] + offset")],
        "masks the diagonal too",
    ),
    "top-left alignment": (
        [("offset = T_k - T_q", "offset = 0")],
        "aligns the causal mask top-left",
    ),
    "ragged key block left out": (
        [("    hi = T_k\n", "    hi = T_k // BLOCK_N * BLOCK_N\n")],
        "drops the ragged last key block",
    ),
    "grid rounds down": (
        [("grid = (triton.cdiv(T_q, BLOCK_M), B * H)", "grid = (max(1, T_q // BLOCK_M), B * H)")],
        "The grid needs (triton.cdiv(T_q, BLOCK_M), B * H) programs",
    ),
    "strides ignored": (
        [
            (
                "q, k, v, o, lse, q.stride(0), q.stride(1), q.stride(2), "
                "k.stride(0), k.stride(1), k.stride(2),\n"
                "        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),",
                "q, k, v, o, lse, H * T_q * D, T_q * D, D, H * T_k * D, T_k * D, D,\n"
                "        H * T_k * D, T_k * D, D, o.stride(0), o.stride(1), o.stride(2),",
            )
        ],
        "is wrong for inputs that are views",
    ),  # fmt: skip
    "returns a tuple": ([(RETURN, "    return o, None\n")], "return the attention output only then"),
    "float32 output for float16 input": (
        [("o = torch.empty_like(q)", "o = torch.empty_like(q, dtype=torch.float64)")],
        "has dtype torch.float64 but the inputs are torch.float32",
    ),
}


# Kernels whose output is right and whose lse (with return_lse=True) is not, and the phrase each gets
FLASH_LSE_REJECTED = {
    "return_lse ignored": ([(RETURN, "    return o\n")], "it ignores return_lse"),
    "no return_lse parameter": (
        [
            (
                "def triton_flash_attention(q, k, v, is_causal=False, return_lse=False):",
                "def triton_flash_attention(q, k, v, is_causal=False):",
            ),
            (RETURN, "    return o\n"),
        ],
        "give it the parameter `return_lse: bool = False`",
    ),  # fmt: skip
    "lse in float64": (
        [
            (
                "lse = torch.empty(B, H, T_q, device=q.device, dtype=torch.float32)",
                "lse = torch.empty(B, H, T_q, device=q.device, dtype=torch.float64)",
            )
        ],
        "allocate it in float32",
    ),  # fmt: skip
    "tl.log2 with tl.exp": ([(LSE, "lse = m + tl.log2(l)")], "mixes natural log and log2"),
    "base-2 lse left from the exp2 trick": (
        [*EXP2, (LSE, "lse = m + tl.log2(l)")],
        "is in base 2 (it is the natural log-sum-exp times log2(e)), as the exp2 trick leaves it",
    ),
    "exp2 trick, then the natural log of l": (
        EXP2,
        "adds the natural tl.log(l) to a base-2 running maximum",
    ),  # fmt: skip
    "running maximum only": ([(LSE, "lse = m")], "the running maximum m without the log of the sum"),
    "last key block only": (
        [(LSE, "lse = m + tl.log(tl.sum(p, 1))")],
        "the log-sum-exp of the last key block only",
    ),
    "unscaled maximum": ([(LSE, "lse = m / scale + tl.log(l)")], "without the 1/√d scale"),
    "row offset without the batch·head": (
        [("tl.store(L + pid_bh * T_q + offs_m,", "tl.store(L + offs_m,")],
        "lse_ptr + pid_bh * T_q + offs_m",
    ),
    "rows counted from 0 in each block": (
        [
            (
                "tl.store(L + pid_bh * T_q + offs_m, lse, mask=offs_m < T_q)",
                "tl.store(L + pid_bh * T_q + tl.arange(0, BLOCK_M), lse, mask=tl.arange(0, BLOCK_M) < T_q)",
            )
        ],
        "the block's absolute query rows",
    ),  # fmt: skip
    "batch·head offset by T_k": (
        [("tl.store(L + pid_bh * T_q + offs_m,", "tl.store(L + pid_bh * T_k + offs_m,")],
        "lse_ptr + z * T_q + i",
    ),
}


@pytest.mark.parametrize("name", FLASH_ACCEPTED)
def test_check_triton_flash_attention_accepts(name, folder, capsys):
    candidate = variant(FLASH, folder, "triton_flash_attention", *FLASH_ACCEPTED[name])
    assert_accepted(check_triton_flash_attention, candidate, capsys)


@pytest.mark.parametrize("name", FLASH_REJECTED)
def test_check_triton_flash_attention_rejects(name, folder, capsys):
    pairs, phrase = FLASH_REJECTED[name]
    candidate = variant(FLASH, folder, "triton_flash_attention", *pairs)
    assert_rejected(check_triton_flash_attention, candidate, phrase, capsys)


@pytest.mark.parametrize("name", FLASH_LSE_REJECTED)
def test_check_triton_flash_attention_names_lse_mistakes(name, folder, capsys):
    pairs, phrase = FLASH_LSE_REJECTED[name]
    candidate = variant(FLASH, folder, "triton_flash_attention", *pairs)
    assert_rejected(check_triton_flash_attention, candidate, phrase, capsys)


def test_the_reference_returns_the_lse_only_when_asked():
    q, k, v = torch.randn(3, 1, 2, 20, 16).unbind(0)
    out = reference.triton_flash_attention(q, k, v, is_causal=True)
    out_again, lse = reference.triton_flash_attention(q, k, v, is_causal=True, return_lse=True)
    assert torch.equal(out, out_again) and lse.shape == (1, 2, 20) and lse.dtype == torch.float32
    scores = (q @ k.transpose(-1, -2) / 4).masked_fill(torch.ones(20, 20).triu(1).bool(), -math.inf)
    torch.testing.assert_close(lse, scores.logsumexp(-1))


def test_a_stub_inside_the_kernel_is_reported_as_not_implemented(folder, capsys):
    # The student notebook gives the kernel's set-up and stops it with a stub where the loop goes.
    stub = ("    hi = T_k\n", '    raise NotImplementedError("Exercise: replace this line.")\n')
    candidate = variant(FLASH, folder, "triton_flash_attention", stub)
    assert_rejected(check_triton_flash_attention, candidate, "not implemented yet", capsys)


def test_check_triton_flash_attention_accepts_the_reference(capsys):
    assert_accepted(check_triton_flash_attention, reference.triton_flash_attention, capsys)


def test_the_trace_puts_the_interpreter_back_after_a_failing_kernel(folder):
    from triton.runtime import interpreter

    unmasked = ("k = tl.load(k_ptrs, mask=cols[:, None] < T_k, other=0.0)", "k = tl.load(k_ptrs)")
    wrong = variant(FLASH, folder, "triton_flash_attention", unmasked)
    before = interpreter.GridExecutor._init_args_hst
    with pytest.raises(AssertionError):
        check_triton_flash_attention(wrong)
    assert interpreter.GridExecutor._init_args_hst is before
    assert "create_masked_load" not in vars(interpreter.interpreter_builder)
    q = torch.randn(1, 1, 8, 16)
    assert torch.isfinite(reference.triton_flash_attention(q, q, q)).all()


# ---------------------------------------------------------------------------------------------
# Without the trace: how the checks judge kernels compiled for a GPU, from the numbers alone


@pytest.fixture
def untraced(monkeypatch):
    """Judge as on a GPU (float16 inputs, GPU tolerances, no trace), with the interpreter standing in."""
    from attn_course.checks import _triton_harness, triton, triton_flash

    class StandIn(_triton_harness.Mode):
        @property
        def gpu(self) -> bool:
            return True

    def stand_in(name, candidate):
        return StandIn(torch.device("cpu"), False)

    for module in (triton, triton_flash):
        monkeypatch.setattr(module, "kernel_mode", stand_in)


UNTRACED_REJECTED = {
    "accumulator not rescaled, blocks of 64×16 found by search": (
        [("BLOCK_M, BLOCK_N = 32, 32", "BLOCK_M, BLOCK_N = 64, 16"), ("acc * alpha[:, None] + ", "acc + ")],
        "does not rescale the accumulator",
    ),
    "causal bound one block short": (
        [("(pid_m + 1) * BLOCK_M + offset)", "pid_m * BLOCK_M + offset)")],
        "stops the causal loop one block early",
    ),  # fmt: skip
    "ragged value loads unmasked read the NaN after the inputs": (
        [("v = tl.load(v_ptrs, mask=cols[:, None] < T_k, other=0.0)", "v = tl.load(v_ptrs)")],
        "a load past the end of a tensor without a mask",
    ),
    "no scale": ([("H, T_q, T_k, 1 / math.sqrt(D),", "H, T_q, T_k, 1.0,")], "does not scale the scores"),
    "base-2 lse left from the exp2 trick": ([*EXP2, (LSE, "lse = m + tl.log2(l)")], "is in base 2"),
    "return_lse ignored": ([(RETURN, "    return o\n")], "it ignores return_lse"),
}


def test_untraced_check_accepts_a_right_kernel_in_float16(untraced, folder, capsys):
    candidate = variant(FLASH, folder, "triton_flash_attention")
    assert_accepted(check_triton_flash_attention, candidate, capsys)
    assert_accepted(check_triton_add, variant(ADD, folder, "triton_add"), capsys)


UNTRACED_SCORES_REJECTED = {
    "no scale": ([("T_q, T_k, 1 / math.sqrt(D),", "T_q, T_k, 1.0,")], "does not scale the scores"),
    "strides ignored": (SCORES_REJECTED["strides ignored"][0], "is wrong for inputs that are views"),
}  # an unmasked ragged load is seen in the trace only: the scores it spoils are never stored


def test_untraced_scores_check_accepts_a_right_kernel_in_float16(untraced, folder, capsys):
    assert_accepted(check_triton_scores, variant(SCORES, folder, "triton_scores"), capsys)


@pytest.mark.parametrize("name", UNTRACED_SCORES_REJECTED)
def test_untraced_scores_check_names_mistakes_from_the_numbers(name, untraced, folder, capsys):
    pairs, phrase = UNTRACED_SCORES_REJECTED[name]
    assert_rejected(check_triton_scores, variant(SCORES, folder, "triton_scores", *pairs), phrase, capsys)


@pytest.mark.parametrize("name", UNTRACED_REJECTED)
def test_untraced_check_names_mistakes_from_the_numbers(name, untraced, folder, capsys):
    pairs, phrase = UNTRACED_REJECTED[name]
    candidate = variant(FLASH, folder, "triton_flash_attention", *pairs)
    assert_rejected(check_triton_flash_attention, candidate, phrase, capsys)


def test_without_triton_every_check_says_how_to_get_it(monkeypatch, capsys):
    from attn_course.triton_flash import runtime

    monkeypatch.setattr(runtime, "_triton_version", lambda: None)
    for check in (check_triton_add, check_triton_softmax, check_triton_scores, check_triton_flash_attention):
        assert_rejected(check, lambda *args, **kwargs: None, "Triton is not installed", capsys)


# ---------------------------------------------------------------------------------------------
# Hold-out kernels: written after the checks were improved against the cases above, without looking
# at their mistake tables, and run once before any check was changed for them. `named` records
# whether the message then named the idea of the mistake; the phrases are what the checks say now.

TRITON_HOLD_OUT = {
    "add: flat output for a 2-D input": (
        check_triton_add, ADD, "triton_add",
        [("out = torch.empty_like(x)", "out = torch.empty(x.numel(), dtype=x.dtype, device=x.device)")],
        "returned a flat tensor", True,
    ),
    "add: offsets without the block size": (
        check_triton_add, ADD, "triton_add",
        [("offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = pid + tl.arange(0, BLOCK)")],
        "the programs' blocks overlap", False,
    ),
    "add: store mask one short": (
        check_triton_add, ADD, "triton_add",
        [("x + y, mask=mask)", "x + y, mask=offsets < n - 1)")],
        "so it is the mask that leaves some out", False,
    ),
    "softmax: running max starts at 0": (
        check_triton_softmax, SOFTMAX, "triton_softmax",
        [('    m = float("-inf")\n', "    m = 0.0\n")],
        "rows of large negative scores", False,
    ),
    "softmax: output written with x's row stride": (
        check_triton_softmax, SOFTMAX, "triton_softmax",
        [("n_cols, x.stride(0), out.stride(0)", "n_cols, x.stride(0), x.stride(0)")],
        "writes the output's rows 64 elements apart, the row stride of x", False,
    ),
    "softmax: store mask one short": (
        check_triton_softmax, SOFTMAX, "triton_softmax",
        [("tl.exp(x - m) / total, mask=cols < n_cols)", "tl.exp(x - m) / total, mask=cols < n_cols - 1)")],
        "no program wrote", True,
    ),
    "flash: k and v with q's strides": (
        check_triton_flash_attention, FLASH, "triton_flash_attention",
        [("k.stride(0), k.stride(1), k.stride(2),\n        v.stride(0), v.stride(1), v.stride(2),",
          "q.stride(0), q.stride(1), q.stride(2),\n        q.stride(0), q.stride(1), q.stride(2),")],
        "reads k and v with q's strides", True,
    ),
    "flash: no final division": (
        check_triton_flash_attention, FLASH, "triton_flash_attention",
        [("    out = acc / l_safe[:, None]\n", "    out = acc\n")],
        "never divides by the running sum", True,
    ),
    "flash: query offsets without the block size": (
        check_triton_flash_attention, FLASH, "triton_flash_attention",
        [("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", "offs_m = pid_m + tl.arange(0, BLOCK_M)")],
        "the programs' blocks overlap", False,
    ),
    "flash: causal bound from the block's first query": (
        check_triton_flash_attention, FLASH, "triton_flash_attention",
        [("(pid_m + 1) * BLOCK_M + offset)", "pid_m * BLOCK_M + offset + 1)")],
        "computed from the block's FIRST query", False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", TRITON_HOLD_OUT)
def test_triton_hold_out_kernels_are_rejected_with_their_message(name, folder, capsys):
    check, template, function, pairs, phrase, _ = TRITON_HOLD_OUT[name]
    assert_rejected(check, variant(template, folder, function, *pairs), phrase, capsys)


# ---------------------------------------------------------------------------------------------
# The cases generated from triton_flash_attention's contract (checks/_contracts.py, issue 44): each
# changes one size or makes one input alone a view, and catches what the hand-picked cases let through.

CONTRACT_REJECTED = {
    "no guard for rows that see no key (T_q > T_k, causal)": (
        [("    l_safe = tl.where(l == 0.0, 1.0, l)  # a row that saw no key: output 0\n"
          "    out = acc / l_safe[:, None]\n", "    out = acc / l[:, None]\n")],
        "gives NaN in the first 32 query rows, which see no key",
    ),
    "values read with the keys' strides": (
        [("v_ptrs = V + b * svb + h * svh + cols[:, None] * svn",
          "v_ptrs = V + b * skb + h * skh + cols[:, None] * skn")],
        "reads `v` with `k`'s strides: with `k` passed as a transposed view",
    ),
    "keys read with the queries' row stride": (
        [("k_ptrs = K + b * skb + h * skh + cols[:, None] * skn",
          "k_ptrs = K + b * skb + h * skh + cols[:, None] * sqm")],
        "is right when every input is contiguous (the cases before passed) but wrong with `k` passed as a "
        "transposed view",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CONTRACT_REJECTED)
def test_contract_cases_name_what_the_hand_picked_cases_let_through(name, folder, capsys):
    pairs, phrase = CONTRACT_REJECTED[name]
    assert_rejected(
        check_triton_flash_attention, variant(FLASH, folder, "triton_flash_attention", *pairs), phrase, capsys
    )


CONTRACT_REJECTED_OTHERS = {
    "add: a copy only where the last stride is not 1": (
        check_triton_add, ADD, "triton_add",
        [("    x, y = x.contiguous(), y.contiguous()\n",
          "    x, y = (t if t.stride(-1) == 1 else t.contiguous() for t in (x, y))\n")],
        "adds x in memory order as if it were contiguous: with `x` passed as a slice of a longer tensor",
    ),
    "scores: keys stepped by the queries' row stride": (
        check_triton_scores, SCORES, "triton_scores",
        [("offs_n[:, None] * skn", "offs_n[:, None] * sqm")],
        "Only one input is a view here, `q` passed as a transposed view",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CONTRACT_REJECTED_OTHERS)
def test_contract_cases_of_add_and_scores(name, folder, capsys):
    check, template, function, pairs, phrase = CONTRACT_REJECTED_OTHERS[name]
    assert_rejected(check, variant(template, folder, function, *pairs), phrase, capsys)
