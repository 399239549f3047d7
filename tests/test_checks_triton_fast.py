"""Notebook 08's stretch exercise: the check accepts fast kernels and names the work a slow one still does.

Every variant is a learner-like kernel (tests/triton_variants.py, FAST: the Exercise 4 kernel split
into an unmasked and a masked loop, with exp2 and the scale folded in) with lines changed, run
through Triton's interpreter; the Exercise 4 kernel itself (FLASH) is the first thing learners try.
"""

from __future__ import annotations

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected
from triton_variants import FAST, FLASH, variant

from attn_course import reference
from attn_course.checks import check_fast_flash_attention
from attn_course.triton_flash.tile_ops import count_tile_ops, tiles_needing_a_mask

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("triton_fast_variants")


FAST_ACCEPTED = {
    "template: a helper with MASKED, exp2, qk_scale": [],
    "q scaled once before the loop": [
        ("    qk_scale = scale * LOG2E\n", "    qk_scale = 1.0\n    q = q * (scale * LOG2E)\n"),
    ],
    "the mask added as -inf instead of tl.where": [
        (
            '            s = tl.where(keep, s, float("-inf"))',
            '            s += tl.where(keep, 0.0, float("-inf"))',
        ),
    ],
    "the full bound rounded with tl.cdiv-free arithmetic": [
        ("    full = full // BLOCK_N * BLOCK_N\n", "    full = full - full % BLOCK_N\n"),
    ],
    "the lse by natural log of l, m turned back first": [
        (
            "    lse = (m + tl.log2(l_safe)) * 0.6931471805599453",
            "    lse = m * 0.6931471805599453 + tl.log(l_safe)",
        ),
    ],
}

FAST_REJECTED = {
    "the kernel of Exercise 4, unchanged": (
        FLASH,
        "triton_flash_attention",
        [],
        "it masks every one of its 20 tiles of scores, where 8 need a mask",
    ),
    "masks the ragged keys in the unmasked loop too": (
        FAST,
        "fast_flash_attention",
        [
            (
                "        s = tl.dot(q, tl.trans(k)) * qk_scale\n        if MASKED:\n",
                "        s = tl.dot(q, tl.trans(k)) * qk_scale\n"
                '        s = tl.where(cols[None, :] < T_k, s, float("-inf"))\n        if MASKED:\n',
            )
        ],
        "where 8 need a mask",
    ),
    "no split without the causal mask": (
        FAST,
        "fast_flash_attention",
        [("    hi = T_k\n    full = T_k\n", "    hi = T_k\n    full = 0\n")],
        "only the ragged last key block of each program",
    ),
    "split, but still tl.exp with the plain scale": (
        FAST,
        "fast_flash_attention",
        [
            ("    qk_scale = scale * LOG2E\n", "    qk_scale = scale\n"),
            ("        alpha = tl.exp2(m - m_safe)", "        alpha = tl.exp(m - m_safe)"),
            ("        p = tl.exp2(s - m_safe[:, None])", "        p = tl.exp(s - m_safe[:, None])"),
            ("    lse = (m + tl.log2(l_safe)) * 0.6931471805599453", "    lse = m + tl.log(l_safe)"),
        ],
        "it takes tl.exp of the scores",
    ),
    "exp2 of the scores times log2(e) inside the loop": (
        FAST,
        "fast_flash_attention",
        [
            ("    qk_scale = scale * LOG2E\n", "    qk_scale = scale\n"),
            (
                "        alpha = tl.exp2(m - m_safe)",
                "        alpha = tl.exp2((m - m_safe) * 1.4426950408889634)",
            ),
            (
                "        p = tl.exp2(s - m_safe[:, None])",
                "        p = tl.exp2((s - m_safe[:, None]) * 1.4426950408889634)",
            ),
            ("    lse = (m + tl.log2(l_safe)) * 0.6931471805599453", "    lse = m + tl.log(l_safe)"),
        ],
        "multiplies each score 2 times",
    ),
    "exp2 without log2(e) in the scale": (
        FAST,
        "fast_flash_attention",
        [("    qk_scale = scale * LOG2E\n", "    qk_scale = scale\n")],
        "uses tl.exp2 without converting the scores to base 2",
    ),
    "the lse left in base 2": (
        FAST,
        "fast_flash_attention",
        [("    lse = (m + tl.log2(l_safe)) * 0.6931471805599453", "    lse = m + tl.log2(l_safe)")],
        "is in base 2",
    ),
    "the full blocks run to the last row's keys (hi), unmasked": (
        FAST,
        "fast_flash_attention",
        [
            (
                "        full = tl.minimum(T_k, tl.maximum(0, pid_m * BLOCK_M + offset + 1))",
                "        full = hi",
            )
        ],
        "masks no key inside the blocks that cross it",
    ),
    "the masked loop's causal test applied without the causal mask": (
        FAST,
        "fast_flash_attention",
        [
            (
                "            keep = cols[None, :] < T_k\n            if IS_CAUSAL:\n"
                "                keep = keep & (cols[None, :] <= offs_m[:, None] + offset)\n",
                "            keep = cols[None, :] <= offs_m[:, None] + offset\n",
            )
        ],
        "applies the causal test in its masked blocks also when is_causal=False",
    ),
    "the diagonal key masked too (<, a learner's own spelling: rows with no key left give 0)": (
        FAST,
        "fast_flash_attention",
        [
            (
                "keep & (cols[None, :] <= offs_m[:, None] + offset)",
                "keep & (cols[None, :] < offs_m[:, None] + offset)",
            )
        ],
        "masks the diagonal too",
    ),
    "the full bound not rounded down to a block": (
        FAST,
        "fast_flash_attention",
        [("    full = full // BLOCK_N * BLOCK_N\n", "")],
        "gives the keys past T_k in the last, ragged key block a score of 0",
    ),
}


@pytest.mark.parametrize("name", FAST_ACCEPTED)
def test_check_fast_flash_attention_accepts(name, folder, capsys):
    candidate = variant(FAST, folder, "fast_flash_attention", *FAST_ACCEPTED[name])
    assert_accepted(check_fast_flash_attention, candidate, capsys)


@pytest.mark.parametrize("name", FAST_REJECTED)
def test_check_fast_flash_attention_rejects(name, folder, capsys):
    template, function, pairs, phrase = FAST_REJECTED[name]
    assert_rejected(check_fast_flash_attention, variant(template, folder, function, *pairs), phrase, capsys)


def test_check_fast_flash_attention_accepts_the_reference(capsys):
    assert_accepted(check_fast_flash_attention, reference.fast_flash_attention, capsys)


def test_compiled_for_a_gpu_the_check_says_it_cannot_count_the_tiles(monkeypatch, folder, capsys):
    """On a GPU the kernel is compiled: right kernels pass; the pass line says the tiles went uncounted."""
    from attn_course.checks import _triton_harness, triton_fast, triton_flash

    class StandIn(_triton_harness.Mode):
        @property
        def gpu(self) -> bool:
            return True

    for module in (triton_fast, triton_flash):
        monkeypatch.setattr(module, "kernel_mode", lambda *_: StandIn(torch.device("cpu"), False))
    candidate = variant(FLASH, folder, "triton_flash_attention")  # slow, but right: not counted here
    assert_accepted(check_fast_flash_attention, candidate, capsys)
    check_fast_flash_attention(candidate)
    assert "its tiles cannot be counted here" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("t_q", "t_k", "block_m", "block_n", "causal", "expected"),
    [
        (200, 200, 32, 32, True, (28, 7)),  # question 08.2: 28 of 49 tiles loaded, 7 on the diagonal
        (4096, 4096, 128, 64, True, (1056, 64)),  # question 08.5: 6% of the tiles need a mask
        (40, 100, 32, 32, False, (8, 2)),  # without the causal mask: the ragged last block of each program
        (64, 64, 32, 32, False, (4, 0)),  # nothing to mask
    ],
)
def test_tiles_needing_a_mask_gives_the_notebooks_counts(t_q, t_k, block_m, block_n, causal, expected):
    assert tiles_needing_a_mask(t_q, t_k, block_m, block_n, causal) == expected


def test_tile_ops_counts_an_added_minus_infinity_as_a_mask_and_leaves_the_builder_as_it_was(folder):
    from triton.runtime.interpreter import interpreter_builder

    def wrapped():
        return {name for name in vars(interpreter_builder) if name.startswith("create_")}

    before = wrapped()
    pairs = FAST_ACCEPTED["the mask added as -inf instead of tl.where"]
    additive = variant(FAST, folder, "fast_flash_attention", *pairs)
    q, k, v = torch.randn(3, 1, 1, 128, 32).unbind(0)
    counts = count_tile_ops(additive, q, k, v, is_causal=True)
    assert (counts.computed, counts.masked, counts.base2_exps_per_score) == (10, 4, 1)
    assert wrapped() == before
