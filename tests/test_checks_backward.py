"""The checks of notebook 09 reject learner-like wrong backward passes by name and accept right ones.

Wrong versions are written as a learner would: small functions here, and text edits of a
learner's tiled backward (`backward_variants.FLASH_BACKWARD`), never the checker's simulator.
"""

from __future__ import annotations

import linecache
import math

import pytest
import torch
from backward_variants import FLASH_BACKWARD
from check_assertions import assert_accepted, assert_rejected, cpu_standing_in_for_cuda
from einops import einsum
from learner_code import learner
from triton_variants import variant

from attn_course import flash
from attn_course.attention import attention
from attn_course.backward import attention_backward, softmax_backward
from attn_course.checks import (
    CheckFailed,
    check_attention_backward,
    check_flash_attention_backward,
    check_FlashAttentionFunction,
    check_softmax_backward,
    check_triton_flash_attention_backward,
)
from attn_course.checks import backward as backward_checks


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("backward_variants")


def not_implemented(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# softmax_backward


def softmax_backward_jacobian(p, grad_p, dim=-1):
    moved = p.movedim(dim, -1)  # (..., n)
    jacobian = torch.diag_embed(moved) - moved[..., :, None] * moved[..., None, :]  # (..., n, n)
    return (jacobian @ grad_p.movedim(dim, -1)[..., None])[..., 0].movedim(-1, dim)


def softmax_backward_einsum(p, grad_p, dim=-1):
    p_, g_ = p.movedim(dim, -1), grad_p.movedim(dim, -1)
    dot = einsum(p_, g_, "... n, ... n -> ...")[..., None]
    return (p_ * (g_ - dot)).movedim(-1, dim)


@pytest.mark.parametrize("candidate", [softmax_backward, softmax_backward_jacobian, softmax_backward_einsum])
def test_softmax_backward_accepts_right_answers(candidate, capsys):
    assert_accepted(check_softmax_backward, candidate, capsys)


SOFTMAX_BACKWARD = """
def softmax_backward(p, grad_p, dim=-1):
    D = (grad_p * p).sum(dim=dim, keepdim=True)
    dx = p * (grad_p - D)
    return dx
"""
"""A learner's softmax_backward, as the solution cell is written."""

_SOFTMAX_D = "D = (grad_p * p).sum(dim=dim, keepdim=True)"

SOFTMAX_BACKWARD_WRONG = {
    "not implemented": ([(_SOFTMAX_D, "raise NotImplementedError")], "not implemented yet"),
    "p times grad_p, no D": (
        [("dx = p * (grad_p - D)", "dx = p * grad_p")],
        "multiplies grad_p by p and stops",
    ),
    "D without p": (
        [(_SOFTMAX_D, "D = grad_p.sum(dim=dim, keepdim=True)")],
        "subtracts the plain sum of grad_p",
    ),
    "no outer p": ([("dx = p * (grad_p - D)", "dx = grad_p - D")], "forgets the outer factor p"),
    "D over the last axis": (
        [(_SOFTMAX_D, "D = (grad_p * p).sum(dim=-1, keepdim=True)")],
        "sums over the last axis instead of the `dim` it was given",
    ),
    "no keepdim": ([(_SOFTMAX_D, "D = (grad_p * p).sum(dim=dim)")], "keepdim=True"),
    "returns D": ([("return dx", "return D.squeeze(dim)")], "one number per row"),
    "the diagonal only": (
        [("dx = p * (grad_p - D)", "dx = grad_p * (p - p**2)")],
        "as if each output depended on its own input only",
    ),
    "p(1 - p) for the small p": (
        [("dx = p * (grad_p - D)", "dx = torch.where(p > 0.5, p * grad_p, p * (1 - p) * grad_p)")],
        "its own input only",
    ),
}
"""Wrong softmax_backwards written as learners write them (edits of SOFTMAX_BACKWARD), each with the
phrase the check's message must contain."""


def test_the_learners_softmax_backward_is_right(capsys):
    assert_accepted(check_softmax_backward, learner(SOFTMAX_BACKWARD, "softmax_backward"), capsys)


@pytest.mark.parametrize("name", SOFTMAX_BACKWARD_WRONG)
def test_softmax_backward_names_each_mistake(name, capsys):
    edits, phrase = SOFTMAX_BACKWARD_WRONG[name]
    candidate = learner(SOFTMAX_BACKWARD, "softmax_backward", *edits)
    assert_rejected(check_softmax_backward, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# attention_backward


def _probs(q, k, is_causal, top_left=False):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        t_q, t_k = s.shape[-2:]
        keep = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(0 if top_left else t_k - t_q)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row that sees no key: 0, as attention gives it


def learner_attention_backward(
    q,
    k,
    v,
    grad_out,
    is_causal=False,
    *,
    d_term=True,
    scale_q=True,
    transpose_ds=False,
    mask=True,
    top_left=False,
    dv_transpose=True,
):
    p = _probs(q, k, is_causal and mask, top_left)
    dv = p.transpose(-1, -2) @ grad_out if dv_transpose else p @ grad_out
    dp = grad_out @ v.transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True)) if d_term else p * dp
    scale = 1 / math.sqrt(q.shape[-1])
    if transpose_ds:
        return ds.transpose(-1, -2) @ k * scale, ds @ q * scale, dv
    dq = ds @ k * (scale if scale_q else 1.0)
    dk = ds.transpose(-1, -2) @ q * scale
    return dq, dk, dv


def attention_backward_einsum(q, k, v, grad_out, is_causal=False):
    p = _probs(q, k, is_causal)
    dv = einsum(p, grad_out, "... i j, ... i e -> ... j e")
    dp = einsum(grad_out, v, "... i e, ... j e -> ... i j")
    ds = p * (dp - einsum(grad_out, p @ v, "... i e, ... i e -> ... i")[..., None])  # D from O
    dq = einsum(ds, k, "... i j, ... j d -> ... i d") / math.sqrt(q.shape[-1])
    dk = einsum(ds, q, "... i j, ... i d -> ... j d") / math.sqrt(q.shape[-1])
    return dq, dk, dv


def attention_backward_autograd(q, k, v, grad_out, is_causal=False):
    leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
    with torch.enable_grad():
        out = attention(*leaves, is_causal=is_causal)[0]
        return torch.autograd.grad(out, leaves, grad_out)


def attention_backward_dot_backward(q, k, v, grad_out, is_causal=False):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    with torch.enable_grad():
        out, _ = attention(q, k, v, is_causal=is_causal)
        out.backward(grad_out)
    return q.grad, k.grad, v.grad


def attention_backward_vjp(q, k, v, grad_out, is_causal=False):
    _, vjp = torch.func.vjp(lambda q, k, v: attention(q, k, v, is_causal=is_causal)[0], q, k, v)
    return vjp(grad_out)


AUTOGRAD = "asks torch.autograd for the gradients"


@pytest.mark.parametrize(
    "candidate", [attention_backward_autograd, attention_backward_dot_backward, attention_backward_vjp]
)
def test_attention_backward_refuses_autograd_and_gives_the_formulas(candidate, capsys):
    assert_rejected(check_attention_backward, candidate, AUTOGRAD, capsys)
    assert_rejected(check_attention_backward, candidate, "dS = P ∘ (dP − rowsum(dO ∘ O))", capsys)
    assert_rejected(check_attention_backward, candidate, "dK = dSᵀ Q / √d", capsys)


def softmax_backward_autograd(p, grad_p, dim=-1):
    x = p.log().detach().requires_grad_()
    with torch.enable_grad():
        (dx,) = torch.autograd.grad(torch.softmax(x, dim=dim), x, grad_p)
    return dx


def flash_backward_autograd(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    return attention_backward_autograd(q, k, v, grad_out, is_causal)


def test_the_other_backward_exercises_refuse_autograd_too(capsys):
    assert_rejected(check_softmax_backward, softmax_backward_autograd, "dx = p ∘ (grad_p − D)", capsys)
    assert_rejected(check_flash_attention_backward, flash_backward_autograd, AUTOGRAD, capsys)
    assert_rejected(
        check_triton_flash_attention_backward, flash_backward_autograd, "in your two kernels", capsys
    )
    recomputes = BACKWARD.replace(
        BACKWARD.strip().splitlines()[1],  # the call of flash_attention_backward
        "leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]\n"
        "with torch.enable_grad():\n"
        "    again = attention(*leaves, is_causal=ctx.is_causal)[0]\n"
        "    dq, dk, dv = torch.autograd.grad(again, leaves, grad_out)",
    )
    assert recomputes != BACKWARD
    assert_rejected(check_FlashAttentionFunction, _function(FORWARD, recomputes), AUTOGRAD, capsys)


@pytest.mark.parametrize(
    "candidate", [attention_backward, learner_attention_backward, attention_backward_einsum]
)
def test_attention_backward_accepts_right_answers(candidate, capsys):
    assert_accepted(check_attention_backward, candidate, capsys)


def _with(**slips):
    return lambda q, k, v, grad_out, is_causal=False: learner_attention_backward(
        q, k, v, grad_out, is_causal, **slips
    )


@pytest.mark.parametrize(
    ("candidate", "phrase"),
    [
        (not_implemented, "not implemented yet"),
        (_with(d_term=False), "leaves out the D term"),
        (_with(scale_q=False), "forgets the 1/√d scale in dQ"),
        (_with(transpose_ds=True), "transposes dS the wrong way round"),
        (_with(dv_transpose=False), "dV = Pᵀ dO"),
        (_with(mask=False), "ignores is_causal: with is_causal=True the probabilities are the causal ones"),
        (_with(top_left=True), "aligns the causal mask top-left"),
        (
            lambda q, k, v, grad_out, is_causal=False: learner_attention_backward(
                q, k, v, grad_out, is_causal
            )[:2],
            "should return a tuple (dq, dk, dv)",
        ),
        (
            lambda q, k, v, grad_out, is_causal=False: (lambda g: (g[0], g[1], 2 * g[2]))(
                attention_backward(q, k, v, grad_out, is_causal)
            ),
            "gives the wrong dv (dq and dk are right)",
        ),
    ],
)
def test_attention_backward_names_each_mistake(candidate, phrase, capsys):
    assert_rejected(check_attention_backward, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# flash_attention_backward

FLASH_ACCEPTED = {
    "template": [],
    "float64 accumulators": [
        ("dk_acc = torch.zeros_like(kb)", "dk_acc = torch.zeros_like(kb, dtype=torch.float64)"),
        ("dv_acc = torch.zeros_like(vb)", "dv_acc = torch.zeros_like(vb, dtype=torch.float64)"),
    ],
    "einsum for the products": [
        ("dv_acc += p.transpose(-1, -2) @ dob", "dv_acc += torch.einsum('...ij,...ie->...je', p, dob)"),
        (
            "dk_acc += ds.transpose(-1, -2) @ qb * scale",
            "dk_acc += torch.einsum('...ij,...id->...jd', ds, qb) * scale",
        ),
    ],
    "mask only the tiles that cross the diagonal": [
        (
            "            if is_causal:\n                rows",
            "            if is_causal and ke - 1 > qs + offset:\n                rows",
        ),
    ],
    "every tile visited, masked": [("if is_causal and ks > qe - 1 + offset:", "if False:")],
}


def flash_backward_query_blocks_outside(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    # query blocks outside: dQ stays in a local accumulator, dK and dV are added into the outputs
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    delta = (grad_out * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for qs in range(0, t_q, block_size):
        rows = torch.arange(qs, min(qs + block_size, t_q), device=q.device)
        acc = torch.zeros_like(q[..., rows, :])
        last = min(t_k, rows[-1].item() + t_k - t_q + 1) if is_causal else t_k
        for ks in range(0, max(last, 0), block_size):
            cols = torch.arange(ks, min(ks + block_size, t_k), device=q.device)
            s = q[..., rows, :] @ k[..., cols, :].mT / math.sqrt(d)
            if is_causal:
                s = s.masked_fill(cols[None, :] > rows[:, None] + t_k - t_q, -math.inf)
            p = (s - lse[..., rows, None]).exp()
            dv[..., cols, :] += p.mT @ grad_out[..., rows, :]
            ds = p * (grad_out[..., rows, :] @ v[..., cols, :].mT - delta[..., rows, None])
            acc += ds @ k[..., cols, :] / math.sqrt(d)
            dk[..., cols, :] += ds.mT @ q[..., rows, :] / math.sqrt(d)
        dq[..., rows, :] = acc
    return dq, dk, dv


@pytest.mark.parametrize("name", FLASH_ACCEPTED)
def test_flash_attention_backward_accepts_right_answers(name, folder, capsys):
    candidate = variant(FLASH_BACKWARD, folder, "flash_attention_backward", *FLASH_ACCEPTED[name])
    assert_accepted(check_flash_attention_backward, candidate, capsys)


@pytest.mark.parametrize("candidate", [flash.flash_attention_backward, flash_backward_query_blocks_outside])
def test_flash_attention_backward_accepts_other_loop_orders(candidate, capsys):
    assert_accepted(check_flash_attention_backward, candidate, capsys)


FLASH_REJECTED = {
    "no D term": ([("ds = p * (dp - D[..., qs:qe, :])", "ds = p * dp")], "leaves out the D term"),
    "D from the tile": (
        [("ds = p * (dp - D[..., qs:qe, :])", "ds = p * (dp - (dp * p).sum(-1, keepdim=True))")],
        "computes D from the tile's dP ∘ P",
    ),
    "no scale in dQ": (
        [("dq[..., qs:qe, :] += ds @ kb * scale", "dq[..., qs:qe, :] += ds @ kb")],
        "forgets the 1/√d scale in dQ",
    ),
    "no scale in dK": (
        [("dk_acc += ds.transpose(-1, -2) @ qb * scale", "dk_acc += ds.transpose(-1, -2) @ qb")],
        "forgets the 1/√d scale in dK",
    ),
    "scale twice in dQ": (
        [("dq[..., qs:qe, :] += ds @ kb * scale", "dq[..., qs:qe, :] += ds @ kb * scale * scale")],
        "applies the 1/√d scale twice in dQ",
    ),
    "exp(S - m)": (
        [("p = torch.exp(s - lse[..., qs:qe, None])", "p = torch.exp(s - s.amax(-1, keepdim=True))")],
        "unnormalised exp(S − m)",
    ),
    "lse of the key rows": (
        [("lse[..., qs:qe, None]", "lse[..., ks:ke, None]")],
        "lse of the key block's rows",
    ),
    "mask only in the forward": (
        [("            if is_causal:\n                rows", "            if False:\n                rows")],
        "causal mask in the forward but masks no key in the recomputation",
    ),
    "keys numbered from the end: a mask that masks nothing": (
        [
            (
                "cols = torch.arange(ks, ke, device=q.device)[None, :]",
                "cols = torch.arange(ks, ke, device=q.device)[None, :] - T_k",
            )
        ],
        "masks no key in the recomputation (no mask there, or one that lets every key through)",
    ),
    "dQ not accumulated": (
        [("dq[..., qs:qe, :] += ds", "dq[..., qs:qe, :] = ds")],
        "does not accumulate dQ over the key blocks",
    ),
    "dK, dV not accumulated": (
        [("dv_acc += p", "dv_acc = p"), ("dk_acc += ds", "dk_acc = ds")],
        "does not accumulate dK and dV over the query blocks",
    ),
    "dS transposed": (
        [
            ("dq[..., qs:qe, :] += ds @ kb", "dq[..., qs:qe, :] += ds.transpose(-1, -2) @ kb"),
            ("dk_acc += ds.transpose(-1, -2) @ qb", "dk_acc += ds @ qb"),
        ],
        "transposes dS the wrong way round",
    ),
    "top-left": ([("offset = T_k - T_q", "offset = 0")], "aligns the causal mask top-left"),
    "tail dropped": (
        [("for ks in range(0, T_k, block_size)", "for ks in range(0, T_k - T_k % block_size, block_size)")],
        "drops the ragged last key block",
    ),
    "D scaled like the scores": (
        [
            (
                "D = (grad_out * out).sum(dim=-1, keepdim=True)",
                "D = (grad_out * out).sum(dim=-1, keepdim=True) * scale",
            )
        ],
        "off by exactly what another D gives",
    ),
    "D from the output alone": (
        [("D = (grad_out * out).sum(dim=-1, keepdim=True)", "D = out.sum(dim=-1, keepdim=True)")],
        "the factor `grad_out` left out of `grad_out * out`",
    ),
    "D plus the lse: another number": (
        [
            (
                "D = (grad_out * out).sum(dim=-1, keepdim=True)",
                "D = (grad_out * out).sum(dim=-1, keepdim=True) + lse[..., None]",
            )
        ],
        "Yours is another number",
    ),
    "dV overwritten by each query block": (
        [("dv_acc += p", "dv_acc = p")],
        "overwrites what the loop adds up, where it accumulates with `+=`",
    ),
    "tiles skipped by the block's first row": (
        [("if is_causal and ks > qe - 1 + offset:", "if is_causal and ks > qs + offset:")],
        "passes this check written `if is_causal and ks > qe + offset:`",
    ),
    "strict mask: only causal": (
        [("cols > rows", "cols >= rows")],
        "passes this check written `s = s.masked_fill(cols > rows",
    ),
    "dv halved: located": (
        [("dv_acc += p.transpose(-1, -2) @ dob", "dv_acc += p.transpose(-1, -2) @ dob / 2")],
        "gives the wrong dv (dq and dk are right): it is wrong in every key row",
    ),
    "dq wrong in the last block: located": (
        [
            (
                "dq[..., qs:qe, :] += ds @ kb * scale",
                "dq[..., qs:qe, :] += ds @ kb * scale * (1 + (qe == T_q) * (T_q % block_size > 0))",
            )
        ],
        "the last, ragged query block",
    ),
}


@pytest.mark.parametrize("name", FLASH_REJECTED)
def test_flash_attention_backward_names_each_mistake(name, folder, capsys):
    pairs, phrase = FLASH_REJECTED[name]
    candidate = variant(FLASH_BACKWARD, folder, "flash_attention_backward", *pairs)
    assert_rejected(check_flash_attention_backward, candidate, phrase, capsys)


def attention_backward_of_the_sum(q, k, v, grad_out, is_causal=False):  # as if the loss were out.sum()
    return learner_attention_backward(q, k, v, torch.ones_like(grad_out), is_causal)


def test_gradients_of_another_upstream_gradient_are_named(capsys):
    assert_rejected(
        check_attention_backward,
        attention_backward_of_the_sum,
        "an upstream gradient of 1 everywhere",
        capsys,
    )


ATTENTION_BACKWARD = """
from attn_course.attention import attention


def attention_backward(q, k, v, grad_out, is_causal=False):
    scale = 1 / math.sqrt(q.shape[-1])
    out, p = attention(q, k, v, is_causal=is_causal)
    dv = p.transpose(-1, -2) @ grad_out
    dp = grad_out @ v.transpose(-1, -2)
    D = (grad_out * out).sum(dim=-1, keepdim=True)
    ds = p * (dp - D)
    dq = ds @ k * scale
    dk = ds.transpose(-1, -2) @ q * scale
    return dq, dk, dv
"""
"""A learner's attention_backward, with D = rowsum(dO ∘ O) as the notebook derives it."""

_D = "D = (grad_out * out).sum(dim=-1, keepdim=True)"

ATTENTION_BACKWARD_WRONG = {
    "D from dP alone": (
        [(_D, "D = dp.sum(dim=-1, keepdim=True)")],
        "subtracts rowsum(dP) instead of rowsum(dP ∘ P)",
    ),
    "dV = P dO": (
        [("dv = p.transpose(-1, -2) @ grad_out", "dv = p @ grad_out")],
        "computes dV = P dO: the values' gradient collects over the queries",
    ),
    "D from the output alone": (
        [(_D, "D = out.sum(dim=-1, keepdim=True)")],
        "rowsum(O): dO is left out of dO ∘ O",
    ),
    "D added": ([("ds = p * (dp - D)", "ds = p * (dp + D)")], "−rowsum(dO ∘ O): its sign is flipped"),
    "D scaled like the scores": ([(_D, f"{_D} * scale")], "rowsum(dO ∘ O)/√d: D carries no scale"),
    "D divided by the scale": ([(_D, f"{_D} / scale")], "rowsum(dO ∘ O)·√d: D carries no scale"),
    "the gradient of out.sum()": (
        [("    dv = p.transpose", "    grad_out = torch.ones_like(out)\n    dv = p.transpose")],
        "1 everywhere (torch.ones_like)",
    ),
}
"""Wrong attention_backwards written as learners write them (edits of ATTENTION_BACKWARD), each with
the phrase the check's message must contain."""


def test_the_learners_attention_backward_is_right(capsys):
    assert_accepted(check_attention_backward, learner(ATTENTION_BACKWARD, "attention_backward"), capsys)


@pytest.mark.parametrize("name", ATTENTION_BACKWARD_WRONG)
def test_attention_backward_names_each_learners_mistake(name, capsys):
    edits, phrase = ATTENTION_BACKWARD_WRONG[name]
    candidate = learner(ATTENTION_BACKWARD, "attention_backward", *edits)
    assert_rejected(check_attention_backward, candidate, phrase, capsys)


def flash_backward_through_naive_attention(q, k, v, out, lse, grad_out, is_causal=False, block_size=64):
    return attention_backward(q, k, v, grad_out, is_causal)


@pytest.mark.parametrize(
    ("candidate", "phrase"),
    [
        (not_implemented, "not implemented yet"),
        (flash_backward_through_naive_attention, "as many as the whole 128×128 matrix"),
        (lambda q, k, v, out, lse, grad_out, is_causal=False, block_size=64: (q, k), "should return a tuple"),
    ],
)
def test_flash_attention_backward_names_other_mistakes(candidate, phrase, capsys):
    assert_rejected(check_flash_attention_backward, candidate, phrase, capsys)


def test_flash_attention_backward_runs_the_gpu_case_where_there_is_one(monkeypatch, capsys):
    calls = cpu_standing_in_for_cuda(monkeypatch, backward_checks)
    assert_accepted(check_flash_attention_backward, flash.flash_attention_backward, capsys)
    assert calls


# ---------------------------------------------------------------------------------------------
# FlashAttentionFunction


class SavesInAnotherOrder(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, block_size=64):
        out, lse = flash.flash_attention_forward(q, k, v, is_causal, block_size)
        ctx.save_for_backward(out, lse, q, k, v)
        ctx.causal, ctx.block = is_causal, block_size
        return out

    @staticmethod
    def backward(ctx, grad_out):
        out, lse, q, k, v = ctx.saved_tensors
        return (
            *flash.flash_attention_backward(q, k, v, out, lse, grad_out, ctx.causal, ctx.block),
            None,
            None,
        )


def _function(forward_body: str, backward_body: str) -> type:
    """A learner's Function with the given bodies (strings of statements)."""
    namespace = {"torch": torch, "flash": flash, "attention": attention}
    source = (
        "class Learners(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, q, k, v, is_causal=False, block_size=64):\n"
        + "".join(f"        {line}\n" for line in forward_body.strip().splitlines())
        + "    @staticmethod\n    def backward(ctx, grad_out):\n"
        + "".join(f"        {line}\n" for line in backward_body.strip().splitlines())
    )
    filename = f"<learner's Function {len(linecache.cache)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)  # as IPython
    exec(compile(source, filename, "exec"), namespace)  # test fixture: learner-like classes from short bodies
    return namespace["Learners"]


FORWARD = """
out, lse = flash.flash_attention_forward(q, k, v, is_causal, block_size)
ctx.save_for_backward(q, k, v, out, lse)
ctx.is_causal, ctx.block_size = is_causal, block_size
return out
"""
BACKWARD = """
q, k, v, out, lse = ctx.saved_tensors
dq, dk, dv = flash.flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)
return dq, dk, dv, None, None
"""


@pytest.mark.parametrize(
    "candidate", [flash.FlashAttentionFunction, SavesInAnotherOrder, _function(FORWARD, BACKWARD)]
)
def test_flash_attention_function_accepts_right_answers(candidate, capsys):
    assert_accepted(check_FlashAttentionFunction, candidate, capsys)


FUNCTION_WRONG = [
    (flash.flash_attention, "subclasses torch.autograd.Function"),
    (_function("raise NotImplementedError", "raise NotImplementedError"), "not implemented yet"),
    (_function(FORWARD, "raise NotImplementedError"), "is not implemented yet"),
    (
        _function(FORWARD.replace("return out", "return out, lse"), BACKWARD),
        "returned a tuple of 2 items",
    ),
    (
        _function(
            FORWARD.replace(
                "ctx.save_for_backward(q, k, v, out, lse)",
                "p = attention(q, k, v, is_causal=is_causal)[1]\nctx.save_for_backward(q, k, v, out, lse, p)",
            ),
            BACKWARD,
        ),
        "as large as the whole T_q × T_k matrix",
    ),
    (
        _function(
            FORWARD.replace(
                "ctx.save_for_backward(q, k, v, out, lse)",
                "ctx.save_for_backward(q, k, v, out)\nctx.lse = lse",
            ),
            BACKWARD.replace(
                "q, k, v, out, lse = ctx.saved_tensors", "q, k, v, out = ctx.saved_tensors\nlse = ctx.lse"
            ),
        ),
        "keeps a tensor on ctx.lse",
    ),
    (
        _function(FORWARD, BACKWARD.replace("return dq, dk, dv, None, None", "return dq, dk, dv")),
        "one gradient per argument of forward",
    ),
    (
        _function(FORWARD, BACKWARD.replace("ctx.is_causal, ctx.block_size)", "block_size=ctx.block_size)")),
        "passes is_causal=False to the backward",
    ),
    (
        _function(FORWARD, BACKWARD.replace("ctx.is_causal, ctx.block_size)", "ctx.block_size)")),
        "Pass it by name, block_size=ctx.block_size, and give `is_causal` its own value",
    ),
    (
        _function(FORWARD, BACKWARD.replace("return dq, dk, dv", "return dk, dq, dv")),
        "returns dk before dq",
    ),
    (
        _function(FORWARD, BACKWARD.replace("return dq, dk, dv", "return dq, dv, dk")),
        "returns dv before dk",
    ),
    (
        _function(
            FORWARD,
            BACKWARD.replace(
                "q, k, v, out, lse = ctx.saved_tensors", "q, v, k, out, lse = ctx.saved_tensors"
            ),
        ),
        "passes this check written `",
    ),
    (
        _function(
            FORWARD,
            BACKWARD.replace("dq, dk, dv = flash", "dq, dk, dv = flash").replace(
                "return dq, dk, dv", "return dq * 3, dk, dv"
            ),
        ),
        "gives the wrong dq",
    ),
    # The learner's own backward raising inside autograd is their mistake, named at their line.
    (
        _function(FORWARD, BACKWARD.replace("q, k, v, out, lse = ", "q, k, v, out = ")),
        "raised ValueError: too many values to unpack (expected 4) at line 10 of your code",
    ),
    (
        _function(FORWARD, BACKWARD.replace("return dq, dk, dv, None", "return dq + lse, dk, dv, None")),
        "`lse` (2, 2, 12) lacks axes that `dq` (2, 2, 12, 4) has",
    ),
    (
        _function(FORWARD, BACKWARD.replace("return dq, dk, dv, None", "return dq, dk.sum(0), dv, None")),
        "backward's gradient number 2 has shape (2, 12, 4), but a gradient has the shape of its input",
    ),
]
"""Wrong FlashAttentionFunctions written as learners write them (edits of FORWARD and BACKWARD), each
with the phrase the check's message must contain."""


@pytest.mark.parametrize(("candidate", "phrase"), FUNCTION_WRONG)
def test_flash_attention_function_names_each_mistake(candidate, phrase, capsys):
    assert_rejected(check_FlashAttentionFunction, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# The findings of the one diagnosis pipeline, by id beside the words


def _finding(check, candidate, capsys):
    with pytest.raises(CheckFailed) as failure:
        check(candidate)
    capsys.readouterr()
    return failure.value.finding, str(failure.value)


@pytest.mark.parametrize(
    ("check", "candidate", "finding", "phrase"),
    [
        (check_softmax_backward, lambda p, grad_p, dim=-1: p * grad_p, "known-mistake", "multiplies grad_p"),
        (check_softmax_backward, lambda p, grad_p, dim=-1: grad_p * (p - p**2), "property", "its own input"),
        (check_attention_backward, _with(d_term=False), "known-mistake", "leaves out the D term"),
        (
            check_attention_backward,
            lambda q, k, v, grad_out, is_causal=False: (lambda g: (g[0], g[1], 2 * g[2]))(
                attention_backward(q, k, v, grad_out, is_causal)
            ),
            "where-wrong",
            "gives the wrong dv (dq and dk are right)",
        ),
        (check_attention_backward, attention_backward_of_the_sum, "where-wrong", "an upstream gradient of 1"),
        (
            check_FlashAttentionFunction,
            _function(FORWARD, BACKWARD.replace("return dq, dk, dv", "return dk, dq, dv")),
            "known-mistake",
            "returns dk before dq",
        ),
        (  # the Function's own wiring, named alone: not also the backward's slip that computes the same
            check_FlashAttentionFunction,
            _function(
                FORWARD, BACKWARD.replace("ctx.is_causal, ctx.block_size)", "block_size=ctx.block_size)")
            ),
            "known-mistake",
            ") passes is_causal=False to the backward",
        ),
    ],
)
def test_each_backward_failure_carries_the_id_of_its_finding(check, candidate, finding, phrase, capsys):
    got, message = _finding(check, candidate, capsys)
    assert (got, phrase in message) == (finding, True), message


@pytest.mark.parametrize(
    ("name", "finding"),
    [("no scale in dQ", "known-mistake"), ("dv halved: located", "where-wrong")],
)
def test_flash_attention_backward_failures_carry_their_finding(name, finding, folder, capsys):
    pairs, phrase = FLASH_REJECTED[name]
    candidate = variant(FLASH_BACKWARD, folder, "flash_attention_backward", *pairs)
    got, message = _finding(check_flash_attention_backward, candidate, capsys)
    assert (got, phrase in message) == (finding, True), message


def test_a_function_whose_call_the_message_names_says_it_once(capsys):
    candidate = _function(FORWARD, BACKWARD.replace("return dq, dk, dv", "return dq * 3, dk, dv"))
    _, message = _finding(check_FlashAttentionFunction, candidate, capsys)
    assert message.startswith("The backward of FlashAttentionFunction.apply(") and "(Called as" not in message


# ---------------------------------------------------------------------------------------------
# The exercises' contracts (issue 44): wrong programs that pass every hand-picked case and fail one the
# contract generates, and right ones in other styles that pass them all


def _attention_backward_source(keep: str, flatten: bool = False, rows: str = "") -> str:
    """A learner's attention_backward with its own causal mask `keep` and softmax (`rows`: what it does
    to rows with no key), batch axes flattened for bmm where asked."""
    head = (
        "    q, k, v, grad_out = (x.view(-1, *x.shape[-2:]) for x in (q, k, v, grad_out))\n"
        if flatten
        else ""
    )
    tail = (
        "    return dq.view(shape_q), dk.view(shape_k), dv.view(shape_v)\n"
        if flatten
        else "    return dq, dk, dv\n"
    )
    return (
        "def attention_backward(q, k, v, grad_out, is_causal=False):\n"
        "    shape_q, shape_k, shape_v = q.shape, k.shape, v.shape\n" + head + "    t_q, d = q.shape[-2:]\n"
        "    t_k = k.shape[-2]\n"
        "    s = q @ k.transpose(-1, -2) / math.sqrt(d)\n"
        "    if is_causal:\n"
        f"        {keep}\n"
        "        s = s.masked_fill(~keep, float('-inf'))\n"
        f"    p = torch.softmax(s, dim=-1){rows}\n"
        "    dv = p.transpose(-1, -2) @ grad_out\n"
        "    dp = grad_out @ v.transpose(-1, -2)\n"
        "    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))\n"
        "    dq = ds @ k / math.sqrt(d)\n"
        "    dk = ds.transpose(-1, -2) @ q / math.sqrt(d)\n" + tail
    )


_KEEP = "keep = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(t_k - t_q)"
_NO_KEY = ".nan_to_num(0.0)  # a row that sees no key: 0"

CONTRACT_WRONG = [
    (
        check_softmax_backward,
        learner(
            SOFTMAX_BACKWARD,
            "softmax_backward",
            ("dx = p * (grad_p - D)", "dx = torch.zeros(p.shape)\n    dx += p * (grad_p - D)"),
        ),
        ["Your `dx` has dtype float32 for float64 inputs", "`dx = torch.zeros(p.shape)`"],
    ),
    (  # its own softmax: NaN in the rows that see no key (the old check had no causal T_q > T_k)
        check_attention_backward,
        learner(_attention_backward_source(_KEEP), "attention_backward"),
        [
            "T_q = 9 (more queries than keys: with is_causal the first 2 rows see no key)",
            "you have nan, expected 0",
        ],
    ),
    (  # the mask made on the default device
        check_attention_backward,
        learner(
            _attention_backward_source(
                "keep = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)", rows=_NO_KEY
            ),
            "attention_backward",
        ),
        ["with its inputs on another device than the CPU", "`torch.ones(…)`", "device=q.device"],
    ),
    (  # .view to flatten the batch axes for bmm: a transposed q has no such view
        check_attention_backward,
        learner(_attention_backward_source(_KEEP, flatten=True, rows=_NO_KEY), "attention_backward"),
        ["view needs a contiguous tensor", "`q` passed as a transposed view, (B, T_q, H, d).transpose(1, 2)"],
    ),
    (
        check_flash_attention_backward,
        learner(
            FLASH_BACKWARD,
            "flash_attention_backward",
            ("dq = torch.zeros_like(q)", "dq = torch.zeros(q.shape)"),
        ),
        ["Your `dq` has dtype float32 for float64 inputs", "`dq = torch.zeros(q.shape)`"],
    ),
    (
        check_flash_attention_backward,
        learner(
            FLASH_BACKWARD,
            "flash_attention_backward",
            ("    D = (grad_out", "    lse = lse.view(-1, T_q)\n    D = (grad_out"),
            ("lse[..., qs:qe, None]", "lse.view(q.shape[:-1])[..., qs:qe, None]"),
        ),
        ["view needs a contiguous tensor", "`lse` passed as a transposed view, (B, T_q, H).transpose(1, 2)"],
    ),
    (  # float64 inside, "as gradcheck wants", and float64 out
        check_FlashAttentionFunction,
        _function("q, k, v = q.double(), k.double(), v.double()\n" + FORWARD, BACKWARD),
        ["Your `out` has dtype float64 for float32 inputs", "`.double(…)`"],
    ),
]
"""(check, a learner's wrong answer the hand-picked cases pass, phrases of the message)."""


@pytest.mark.parametrize(("check", "candidate", "phrases"), CONTRACT_WRONG)
def test_the_contracts_cases_catch_what_the_hand_picked_ones_pass(check, candidate, phrases, capsys):
    for phrase in phrases:
        assert_rejected(check, candidate, phrase, capsys)


def softmax_backward_float64_inside(p, grad_p, dim=-1):
    p64, g64 = p.double().movedim(dim, -1), grad_p.double().movedim(dim, -1)  # (..., n)
    dx = p64 * (g64 - einsum(p64, g64, "... n, ... n -> ...")[..., None])  # (..., n)
    return dx.movedim(-1, dim).to(p.dtype)


def attention_backward_bmm_reshape(q, k, v, grad_out, is_causal=False):
    t_q, d = q.shape[-2:]
    t_k, d_v = v.shape[-2:]
    q3, k3 = q.reshape(-1, t_q, d), k.reshape(-1, t_k, d)  # (N, T_q, d), (N, T_k, d)
    v3, do3 = v.reshape(-1, t_k, d_v), grad_out.reshape(-1, t_q, d_v)  # (N, T_k, d_v), (N, T_q, d_v)
    _, p = attention(q3, k3, v3, is_causal=is_causal)  # (N, T_q, T_k)
    dv = torch.bmm(p.transpose(1, 2), do3)  # (N, T_k, d_v)
    ds = softmax_backward(p, torch.bmm(do3, v3.transpose(1, 2)))  # (N, T_q, T_k)
    dq, dk = torch.bmm(ds, k3) / math.sqrt(d), torch.bmm(ds.transpose(1, 2), q3) / math.sqrt(d)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


@pytest.mark.parametrize(
    ("check", "candidate"),
    [
        (check_softmax_backward, softmax_backward_float64_inside),
        (check_attention_backward, attention_backward_bmm_reshape),
        (
            check_FlashAttentionFunction,
            _function("q, k, v = (x.contiguous() for x in (q, k, v))\n" + FORWARD, BACKWARD),
        ),
    ],
)
def test_the_contracts_cases_accept_right_answers_in_other_styles(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


def test_the_old_checks_passed_the_contracts_wrong_answers(monkeypatch, capsys):
    """Without the generated cases, each wrong answer above passes: the contract is what catches it."""
    monkeypatch.setattr(backward_checks, "_expect_contract", lambda contract, exercise: 0)
    for check, candidate, _ in CONTRACT_WRONG:
        assert_accepted(check, candidate, capsys)
