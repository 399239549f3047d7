"""Checks for notebook 07: the decoder block's forward pass, and switching heads off (ablation)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import torch

from attn_course import reference
from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Case,
    Contract,
    Exercise,
    Returns,
    _device_error,
    _FirstUnlike,
    contract_cases,
    dtype_name,
    expect_contract_cases,
    expect_inputs_device,
)
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
# The contracts of notebook 07's model exercises: what each must accept and return.

BLOCK_CONTRACT = Contract(
    "block_forward",
    args=(Arg("x", ("b", "t", "h·d"), views=VIEW_KINDS, swap=(0, 1), slice_axis=1, expand_axis=0),),
    axes=(
        Axis("b", (2, 1), "one sequence"),
        Axis("t", (7, 1), "one position"),
        Axis("h", (4, 3), "a block of 3 heads, a head count that is not a power of two"),
        Axis("d", (6,), "a head width that is not a power of two"),
    ),
    returns=(Returns("output", ("b", "t", "h·d")),),
    dtypes=(torch.float64, torch.float32),
)
"""Exercise 1 of 07: x (b, t, d_model) a view or not, through blocks of 4 or 3 heads of 6 in the block's
dtype (float64, float32), the output in x's dtype on x's device (a mask it makes, made there too)."""

ABLATE_CONTRACT = Contract(
    "ablate_heads",
    args=(),
    axes=(
        Axis("n_layers", (3, 2)),
        Axis("n_heads", (4, 3), "a head count that is not the notebook's 4"),
        Axis("d_k", (6,), "a head width that is not a power of two"),
    ),
    returns=(Returns("model", ("n_layers",)),),
    dtypes=(torch.float64, torch.float32),
    notes=("the cases are models of other configs; the copy's logits and its parameters' dtype and device",),
)
"""Exercise 2 of 07: any model.config (layers, heads, head width), a float32 model, a model on another
device than the CPU; the copy keeps the model's dtype and device."""


# ---------------------------------------------------------------------------------------------
# block_forward

_CONFIG = DecoderConfig(vocab_size=11, n_layers=3, n_heads=4, d_model=24, d_mlp=40)
"""Sizes of the checks' blocks and models: every axis a different length."""


def _random_block(config: DecoderConfig = _CONFIG) -> Block:
    """A block in float64 whose LayerNorms are not the identity, so ln1 and ln2 differ."""
    block = Block(config).double()
    with torch.no_grad():
        for norm in (block.ln1, block.ln2):
            norm.weight.copy_(1 + 0.5 * randn(config.d_model))
            norm.bias.copy_(0.5 * randn(config.d_model))
    return block


@dataclass(frozen=True)
class BlockVariant:
    """How one block's forward is written: the right one with the defaults, each other value a named
    mistake (`_block` computes what it gives; `_BLOCK_MISTAKES` names each)."""

    attn_residual: int = 1
    """How many times x is added around the attention (0: no residual, 2: twice)."""
    mlp_residual: int = 1
    """How many times h is added around the MLP."""
    post_norm: bool = False
    """True: each LayerNorm after its residual sum (the 2017 Transformer's post-norm)."""
    causal: bool = True
    """False: the attention without its causal mask."""
    swap_norms: bool = False
    """True: ln2 before the attention and ln1 before the MLP."""
    one_norm: str | None = None
    """"ln1" or "ln2": that one LayerNorm before both branches."""
    mlp_reads_input: bool = False
    """True: the MLP reads the block's input x instead of h."""
    mlp_norm: bool = True
    """False: no ln2 before the MLP."""


_RIGHT_BLOCK = BlockVariant()


def _block(block: Block, x: torch.Tensor, variant: BlockVariant = _RIGHT_BLOCK) -> torch.Tensor:
    """A block's forward written as `variant`; the defaults are right."""
    w = variant
    ln1, ln2 = (block.ln2, block.ln1) if w.swap_norms else (block.ln1, block.ln2)
    if w.one_norm is not None:  # one LayerNorm, "ln1" or "ln2", before both branches
        ln1 = ln2 = getattr(block, w.one_norm)
    if w.post_norm:
        h = ln1(x + block.attn(x, is_causal=w.causal))  # (b, t, d_model)
        return ln2(h + block.mlp(h))  # (b, t, d_model)
    h = w.attn_residual * x + block.attn(ln1(x), is_causal=w.causal)  # (b, t, d_model)
    read = x if w.mlp_reads_input else h  # (b, t, d_model)
    return w.mlp_residual * h + block.mlp(ln2(read) if w.mlp_norm else read)  # (b, t, d_model)


_BLOCK_MISTAKES: list[tuple[str, BlockVariant]] = [
    (
        "has no residual connection around the attention: add the input back, "
        "x = x + block.attn(block.ln1(x), is_causal=True).",
        BlockVariant(attn_residual=0),
    ),
    (
        "has no residual connection around the MLP: return x + block.mlp(block.ln2(x)), not the MLP's "
        "output alone.",
        BlockVariant(mlp_residual=0),
    ),
    (
        "adds the residual twice around the attention (2·x + attn): x = x + block.attn(...) adds x once.",
        BlockVariant(attn_residual=2),
    ),
    (
        "adds the residual twice around the MLP (2·x + mlp): return x + block.mlp(...) adds x once.",
        BlockVariant(mlp_residual=2),
    ),
    (
        "normalises after the residual (post-norm, as the 2017 Transformer did): this block is pre-norm, "
        "the LayerNorm goes inside the branch, x + block.attn(block.ln1(x)), and the sum is not normalised.",
        BlockVariant(post_norm=True),
    ),
    (
        "has no causal mask: every position sees the later ones. Call block.attn(..., is_causal=True).",
        BlockVariant(causal=False),
    ),
    (
        "uses block.ln2 before the attention and block.ln1 before the MLP: ln1 belongs to the attention, "
        "ln2 to the MLP.",
        BlockVariant(swap_norms=True),
    ),
    (
        "uses block.ln1 before the MLP too: each branch has its own LayerNorm with its own weights, "
        "block.ln1 before the attention and block.ln2 before the MLP.",
        BlockVariant(one_norm="ln1"),
    ),
    (
        "uses block.ln2 before the attention too: each branch has its own LayerNorm with its own "
        "weights, block.ln1 before the attention and block.ln2 before the MLP.",
        BlockVariant(one_norm="ln2"),
    ),
    (
        "feeds the MLP the block's input x instead of x after the attention's residual: the MLP reads "
        "h = x + attn(ln1(x)) (through ln2) and the block returns h + mlp(ln2(h)).",
        BlockVariant(mlp_reads_input=True),
    ),
    (
        "skips block.ln2 before the MLP: x + block.mlp(block.ln2(x)).",
        BlockVariant(mlp_norm=False),
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
        Mistake(message, lambda variant=variant: _block(block, x, variant))
        for message, variant in _BLOCK_MISTAKES
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
    generated = _expect_block_contract(candidate)
    return (
        "a pre-norm causal block (random LayerNorms, float64) matches, gradients included, and "
        f"{generated} cases from the exercise's contract (one sequence, one position, 3 heads, x a view, "
        "float32, x's device)"
    )


def _expect_block_contract(candidate: Callable[..., Any]) -> int:
    """The contract's generated cases on blocks of h heads of d with random LayerNorms, in each case's
    dtype; then one with x and the block on another device (a mask made on the CPU meets x there)."""
    blocks: dict[tuple[int, int], Block] = {}

    def functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
        h, d = case.size["h"], case.size["d"]
        if (h, d) not in blocks:
            blocks[h, d] = _random_block(replace(_CONFIG, n_heads=h, d_model=h * d))
        block = copy.deepcopy(blocks[h, d]).to("meta" if case.changed == "meta" else case.dtype)
        return (lambda x: candidate(block, x)), (lambda x: reference.block_forward(block, x))

    exercise = Exercise("block_forward", functions)
    ran = expect_contract_cases(BLOCK_CONTRACT, exercise, contract_cases(BLOCK_CONTRACT))
    return ran + expect_inputs_device(BLOCK_CONTRACT, exercise)


# ---------------------------------------------------------------------------------------------
# ablate_heads

_HEAD_SETS: list[list[tuple[int, int]]] = [[(1, 2)], [(0, 0), (2, 3)], [(2, 1), (2, 2), (0, 3)], []]
"""The (layer, head) lists the check switches off: one head, heads of two layers, three, none."""


def _random_model(config: DecoderConfig = _CONFIG) -> TinyDecoder:
    """A float64 model of `config` with nonzero output biases everywhere."""
    model = TinyDecoder(config).double()
    with torch.no_grad():
        for block in cast("list[Block]", model.blocks):
            block.attn.out.bias.copy_(0.3 * randn(config.d_model))
    return model


@dataclass(frozen=True)
class AblationVariant:
    """How one ablation is written: the right one with the defaults, each other value a named mistake
    (`_ablated` computes what it gives; `_ABLATE_MISTAKES` names each)."""

    axis: str = "columns"
    """Which of attn.out.weight's axes is cut: "columns" (right, the input features) or "rows"."""
    width: str = "d_k"
    """Where head h's slice starts: "d_k" (h·d_k, right) or "h" (column h)."""
    layer_shift: int = 0
    """The block switched off is layer + layer_shift."""
    bias: bool = False
    """True: attn.out.bias zeroed too."""
    n_heads: int | None = None
    """The head count d_k is worked out from: None (the model's own, right) or a number written down."""


_RIGHT_ABLATION = AblationVariant()


def _ablated(
    model: TinyDecoder, heads: list[tuple[int, int]], variant: AblationVariant = _RIGHT_ABLATION
) -> TinyDecoder:
    """A copy of `model` with heads zeroed as `variant` writes it; the defaults are right."""
    w = variant
    ablated = copy.deepcopy(model)
    d_k = model.config.d_model // (w.n_heads or model.config.n_heads)
    blocks = cast("list[Block]", ablated.blocks)
    with torch.no_grad():
        for layer, head in heads:
            out = blocks[layer + w.layer_shift].attn.out
            start = head * d_k if w.width == "d_k" else head
            cols = slice(start, start + d_k)
            if w.axis == "columns":
                out.weight[:, cols] = 0.0
            else:
                out.weight[cols, :] = 0.0
            if w.bias:
                out.bias.zero_()
    return ablated


_ABLATE_MISTAKES: list[tuple[str, AblationVariant]] = [
    (
        "zeroes rows of attn.out.weight: nn.Linear's weight is (out_features, in_features), and head h's "
        "output is the input features h·d_k … (h+1)·d_k, so zero the columns, weight[:, h*d_k:(h+1)*d_k].",
        AblationVariant(axis="rows"),
    ),
    (
        "zeroes the columns h … h + d_k: head h's slice of the merged heads starts at h·d_k, "
        "weight[:, h*d_k:(h+1)*d_k].",
        AblationVariant(width="h"),
    ),
    (
        "switches off the heads of the layer after the one named: layers count from 0, model.blocks[layer].",
        AblationVariant(layer_shift=1),
    ),
    (
        "switches off the heads of the layer before the one named: layers count from 0, "
        "model.blocks[layer] (not layer - 1).",
        AblationVariant(layer_shift=-1),
    ),
    (
        "also zeroes attn.out.bias: the bias belongs to no head (it is added once, whatever the heads "
        "say), so leave it; zero only the head's columns of the weight.",
        AblationVariant(bias=True),
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
            Mistake(message, lambda variant=variant, heads=heads: _ablated(model, heads, variant)(tokens))
            for message, variant in _ABLATE_MISTAKES
        ]
        right = reference.ablate_heads(model, heads)
        diagnose = _diagnose_ablation(out, original, ablated, right)
        expect_close(out, want, what, mistakes=mistakes, diagnose=diagnose, called_as="")
    generated = _expect_ablation_contract(candidate)
    return (
        f"{len(_HEAD_SETS)} lists of heads switched off in a copy (3 layers, 4 heads), the original kept, "
        f"and {generated} cases from the exercise's contract (2 layers, 3 heads, float32, the "
        "model's device)"
    )


_HARD_CODED_HEADS: tuple[str, AblationVariant] = (
    "come from a copy whose d_k is worked out from 4 heads, the notebook's model's, not from the model it "
    "is given: d_k = model.config.d_model // model.config.n_heads.",
    AblationVariant(n_heads=4),
)
"""A mistake only a model of another head count than 4 shows (the notebook's model has 4)."""


def _expect_ablation_contract(candidate: Callable[..., Any]) -> int:
    """The contract's other configs and dtype, one at a time, then a model on another device; how many
    ran."""
    cases = contract_cases(ABLATE_CONTRACT)[1:]  # the base config is the hand-written cases'
    for case in cases:
        _expect_ablation_case(candidate, case)
    return len(cases) + _expect_ablation_on_another_device(candidate)


def _expect_ablation_case(candidate: Callable[..., Any], case: Case) -> None:
    """One model of the case's config and dtype, its last head of the last layer and head 0 of layer 0
    switched off: the copy's logits, the original kept."""
    n_layers, n_heads, d_k = (case.size[name] for name in ("n_layers", "n_heads", "d_k"))
    config = replace(_CONFIG, n_layers=n_layers, n_heads=n_heads, d_model=n_heads * d_k)
    model = _random_model(config).to(case.dtype)
    heads = [(n_layers - 1, n_heads - 1), (0, 0)]
    tokens = torch.randint(0, config.vocab_size, (2, 9))  # (b, t)
    axis = next((a for a in ABLATE_CONTRACT.axes if a.name == case.changed), None)
    change = (
        f"a {dtype_name(case.dtype)} model"
        if axis is None
        else f"{axis.name} = {case.size[axis.name]}" + (f" ({axis.why})" if axis.why else "")
    )
    model_words = f"a {dtype_name(case.dtype)} model of {n_layers} layers of {n_heads} heads of d_k = {d_k}"
    shown = f"ablate_heads(model, {heads})"
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    with torch.no_grad():
        original = model(tokens)  # (b, t, vocab_size)
    ablated = call("ablate_heads", candidate, model, heads)
    if ablated is None:
        raise CheckFailed(f"{shown}, for {model_words}, returned None: return the ablated copy of the model.")
    _expect_original_kept(model, ablated, before, f"{shown}, for {model_words},")
    right = reference.ablate_heads(model, heads)
    with torch.no_grad():
        got = call("the model that ablate_heads returned", ablated, tokens)
        want = right(tokens)  # (b, t, vocab_size)
    what = f"For {model_words}, the logits of the model that {shown} returned"
    out = expect_tensor(got, want.shape, what)
    if out.dtype != want.dtype:
        raise CheckFailed(
            f"{what} have dtype {dtype_name(out.dtype)}: the copy must keep the model's dtype (the cases "
            f"before passed; this one differs only in that it has {change}). Set entries to a number, "
            "weight[:, ...] = 0, and make any tensor you need in the weights' dtype (dtype=weight.dtype)."
        )
    variants = [*_ABLATE_MISTAKES, *([_HARD_CODED_HEADS] if n_heads != 4 else [])]
    mistakes = [
        Mistake(message, lambda variant=variant: _ablated(model, heads, variant)(tokens))
        for message, variant in variants
    ]
    diagnose = _diagnose_ablation(out, original, ablated, right)

    def after(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        text = diagnose(actual, expected)
        return text and f"{text} (The cases before passed; this one differs only in that it has {change}.)"

    expect_close(out, want, what, mistakes=mistakes, diagnose=after, called_as="")


def _expect_ablation_on_another_device(candidate: Callable[..., Any]) -> int:
    """A model on PyTorch's meta device (shapes, no data): the copy's parameters stay there, and nothing the
    learner makes on the CPU meets them (as on a GPU). 1 where the course's own ablation runs there."""
    model = _random_model().to("meta")
    heads = [(1, 2), (0, 0)]
    where = (
        "for a model on another device than the CPU (PyTorch's meta device, tensors with shapes and no data)"
    )
    fix = (
        "Make every new tensor on the weights' device (device=weight.device, torch.zeros_like(weight)), "
        "or assign a number: weight[:, ...] = 0."
    )
    try:
        reference.ablate_heads(model, heads)
    except Exception:  # noqa: BLE001 - the course's own code cannot run there: no case
        return 0
    mode = _FirstUnlike(device="meta")
    try:
        with mode:
            ablated = candidate(model, heads)
    except Exception as error:  # noqa: BLE001 - only a meeting of two devices is the learner's mistake
        if not _device_error(error, mode.raised_by):
            return 1
        text = str(error).strip().splitlines()[0]
        made = (
            f"; the first tensor your code makes off that device comes from {mode.found}"
            if mode.found
            else ""
        )
        raise CheckFailed(
            f"Your ablate_heads raised {type(error).__name__}: {text}, {where}{made}. {fix}"
        ) from None
    if isinstance(ablated, torch.nn.Module):
        moved = [(name, p.device.type) for name, p in ablated.named_parameters() if p.device.type != "meta"]
        if moved:
            name, device = moved[0]
            raise CheckFailed(
                f"The copy that your ablate_heads returns has {name} on {device} {where}: the copy keeps "
                f"the model's device. {fix}"
            )
    return 1


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


def _silenced(state: dict[str, torch.Tensor], d_k: int) -> set[tuple[int, int]]:
    """The (layer, head) pairs whose columns of attn.out.weight are all zero in a state dict."""
    found = set()
    for name, weight in state.items():
        m = re.fullmatch(r"blocks\.(\d+)\.attn\.out\.weight", name)
        if m is None or weight.dim() != 2:
            continue
        for head in range(weight.shape[1] // d_k):
            if not weight[:, head * d_k : (head + 1) * d_k].any():
                found.add((int(m[1]), head))
    return found


def _pairs_reversed(theirs: dict[str, torch.Tensor], ours: dict[str, torch.Tensor], d_k: int) -> str | None:
    """The heads switched off are the asked ones with each pair read the other way round, (head, layer)."""
    asked, silenced = _silenced(dict(ours), d_k), _silenced(theirs, d_k)
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
    config = getattr(right, "config", _CONFIG)
    d_k = config.d_model // config.n_heads
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
                    "That changes which positions the head weighs, not that it adds its values to the "
                    "output, so it does not fall silent; zero its columns of attn.out.weight, what the head "
                    "adds to the output."
                )
            if part == "values":
                return (
                    f"come from a copy whose {name} has rows {_ranges(rows)} zeroed: the values of the head. "
                    "Its values keep their bias, so the head still adds that bias, mixed by W^O, to the "
                    "output instead of falling silent; zero its columns of attn.out.weight, what it adds."
                )
        return None
    if order := _pairs_reversed(theirs, ours, d_k):
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
        return (
            f"come from a copy whose {name} is wrong: it {what} (of shape {tuple(want.shape)}). Head h of "
            f"model.blocks[layer] is columns h·d_k … (h+1)·d_k - 1 of that layer's attn.out.weight "
            f"(d_k = {d_k})."
        )
    return None
