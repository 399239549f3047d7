"""Checks on code real learners wrote (tests/fixtures/, copied from shared/fixtures/): true messages only.

A new learner's `flash_attention` for notebook 06's Exercise 3 in five versions, and `dana`'s notebooks
03 and 07 from an instructor's class, whose right `attention` and `sample_next` call her own wrong
`causal_mask` and `next_token_probs`. Each message must name the learner's idea and state no cause
their code does not have; a right exercise that fails only through an earlier one says so and
carries `upstream`, which gives it its point in the grader.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from einops import rearrange

from attn_course import decoder, generation, kv_cache
from attn_course.checks import CheckFailed, check_attention, check_flash_attention, check_sample_next

FIXTURES = Path(__file__).parent / "fixtures"

pytestmark = pytest.mark.slow


def newcomer(name: str) -> Any:
    """The new learner's `flash_attention` of one file of tests/fixtures/newcomer-06."""
    namespace: dict[str, Any] = {"torch": torch, "math": math}
    path = FIXTURES / "newcomer-06" / f"{name}.py"
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["flash_attention"]


def test_the_newcomers_right_flash_attention_passes(capsys):
    check_flash_attention(newcomer("ex3"))
    assert "check_flash_attention passed" in capsys.readouterr().out


NEWCOMER_06 = [  # (file, the finding, what the message must say, what it must not: a cause the code lacks)
    ("ex3_lse2", "property", "wrong only for the rows that see no key (rows 0–17", "at its absolute rows"),
    ("ex3_local", "known-mistake", "own row and column numbers (0, 1, … within the tile) instead", "largest"),
    ("ex3_local_off", "known-mistake", "plus T_k - T_q, which leaves out the tile", "not mask inside"),
    ("ex3_offbyone", "known-mistake", "stops the causal key loop one key short", "masks the diagonal too"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "finding", "said", "not_said"), NEWCOMER_06)
def test_the_newcomers_mistakes_are_named_truly(name, finding, said, not_said):
    with pytest.raises(CheckFailed) as failure:
        check_flash_attention(newcomer(name))
    message = str(failure.value)
    assert said in message
    assert not_said not in message
    assert failure.value.finding == finding and failure.value.upstream == ""


def _dana(notebook: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Dana's exercise cells of one notebook, run in order in `namespace` (her notebook's globals)."""
    source = (FIXTURES / f"c{notebook}_dana.py").read_text()
    parts = re.split(r"^### (\w+)\n", source, flags=re.MULTILINE)
    for name, cell in zip(parts[1::2], parts[2::2], strict=True):
        exec(compile(cell, f"<dana's {name}>", "exec"), namespace)
    return namespace


def test_a_right_attention_over_an_inverted_causal_mask_blames_the_mask():
    from attn_course.reference import dot_product_scores, softmax

    namespace = _dana(
        "03", {"torch": torch, "math": math, "dot_product_scores": dot_product_scores, "softmax": softmax}
    )
    with pytest.raises(CheckFailed) as failure:
        check_attention(namespace["attention"])
    message = str(failure.value)
    assert failure.value.upstream == "causal_mask"
    assert (
        "Your `attention` is right" in message
        and "your `causal_mask` (earlier in this notebook) is wrong" in message
    )
    assert "fill the scores where the mask is False" not in message
    assert namespace["causal_mask"].__module__ != "attn_course.masking"  # her own mask is back in place


def test_a_right_sample_next_over_wrong_probabilities_blames_next_token_probs():
    namespace: dict[str, Any] = {"torch": torch, "math": math, "rearrange": rearrange}
    for module in (kv_cache, decoder, generation):
        namespace.update({n: getattr(module, n) for n in dir(module) if not n.startswith("_")})
    namespace = _dana("07", namespace)
    with pytest.raises(CheckFailed) as failure:
        check_sample_next(namespace["sample_next"])
    assert failure.value.upstream == "next_token_probs"
    assert "ignore the temperature" not in str(failure.value)


def test_a_wrong_attention_over_a_right_mask_is_still_its_own_mistake():
    from attn_course.reference import causal_mask, dot_product_scores, softmax

    namespace = _dana(
        "03", {"torch": torch, "math": math, "dot_product_scores": dot_product_scores, "softmax": softmax}
    )
    learners_mask = namespace["causal_mask"]
    namespace["causal_mask"] = lambda t_q, t_k=None, device=None: (
        ~learners_mask(t_q, t_k, device)
    )  # now right
    assert torch.equal(namespace["causal_mask"](3, 5), causal_mask(3, 5))
    source = (FIXTURES / "c03_dana.py").read_text().split("### attention\n")[1]
    exec(
        compile(source.replace("masked_fill(~allowed", "masked_fill(allowed"), "<attention>", "exec"),
        namespace,
    )
    with pytest.raises(CheckFailed) as failure:
        check_attention(namespace["attention"])
    assert failure.value.upstream == ""


class MaskWithoutHeadAxis(torch.nn.Module):
    """A second new learner's layer (notebook 04): the mask reaches `attention` without a head axis."""

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.qkv = torch.nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = torch.nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        from attn_course.reference import attention, merge_heads, split_heads

        if context is None:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            w_q, w_kv = self.qkv.weight.split([self.d_model, 2 * self.d_model])
            b_q, b_kv = self.qkv.bias.split([self.d_model, 2 * self.d_model])
            q = x @ w_q.T + b_q
            k, v = (context @ w_kv.T + b_kv).chunk(2, dim=-1)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))
        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)
        return self.out(merge_heads(out))


def test_a_mask_without_a_head_axis_is_named_without_a_false_cause():
    from attn_course.checks import check_MultiHeadAttention

    with pytest.raises(CheckFailed) as failure:
        check_MultiHeadAttention(MaskWithoutHeadAxis)
    message = str(failure.value)
    assert "has no head axis" in message and "mask.unsqueeze(-3)" in message
    assert "used where the right computation uses" not in message  # no mutant that only raises alike
