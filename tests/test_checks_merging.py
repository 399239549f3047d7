"""The checks of notebook 11's merging (`merge_attention`, `flash_decode`) reject mistakes written as learners
write them, name each, and accept right answers in other styles."""

# ruff: noqa: E501  (tables of learner cases)
from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_code import (
    FLASH_DECODE,
    FLASH_DECODE_LOOP,
    FLASH_DECODE_PADDED,
    MERGE_ATTENTION,
    MERGE_ATTENTION_STACKED,
    learner,
)

from attn_course import reference
from attn_course.checks import CheckFailed, check_flash_decode, check_merge_attention

MERGE_W = "    w_a = torch.exp(lse_a - lse_safe)\n    w_b = torch.exp(lse_b - lse_safe)\n"
MERGE_OUT = "out = w_a.unsqueeze(-1) * out_a + w_b.unsqueeze(-1) * out_b"


def merge(*edits: tuple[str, str]):
    return learner(MERGE_ATTENTION, "merge_attention", *edits)


def decode(*edits: tuple[str, str]):
    return learner(FLASH_DECODE, "flash_decode", *edits)


def decode_loop(*edits: tuple[str, str]):
    return learner(FLASH_DECODE_LOOP, "flash_decode", *edits)


MERGE_STACKED_SOFTMAX = """
def merge_attention(out_a, lse_a, out_b, lse_b):
    lses = torch.stack([lse_a, lse_b])
    w = torch.softmax(lses, dim=0)
    out = w[0][..., None] * out_a + w[1][..., None] * out_b
    return out, torch.logsumexp(lses, dim=0)
"""

MERGE_LOGADDEXP_BY_HAND = """
def merge_attention(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    a = torch.exp(lse_a - m)
    b = torch.exp(lse_b - m)
    total = a + b
    lse = m + torch.log(total)
    total = torch.where(total == 0, torch.ones_like(total), total)
    out = (a / total)[..., None] * out_a + (b / total)[..., None] * out_b
    return out, lse
"""


MERGE_EINSUM = """
def merge_attention(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isfinite(lse), lse, 0.0)
    out = torch.einsum("...t,...td->...td", torch.exp(lse_a - safe), out_a)
    out = out + torch.einsum("...t,...td->...td", torch.exp(lse_b - safe), out_b)
    return out, lse
"""

MERGE_NEGINF_AS_ZERO = (  # an unknown slip: a part with no key read as lse 0
    "    lse = torch.logaddexp(lse_a, lse_b)\n",
    "    lse_a = torch.nan_to_num(lse_a, neginf=0.0)\n    lse_b = torch.nan_to_num(lse_b, neginf=0.0)\n    lse = torch.logaddexp(lse_a, lse_b)\n",
)


DECODE_EINSUM = """
from attn_course.merging import partial_attention


def flash_decode(q, k, v, chunk_size):
    parts = [
        partial_attention(q, k[..., s : s + chunk_size, :], v[..., s : s + chunk_size, :])
        for s in range(0, k.shape[-2], chunk_size)
    ]
    lses = torch.stack([lse for _, lse in parts], dim=-1)  # (..., T_q, n)
    outs = torch.stack([out for out, _ in parts], dim=-2)  # (..., T_q, n, d_v)
    weights = torch.softmax(lses, dim=-1)
    return torch.einsum("...n,...nd->...d", weights, outs)
"""

RIGHT = [
    pytest.param(check_merge_attention, reference.merge_attention, id="merge-reference"),
    pytest.param(check_merge_attention, merge(), id="merge-learner"),
    pytest.param(
        check_merge_attention,
        learner(MERGE_LOGADDEXP_BY_HAND, "merge_attention"),
        id="merge-logaddexp-by-hand",
    ),
    pytest.param(
        check_merge_attention,
        learner(MERGE_ATTENTION_STACKED, "merge_attention"),
        id="merge-logsumexp-stacked-guarded",
    ),
    pytest.param(check_merge_attention, learner(MERGE_EINSUM, "merge_attention"), id="merge-einsum"),
    pytest.param(
        check_merge_attention,
        merge(
            ("torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)", "lse"),
            ("return out, lse", "return torch.nan_to_num(out), lse"),
        ),
        id="merge-nan-to-num-afterwards",
    ),
    pytest.param(check_flash_decode, reference.flash_decode, id="decode-reference"),
    pytest.param(check_flash_decode, decode(), id="decode-learner"),
    pytest.param(check_flash_decode, decode_loop(), id="decode-loop-of-merges"),
    pytest.param(
        check_flash_decode,
        decode_loop(
            (
                "    out, lse = None, None\n",
                "    out = q.new_zeros(*q.shape[:-1], v.shape[-1])\n    lse = q.new_full(q.shape[:-1], float('-inf'))\n",
            ),
            (
                "        if out is None:\n            out, lse = out_c, lse_c\n        else:\n            out, lse = merge_attention(out, lse, out_c, lse_c)\n",
                "        out, lse = merge_attention(out_c, lse_c, out, lse)\n",
            ),
        ),
        id="decode-loop-from-an-empty-start",
    ),
    pytest.param(check_flash_decode, learner(FLASH_DECODE_PADDED, "flash_decode"), id="decode-padded-masked"),
    pytest.param(check_flash_decode, learner(DECODE_EINSUM, "flash_decode"), id="decode-einsum"),
]


@pytest.mark.parametrize(("check", "candidate"), RIGHT)
def test_accepts_right_answers(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


WRONG = [
    # merge_attention: the named slips
    pytest.param(
        check_merge_attention,
        merge((MERGE_OUT, "out = (out_a + out_b) / 2")),
        "averages the two outputs",
        id="merge-average",
    ),
    pytest.param(
        check_merge_attention,
        merge(
            (
                MERGE_W,
                "    w_a = torch.exp(lse_a) / (torch.exp(lse_a) + torch.exp(lse_b))\n    w_b = torch.exp(lse_b) / (torch.exp(lse_a) + torch.exp(lse_b))\n",
            )
        ),
        "exponentiates the lse themselves",
        id="merge-unstabilised",
    ),
    pytest.param(
        check_merge_attention,
        merge(("torch.logaddexp(lse_a, lse_b)", "torch.maximum(lse_a, lse_b)")),
        "takes the larger of the two lse",
        id="merge-lse-max",
    ),
    pytest.param(
        check_merge_attention,
        merge(("torch.logaddexp(lse_a, lse_b)", "lse_a + lse_b")),
        "adds the two lse",
        id="merge-lse-sum",
    ),
    pytest.param(
        check_merge_attention,
        merge((MERGE_OUT, "out = w_b.unsqueeze(-1) * out_a + w_a.unsqueeze(-1) * out_b")),
        "the other part's share",
        id="merge-swapped",
    ),
    pytest.param(
        check_merge_attention,
        merge((MERGE_OUT, "out = w_a * out_a + w_b * out_b")),
        "without a new last axis",
        id="merge-no-unsqueeze",
    ),
    pytest.param(
        check_merge_attention,
        merge(("torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)", "lse")),
        "no key in either part",
        id="merge-unguarded",
    ),
    pytest.param(
        check_merge_attention,
        learner(MERGE_STACKED_SOFTMAX, "merge_attention"),
        "no key in either part",
        id="merge-stacked-softmax",
    ),
    pytest.param(
        check_merge_attention,
        merge(("return out, lse", "return out")),
        "returned one tensor",
        id="merge-only-out",
    ),
    pytest.param(
        check_merge_attention,
        merge(("return out, lse", "return lse, out")),
        "in the order (out, lse)",
        id="merge-lse-out",
    ),
    pytest.param(
        check_merge_attention,
        merge(("return out, lse", "return out, torch.maximum(lse_a, lse_b)")),
        "is the larger of lse_a and lse_b",
        id="merge-returns-max",
    ),
    pytest.param(
        check_merge_attention,
        merge(("return out, lse", "return out, lse_a + lse_b")),
        "is lse_a + lse_b",
        id="merge-returns-sum",
    ),
    pytest.param(
        check_merge_attention,
        merge(("return out, lse", "return out, torch.log(torch.exp(lse_a) + torch.exp(lse_b))")),
        "computed as written",
        id="merge-returns-unstabilised-lse",
    ),
    pytest.param(
        check_merge_attention,
        learner(
            "def merge_attention(out_a, lse_a, out_b, lse_b):\n    w_a = torch.sigmoid(lse_a - lse_b)[..., None]\n    return w_a * out_a + (1 - w_a) * out_b, torch.logaddexp(lse_a, lse_b)\n",
            "merge_attention",
        ),
        "or in a sigmoid of lse_a - lse_b",
        id="merge-sigmoid",
    ),
    pytest.param(
        check_merge_attention,
        merge(("return out, lse", "return out, lse.unsqueeze(-1)")),
        "Drop the last axis",
        id="merge-lse-keepdim",
    ),
    # merge_attention: no named slip; the property that fails
    pytest.param(
        check_merge_attention,
        merge((MERGE_OUT, "out = w_a.unsqueeze(-1) * out_a + out_b")),
        "do not sum to 1",
        id="merge-weight-b-forgotten",
    ),
    pytest.param(
        check_merge_attention,
        merge(MERGE_NEGINF_AS_ZERO),
        "only in rows where one part saw no key",
        id="merge-neginf-read-as-zero",
    ),
    pytest.param(
        check_merge_attention,
        merge(
            ("torch.exp(lse_a - lse_safe)", "torch.exp(lse_a) * torch.exp(-lse_safe)"),
            ("torch.exp(lse_b - lse_safe)", "torch.exp(lse_b) * torch.exp(-lse_safe)"),
        ),
        "exponentiates the lse themselves",
        id="merge-exp-split",
    ),
    pytest.param(
        check_merge_attention,
        merge(("torch.logaddexp(lse_a, lse_b)", "torch.log(torch.exp(lse_a) + torch.exp(lse_b))")),
        "only in the rows whose lse is large",
        id="merge-lse-by-hand-overflows",
    ),
    # flash_decode: the named slips
    pytest.param(
        check_flash_decode,
        decode(("range(0, k.shape[-2], chunk_size)", "range(0, k.shape[-2] - chunk_size + 1, chunk_size)")),
        "drops the last, shorter chunk",
        id="decode-ragged-dropped",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            (
                "return (weights.unsqueeze(-1) * torch.stack(outs)).sum(dim=0)",
                "return torch.stack(outs).mean(dim=0)",
            )
        ),
        "averages the chunks' outputs",
        id="decode-average",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            (
                "k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]",
                "k[..., start:start + chunk_size + 1, :], v[..., start:start + chunk_size + 1, :]",
            )
        ),
        "neighbouring chunks overlap",
        id="decode-overlap",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            (
                "k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]",
                "k[..., start + 1:start + chunk_size, :], v[..., start + 1:start + chunk_size, :]",
            )
        ),
        "skips a key at each chunk's edge (the first",
        id="decode-skip-first",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            (
                "k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]",
                "k[..., start:start + chunk_size - 1, :], v[..., start:start + chunk_size - 1, :]",
            )
        ),
        "skips a key at each chunk's edge (the last",
        id="decode-skip-last",
    ),
    pytest.param(
        check_flash_decode,
        decode(("partial_attention(q, ", "partial_attention(q / math.sqrt(q.shape[-1]), ")),
        "scales the scores twice",
        id="decode-scaled-twice",
    ),
    pytest.param(
        check_flash_decode,
        decode_loop(
            (
                "out, lse = merge_attention(out, lse, out_c, lse_c)",
                "out, _ = merge_attention(out, lse, out_c, lse_c)",
            )
        ),
        "keeps the first chunk's lse",
        id="decode-stale-lse",
    ),
    pytest.param(
        check_flash_decode,
        decode(("weights = torch.exp(lses - lse)", "weights = torch.exp(lses) / torch.exp(lses).sum(dim=0)")),
        "weighs the chunks by exp(lse_c)",
        id="decode-unstabilised",
    ),
    pytest.param(
        check_flash_decode,
        decode(("return (weights", "return lse, (weights")),
        "return only the output",
        id="decode-returns-pair",
    ),
    # flash_decode: no named slip; the property that fails
    pytest.param(
        check_flash_decode,
        decode(("weights = torch.exp(lses - lse)", "weights = torch.softmax(lses, dim=-1)")),
        "do not sum to 1",
        id="decode-softmax-over-queries",
    ),
    pytest.param(
        check_flash_decode,
        decode(("range(0, k.shape[-2], chunk_size)", "range(0, k.shape[-2], chunk_size + 1)")),
        "gives no weight to keys 8, 17, 26, 35 of 37",
        id="decode-steps-past-a-key",
    ),
    pytest.param(
        check_flash_decode,
        decode(("weights = torch.exp(lses - lse)", "weights = torch.softmax(lses / 2, dim=0)")),
        "mixes the chunks in the wrong proportions",
        id="decode-chunks-tempered",
    ),
    # flash_decode: the chunks cut along the first axis (right without batch axes only)
    pytest.param(
        check_flash_decode,
        decode(
            (
                "k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]",
                "k[start:start + chunk_size], v[start:start + chunk_size]",
            )
        ),
        "works without batch axes and fails with them",
        id="decode-first-axis-sliced-raises",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            (
                "k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]",
                "k[start:start + chunk_size], v[start:start + chunk_size]",
            )
        ),
        "slices k (2, 3, 37, 8) and v (2, 3, 37, 5) along each one's first axis",
        id="decode-first-axis-sliced-names-the-slice",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            (
                "    for start in range(0, k.shape[-2], chunk_size):\n        chunk_k, chunk_v = k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]\n",
                "    for chunk_k, chunk_v in zip(k.split(chunk_size), v.split(chunk_size)):\n",
            )
        ),
        "`, splits k (2, 9, 8) and v (2, 9, 4) along each one's first axis: without batch axes that axis is the keys",
        id="decode-split-on-dim-0-silently-wrong",
    ),
    # flash_decode: the chunks' lse normalised over another axis than the chunks'
    pytest.param(
        check_flash_decode,
        decode(("lse = torch.logsumexp(lses, dim=0)", "lse = torch.logsumexp(lses, dim=1, keepdim=True)")),
        "the log-sum-exp of the chunks' lse taken over batch axis 0",
        id="decode-logsumexp-over-a-batch-axis",
    ),
    pytest.param(
        check_flash_decode,
        learner(
            DECODE_EINSUM, "flash_decode", ("torch.softmax(lses, dim=-1)", "torch.softmax(lses, dim=-2)")
        ),
        "the log-sum-exp of the chunks' lse taken over the query axis (T_q)",
        id="decode-einsum-softmax-over-queries",
    ),
    # flash_decode: a start of lse 0 (one more key of score 0 and value 0)
    pytest.param(
        check_flash_decode,
        decode_loop(
            (
                "    out, lse = None, None\n",
                "    out = q.new_zeros(*q.shape[:-1], v.shape[-1])\n    lse = q.new_zeros(q.shape[:-1])\n",
            ),
            (
                "        if out is None:\n            out, lse = out_c, lse_c\n        else:\n            out, lse = merge_attention(out, lse, out_c, lse_c)\n",
                "        out, lse = merge_attention(out, lse, out_c, lse_c)\n",
            ),
        ),
        "a part of out 0 and lse 0 gives exactly that: lse 0 counts as a part whose sum of exp(score) is 1",
        id="decode-loop-from-lse-0",
    ),
    pytest.param(
        check_flash_decode,
        decode(
            ("lses = torch.stack(lses)", "lses = torch.stack([torch.zeros_like(lses[0]), *lses])"),
            ("torch.stack(outs)", "torch.stack([torch.zeros_like(outs[0]), *outs])"),
        ),
        "one more key, of score 0 (exp(score) = 1) and value 0",
        id="decode-stacked-with-a-zero-part",
    ),
    # flash_decode over the learner's own wrong merge_attention: merge_attention is blamed
    pytest.param(
        check_flash_decode,
        decode_loop((MERGE_OUT, "out = (out_a + out_b) / 2")),
        "It fails because your `merge_attention`",
        id="decode-upstream-average",
    ),
    pytest.param(
        check_flash_decode,
        decode_loop(("torch.logaddexp(lse_a, lse_b)", "torch.maximum(lse_a, lse_b)")),
        "It fails because your `merge_attention`",
        id="decode-upstream-max",
    ),
    # what the contract's cases find: a view, another device, another dtype; and the notebook's stubs
    pytest.param(
        check_flash_decode,
        decode(
            (
                "    outs, lses = [], []\n",
                "    shape = q.shape\n    q, k, v = (x.view(-1, *x.shape[-2:]) for x in (q, k, v))\n    outs, lses = [], []\n",
            ),
            (
                "return (weights.unsqueeze(-1) * torch.stack(outs)).sum(dim=0)",
                "return (weights.unsqueeze(-1) * torch.stack(outs)).sum(dim=0).view(*shape[:-1], -1)",
            ),
        ),
        "`q` passed as an expanded view",
        id="decode-view-of-views",
    ),
    pytest.param(
        check_merge_attention,
        merge(("torch.zeros_like(lse)", "torch.zeros(lse.shape)")),
        "Make every new tensor on the inputs' device",
        id="merge-zeros-on-cpu",
    ),
    pytest.param(
        check_merge_attention,
        merge(("torch.logaddexp(lse_a, lse_b)", "torch.logaddexp(lse_a.double(), lse_b.double())")),
        "has dtype float64 for float32 inputs",
        id="merge-float64-inside",
    ),
    pytest.param(
        check_merge_attention,
        learner(
            "def merge_attention(out_a, lse_a, out_b, lse_b):\n    raise NotImplementedError\n",
            "merge_attention",
        ),
        "not implemented yet",
        id="merge-stub",
    ),
    pytest.param(
        check_flash_decode,
        learner("def flash_decode(q, k, v, chunk_size):\n    raise NotImplementedError\n", "flash_decode"),
        "not implemented yet",
        id="decode-stub",
    ),
]


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_names_each_mistake(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


WHOLE_CACHE = [
    "from attn_course.merging import partial_attention\n\ndef flash_decode(q, k, v, chunk_size):\n    return partial_attention(q, k, v)[0]\n",
    "def flash_decode(q, k, v, chunk_size):\n    return F.scaled_dot_product_attention(q, k, v)\n",
    "def flash_decode(q, k, v, chunk_size):\n    s = torch.einsum('...qd,...kd->...qk', q, k) / math.sqrt(q.shape[-1])\n    return torch.softmax(s, dim=-1) @ v\n",
]


@pytest.mark.parametrize("source", WHOLE_CACHE, ids=["partial-attention", "sdpa", "einsum"])
def test_whole_cache_at_once_is_refused_though_its_numbers_are_right(source, capsys):
    assert_rejected(check_flash_decode, learner(source, "flash_decode"), "all 40 keys at once", capsys)


def test_flash_decode_over_a_wrong_merge_gives_merge_attention_the_blame():
    wrong_merge = decode_loop(("return out, lse", "return out, torch.maximum(lse_a, lse_b)"))
    with pytest.raises(CheckFailed) as failure:
        check_flash_decode(wrong_merge)
    assert failure.value.upstream == "merge_attention"
    assert "Your `flash_decode` is right" in str(failure.value)
