"""Checks for notebook 07: the decoder block's forward pass, and switching heads off (ablation)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import torch

from attn_course import reference
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    expect_close,
    expect_gradients,
    expect_tensor,
    is_close,
    randn,
)
from attn_course.decoder import Block, DecoderConfig, TinyDecoder

# ---------------------------------------------------------------------------------------------
# block_forward

_CONFIG = DecoderConfig(vocab_size=11, n_layers=3, n_heads=4, d_model=24, d_mlp=40)
"""Sizes of the checks' blocks and models: every axis a different length."""


def _random_block() -> Block:
    """A block in float64 whose LayerNorms are not the identity, so ln1 and ln2 differ."""
    block = Block(_CONFIG).double()
    with torch.no_grad():
        for norm in (block.ln1, block.ln2):
            norm.weight.copy_(1 + 0.5 * randn(_CONFIG.d_model))
            norm.bias.copy_(0.5 * randn(_CONFIG.d_model))
    return block


def _block(
    block: Block,
    x: torch.Tensor,
    *,
    attn_residual: int = 1,
    mlp_residual: int = 1,
    post_norm: bool = False,
    causal: bool = True,
    swap_norms: bool = False,
    one_norm: str | None = None,
    mlp_reads_input: bool = False,
    mlp_norm: bool = True,
) -> torch.Tensor:
    """A block's forward with each knob a learner might get wrong; the defaults are right."""
    ln1, ln2 = (block.ln2, block.ln1) if swap_norms else (block.ln1, block.ln2)
    if one_norm is not None:  # one LayerNorm, "ln1" or "ln2", before both branches
        ln1 = ln2 = getattr(block, one_norm)
    if post_norm:
        h = ln1(x + block.attn(x, is_causal=causal))  # (b, t, d_model)
        return ln2(h + block.mlp(h))  # (b, t, d_model)
    h = attn_residual * x + block.attn(ln1(x), is_causal=causal)  # (b, t, d_model)
    read = x if mlp_reads_input else h  # (b, t, d_model)
    return mlp_residual * h + block.mlp(ln2(read) if mlp_norm else read)  # (b, t, d_model)


_BLOCK_MISTAKES: list[tuple[str, dict[str, Any]]] = [
    (
        "has no residual connection around the attention: add the input back, "
        "x = x + block.attn(block.ln1(x), is_causal=True).",
        {"attn_residual": 0},
    ),
    (
        "has no residual connection around the MLP: return x + block.mlp(block.ln2(x)), not the MLP's "
        "output alone.",
        {"mlp_residual": 0},
    ),
    (
        "adds the residual twice around the attention (2·x + attn): x = x + block.attn(...) adds x once.",
        {"attn_residual": 2},
    ),
    (
        "adds the residual twice around the MLP (2·x + mlp): return x + block.mlp(...) adds x once.",
        {"mlp_residual": 2},
    ),
    (
        "normalises after the residual (post-norm, as the 2017 Transformer did): this block is pre-norm, "
        "the LayerNorm goes inside the branch, x + block.attn(block.ln1(x)), and the sum is not normalised.",
        {"post_norm": True},
    ),
    (
        "has no causal mask: every position sees the later ones. Call block.attn(..., is_causal=True).",
        {"causal": False},
    ),
    (
        "uses block.ln2 before the attention and block.ln1 before the MLP: ln1 belongs to the attention, "
        "ln2 to the MLP.",
        {"swap_norms": True},
    ),
    (
        "uses block.ln1 before the MLP too: each branch has its own LayerNorm with its own weights, "
        "block.ln1 before the attention and block.ln2 before the MLP.",
        {"one_norm": "ln1"},
    ),
    (
        "uses block.ln2 before the attention too: each branch has its own LayerNorm with its own "
        "weights, block.ln1 before the attention and block.ln2 before the MLP.",
        {"one_norm": "ln2"},
    ),
    (
        "feeds the MLP the block's input x instead of x after the attention's residual: the MLP reads "
        "h = x + attn(ln1(x)) (through ln2) and the block returns h + mlp(ln2(h)).",
        {"mlp_reads_input": True},
    ),
    (
        "skips block.ln2 before the MLP: x + block.mlp(block.ln2(x)).",
        {"mlp_norm": False},
    ),
]

_BLOCK_SIGNATURE = (
    "The signature is block_forward(block, x): block has .ln1, .attn, .ln2 and .mlp, and x is "
    "(b, t, d_model). Call block.attn(h, is_causal=True) and return (b, t, d_model)."
)


def _diagnose_causal(
    candidate: Callable[..., Any], block: Block, x: torch.Tensor
) -> Callable[..., str | None]:
    """Whether changing the last position changes the outputs of earlier ones (no causal mask)."""

    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        changed = x.clone()
        changed[:, -1] = changed[:, -1].flip(-1)  # another input at the last position only
        with torch.no_grad():
            again = call("block_forward", candidate, block, changed)
        if isinstance(again, torch.Tensor) and again.shape == actual.shape:
            if not is_close(again[:, :-1], actual[:, :-1]):
                return (
                    "lets earlier positions see later ones: changing only the last position changed the "
                    "outputs at earlier positions. Call block.attn(..., is_causal=True)."
                )
        return None

    return diagnose


@check
def check_block_forward(candidate: Callable[..., Any]) -> str:
    """A float64 block with random LayerNorms on (2, 7, 24), against the pre-norm causal block."""
    block = _random_block()
    x = randn(2, 7, _CONFIG.d_model)  # (b, t, d_model)
    with torch.no_grad():
        got = call("block_forward", candidate, block, x, hint=_BLOCK_SIGNATURE)
        want = reference.block_forward(block, x)  # (b, t, d_model)
    what = "The output of block_forward(block, x) for x of shape (2, 7, 24)"
    out = expect_tensor(got, want.shape, what)
    mistakes = [
        Mistake(message, lambda knobs=knobs: _block(block, x, **knobs)) for message, knobs in _BLOCK_MISTAKES
    ]
    expect_close(
        out, want, what, mistakes=mistakes, diagnose=_diagnose_causal(candidate, block, x), called_as=""
    )
    expect_gradients(
        "block_forward",
        lambda x: candidate(block, x),
        lambda x: reference.block_forward(block, x),
        [x],
        ["x"],
    )
    return "a pre-norm causal block (random LayerNorms, float64) matches, gradients included"


# ---------------------------------------------------------------------------------------------
# ablate_heads

_HEAD_SETS: list[list[tuple[int, int]]] = [[(1, 2)], [(0, 0), (2, 3)], [(2, 1), (2, 2), (0, 3)], []]
"""The (layer, head) lists the check switches off: one head, heads of two layers, three, none."""


def _random_model() -> TinyDecoder:
    """A float64 model of _CONFIG with nonzero output biases everywhere."""
    model = TinyDecoder(_CONFIG).double()
    with torch.no_grad():
        for block in cast("list[Block]", model.blocks):
            block.attn.out.bias.copy_(0.3 * randn(_CONFIG.d_model))
    return model


def _ablated(
    model: TinyDecoder,
    heads: list[tuple[int, int]],
    *,
    axis: str = "columns",
    width: str = "d_k",
    layer_shift: int = 0,
    bias: bool = False,
) -> TinyDecoder:
    """A copy of `model` with heads zeroed the way a learner might; the defaults are right."""
    ablated = copy.deepcopy(model)
    d_k = _CONFIG.d_model // _CONFIG.n_heads
    blocks = cast("list[Block]", ablated.blocks)
    with torch.no_grad():
        for layer, head in heads:
            out = blocks[layer + layer_shift].attn.out
            start = head * d_k if width == "d_k" else head
            cols = slice(start, start + d_k)
            if axis == "columns":
                out.weight[:, cols] = 0.0
            else:
                out.weight[cols, :] = 0.0
            if bias:
                out.bias.zero_()
    return ablated


_ABLATE_MISTAKES: list[tuple[str, dict[str, Any]]] = [
    (
        "zeroes rows of attn.out.weight: nn.Linear's weight is (out_features, in_features), and head h's "
        "output is the input features h·d_k … (h+1)·d_k, so zero the columns, weight[:, h*d_k:(h+1)*d_k].",
        {"axis": "rows"},
    ),
    (
        "zeroes the columns h … h + d_k: head h's slice of the merged heads starts at h·d_k, "
        "weight[:, h*d_k:(h+1)*d_k].",
        {"width": "h"},
    ),
    (
        "switches off the heads of the layer after the one named: layers count from 0, model.blocks[layer].",
        {"layer_shift": 1},
    ),
    (
        "switches off the heads of the layer before the one named: layers count from 0, "
        "model.blocks[layer] (not layer - 1).",
        {"layer_shift": -1},
    ),
    (
        "also zeroes attn.out.bias: the bias belongs to no head (it is added once, whatever the heads "
        "say), so leave it; zero only the head's columns of the weight.",
        {"bias": True},
    ),
]


@check
def check_ablate_heads(candidate: Callable[..., Any]) -> str:
    """A 3-layer, 4-head float64 model; the copy's logits for 4 lists of heads, and the original kept."""
    model = _random_model()
    tokens = torch.randint(0, _CONFIG.vocab_size, (2, 9))  # (b, t)
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    with torch.no_grad():
        original = model(tokens)  # (b, t, vocab_size)
    for heads in _HEAD_SETS:
        shown = f"ablate_heads(model, {heads})"
        ablated = call("ablate_heads", candidate, model, heads, hint="It returns a copy of the model.")
        if ablated is None:
            raise CheckFailed(f"{shown} returned None: return the ablated copy of the model.")
        _expect_original_kept(model, ablated, before, shown)
        with torch.no_grad():
            got = call("the model that ablate_heads returned", ablated, tokens)
            want = reference.ablate_heads(model, heads)(tokens)  # (b, t, vocab_size)
        what = f"The logits of the model that {shown} returned"
        out = expect_tensor(got, want.shape, what)
        mistakes = [
            Mistake(message, lambda knobs=knobs, heads=heads: _ablated(model, heads, **knobs)(tokens))
            for message, knobs in _ABLATE_MISTAKES
        ]
        expect_close(
            out, want, what, mistakes=mistakes, diagnose=_diagnose_ablation(out, original), called_as=""
        )
    return f"{len(_HEAD_SETS)} lists of heads switched off in a copy (3 layers, 4 heads), the original kept"


def _expect_original_kept(
    model: TinyDecoder, ablated: Any, before: dict[str, torch.Tensor], shown: str
) -> None:
    changed = [name for name, p in model.state_dict().items() if not torch.equal(p, before[name])]
    if changed:
        raise CheckFailed(
            f"{shown} changed the original model ({changed[0]}): switch the heads off in a copy, "
            "copy.deepcopy(model), and leave the model you were given as it was (the notebook compares "
            "the two)."
        )
    if ablated is model:
        raise CheckFailed(f"{shown} returned the model itself: return a copy, copy.deepcopy(model).")


def _diagnose_ablation(out: torch.Tensor, original: torch.Tensor) -> Callable[..., str | None]:
    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        if is_close(out, original):
            return (
                "are those of the original model: no head was switched off. Zero the columns "
                "h·d_k … (h+1)·d_k of model.blocks[layer].attn.out.weight for each (layer, head), "
                "in the copy."
            )
        return None

    return diagnose
