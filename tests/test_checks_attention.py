"""The checks of notebooks 01 and 02 reject known mistakes with the right message, accept right answers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from check_assertions import assert_accepted, assert_rejected
from learner_code import DOT_PRODUCT_ATTENTION, SCALED, SCORES, SOFTMAX, VARIANCE, learner

from attn_course import reference
from attn_course.checks import (
    check_dot_product_attention,
    check_dot_product_scores,
    check_scaled_dot_product_attention,
    check_score_variance,
    check_softmax,
)

# ---------------------------------------------------------------------------------------------
# dot_product_scores


def scores_matmul(q, k):
    return q @ k.transpose(-2, -1)


def scores_einsum(q, k):
    return torch.einsum("...id,...jd->...ij", q, k)


def scores_mT(q, k):
    return torch.matmul(q, k.mT)


def scores_scaled(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def scores_transposed(q, k):
    return k @ q.transpose(-2, -1)


def scores_dot_T(q, k):
    return q @ k.T


def scores_einsum_2d(q, k):
    return torch.einsum("qd,kd->qk", q, k)


def scores_softmaxed(q, k):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1)


def scores_detached(q, k):
    return (q @ k.transpose(-2, -1)).detach()


def scores_numpy(q, k):
    return torch.from_numpy(q.detach().numpy() @ k.detach().numpy().swapaxes(-1, -2))


def scores_returns_list(q, k):
    return (q @ k.transpose(-2, -1)).tolist()


def scores_in_place(q, k):
    q.mul_(1.0)
    q.add_(1.0)
    return q @ k.transpose(-2, -1)


def not_implemented(*args, **kwargs):
    raise NotImplementedError("Exercise")


# ---------------------------------------------------------------------------------------------
# softmax


def softmax_stable(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_torch(x, dim=-1):
    return F.softmax(x, dim=dim)


def softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_max_values(x, dim=-1):
    m, _ = torch.max(x, dim=dim, keepdim=True)
    e = torch.exp(x - m)
    return e / torch.sum(e, dim=dim, keepdim=True)


def softmax_naive(x, dim=-1):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def softmax_global_max(x, dim=-1):
    e = (x - x.max()).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_ignores_dim(x, dim=-1):
    return softmax_stable(x, dim=-1)


def softmax_dim0(x, dim=-1):
    return softmax_stable(x, dim=0)


def softmax_unnormalised(x, dim=-1):
    return (x - x.amax(dim=dim, keepdim=True)).exp()


def softmax_log(x, dim=-1):
    return torch.log_softmax(x, dim=dim)


def softmax_no_keepdim_max(x, dim=-1):
    e = (x - x.amax(dim=dim)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_no_keepdim_sum(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim)


def softmax_mean_shift(x, dim=-1):
    e = (x - x.mean(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_detached(x, dim=-1):
    return softmax_stable(x.detach(), dim=dim)


def softmax_default_dim0(x, dim=0):
    return softmax_stable(x, dim=dim)


def softmax_no_dim(x):
    return softmax_stable(x)


# ---------------------------------------------------------------------------------------------
# attention without masks


def attention_unscaled(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return w @ v, w


def attention_scaled(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w


def attention_scale_q_first(q, k, v):
    q = q * q.shape[-1] ** -0.5
    w = F.softmax(torch.einsum("...qd,...kd->...qk", q, k), dim=-1)
    return torch.einsum("...qk,...kd->...qd", w, v), w


def attention_own_softmax(q, k, v):
    w = softmax_stable(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return w @ v, w


def attention_naive_softmax(q, k, v):
    w = softmax_naive(q @ k.transpose(-2, -1))
    return w @ v, w


def attention_dim_minus2(scale):
    def wrong(q, k, v):
        s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
        w = torch.softmax(s, dim=-2)
        return w @ v, w

    return wrong


def attention_no_softmax(scale):
    def wrong(q, k, v):
        s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
        return s @ v, s

    return wrong


def attention_swapped(q, k, v):
    out, w = attention_scaled(q, k, v)
    return w, out


def attention_swapped_unscaled(q, k, v):
    out, w = attention_unscaled(q, k, v)
    return w, out


def attention_only_out(q, k, v):
    return attention_scaled(q, k, v)[0]


def attention_only_out_unscaled(q, k, v):
    return attention_unscaled(q, k, v)[0]


def attention_detached(q, k, v):
    out, w = attention_scaled(q, k, v)
    return out.detach(), w.detach()


def attention_scaled_by(size, power=-0.5):
    def wrong(q, k, v):
        w = torch.softmax(q @ k.transpose(-2, -1) * size(q, k, v) ** power, dim=-1)
        return w @ v, w

    return wrong


def attention_scale_after_softmax(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1) / math.sqrt(q.shape[-1])
    return w @ v, w


def attention_in_place_scale(q, k, v):
    q /= math.sqrt(q.shape[-1])
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return w @ v, w


def attention_k_T(q, k, v):
    w = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w


# ---------------------------------------------------------------------------------------------
# score_variance


def variance_right(d_k, n_samples=20_000, scaled=False):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    s = (q * k).sum(-1)
    return (s / math.sqrt(d_k) if scaled else s).var().item()


def variance_einsum_tensor(d_k, n_samples=20_000, scaled=False):
    q, k = torch.randn(n_samples, d_k, dtype=torch.float64), torch.randn(n_samples, d_k, dtype=torch.float64)
    s = torch.einsum("nd,nd->n", q, k) * (d_k**-0.5 if scaled else 1.0)
    return s.var()


def variance_every_pair(d_k, n_samples=20_000, scaled=False):  # a second learner's: q @ k.mT, its diagonal
    q = torch.randn(n_samples, d_k)
    k = torch.randn(n_samples, d_k)
    scores = torch.diagonal(q @ k.mT)  # each q with its own k... after all n × n products
    if scaled:
        scores = scores / math.sqrt(d_k)
    return scores.var().item()


def variance_batched_matmul(d_k, n_samples=20_000, scaled=False):  # right: one (1, d) @ (d, 1) per pair
    q, k = torch.randn(n_samples, 1, d_k), torch.randn(n_samples, d_k, 1)
    s = (q @ k).flatten()  # (n,)
    return (s / d_k**0.5 if scaled else s).var().item()


def variance_std(d_k, n_samples=20_000, scaled=False):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    s = (q * k).sum(-1)
    return (s / math.sqrt(d_k) if scaled else s).std().item()


def variance_always_scaled(d_k, n_samples=20_000, scaled=False):
    return variance_right(d_k, n_samples, scaled=True)


def variance_never_scaled(d_k, n_samples=20_000, scaled=False):
    return variance_right(d_k, n_samples, scaled=False)


def variance_divides_by_d(d_k, n_samples=20_000, scaled=False):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    s = (q * k).sum(-1)
    return (s / d_k if scaled else s).var().item()


def variance_of_products(d_k, n_samples=20_000, scaled=False):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    return (q * k).var().item()


def variance_vector(d_k, n_samples=20_000, scaled=False):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    return (q * k).var(dim=0)


def variance_string(d_k, n_samples=20_000, scaled=False):
    return "about d_k"


# ---------------------------------------------------------------------------------------------
# The tables


CORRECT = [
    pytest.param(check_dot_product_scores, reference.dot_product_scores, id="scores-reference"),
    pytest.param(check_dot_product_scores, scores_matmul, id="scores-matmul"),
    pytest.param(check_dot_product_scores, scores_einsum, id="scores-einsum"),
    pytest.param(check_dot_product_scores, scores_mT, id="scores-mT"),
    pytest.param(check_softmax, reference.softmax, id="softmax-reference"),
    pytest.param(check_softmax, softmax_stable, id="softmax-stable"),
    pytest.param(check_softmax, softmax_logsumexp, id="softmax-logsumexp"),
    pytest.param(check_softmax, softmax_max_values, id="softmax-max-values"),
    pytest.param(check_dot_product_attention, reference.dot_product_attention, id="dpa-reference"),
    pytest.param(check_dot_product_attention, attention_unscaled, id="dpa-matmul"),
    pytest.param(
        check_scaled_dot_product_attention, reference.scaled_dot_product_attention, id="sdpa-reference"
    ),
    pytest.param(check_scaled_dot_product_attention, attention_scaled, id="sdpa-matmul"),
    pytest.param(check_scaled_dot_product_attention, attention_scale_q_first, id="sdpa-scale-q-einsum"),
    pytest.param(check_scaled_dot_product_attention, attention_own_softmax, id="sdpa-own-softmax"),
    pytest.param(check_score_variance, reference.score_variance, id="variance-reference"),
    pytest.param(check_score_variance, variance_right, id="variance-float32"),
    pytest.param(check_score_variance, variance_einsum_tensor, id="variance-0d-tensor"),
    pytest.param(check_score_variance, variance_batched_matmul, id="variance-batched-matmul"),
]

d_k = lambda q, k, v: float(q.shape[-1])  # noqa: E731

WRONG = [
    # dot_product_scores
    pytest.param(check_dot_product_scores, not_implemented, "is not implemented yet", id="scores-stub"),
    pytest.param(check_dot_product_scores, scores_scaled, "scores are divided by √d", id="scores-scaled"),
    pytest.param(check_dot_product_scores, scores_transposed, "are transposed", id="scores-transposed"),
    pytest.param(check_dot_product_scores, scores_softmaxed, "scores have a softmax", id="scores-softmax"),
    pytest.param(check_dot_product_scores, scores_dot_T, "not k.T", id="scores-dot-T-batch"),
    pytest.param(
        check_dot_product_scores, scores_einsum_2d, "write einsum with '...'", id="scores-einsum-2d"
    ),
    pytest.param(check_dot_product_scores, scores_detached, "No gradient flows", id="scores-detached"),
    pytest.param(check_dot_product_scores, scores_numpy, "No gradient flows", id="scores-numpy"),
    pytest.param(check_dot_product_scores, scores_returns_list, "should be a torch.Tensor", id="scores-list"),
    pytest.param(
        check_dot_product_scores,
        scores_in_place,
        "changed one of its input tensors in place",
        id="scores-in-place",
    ),
    # softmax
    pytest.param(check_softmax, not_implemented, "is not implemented yet", id="softmax-stub"),
    pytest.param(check_softmax, softmax_naive, "subtract each row's maximum", id="softmax-overflow"),
    pytest.param(
        check_softmax,
        softmax_global_max,
        "Subtracting the maximum of the whole tensor is not enough",
        id="softmax-global-max",
    ),
    pytest.param(
        check_softmax,
        softmax_ignores_dim,
        "instead of along the dim=1 you were given",
        id="softmax-ignores-dim",
    ),
    pytest.param(
        check_softmax,
        softmax_dim0,
        "sums to 1 along dim=0 instead of along the dim=-1",
        id="softmax-wrong-axis",
    ),
    pytest.param(check_softmax, softmax_unnormalised, "is not normalised", id="softmax-unnormalised"),
    pytest.param(check_softmax, softmax_log, "matches log-softmax", id="softmax-log"),
    pytest.param(check_softmax, softmax_torch, "write it yourself", id="softmax-F.softmax"),
    pytest.param(
        check_softmax,
        softmax_no_keepdim_max,
        "subtracts the max without keepdim=True",
        id="softmax-max-no-keepdim",
    ),
    pytest.param(
        check_softmax,
        softmax_no_keepdim_sum,
        "divides by a sum taken without keepdim=True",
        id="softmax-sum-no-keepdim",
    ),
    pytest.param(
        check_softmax,
        softmax_mean_shift,
        "Entries of -inf (masked scores) must get weight exactly 0",
        id="softmax-mean-shift-neg-inf",
    ),
    pytest.param(
        check_softmax, softmax_default_dim0, "should use dim=-1 by default", id="softmax-default-dim"
    ),
    pytest.param(check_softmax, softmax_no_dim, "unexpected keyword argument 'dim'", id="softmax-no-dim-arg"),
    pytest.param(
        check_softmax, softmax_detached, "No gradient flows through `softmax`", id="softmax-detached"
    ),
    # dot_product_attention
    pytest.param(check_dot_product_attention, not_implemented, "is not implemented yet", id="dpa-stub"),
    pytest.param(
        check_dot_product_attention,
        attention_scaled,
        "match attention *with* the 1/√d_k scale",
        id="dpa-scaled",
    ),
    pytest.param(
        check_dot_product_attention,
        attention_dim_minus2(False),
        "normalised over the queries",
        id="dpa-softmax-dim-2",
    ),
    pytest.param(
        check_dot_product_attention, attention_no_softmax(False), "skip the softmax", id="dpa-no-softmax"
    ),
    pytest.param(
        check_dot_product_attention, attention_swapped_unscaled, "returned (weights, out)", id="dpa-swapped"
    ),
    pytest.param(
        check_dot_product_attention,
        attention_only_out_unscaled,
        "should return a tuple (out, weights)",
        id="dpa-only-out",
    ),
    pytest.param(
        check_dot_product_attention,
        attention_naive_softmax,
        "use a numerically stable softmax",
        id="dpa-unstable",
    ),
    # scaled_dot_product_attention
    pytest.param(
        check_scaled_dot_product_attention, not_implemented, "is not implemented yet", id="sdpa-stub"
    ),
    pytest.param(
        check_scaled_dot_product_attention, attention_unscaled, "without the 1/√d_k scale", id="sdpa-unscaled"
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_scaled_by(d_k, -1.0),
        "divided by d_k instead of √d_k",
        id="sdpa-divide-by-d",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_scaled_by(d_k, 0.5),
        "multiplied by √d_k",
        id="sdpa-multiply",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_scaled_by(lambda q, k, v: float(v.shape[-1])),
        "scaled by √d_v",
        id="sdpa-d-v",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_scaled_by(lambda q, k, v: float(q.shape[0])),
        "square root of q.shape[0]",
        id="sdpa-shape-0",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_scaled_by(lambda q, k, v: float(k.shape[-2])),
        "number of keys",
        id="sdpa-t-k",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_scale_after_softmax,
        "scaled after the softmax",
        id="sdpa-after-softmax",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_dim_minus2(True),
        "normalised over the queries",
        id="sdpa-softmax-dim-2",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        attention_no_softmax(True),
        "skip the softmax",
        id="sdpa-no-softmax",
    ),
    pytest.param(
        check_scaled_dot_product_attention, attention_swapped, "returned (weights, out)", id="sdpa-swapped"
    ),
    pytest.param(
        check_scaled_dot_product_attention, attention_only_out, "returned one tensor", id="sdpa-only-out"
    ),
    pytest.param(
        check_scaled_dot_product_attention, attention_detached, "No gradient flows", id="sdpa-detached"
    ),
    pytest.param(
        check_scaled_dot_product_attention, attention_in_place_scale, "in place", id="sdpa-in-place"
    ),
    pytest.param(check_scaled_dot_product_attention, attention_k_T, "not k.T", id="sdpa-k-T"),
    # score_variance
    pytest.param(check_score_variance, not_implemented, "is not implemented yet", id="variance-stub"),
    pytest.param(check_score_variance, variance_std, "That is the standard deviation", id="variance-std"),
    pytest.param(
        check_score_variance, variance_every_pair, "every query against every key", id="variance-every-pair"
    ),
    pytest.param(
        check_score_variance, variance_always_scaled, "Did you scale anyway", id="variance-always-scaled"
    ),
    pytest.param(
        check_score_variance, variance_never_scaled, "scaled=True had no effect", id="variance-never-scaled"
    ),
    pytest.param(
        check_score_variance,
        variance_divides_by_d,
        "Dividing by d_k makes it ≈ 1/d_k",
        id="variance-divide-by-d",
    ),
    pytest.param(
        check_score_variance, variance_of_products, "variance of the single products", id="variance-products"
    ),
    pytest.param(check_score_variance, variance_vector, "should return one number", id="variance-vector"),
    pytest.param(check_score_variance, variance_string, "should return a float", id="variance-string"),
]


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_check_accepts_correct_implementation(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_check_rejects_mistake_with_its_message(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


# ---------------------------------------------------------------------------------------------
# score_variance: how the learner's variance grows with d_k names the mistake (learner_code.py edits)

SCALE = "scores = scores / math.sqrt(d_k)"
VARIANCE_WRONG = [
    ([("k = torch.randn(n_samples, d_k)", "k = q")], "k is q, or drawn as q"),
    ([("scores = (q * k).sum(dim=-1)", "scores = (q * q).sum(dim=-1)")], "k is q, or drawn as q"),
    ([("scores = (q * k).sum(dim=-1)", "scores = q.pow(2).sum(dim=-1)")], "about 2·d_k, where theory"),
    ([(SCALE, "scores = scores * math.sqrt(d_k)")], "multiplied by √d_k"),
    ([(SCALE, "scores = scores / d_k ** 0.25")], "about √d_k, where theory says 1"),
    ([("scores = (q * k).sum(dim=-1)", "scores = (q * k).sum(dim=-1) * math.sqrt(d_k)")], "about d_k²"),
    ([("return scores.var().item()", "return scores.std().item()")], "That is the standard deviation"),
]  # fmt: skip
"""(text edits of the right learner solution, the phrase the message must contain)."""

VARIANCE_RIGHT = [
    [("scores = (q * k).sum(dim=-1)", 'scores = torch.einsum("nd,nd->n", q, k)')],
    [(SCALE, "scores = scores * d_k**-0.5")],
    [("return scores.var().item()", "return float(((scores - scores.mean()) ** 2).mean())")],
]  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), VARIANCE_WRONG)
def test_score_variance_names_the_value_class(edits, phrase, capsys):
    assert_rejected(check_score_variance, learner(VARIANCE, "score_variance", *edits), phrase, capsys)


@pytest.mark.parametrize("edits", VARIANCE_RIGHT)
def test_score_variance_accepts_other_spellings(edits, capsys):
    assert_accepted(check_score_variance, learner(VARIANCE, "score_variance", *edits), capsys)


# ---------------------------------------------------------------------------------------------
# The exercises' contracts: wrong programs a learner writes that pass every hand-picked case (the
# checks passed each of them before the contracts) and fail a generated one, with what it observes.

LOOP_SCORES = """    scores = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
    for j in range(k.shape[-2]):
        scores[..., j] = (q * k[..., j, None, :]).sum(-1)
    return scores"""

CONTRACT_WRONG = [
    pytest.param(
        check_dot_product_scores,
        (
            SCORES,
            "dot_product_scores",
            ("q @ k.transpose(-2, -1)", "q.float() @ k.float().transpose(-2, -1)"),
        ),
        "`scores` has dtype float32 for float64 inputs: it must have the inputs' dtype",
        id="scores-float",
    ),
    pytest.param(
        check_dot_product_scores,
        (SCORES, "dot_product_scores", ("    return q @ k.transpose(-2, -1)", LOOP_SCORES)),
        "the first tensor your code makes off that device comes from `torch.zeros(…)` at line 10",
        id="scores-default-device",
    ),
    pytest.param(
        check_softmax,
        (SOFTMAX, "softmax", ("    x_max =", "    x = x.float()\n    x_max =")),
        "`softmax` has dtype float32 for float64 inputs: it must have the inputs' dtype (seen on B=2",
        id="softmax-float",
    ),
    pytest.param(
        check_dot_product_attention,
        (
            DOT_PRODUCT_ATTENTION,
            "dot_product_attention",
            ("    scores =", "    q, k, v = q.float(), k.float(), v.float()\n    scores ="),
        ),
        "The first float32 tensor your code makes comes from `.float(…)` at line 10 of your code",
        id="dpa-float",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        (
            SCALED,
            "scaled_dot_product_attention",
            ("math.sqrt(d_k)", "torch.tensor([d_k], dtype=q.dtype).sqrt()"),
        ),
        "raised RuntimeError: Tensor on device cpu is not on the expected device meta!",
        id="sdpa-scale-on-cpu",
    ),
]


@pytest.mark.parametrize(("check", "program", "phrase"), CONTRACT_WRONG)
def test_contract_cases_catch_what_the_hand_picked_ones_pass(check, program, phrase, capsys):
    source, name, *edits = program
    assert_rejected(check, learner(source, name, *edits), phrase, capsys)


# ---------------------------------------------------------------------------------------------
# Two batch axes: "any number of batch axes may come first", and notebook 04's MultiHeadAttention
# passes (b, h, T, d) tensors made by split_heads' transpose. Code that flattens the batch axes with
# `.view` runs on every contiguous input (the hand-picked cases, and the contracts' one batch axis of
# before, which `.view(-1, T, d)` leaves as it is) and breaks on those: the contracts' cases now have
# two batch axes (B, H) and a view transposed as split_heads makes it.

FLAT_SCORES = """
def dot_product_scores(q, k):
    *batch, t_q, d = q.shape
    t_k = k.shape[-2]
    q3 = q.view(-1, t_q, d)
    k3 = k.view(-1, t_k, d)
    scores = torch.bmm(q3, k3.transpose(1, 2))
    return scores.view(*batch, t_q, t_k)
"""

FLAT_ATTENTION = """
def dot_product_attention(q, k, v):
    *batch, t_q, d = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    q3, k3, v3 = q.view(-1, t_q, d), k.view(-1, t_k, d), v.view(-1, t_k, d_v)
    weights = torch.softmax(torch.bmm(q3, k3.transpose(1, 2)), dim=-1)
    out = torch.bmm(weights, v3)
    return out.view(*batch, t_q, d_v), weights.view(*batch, t_q, t_k)
"""

FLAT_SCALED = """
def scaled_dot_product_attention(q, k, v):
    n = math.prod(q.shape[:-2])
    t_q, d = q.shape[-2:]
    t_k, d_v = k.shape[-2], v.shape[-1]
    scores = torch.bmm(q.reshape(n, t_q, d), k.view(n, t_k, d).transpose(1, 2)) / math.sqrt(d)
    weights = torch.softmax(scores, dim=-1)
    out = torch.bmm(weights, v.reshape(n, t_k, d_v))
    return out.reshape(*q.shape[:-1], d_v), weights.reshape(*q.shape[:-1], t_k)
"""

TRANSPOSED_Q = "differs from them only in that it has `q` passed as a transposed view, (B, T_q, H, d)"
TRANSPOSED_K = "differs from them only in that it has `k` passed as a transposed view, (B, T_k, H, d)"
VIEW_ERROR = "view needs a contiguous tensor, and a transposed or permuted one is not: use .reshape(...)"

BATCH_AXES_WRONG = [
    pytest.param(
        check_dot_product_scores, (FLAT_SCORES, "dot_product_scores"), TRANSPOSED_Q, id="scores-view-flat"
    ),
    pytest.param(
        check_dot_product_scores,
        (FLAT_SCORES, "dot_product_scores", ("q3 = q.view(-1, t_q, d)", "q3 = q.reshape(-1, t_q, d)")),
        TRANSPOSED_K,
        id="scores-view-flat-k-only",
    ),
    pytest.param(
        check_dot_product_attention,
        (FLAT_ATTENTION, "dot_product_attention"),
        TRANSPOSED_Q,
        id="dpa-view-flat",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        (FLAT_SCALED, "scaled_dot_product_attention"),
        TRANSPOSED_K,
        id="sdpa-view-n-k-only",
    ),
]


@pytest.mark.parametrize(("check", "program", "phrase"), BATCH_AXES_WRONG)
def test_flattening_batch_axes_with_view_is_caught_on_a_transposed_view(check, program, phrase, capsys):
    source, name, *edits = program
    candidate = learner(source, name, *edits)
    assert_rejected(check, candidate, phrase, capsys)
    assert_rejected(check, candidate, VIEW_ERROR, capsys)


STILL_CAUGHT = [
    pytest.param(
        check_dot_product_scores,
        (SCORES, "dot_product_scores", ("q @ k.transpose(-2, -1)", "torch.bmm(q, k.transpose(1, 2))")),
        "your code asks for axis 2: count axes from the end (dim=-1, transpose(-2, -1))",
        id="scores-bmm-3d-only",
    ),
    pytest.param(
        check_dot_product_attention,
        (DOT_PRODUCT_ATTENTION, "dot_product_attention", ("k.transpose(-2, -1)", "k.transpose(1, 2)")),
        "your code asks for axis 2: count axes from the end",
        id="dpa-k-transpose-1-2",
    ),
]


@pytest.mark.parametrize(("check", "program", "phrase"), STILL_CAUGHT)
def test_code_for_three_axes_only_is_caught_by_the_inputs_without_batch_axes(check, program, phrase, capsys):
    source, name, *edits = program
    assert_rejected(check, learner(source, name, *edits), phrase, capsys)


RESHAPE_SCORES = FLAT_SCORES.replace(".view(", ".reshape(")
ROWS_SOFTMAX = """
def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    exps = torch.exp(rows - rows.amax(dim=-1, keepdim=True))
    probs = exps / exps.sum(dim=-1, keepdim=True)
    return probs.reshape(moved.shape).movedim(-1, dim)
"""
BATCH_AXES_RIGHT = [
    pytest.param(check_dot_product_scores, (RESHAPE_SCORES, "dot_product_scores"), id="scores-reshape-bmm"),
    pytest.param(
        check_dot_product_scores,
        (
            FLAT_SCORES,
            "dot_product_scores",
            ("q.view(-1, t_q, d)", 'rearrange(q, "... t d -> (...) t d")'),
            ("k.view(-1, t_k, d)", 'rearrange(k, "... t d -> (...) t d")'),
        ),
        id="scores-rearrange-bmm-view-back",
    ),
    pytest.param(
        check_dot_product_scores,
        (
            FLAT_SCORES,
            "dot_product_scores",
            ("q.view(", "q.contiguous().view("),
            ("k.view(", "k.contiguous().view("),
        ),
        id="scores-contiguous-view",
    ),
    pytest.param(
        check_dot_product_scores,
        (
            SCORES,
            "dot_product_scores",
            ("q @ k.transpose(-2, -1)", 'torch.einsum("...qd,...kd->...qk", q, k)'),
        ),
        id="scores-einsum-ellipsis",
    ),
    pytest.param(
        check_dot_product_scores,
        (SCORES, "dot_product_scores", ("k.transpose(-2, -1)", "k.mT")),
        id="scores-mT",
    ),
    pytest.param(check_softmax, (ROWS_SOFTMAX, "softmax"), id="softmax-rows-reshape"),
    pytest.param(
        check_dot_product_attention,
        (
            FLAT_ATTENTION,
            "dot_product_attention",
            ("q.view(-1", "q.reshape(-1"),
            ("k.view(-1", "k.reshape(-1"),
            ("v.view(-1", "v.reshape(-1"),
        ),
        id="dpa-reshape-bmm-view-back",
    ),
    pytest.param(
        check_scaled_dot_product_attention,
        (FLAT_SCALED, "scaled_dot_product_attention", ("k.view(n", "k.reshape(n")),
        id="sdpa-reshape-bmm-reshape-back",
    ),
]


@pytest.mark.parametrize(("check", "program"), BATCH_AXES_RIGHT)
def test_flattening_batch_axes_by_reshape_passes(check, program, capsys):
    source, name, *edits = program
    assert_accepted(check, learner(source, name, *edits), capsys)
