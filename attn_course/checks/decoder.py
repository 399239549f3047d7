"""Checks for notebook 07: the decoder block's forward pass, and switching heads off (ablation)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, cast

import torch

from attn_course import reference
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    _ranges,
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


def _probe_block(candidate: Callable[..., Any], block: Block, x: torch.Tensor) -> str | None:
    """Which branch of the learner's block is wrong: what each of ln1, attn, ln2, mlp got, and the sum.

    Forward hooks record the input of each sub-module in the learner's call; each is compared with
    the tensors of the right block (x, ln1(x), h = x + attn(ln1(x)), ln2(h), ...) to say what it got.
    """
    with torch.no_grad():
        a1 = block.ln1(x)  # (b, t, d_model)
        att = block.attn(a1, is_causal=True)
        h = x + att
        m_in = block.ln2(h)
        mlp_out = block.mlp(m_in)
        named = {
            "x": x,
            "block.ln1(x)": a1,
            "block.ln2(x)": block.ln2(x),
            "the attention's output alone, without the residual": att,
            "h = x + block.attn(block.ln1(x))": h,
            "block.ln2(h)": m_in,
            "block.ln1(h)": block.ln1(h),
            "block.mlp(block.ln2(h))": mlp_out,
            "block.attn(x) (no ln1)": block.attn(x, is_causal=True),
            "block.ln1(block.ln1(x)) (ln1 twice)": block.ln1(a1),
            "block.ln2(block.ln2(h)) (ln2 twice)": block.ln2(m_in),
        }
    seen: dict[str, list[tuple[torch.Tensor, dict[str, Any]]]] = {}
    handles = []
    for name in ("ln1", "attn", "ln2", "mlp"):

        def keep(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str = name) -> None:
            if args and isinstance(args[0], torch.Tensor):
                seen.setdefault(name, []).append((args[0].detach(), dict(kwargs)))

        handles.append(getattr(block, name).register_forward_pre_hook(keep, with_kwargs=True))
    try:
        with torch.no_grad():
            out = candidate(block, x)
    except Exception:  # the call was checked before; a probe that cannot run says nothing
        return None
    finally:
        for handle in handles:
            handle.remove()

    def which(t: torch.Tensor) -> str:
        return next((words for words, value in named.items() if is_close(t, value)), "a tensor other")

    expected = {"attn": ("block.ln1(x)", a1), "mlp": ("block.ln2(h)", m_in)}
    for name in ("attn", "mlp"):
        if name not in seen:  # not called, or called through .forward, which hooks do not see
            return None
        got, kwargs = seen[name][-1]
        words, right = expected[name]
        if not is_close(got, right):
            found = which(got)
            return (
                f"gives block.{name} a tensor other than {words} (none of x, ln1(x), h, ln2(h))."
                if found == "a tensor other"
                else f"gives block.{name} {found} instead of {words}."
            )
        if name == "attn" and kwargs.get("is_causal") is not True and "mask" not in kwargs:
            return "calls block.attn without is_causal=True: every position then sees the later ones."
    if isinstance(out, torch.Tensor) and out.shape == h.shape:
        for words, wrong in (
            (
                "x + block.mlp(...): the MLP's residual adds h, the sum after the attention, not x",
                x + mlp_out,
            ),
            ("block.mlp(...) + the attention's output, without x", att + mlp_out),
        ):
            if is_close(out, wrong):
                return f"returns {words}: return h + block.mlp(block.ln2(h))."
        parts = torch.stack([x, att, mlp_out], dim=-1).reshape(-1, 3)  # (b·t·d, 3)
        factors = torch.linalg.lstsq(parts, out.reshape(-1, 1).to(parts.dtype)).solution.flatten()
        if is_close((parts @ factors[:, None]).reshape(out.shape), out):
            a, b, c = (round(float(f), 3) for f in factors)
            return (
                f"returns {a:g}·x + {b:g}·attn + {c:g}·mlp (attn = block.attn(block.ln1(x)), mlp = "
                "block.mlp(block.ln2(h))): the block adds each once, h = x + attn, then h + mlp."
            )
    return None


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
    causal = _diagnose_causal(candidate, block, x)

    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        return causal(actual, expected) or _probe_block(candidate, block, x)

    expect_close(out, want, what, mistakes=mistakes, diagnose=diagnose, called_as="")
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
        right = reference.ablate_heads(model, heads)
        diagnose = _diagnose_ablation(out, original, ablated, right)
        expect_close(out, want, what, mistakes=mistakes, diagnose=diagnose, called_as="")
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


def _diagnose_ablation(
    out: torch.Tensor, original: torch.Tensor, ablated: Any = None, right: Any = None
) -> Callable[..., str | None]:
    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        if is_close(out, original):
            return (
                "are those of the original model: no head was switched off. Zero the columns "
                "h·d_k … (h+1)·d_k of model.blocks[layer].attn.out.weight for each (layer, head), "
                "in the copy."
            )
        if isinstance(ablated, torch.nn.Module) and isinstance(right, torch.nn.Module):
            return _parameter_difference(ablated, right)
        return None

    return diagnose


def _silenced(state: dict[str, torch.Tensor]) -> set[tuple[int, int]]:
    """The (layer, head) pairs whose columns of attn.out.weight are all zero in a state dict."""
    d_k = _CONFIG.d_model // _CONFIG.n_heads
    found = set()
    for name, weight in state.items():
        m = re.fullmatch(r"blocks\.(\d+)\.attn\.out\.weight", name)
        if m is None or weight.dim() != 2:
            continue
        for head in range(weight.shape[1] // d_k):
            if not weight[:, head * d_k : (head + 1) * d_k].any():
                found.add((int(m[1]), head))
    return found


def _pairs_reversed(theirs: dict[str, torch.Tensor], ours: dict[str, torch.Tensor]) -> str | None:
    """The heads switched off are the asked ones with each pair read the other way round, (head, layer)."""
    asked, silenced = _silenced(dict(ours)), _silenced(theirs)
    if asked and silenced != asked and silenced == {(head, layer) for layer, head in asked}:
        return (
            f"come from a copy that switched off {sorted(silenced)} for the pairs {sorted(asked)}: each "
            "pair is (layer, head), and yours were read as (head, layer). Unpack them as "
            "`for layer, head in heads`."
        )
    return None


def _parameter_difference(ablated: torch.nn.Module, right: torch.nn.Module) -> str | None:
    """Where the learner's ablated copy's parameters differ from the right copy's, in rows and columns."""
    theirs = dict(ablated.state_dict())
    ours = right.state_dict()
    others = [n for n, w in ours.items() if ".attn.out." not in n and not torch.equal(theirs.get(n, w), w)]
    if others:  # switched off some other way: say where, in the words of the layer's qkv
        name = others[0]
        got, want = theirs[name], ours[name]
        if name.endswith("attn.qkv.weight") and got.dim() == 2:
            rows = ((got != want) & (got == 0)).any(1).nonzero().flatten().tolist()
            d_model = want.shape[1]
            part = {0: "queries", 1: "keys", 2: "values"}.get(rows[0] // d_model, "") if rows else ""
            if part in ("queries", "keys"):
                return (
                    f"come from a copy whose {name} has rows {_ranges(rows)} zeroed: the {part} of the head. "
                    "That head's scores become 0, so it attends uniformly instead of falling silent; zero "
                    "its columns of attn.out.weight, what the head adds to the output."
                )
            if part == "values":
                return (
                    f"come from a copy whose {name} has rows {_ranges(rows)} zeroed: the values of the head. "
                    "Its values keep their bias, so the head still adds that bias, mixed by W^O, to the "
                    "output instead of falling silent; zero its columns of attn.out.weight, what it adds."
                )
        return None
    if order := _pairs_reversed(theirs, ours):
        return order
    for name, want in ours.items():
        got = theirs.get(name)
        if got is None or got.shape != want.shape or torch.equal(got, want):
            continue
        wrong = got != want  # (out, in) for a weight
        zeroed = wrong & (got == 0)
        kept = wrong & (want == 0)
        parts = []
        for label, where in (("zeroed", zeroed), ("left nonzero", kept)):
            if not where.any():
                continue
            if where.dim() == 2:
                cols = where.any(0).nonzero().flatten().tolist()
                rows = where.any(1).nonzero().flatten().tolist()
                place = (
                    f"columns {_ranges(cols)}"
                    if len(rows) == where.shape[0]
                    else f"rows {_ranges(rows)}"
                    if len(cols) == where.shape[1]
                    else f"rows {_ranges(rows)} × columns {_ranges(cols)}"
                )
            else:
                place = f"entries {_ranges(where.nonzero().flatten().tolist())}"
            parts.append(f"{label} {place}")
        what = " and ".join(parts) or "changed some entries"
        d_k = _CONFIG.d_model // _CONFIG.n_heads
        return (
            f"come from a copy whose {name} is wrong: it {what} (of shape {tuple(want.shape)}). Head h of "
            f"model.blocks[layer] is columns h·d_k … (h+1)·d_k - 1 of that layer's attn.out.weight "
            f"(d_k = {d_k})."
        )
    return None
