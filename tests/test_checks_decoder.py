"""The checks of the decoder block and of head ablation (notebook 07): mistakes named, right answers kept."""
# ruff: noqa: E501  (tables of learner code edits, one case a line)

from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_code import ABLATE, BLOCK, BLOCK_SHORT, learner

from attn_course import reference
from attn_course.checks import check_ablate_heads, check_block_forward

POST_NORM = (
    (
        "h = block.ln1(x)\n    x = x + block.attn(h, is_causal=True)",
        "x = block.ln1(x + block.attn(x, is_causal=True))",
    ),
    ("h = block.ln2(x)\n    x = x + block.mlp(h)", "x = block.ln2(x + block.mlp(x))"),
)
SWAPPED_NORMS = (
    ("h = block.ln1(x)", "h = block.LN(x)"),
    ("h = block.ln2(x)", "h = block.ln1(x)"),
    ("LN", "ln2"),
)
MASK = ", mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()"
MASK_ON_X = ", mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()"
V_ROWS = (
    ("weight = new_model.blocks[layer].attn.out.weight", "qkv = new_model.blocks[layer].attn.qkv"),
    (
        "weight[:, head * d_head:(head + 1) * d_head] = 0",
        "start = 2 * model.config.d_model + head * d_head\n"
        "            qkv.weight[start:start + d_head] = 0\n"
        "            qkv.bias[start:start + d_head] = 0",
    ),
)
BIAS = (
    "weight[:, head * d_head:(head + 1) * d_head] = 0",
    "weight[:, head * d_head:(head + 1) * d_head] = 0\n            new_model.blocks[layer].attn.out.bias.zero_()",
)
ONE = "weight[:, head * d_head:(head + 1) * d_head] = 0"
D_HEAD = "d_head = model.config.d_model // model.config.n_heads"
KEEP_ON_THE_CPU = (
    "keep = torch.ones(weight.shape[1])\n"
    "            keep[head * d_head:(head + 1) * d_head] = 0\n"
    "            weight.copy_(weight * keep)"
)

WRONG = [
    pytest.param("block_forward", BLOCK, [("x = x + block.attn(", "x = block.attn(")],
                 "no residual connection around the attention", id="block-no-attn-residual"),
    pytest.param("block_forward", BLOCK, [("x = x + block.mlp(h)", "x = block.mlp(h)")],
                 "no residual connection around the MLP", id="block-no-mlp-residual"),
    pytest.param("block_forward", BLOCK, [("x = x + block.attn(", "x = x + x + block.attn(")],
                 "adds the residual twice around the attention", id="block-attn-residual-twice"),
    pytest.param("block_forward", BLOCK, [("x = x + block.mlp(h)", "x = x + x + block.mlp(h)")],
                 "adds the residual twice around the MLP", id="block-mlp-residual-twice"),
    pytest.param("block_forward", BLOCK, list(POST_NORM), "post-norm", id="block-post-norm"),
    pytest.param("block_forward", BLOCK, [("h = block.ln2(x)", "h = block.ln1(x)")],
                 "uses block.ln1 before the MLP too", id="block-ln1-twice"),
    pytest.param("block_forward", BLOCK, [("h = block.ln1(x)", "h = block.ln2(x)")],
                 "uses block.ln2 before the attention too", id="block-ln2-twice"),
    pytest.param("block_forward", BLOCK, [(", is_causal=True", "")], "has no causal mask", id="block-not-causal"),
    pytest.param("block_forward", BLOCK, list(SWAPPED_NORMS), "ln1 belongs to the attention", id="block-norms-swapped"),
    pytest.param("block_forward", BLOCK_SHORT, [("block.ln2(attended)", "block.ln2(x)")],
                 "feeds the MLP the block's input x", id="block-mlp-reads-input"),
    pytest.param("block_forward", BLOCK_SHORT, [("block.mlp(block.ln2(attended))", "block.mlp(attended)")],
                 "skips block.ln2 before the MLP", id="block-no-ln2"),
    pytest.param("block_forward", BLOCK_SHORT, [(", is_causal=True", ""), ("block.ln2(attended)", "attended")],
                 "lets earlier positions see later ones", id="block-not-causal-and-no-ln2"),
    pytest.param("block_forward", BLOCK, [("return x", "return x.detach()")], "No gradient flows", id="block-detached"),
    pytest.param("block_forward", BLOCK, [("block.attn(h, is_causal=True)", "block.attn(h, True)")],
                 "raised", id="block-mask-as-positional"),
    pytest.param("ablate_heads", ABLATE, [(ONE, "weight[head * d_head:(head + 1) * d_head, :] = 0")],
                 "zeroes rows of attn.out.weight", id="ablate-rows"),
    pytest.param("ablate_heads", ABLATE, [(ONE, "weight[:, head:head + d_head] = 0")],
                 "zeroes the columns h … h + d_k", id="ablate-slice-h"),
    pytest.param("ablate_heads", ABLATE, [("copy.deepcopy(model)", "model")],
                 "changed the original model", id="ablate-no-copy"),
    pytest.param("ablate_heads", ABLATE, [("copy.deepcopy(model)", "copy.copy(model)")],
                 "changed the original model", id="ablate-shallow-copy"),
    pytest.param("ablate_heads", ABLATE, [BIAS], "also zeroes attn.out.bias", id="ablate-bias"),
    pytest.param("ablate_heads", ABLATE, [("blocks[layer]", "blocks[layer - 1]")],
                 "the layer before the one named", id="ablate-layer-minus-one"),
    pytest.param("ablate_heads", ABLATE, [("blocks[layer]", "blocks[layer + 1]")],
                 "the layer after the one named", id="ablate-layer-plus-one"),
    pytest.param("ablate_heads", ABLATE, [(".attn.out.weight", ".attn.out.weight.clone()")],
                 "no head was switched off", id="ablate-zeroes-a-clone"),
    pytest.param("ablate_heads", ABLATE, [("        with torch.no_grad():\n", "        if True:\n")],
                 "raised RuntimeError", id="ablate-without-no-grad"),
    pytest.param("ablate_heads", ABLATE, [("    return new_model", "    pass")],
                 "returned None", id="ablate-returns-nothing"),
    # No table entry matches these: the probes read the block's branches and the copy's weights (issue 27).
    pytest.param("block_forward", BLOCK, [("x = x + block.mlp(h)", "x = x + block.mlp(h) * 0.5")],
                 "returns 1·x + 1·attn + 0.5·mlp", id="block-probe-mlp-halved"),
    pytest.param("block_forward", BLOCK_SHORT, [("return attended + block.mlp(", "return x + block.mlp(")],
                 "returns x + block.mlp(...): the MLP's residual adds h", id="block-probe-mlp-residual-from-x"),
    pytest.param("block_forward", BLOCK, [("block.attn(h, is_causal=True)", "block.attn(block.ln1(h), is_causal=True)")],
                 "gives block.attn block.ln1(block.ln1(x)) (ln1 twice) instead of block.ln1(x)", id="block-probe-ln1-twice"),
    pytest.param("block_forward", BLOCK, [("block.attn(h, is_causal=True)", "block.attn(2 * h, is_causal=True)")],
                 "gives block.attn a tensor other than block.ln1(x)", id="block-probe-attn-input"),
    pytest.param("ablate_heads", ABLATE, [(ONE, "weight[:, (head - 1) * d_head:head * d_head] = 0")],
                 "it zeroed columns 6–11 and left nonzero columns 12–17", id="ablate-probe-head-minus-one"),
    pytest.param("ablate_heads", ABLATE, [(ONE, "weight[:, head * d_head:(head + 1) * d_head + 1] = 0")],
                 "it zeroed columns 18 (of shape (24, 24))", id="ablate-probe-one-column-too-many"),
    # Caught by the contract's cases only (issue 44): another head count, another device.
    pytest.param("block_forward", BLOCK, [(", is_causal=True", MASK)],
                 "with its inputs on another device than the CPU", id="block-mask-made-on-the-cpu"),
    pytest.param("ablate_heads", ABLATE, [("model.config.n_heads", "4")],
                 "d_k is worked out from 4 heads, the notebook's model's", id="ablate-four-heads-written-down"),
    pytest.param("ablate_heads", ABLATE, [(D_HEAD, "d_head = new_model.blocks[0].attn.out.weight.shape[1] // 4")],
                 "d_k is worked out from 4 heads, the notebook's model's", id="ablate-four-heads-from-the-weight"),
    pytest.param("ablate_heads", ABLATE, [(ONE, KEEP_ON_THE_CPU)],
                 "for a model on another device than the CPU (PyTorch's meta device, tensors with shapes and no "
                 "data); the first tensor your code makes off that device comes from `torch.ones(…)`",
                 id="ablate-mask-made-on-the-cpu"),
    pytest.param("ablate_heads", ABLATE, [
        ("weight = new_model.blocks[layer].attn.out.weight", "weight = new_model.blocks[layer].attn.qkv.weight"),
        (ONE, "weight[2 * model.config.d_model + head * d_head:2 * model.config.d_model + (head + 1) * d_head] = 0"),
    ], "zeroed: the values of the head. Its values keep their bias", id="ablate-probe-value-weights"),
]  # fmt: skip
"""(exercise, learner source, text edits, the phrase the check's message must contain)."""

RIGHT = [
    pytest.param("block_forward", BLOCK, [], id="block-learner"),
    pytest.param("block_forward", BLOCK_SHORT, [], id="block-one-line-each"),
    pytest.param("block_forward", BLOCK, [(", is_causal=True", MASK_ON_X)], id="block-explicit-mask"),
    pytest.param("block_forward", BLOCK, [("return x", "return x.contiguous()")], id="block-contiguous-out"),
    pytest.param("block_forward", BLOCK, [("block.attn(h, is_causal=True)", "block.attn.forward(h, is_causal=True)")],
                 id="block-forward-method"),
    pytest.param("ablate_heads", ABLATE, [], id="ablate-learner"),
    pytest.param("ablate_heads", ABLATE, list(V_ROWS), id="ablate-zeroes-the-heads-values"),
    pytest.param("ablate_heads", ABLATE, [(ONE, 'rearrange(weight, "o (h d) -> o h d", d=d_head)[:, head] = 0')],
                 id="ablate-einops-view"),
    pytest.param("ablate_heads", ABLATE, [(D_HEAD, "d_head = new_model.blocks[0].attn.out.weight.shape[1] // model.config.n_heads")],
                 id="ablate-d-head-from-the-weight"),
    pytest.param("ablate_heads", ABLATE, [(ONE, "for column in range(head * d_head, (head + 1) * d_head):\n"
                                                "                weight[:, column] = 0")],
                 id="ablate-column-by-column"),
    pytest.param("ablate_heads", ABLATE, [(ONE, "cols = slice(head * d_head, (head + 1) * d_head)\n"
                                                "            weight[:, cols] = torch.zeros_like(weight[:, cols])")],
                 id="ablate-zeros-like"),
    pytest.param("ablate_heads", ABLATE, [(ONE, KEEP_ON_THE_CPU.replace("torch.ones(weight.shape[1])",
                                                                        "torch.ones_like(weight[0])"))],
                 id="ablate-mask-like-the-weight"),
]  # fmt: skip

CHECKS = {"block_forward": check_block_forward, "ablate_heads": check_ablate_heads}


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), WRONG)
def test_learner_mistakes_are_named(exercise, source, edits, phrase, capsys):
    assert_rejected(CHECKS[exercise], learner(source, exercise, *edits), phrase, capsys)


@pytest.mark.parametrize(("exercise", "source", "edits"), RIGHT)
def test_right_learner_solutions_pass(exercise, source, edits, capsys):
    assert_accepted(CHECKS[exercise], learner(source, exercise, *edits), capsys)


@pytest.mark.parametrize("exercise", ["block_forward", "ablate_heads"])
def test_the_reference_passes(exercise, capsys):
    assert_accepted(CHECKS[exercise], getattr(reference, exercise), capsys)
