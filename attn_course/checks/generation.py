"""Checks for notebook 07: generation with the cache, and sampling at a temperature with top-k."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
    contract_cases,
    expect_contract_cases,
    expect_inputs_device,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    expect_close,
    expect_tensor,
    randn,
)
from attn_course.decoder import DecoderConfig, TinyDecoder
from attn_course.generation import greedy

# ---------------------------------------------------------------------------------------------
# The contracts of notebook 07's Exercises 5 and 6: what each function must accept and return.

PROBS_CONTRACT = Contract(
    "next_token_probs",
    args=(Arg("logits", ("B", "V"), views=VIEW_KINDS, swap=(0, 1), slice_axis=-1, expand_axis=0),),
    axes=(
        Axis("B", (4, 1), "a single row"),
        Axis("V", (10, 33), "another vocabulary size"),
        Axis("k", (3, 1, 10), "top_k = 1, and top_k = vocab_size: every token kept"),
    ),
    returns=(Returns("probs", ("B", "V")),),
    dtypes=(torch.float32, torch.float64),
    notes=("temperature 0.7 and top_k = k in every generated case; top_k is None or 1 … vocab_size",),
)
"""Exercise 6 of 07, first half: logits (b, vocab_size) of float32 or float64, a view or not (a slice as
model.step(...)[:, -1] gives, transposed, one row expanded over the batch); probabilities in their dtype,
on their device."""

SAMPLE_CONTRACT = Contract(
    "sample_next",
    args=(Arg("logits", ("B", "V"), views=VIEW_KINDS, swap=(0, 1), slice_axis=-1, expand_axis=0),),
    axes=(Axis("B", (3, 1), "a single row"), Axis("V", (8, 33), "another vocabulary size")),
    returns=(Returns("tokens", ("B", "1"), dtype="int64"),),
    dtypes=(torch.float32, torch.float64),
    notes=(
        "top_k = 1 in every generated case, so that every right draw is the argmax (the distribution is "
        "the hand-written cases' to test); no run on another device: the text leaves devices open, and "
        "random numbers come from `generator`'s device",
    ),
)
"""Exercise 6 of 07, second half: the same logits; one token id per row, (b, 1), dtype long."""

GENERATE_CONTRACT = Contract(
    "generate_with_cache",
    args=(Arg("prompt", ("B", "T"), views=("sliced", "expanded"), slice_axis=-1, expand_axis=0),),
    axes=(Axis("B", (3, 1), "a single sequence"), Axis("T", (4, 1), "a prompt of one token")),
    returns=(Returns("tokens", ("B", "T + n_new")),),
    dtypes=(torch.int64,),
    notes=("n_new = 4 and a pick that takes the second most likely token in every generated case",),
)
"""Exercise 5 of 07: prompts (b, t) with b and t down to 1, a slice of a longer batch or one prompt
expanded over it; the tokens in the prompt's dtype, on its device."""

_GENERATED_N_NEW = 4

# ---------------------------------------------------------------------------------------------
# next_token_probs

_VOCAB = 10
_PROBS_CASES: list[tuple[float, int | None]] = [
    (1.0, None),
    (0.5, None),
    (2.0, 3),
    (0.7, 1),
    (1.3, _VOCAB),
    (1.0, 5),
]
"""(temperature, top_k) of each call: with and without top-k, k = 1 and k = vocab_size."""


@dataclass(frozen=True)
class ProbsVariant:
    """How one next_token_probs is written: the right one with the defaults, each other value a named
    mistake (`_probs` computes what it gives; `_PROBS_MISTAKES` names each)."""

    when: str = "before"
    """Where the temperature acts: "before" the softmax on the logits (right), "after" (the probabilities
    divided by it), "power" (probs ** (1 / T)) or "never"."""
    scale: str = "divide"
    """How it acts on the logits: "divide" (right) or "multiply"."""
    keep: int = 0
    """Tokens kept beyond top_k (-1: k - 1, 1: k + 1, a huge number: top_k ignored)."""
    fill: float = -math.inf
    """What the logits outside the top k become: -inf (right) or another value (0.0)."""
    softmax: bool = True
    """False: the masked logits returned, no softmax."""
    renormalise: bool = True
    """False: the probabilities outside the top k zeroed after the softmax, the rest not renormalised."""


_RIGHT_PROBS = ProbsVariant()


def _probs(
    logits: torch.Tensor, temperature: float, top_k: int | None, variant: ProbsVariant = _RIGHT_PROBS
) -> torch.Tensor:
    """next_token_probs written as `variant`; the default variant is right."""
    when, keep, fill = variant.when, variant.keep, variant.fill
    scaled = logits
    if when == "before":
        scaled = logits / temperature if variant.scale == "divide" else logits * temperature  # (b, vocab)
    if top_k is not None and top_k + keep >= 1:
        k = min(top_k + keep, logits.shape[-1])
        kth = scaled.topk(k, dim=-1).values[:, -1:]  # (b, 1)
        outside = scaled < kth  # (b, vocab)
        if not variant.renormalise:
            probs = torch.softmax(scaled, dim=-1).masked_fill(outside, 0.0)  # (b, vocab)
            return probs if when != "power" else probs ** (1 / temperature)
        scaled = scaled.masked_fill(outside, fill)  # (b, vocab)
    if not variant.softmax:
        return scaled
    probs = torch.softmax(scaled, dim=-1)  # (b, vocab)
    if when == "power":
        return probs ** (1 / temperature)
    if when == "after":
        return probs / temperature
    return probs


_PROBS_MISTAKES: list[tuple[str, ProbsVariant]] = [
    (
        "applies the temperature after the softmax (probs ** (1 / T)), so the rows no longer sum to 1: "
        "divide the logits by the temperature, then take the softmax.",
        ProbsVariant(when="power"),
    ),
    (
        "divides the probabilities by the temperature: the temperature divides the logits, before the "
        "softmax, softmax(logits / temperature).",
        ProbsVariant(when="after"),
    ),
    (
        "multiplies the logits by the temperature: divide by it, softmax(logits / temperature), so that a "
        "high temperature flattens the distribution and a low one sharpens it.",
        ProbsVariant(scale="multiply"),
    ),
    (
        "ignores the temperature: softmax(logits / temperature).",
        ProbsVariant(when="never"),
    ),
    (
        "keeps k - 1 tokens, not k: keep every logit at least as large as the k-th largest, "
        "logits.topk(k).values[:, -1:], and mask the ones below it (<, not <=).",
        ProbsVariant(keep=-1),
    ),
    (
        "keeps k + 1 tokens, not k: the k-th largest logit is logits.topk(k).values[:, -1:] (index k - 1, "
        "counting from 0).",
        ProbsVariant(keep=1),
    ),
    (
        "sets the logits outside the top k to 0, which still gives them probability: set them to "
        "float('-inf'), so that exp makes them exactly 0.",
        ProbsVariant(fill=0.0),
    ),
    (
        "returns logits, not probabilities: finish with torch.softmax(scaled, dim=-1).",
        ProbsVariant(softmax=False),
    ),
    (
        "zeroes the tokens outside the top k after the softmax without renormalising, so the rows sum to "
        "less than 1: mask the logits with -inf before the softmax (or divide by the new sum).",
        ProbsVariant(renormalise=False),
    ),
    (
        "ignores top_k: keep only the top_k largest logits of each row (the others -inf) before the "
        "softmax, when top_k is not None.",
        ProbsVariant(keep=10**6),
    ),
]

_PROBS_SIGNATURE = (
    "The signature is next_token_probs(logits, temperature=1.0, top_k=None), logits (b, vocab_size); "
    "top_k=None keeps every token."
)


def _sharpness(
    p: torch.Tensor, logits: torch.Tensor, temperature: float, counts: int | None = None
) -> str | None:
    """How probabilities (or frequencies of `counts` draws) p differ in sharpness from softmax(logits / T).

    Fits log p = logits / T' + c per row on the tokens p keeps; names T' = T², 1/T, 1 or √T, else says
    whether p is sharper (T' < T) or flatter (T' > T) than it should be.
    """
    p = p.detach().to("cpu", torch.float64)
    logits = logits.detach().to("cpu", torch.float64)
    slopes, weights = [], []
    for row in range(p.shape[0]):
        kept = p[row] > 0
        if int(kept.sum()) < 2:
            continue
        x, y = logits[row][kept], torch.log(p[row][kept])
        w = p[row][kept] if counts is not None else torch.ones_like(x)  # draws: rare tokens are noisy
        xm, ym = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
        var = (w * (x - xm) ** 2).sum()
        if float(var) <= 0:
            continue
        slope = float((w * (x - xm) * (y - ym)).sum() / var)
        residual = y - (ym + slope * (x - xm))
        if float((w * residual**2).sum() / w.sum()) > (0.05 if counts is not None else 1e-8):
            return None  # not a softmax of the logits at any temperature
        slopes.append(slope)
        weights.append(1.0)
    if not slopes or min(slopes) <= 0:
        return None
    fitted = 1 / (sum(slopes) / len(slopes))  # T'
    if abs(fitted / temperature - 1) < 0.05:
        return None
    if counts is not None:  # draws: the fitted temperature must explain them within their noise
        masked = logits.masked_fill(p == 0, -math.inf)
        tempered = torch.softmax(masked / fitted, dim=-1)  # (b, vocab)
        sigma = (tempered * (1 - tempered) / counts).sqrt().clamp_min(1 / counts)
        if float(((p - tempered).abs() / sigma).max()) > 6:
            return None  # not a softmax at any one temperature: another way of drawing
    named = {
        temperature**2: "divides by the temperature twice (logits / T / T)",
        1 / temperature: "multiplies the logits by the temperature instead of dividing (logits * T)",
        1.0: "ignores the temperature",
        math.sqrt(temperature): "divides by √T instead of T",
    }
    said = next(
        (w for t, w in named.items() if abs(fitted / t - 1) < 0.05 and abs(t - temperature) > 1e-9), None
    )
    kind = "sharper" if fitted < temperature else "flatter"
    how = f", what a code that {said} gives" if said else ""
    return (
        f"{kind} than softmax(logits / {temperature:g}): they fit a temperature of {fitted:.3g}{how}. "
        "Divide the logits by the temperature once, softmax(logits / temperature)."
    )


def _diagnose_probs(logits: torch.Tensor, temperature: float, top_k: int | None) -> Callable[..., str | None]:
    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        a = actual.detach().to("cpu", torch.float64)
        if (a < 0).any():
            return "has negative entries: probabilities come out of a softmax, never negative."
        sums = a.sum(dim=-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
            return (
                f"has rows that do not sum to 1 (from {float(sums.min()):.4g} to {float(sums.max()):.4g}): "
                "take the softmax along the vocabulary axis, dim=-1, last."
            )
        kept, want = a > 0, expected > 0
        if not torch.equal(kept, want.cpu()) and top_k is not None:
            scaled = logits.detach().cpu().to(torch.float64)
            for row in range(scaled.shape[0]):
                kth = scaled[row].topk(top_k).values[-1]
                if torch.equal(kept.cpu(), scaled >= kth) and not torch.equal(want.cpu(), scaled >= kth):
                    return (
                        f"keeps, in every row, the logits at or above row {row}'s k-th largest: take the "
                        "threshold per row, torch.topk(logits, top_k, dim=-1).values[:, -1:] (b, 1)."
                    )
        if not torch.equal(kept, want.cpu()) and top_k is not None:
            raw = logits.detach().cpu().to(torch.float64)  # (b, vocab)
            for mine, theirs in ((raw / temperature, raw), (raw, raw / temperature)):
                threshold = theirs.topk(top_k, dim=-1).values[:, -1:]  # (b, 1)
                if torch.equal(kept.cpu(), mine >= threshold):
                    return (
                        "compares the logits with a threshold taken from the other tensor: the k-th largest "
                        f"of the {'unscaled' if theirs is raw else 'scaled'} logits against the "
                        f"{'scaled' if mine is not raw else 'unscaled'} ones (logits / temperature). Take "
                        "the threshold from the very tensor you mask, its k-th largest value."
                    )
        if not torch.equal(kept, want.cpu()):
            named = None if top_k is None else _kept_count(kept, logits, top_k)
            return named or (
                f"keeps other tokens than the {top_k or 'all'} largest logits of each row "
                f"({int(kept.sum(dim=-1).max())} nonzero in some row, "
                f"{int(want.sum(dim=-1).max())} expected)."
            )
        sharper = _sharpness(a, logits, temperature)
        if sharper:
            return f"keeps the right tokens, but its probabilities are {sharper}"
        return (
            "keeps the right tokens, but their probabilities are not in the proportions exp(logit / T): "
            f"softmax(logits / temperature) with temperature={temperature}."
        )

    return diagnose


def _kept_count(kept: torch.Tensor, logits: torch.Tensor, top_k: int) -> str | None:
    """How a kept set that is each row's r largest (or smallest) logits differs from the top k."""
    vocab = logits.shape[-1]
    order = logits.detach().cpu().argsort(dim=-1, descending=True)  # (b, vocab)
    ranked = kept.cpu().gather(-1, order)  # (b, vocab): kept, from the largest logit down
    counts = {int(n) for n in ranked.sum(dim=-1)}
    if len(counts) != 1:
        return None
    r = counts.pop()
    top, bottom = bool(ranked[:, :r].all()), bool(ranked[:, vocab - r :].all())
    shown = f"{r} token{'s' if r != 1 else ''} per row where top_k={top_k} keeps {top_k}"
    kth = "the k-th largest logit, torch.topk(logits, k, dim=-1).values[:, -1:] (the last of the k)"
    if bottom and not top:
        return (
            f"keeps the smallest logits ({shown}), not the largest: keep the logits at or above {kth}, "
            "and mask those below it."
        )
    if not top:
        return None
    if r == 1 and top_k > 1:
        return (
            f"keeps only the largest logit ({shown}): its threshold is the largest logit "
            f"(values[:, 0] or values[:, :1]), top-1 whatever k is. The threshold is {kth}."
        )
    if r == top_k - 1 or r == top_k + 1:
        return (
            f"keeps {'one token too few' if r < top_k else 'one token too many'} ({shown}): an off-by-one "
            f"in the threshold. Keep every logit at or above {kth}; mask only those below it (<, not <=)."
        )
    if r == vocab - top_k + 1:
        return (
            f"keeps too many tokens ({shown}): every logit at or above the k-th SMALLEST, the threshold "
            "that topk(..., largest=False) or an ascending sort gives. Take the threshold from the other "
            f"end: {kth}."
        )
    return (
        f"keeps the {r} largest logits ({shown}), too {'many' if r > top_k else 'few'}: keep those at or "
        f"above {kth}."
    )


@check
def check_next_token_probs(candidate: Callable[..., Any]) -> str:
    """Logits (4, 10) at 6 (temperature, top_k) pairs, exactly; top-k with ties at the k-th logit; a low
    temperature on float32 logits; then the cases of PROBS_CONTRACT and a run on the meta device."""
    logits = 2 * randn(4, _VOCAB)  # (b, vocab)
    for temperature, top_k in _PROBS_CASES:
        shown = f"next_token_probs(logits, {temperature}, {top_k}) for logits of shape (4, {_VOCAB})"
        got = call("next_token_probs", candidate, logits, temperature, top_k, hint=_PROBS_SIGNATURE)
        want = reference.next_token_probs(logits, temperature, top_k)  # (b, vocab)
        what = f"The result of {shown}"
        out = expect_tensor(got, want.shape, what, finite=False)
        mistakes = [
            Mistake(message, lambda v=variant, t=temperature, k=top_k: _probs(logits, t, k, v))
            for message, variant in _PROBS_MISTAKES
        ]
        diagnose = _diagnose_probs(logits, temperature, top_k)
        expect_close(out, want, what, mistakes=mistakes, diagnose=diagnose, called_as="")
    _expect_ties_handled(candidate)
    _expect_low_temperature(candidate)
    exercise = Exercise(
        "next_token_probs",
        lambda case: (candidate, reference.next_token_probs),
        after=lambda case: (_GENERATED_TEMPERATURE, case.size["k"]),
        alloc=_logits,
        diagnose=lambda case, called: _diagnose_probs(called[0][0], *called[0][1:3]),
    )
    generated = expect_contract_cases(PROBS_CONTRACT, exercise, contract_cases(PROBS_CONTRACT))
    generated += expect_inputs_device(PROBS_CONTRACT, exercise)
    return (
        f"{len(_PROBS_CASES)} temperatures and top-k (k = 1 … vocab_size), ties at the k-th logit, a low "
        "temperature on float32 logits; "
        f"{generated} more from the exercise's contract (one row, k = 1 and vocab_size, float32 and float64, "
        "views, on another device)"
    )


_GENERATED_TEMPERATURE = 0.7
"""The temperature of every generated case of next_token_probs."""


def _logits(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """Seeded logits of a trained model's spread (a few units), in the case's dtype."""
    return lambda *shape: randn(*shape, dtype=case.dtype, scale=3.0)


def _expect_low_temperature(candidate: Callable[..., Any]) -> None:
    """At temperature 0.1, float32 logits of a trained model's size give logits / T past 88, where exp
    overflows float32: only a softmax that subtracts each row's maximum first stays finite."""
    logits = randn(4, _VOCAB, dtype=torch.float32, scale=10.0)  # (b, vocab)
    temperature = 0.1
    what = f"The result of next_token_probs(logits, {temperature}, None) for float32 logits (4, {_VOCAB})"
    got = call("next_token_probs", candidate, logits, temperature, None, hint=_PROBS_SIGNATURE)
    probs = expect_tensor(got, logits.shape, what, finite=False)  # (b, vocab)
    finite = torch.isfinite(probs.detach().cpu()).all(dim=-1)  # (b,)
    if not finite.all():
        overflows = torch.isinf(torch.exp(logits / temperature)).any(dim=-1)  # (b,)
        rows = (~finite).nonzero().flatten().tolist()
        largest = float((logits / temperature).amax())
        if torch.equal(~finite, overflows):
            raise CheckFailed(
                f"{what} has NaN or inf in rows {rows}: exactly the rows where exp(logits / temperature) "
                f"overflows float32 (logits / temperature reach {largest:.0f}, and exp of anything above 88 "
                "is inf in float32). Take the softmax with torch.softmax, or subtract each row's maximum "
                "before exp: a low temperature makes the scaled logits large."
            )
        raise CheckFailed(
            f"{what} has NaN or inf in rows {rows}, where softmax(logits / temperature) is finite."
        )
    want = reference.next_token_probs(logits, temperature, None)  # (b, vocab)
    expect_close(probs, want, what, diagnose=_diagnose_probs(logits, temperature, None), called_as="")


def _expect_ties_handled(candidate: Callable[..., Any]) -> None:
    """With ties at the k-th largest logit, every tied token is kept (the contract: ties kept)."""
    logits = torch.tensor(
        [[3.0, 1.0, 1.0, 1.0, 0.0, -1.0], [2.0, 2.0, 2.0, 0.0, 0.5, 1.0]], dtype=torch.float64
    )
    temperature, top_k = 0.8, 2
    what = f"next_token_probs(logits, {temperature}, {top_k}) with ties at the 2nd largest logit"
    got = call("next_token_probs", candidate, logits, temperature, top_k, hint=_PROBS_SIGNATURE)
    probs = expect_tensor(got, logits.shape, f"The result of {what}").detach().to("cpu", torch.float64)
    kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (b, 1)
    kept = probs > 0  # (b, vocab)
    for row in range(logits.shape[0]):
        support = kept[row]
        must = logits[row] > kth[row]
        may = logits[row] >= kth[row]
        if support[must].all() and not support[~may].any() and not support[may].all():
            tied = int((logits[row] == kth[row]).sum())
            kept_tied = int((support & (logits[row] == kth[row])).sum())
            raise CheckFailed(
                f"The result of {what} keeps {kept_tied} of the {tied} tokens of row {row} tied at the "
                f"k-th largest logit (logits {logits[row].tolist()}): keep every token whose logit equals "
                "the k-th largest (ties kept), so that which tokens survive does not depend on where they "
                "stand in the vocabulary, as top-k's indices (k of them, ties broken by position) do."
            )
        if not (support[must].all() and not support[~may].any() and int(support.sum()) >= top_k):
            raise CheckFailed(
                f"The result of {what} keeps tokens {support.nonzero().flatten().tolist()} of row {row} "
                f"(logits {logits[row].tolist()}): keep every logit larger than the k-th largest, and "
                "all those equal to it."
            )
        expected = torch.softmax(logits[row][support] / temperature, dim=-1)  # (kept,)
        if not torch.allclose(probs[row][support], expected, atol=1e-5):
            raise CheckFailed(
                f"The result of {what} has row {row} {probs[row].tolist()}: the kept tokens' probabilities "
                "should be softmax(logits / temperature) over the kept tokens, summing to 1."
            )


# ---------------------------------------------------------------------------------------------
# sample_next

_DRAWS = 10_000
"""Draws per row: each frequency must lie within 6 standard deviations of its probability."""


def _close_in_distribution(frequencies: torch.Tensor, probs: torch.Tensor) -> bool:
    """Whether observed frequencies (rows of _DRAWS draws) fit `probs` within 6σ, zeros exactly."""
    f, p = frequencies.to(torch.float64), probs.detach().to("cpu", torch.float64)
    if f.shape != p.shape or not torch.isfinite(p).all():
        return False
    sigma = (torch.clamp(p * (1 - p), min=1 / _DRAWS) / _DRAWS).sqrt()
    return bool(((f - p).abs() <= 6 * sigma).all()) and bool((f[p == 0] == 0).all())


_SAMPLE_SIGNATURE = (
    "The signature is sample_next(logits, temperature, top_k, generator): draw one token per row "
    "from next_token_probs(logits, temperature, top_k) with torch.multinomial(probs, 1, "
    "generator=generator), which needs probabilities (non-negative), not logits."
)


def _sampled(
    candidate: Callable[..., Any], logits: torch.Tensor, temperature: float, top_k: int | None, seed: int
) -> torch.Tensor:
    """The candidate's draws for _DRAWS copies of each row of logits, (_DRAWS, b)."""
    b, vocab = logits.shape
    many = logits.repeat(_DRAWS, 1)  # (draws · b, vocab): row i is logits[i % b]
    generator = torch.Generator().manual_seed(seed)
    shown = f"sample_next(logits, {temperature}, {top_k}, generator) for logits of shape {tuple(many.shape)}"
    got = call("sample_next", candidate, many, temperature, top_k, generator, hint=_SAMPLE_SIGNATURE)
    hints = {
        (_DRAWS * b,): "Keep the sample axis: torch.multinomial(probs, 1) gives (b, 1); do not squeeze it.",
        (_DRAWS * b, vocab): "Return the drawn token ids (b, 1), not probabilities or logits.",
    }
    draws = expect_tensor(got, (_DRAWS * b, 1), f"The result of {shown}", hints=hints)
    if draws.is_floating_point() or draws.dtype == torch.bool:
        raise CheckFailed(
            f"The result of {shown} has dtype {draws.dtype}: token ids are integers (torch.long), as "
            "torch.multinomial returns them."
        )
    if bool((draws < 0).any()) or bool((draws >= vocab).any()):
        raise CheckFailed(f"The result of {shown} holds ids outside 0 … {vocab - 1}: draw token ids.")
    return draws.view(_DRAWS, b)  # (draws, b)


def _frequencies(draws: torch.Tensor, vocab: int) -> torch.Tensor:
    """(draws, b) token ids -> (b, vocab) relative frequencies."""
    counts = [torch.bincount(draws[:, row].cpu(), minlength=vocab) for row in range(draws.shape[1])]
    return torch.stack(counts).to(torch.float64) / draws.shape[0]  # (b, vocab)


_SAMPLE_CASES: list[tuple[str, float, int | None]] = [
    ("positive", 1.0, None),
    ("normal", 0.7, 4),
    ("normal", 1.6, None),
]
"""(logits, temperature, top_k): positive logits first (where sampling the logits runs), then top-k."""


@check
def check_sample_next(candidate: Callable[..., Any]) -> str:
    """10,000 draws per row at 3 settings: frequencies within 6σ of next_token_probs; the generator used;
    then the cases of SAMPLE_CONTRACT (top_k = 1: every right draw is the argmax)."""
    vocab = 8
    for kind, temperature, top_k in _SAMPLE_CASES:
        logits = (
            (0.5 + 3 * torch.rand(3, vocab, dtype=torch.float64))
            if kind == "positive"
            else 1.5 * randn(3, vocab)
        )
        draws = _sampled(candidate, logits, temperature, top_k, seed=1234)
        again = _sampled(candidate, logits, temperature, top_k, seed=1234)
        if not torch.equal(draws, again):
            raise CheckFailed(
                "sample_next drew different tokens from two generators seeded alike: it ignores `generator`. "
                "Pass it on, torch.multinomial(probs, 1, generator=generator), so that a seed makes a "
                "generation reproducible."
            )
        frequencies = _frequencies(draws, vocab)  # (b, vocab)
        want = reference.next_token_probs(logits, temperature, top_k)  # (b, vocab)
        mistakes = [
            Mistake(
                "sample the logits, not the probabilities: torch.multinomial treats its input as weights, "
                "so pass next_token_probs(logits, temperature, top_k), the softmax.",
                lambda logits=logits: logits / logits.sum(dim=-1, keepdim=True),
            ),
            Mistake(
                "always pick the most likely token (an argmax), which is greedy decoding: draw at random, "
                "torch.multinomial(probs, 1, generator=generator).",
                lambda want=want: torch.nn.functional.one_hot(want.argmax(dim=-1), vocab).to(torch.float64),
            ),
            Mistake(
                "ignore the temperature: draw from next_token_probs(logits, temperature, top_k).",
                lambda logits=logits, k=top_k: reference.next_token_probs(logits, 1.0, k),
            ),
            Mistake(
                "ignore top_k: draw from next_token_probs(logits, temperature, top_k).",
                lambda logits=logits, t=temperature: reference.next_token_probs(logits, t, None),
            ),
        ]
        what = f"Your sample_next's draws ({_DRAWS:,} per row, temperature={temperature}, top_k={top_k})"
        expect_close(
            frequencies,
            want,
            what,
            mistakes=mistakes,
            close=_close_in_distribution,
            diagnose=_diagnose_draws(frequencies, want, draws, logits, temperature),
            called_as="",
        )
        other = _sampled(candidate, logits, temperature, top_k, seed=4321)
        if torch.equal(draws, other):
            raise CheckFailed(
                "sample_next drew the same tokens from generators seeded 1234 and 4321: it does not draw "
                "from `generator` (a seed set inside, or a fixed draw). Pass it on, torch.multinomial(probs, "
                "1, generator=generator), and set no seed yourself."
            )
    exercise = Exercise(
        "sample_next",
        lambda case: (candidate, reference.sample_next),
        after=lambda case: (_GENERATED_TEMPERATURE, 1, torch.Generator().manual_seed(1234)),
        alloc=_logits,
    )
    generated = expect_contract_cases(SAMPLE_CONTRACT, exercise, contract_cases(SAMPLE_CONTRACT))
    return (
        f"{_DRAWS:,} draws per row at 3 temperatures and top-k fit the probabilities; seeds reproduce; "
        f"{generated} more from the exercise's contract (one row, float32 and float64, views)"
    )


def _diagnose_draws(
    frequencies: torch.Tensor,
    probs: torch.Tensor,
    draws: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> Callable[..., str | None]:
    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        if draws is not None and draws.shape[1] > 1 and bool((draws == draws[:, :1]).all()):
            return (
                "hold the same token in every row of the batch at each draw: one draw is shared by all rows. "
                "Draw one token per row, torch.multinomial(probs, 1) on the (b, vocab) probabilities."
            )
        if draws is not None and bool((draws == draws[:1]).all()) and bool((probs < 1).all()):
            return (
                f"give each row the same token in all {draws.shape[0]:,} of its copies in the batch: one "
                "random number serves the whole batch (or a draw is not random). Each row needs a draw of "
                "its own, torch.multinomial(probs, 1, generator=generator), one per row."
            )
        outside = (frequencies > 0) & (probs.cpu() == 0)
        if outside.any():
            row, token = (int(i) for i in outside.nonzero()[0])
            share = float(frequencies[probs.cpu() == 0].sum() / frequencies.shape[0])
            return (
                f"include token {token} in row {row}, which has probability 0 (outside the top k): "
                f"{share:.1%} of the draws fall outside the top k. Mask those logits with -inf first."
            )
        if logits is not None:
            sharper = _sharpness(frequencies, logits, temperature, counts=_DRAWS)
            if sharper:
                return f"are {sharper}"
        gap = (frequencies - probs.cpu()).abs()
        row, token = (int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
        sigma = math.sqrt(max(float(probs[row, token]) * (1 - float(probs[row, token])), 1 / _DRAWS) / _DRAWS)
        return (
            f"do not fit the probabilities: token {token} of row {row} was drawn with frequency "
            f"{float(frequencies[row, token]):.4f} for a probability of {float(probs[row, token]):.4f}, "
            f"{float(gap[row, token]) / sigma:.0f} standard deviations away. A draw picks token i with "
            "probability probs[i], which torch.multinomial(probs, 1, generator=generator) does; an argmax "
            "(of noisy probabilities too) or a draw from other weights does not."
        )

    return diagnose


# ---------------------------------------------------------------------------------------------
# generate_with_cache

_GEN_CONFIG = DecoderConfig(vocab_size=13, n_layers=2, n_heads=2, d_model=16, d_mlp=24)


class _StepInputError(ValueError):
    """model.step called with token ids that are not (b, t_new)."""


class _Watched:
    """The model as the learner's generate_with_cache sees it, recording every call."""

    def __repr__(self) -> str:
        return "<the model>"

    def __init__(self, model: TinyDecoder) -> None:
        self.model, self.config = model, model.config
        self.steps: list[int] = []  # t_new of each model.step call
        self.forwards = 0

    def step(self, idx: torch.Tensor, cache: Any, attend: Any = reference.cached_attention) -> torch.Tensor:
        """The model's cached step, recorded."""
        if isinstance(idx, torch.Tensor) and idx.dim() != 2:
            raise _StepInputError(
                f"model.step(idx, cache, attend) expects token ids of shape (b, t_new), got "
                f"{tuple(idx.shape)}: feed the token just picked as pick returns it, (b, 1) "
                "(tokens[:, -1] drops the time axis; tokens[:, -1:] keeps it)."
            )
        self.steps.append(int(idx.shape[-1]))
        return self.model.step(idx, cache, attend)  # (b, t_new, vocab_size)

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        """The model on a whole sequence, without the cache, recorded."""
        self.forwards += 1
        return self.model(idx)  # (b, t, vocab_size)

    forward = __call__


Choose = Callable[[torch.Tensor], torch.Tensor]


def _second_best(logits: torch.Tensor) -> torch.Tensor:
    """A deterministic pick that is not greedy: the second most likely token of each row, (b, 1)."""
    return logits.topk(2, dim=-1).indices[:, 1:]  # (b, 1)


def _seeded_sampler(seed: int) -> Choose:
    """A pick that samples from softmax(logits) with its own seeded generator, (b, 1)."""
    generator = torch.Generator().manual_seed(seed)
    return lambda logits: torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


_PICKS: list[tuple[str, Callable[[], Choose]]] = [
    ("the most likely token (greedy)", lambda: greedy),
    ("the second most likely token", lambda: _second_best),
    ("a sample from its own seeded generator", lambda: _seeded_sampler(7)),
]
"""(what the pick does, a fresh pick): greedy first, then picks that argmax would not reproduce."""


def _watched_pick(
    b: int, vocab: int, picks: list[torch.Tensor], choose: Choose, chosen: list[torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    def pick(logits: torch.Tensor) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (b, vocab):
            shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            if shape == (b, 1, vocab):
                why = " Slicing [:, -1:] keeps a time axis of length 1: take the last position with [:, -1]."
            elif shape == (vocab,) and b == 1:
                why = (
                    " The batch axis, of size 1 for one sequence, is gone (a .squeeze() drops every "
                    "axis of size 1): take the last position with [:, -1], or .squeeze(1) for the time "
                    "axis alone."
                )
            else:
                why = " Take the logits of the last position, model.step(...)[:, -1]."
            raise ValueError(f"pick(logits) expects logits of shape {(b, vocab)}, got {shape}.{why}")
        picks.append(logits.detach().clone())
        token = choose(logits)  # (b, 1)
        chosen.append(token.clone())
        return token

    return pick


_GEN_SIGNATURE = (
    "The signature is generate_with_cache(model, prompt, n_new, pick, cache, attend): run "
    "model.step(prompt, cache, attend) once, then model.step(next_token, cache, attend) for each new "
    "token; pick(logits (b, vocab_size)) returns the next tokens (b, 1)."
)


@check
def check_generate_with_cache(candidate: Callable[..., Any]) -> str:
    """Generation from a random float64 model with 3 picks, token-exact, and model.step's calls counted;
    then the cases of GENERATE_CONTRACT and a run on the meta device."""
    model = TinyDecoder(_GEN_CONFIG).double()
    for b, t, n_new in [(3, 5, 6), (2, 4, 1)]:
        _expect_generation(candidate, model, b, t, n_new, *_PICKS[0])
    for label, make in _PICKS[1:]:
        _expect_generation(candidate, model, 3, 4, 5, label, make)
    exercise = Exercise(
        "generate_with_cache",
        functools.partial(_generations, candidate, model),
        positional=0,
        after=lambda case: (_Shown("model"),),
        extra=lambda case, tensors: {
            "n_new": _GENERATED_N_NEW,
            "pick": _Shown("<a pick of the second most likely token>"),
            "cache": _Shown("KVCache()"),
            "attend": _Shown("cached_attention"),
        },
        alloc=_prompts,
    )
    generated = expect_contract_cases(GENERATE_CONTRACT, exercise, contract_cases(GENERATE_CONTRACT))
    generated += expect_inputs_device(GENERATE_CONTRACT, exercise)
    return (
        "tokens match with a greedy pick, a second-best pick and a seeded sampler; one prefill of the "
        f"prompt, then one new token per model.step; {generated} more from the exercise's contract (one "
        "sequence, a one-token prompt, a sliced or expanded prompt, on another device)"
    )


def _prompts(case: Case, arg: Arg) -> Callable[..., torch.Tensor]:
    """Random token ids of the check's model."""
    return lambda *shape: torch.randint(0, _GEN_CONFIG.vocab_size, shape)


class _Shown:
    """An argument as a message shows it; the generated cases put the real one in its place."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _generations(
    candidate: Callable[..., Any], model: TinyDecoder, case: Case
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The learner's and the course's generation for a generated case: the model (a copy on PyTorch's
    meta device for that case), a pick of the second most likely token, a fresh cache each."""
    on = copy.deepcopy(model).to("meta") if case.changed == "meta" else model
    vocab = _GEN_CONFIG.vocab_size

    @torch.no_grad()
    def learners(_: Any, prompt: torch.Tensor, n_new: int, **shown: Any) -> Any:
        pick = _watched_pick(prompt.shape[0], vocab, [], _second_best, [])
        return candidate(on, prompt, n_new, pick, reference.KVCache(), reference.cached_attention)

    def course(_: Any, prompt: torch.Tensor, n_new: int, **shown: Any) -> torch.Tensor:
        return reference.generate_with_cache(on, prompt, n_new, _second_best, reference.KVCache())

    return learners, course


def _expect_generation(
    candidate: Callable[..., Any],
    model: TinyDecoder,
    b: int,
    t: int,
    n_new: int,
    label: str,
    make: Callable[[], Choose],
) -> None:
    vocab = _GEN_CONFIG.vocab_size
    prompt = torch.randint(0, vocab, (b, t))  # (b, t)
    watched, picks, attended = _Watched(model), list[torch.Tensor](), list[int]()
    chosen = list[torch.Tensor]()
    cache = reference.KVCache()

    def attend(attn: Any, x: torch.Tensor, cache: Any, layer: int) -> torch.Tensor:
        attended.append(layer)
        return reference.cached_attention(attn, x, cache, layer)  # (b, t_new, d_model)

    pick = _watched_pick(b, vocab, picks, make(), chosen)
    shown = (
        f"generate_with_cache(model, prompt, {n_new}, pick, cache, attend) for a prompt of shape {(b, t)} "
        f"and a pick that takes {label}"
    )
    with torch.no_grad():
        got = call(
            "generate_with_cache", candidate, watched, prompt, n_new, pick, cache, attend, hint=_GEN_SIGNATURE
        )
        want = reference.generate_with_cache(model, prompt, n_new, make(), reference.KVCache())
        full = model(want)  # (b, t + n_new, vocab_size)
        argmax = reference.generate_with_cache(model, prompt, n_new, greedy, reference.KVCache())
    hints: dict[tuple[int, ...], str] = {
        (b, t + n_new - 1): "One token short: pick and append n_new tokens.",
        (b, t + n_new + 1): "One token too many: pick and append n_new tokens.",
        (b, n_new): "Return the prompt followed by the new tokens, torch.cat([prompt, new], dim=1).",
    }
    tokens = expect_tensor(got, (b, t + n_new), f"The result of {shown}", hints=hints)
    if watched.forwards:
        raise CheckFailed(
            f"{shown} ran the whole model, model(tokens), {watched.forwards} times: generate with the "
            "cache, model.step(prompt, cache, attend) once and then model.step(next_token, cache, attend)."
        )
    steps = watched.steps
    if steps and steps[0] == 1 and t > 1 and len(steps) <= n_new:  # the prompt's last token only
        raise CheckFailed(
            f"{shown} prefilled the cache with 1 position where the prompt has {t}: model.step got "
            f"{steps} new positions, so the cache never held the prompt's first {t - 1} tokens. Prefill "
            "with the whole prompt, model.step(prompt, cache, attend), then one new token per step."
        )
    if steps and steps[0] == 1 and t > 1:
        raise CheckFailed(
            f"{shown} fed the prompt one token at a time (model.step got {steps[:t]} new positions): "
            "prefill it in one call, model.step(prompt, cache, attend), which fills the cache with all of "
            "it at once."
        )
    if any(n > 1 for n in steps[1:]):
        raise CheckFailed(
            f"{shown} re-fed the sequence: model.step got {steps} new positions per call, but the cache "
            "already holds everything before the newest token. After the prefill, feed only the token "
            "just picked, (b, 1)."
        )
    if not attended:
        raise CheckFailed(f"{shown} did not pass `attend` on: call model.step(idx, cache, attend).")
    if steps and steps[0] == t and len(steps) == n_new + 1:
        raise CheckFailed(
            f"{shown} fed the last token to the model too: model.step ran {len(steps)} times, the prefill "
            f"and one step per new token. Nothing reads the logits of the last token, so that step is a "
            f"whole pass of the model for nothing: stop after picking it, {n_new} calls in all (the prefill, "
            "then each new token but the last)."
        )
    if not (steps and steps[0] == t and len(steps) == n_new):
        raise CheckFailed(
            f"{shown} called model.step {len(steps)} times, with {steps} new positions: once for the "
            f"prompt ({t}), then once with each new token but the last, {n_new} calls in all."
        )
    if cache.length(0) < t + n_new - 1:
        raise CheckFailed(
            f"After {shown} the cache it was given holds {cache.length(0)} positions, {t + n_new - 1} "
            "expected: pass `cache` to model.step, do not make a new one."
        )
    if picks:
        first = picks[0]
        expect_close(
            first,
            full[:, t - 1],
            f"The logits that {shown} gave pick first",
            mistakes=[
                Mistake(
                    "are those of the prompt's first position: pick from the last one, "
                    "model.step(prompt, cache, attend)[:, -1].",
                    lambda: full[:, 0],
                )
            ],
            called_as="",
        )
    expect_close(
        tokens.cpu(),
        want,
        f"The tokens of {shown}",
        diagnose=_diagnose_tokens(tokens.cpu(), want, t, argmax, chosen, picks),
        called_as="",
    )


def _diagnose_tokens(
    tokens: torch.Tensor,
    want: torch.Tensor,
    t: int,
    argmax: torch.Tensor,
    chosen: list[torch.Tensor],
    picks: Sequence[torch.Tensor] = (),
) -> Callable[..., str | None]:
    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        repeated = sum(torch.equal(a, b) for a, b in zip(picks, picks[1:], strict=False))
        if len(picks) > 2 and repeated >= max(2, len(picks) // 3):  # logits repeated from step to step
            return (
                "gave pick the same logits at step after step, the prefill's: keep what each "
                "model.step returns, logits = model.step(next_token, cache, attend)[:, -1], for the next "
                "pick."
            )
        if not torch.equal(tokens[:, :t], want[:, :t]):
            return "do not start with the prompt: return torch.cat([prompt, new_tokens], dim=1)."
        new = tokens[:, t:]  # (b, n_new)
        ignored = (
            "show that it ignores the pick it was given: {}. Append the token that pick returns, "
            "next_token = pick(logits), at each step."
        )
        if not chosen:
            return ignored.format("pick was never called")
        if not torch.equal(want, argmax) and torch.equal(tokens, argmax):
            return ignored.format("they are the argmax of the logits, greedy decoding")
        returned = torch.cat(chosen, dim=1).cpu()[:, : new.shape[1]]  # (b, ≤ n_new)
        if not torch.equal(new[:, : returned.shape[1]], returned):
            return ignored.format("they are not the tokens that pick returned")
        wrong = (tokens != want).any(dim=0).nonzero().flatten()
        return (
            f"differ from generation with this pick from position {int(wrong[0])} on (the prompt has {t}): "
            "append each token that pick returns and feed it to the next model.step."
        )

    return diagnose
