"""The checks of generation and sampling (notebook 07): learner mistakes named, right answers kept."""
# ruff: noqa: E501  (tables of learner code edits, one case a line)

from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_code import GENERATE, PROBS, SAMPLE, learner

from attn_course import reference
from attn_course.checks import check_generate_with_cache, check_next_token_probs, check_sample_next

SCALE = "    logits = logits / temperature\n"
SOFTMAX = "return torch.softmax(logits, dim=-1)"
DRAW = "return torch.multinomial(probs, num_samples=1, generator=generator)"
STEP = "logits = model.step(next_token, cache, attend)"
PREFILL = "logits = model.step(prompt, cache, attend)"
PICK = "next_token = pick(logits[:, -1])"
KTH = "torch.topk(logits, top_k, dim=-1).values[:, -1:]"
SCATTER = (
    (SCALE + "    if top_k is not None:\n", SCALE + "    if top_k is None:\n        return F.softmax(logits, dim=-1)\n"
     "    if True:\n"),
    ("        threshold = torch.topk(logits, top_k, dim=-1).values[:, -1:]\n"
     '        logits = logits.masked_fill(logits < threshold, float("-inf"))\n',
     "        top = logits.topk(top_k, dim=-1)\n"
     "        return torch.zeros_like(logits).scatter(-1, top.indices, F.softmax(top.values, dim=-1))\n"),
)  # fmt: skip
INVERSE_CDF = (
    DRAW,
    "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)\n"
    "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True).clamp(max=probs.shape[-1] - 1)",
)
GUMBEL = (
    DRAW,
    "noise = -torch.log(-torch.log(torch.rand(probs.shape, generator=generator, dtype=probs.dtype)))\n"
    "    return (probs.log() + noise).argmax(dim=-1, keepdim=True)",
)

APPEND = "tokens = torch.cat([tokens, next_token], dim=1)"
PREALLOCATED = (
    "    b, t = prompt.shape\n    tokens = torch.zeros(b, t + n_new{})\n    tokens[:, :t] = prompt\n"
)
TOP_K_LINES = (
    "        threshold = torch.topk(logits, top_k, dim=-1).values[:, -1:]\n"
    '        logits = logits.masked_fill(logits < threshold, float("-inf"))\n'
)

WRONG = [
    pytest.param("next_token_probs", PROBS, [(SCALE, ""), (SOFTMAX, SOFTMAX + " ** (1 / temperature)")],
                 "applies the temperature after the softmax", id="probs-power-after-softmax"),
    pytest.param("next_token_probs", PROBS, [(SCALE, ""), (SOFTMAX, SOFTMAX + " / temperature")],
                 "divides the probabilities by the temperature", id="probs-divided-after-softmax"),
    pytest.param("next_token_probs", PROBS, [("logits / temperature", "logits * temperature")],
                 "multiplies the logits by the temperature", id="probs-temperature-multiplied"),
    pytest.param("next_token_probs", PROBS, [(SCALE, "")], "ignores the temperature", id="probs-no-temperature"),
    pytest.param("next_token_probs", PROBS, [("logits < threshold", "logits <= threshold")],
                 "keeps k - 1 tokens", id="probs-top-k-minus-one"),
    pytest.param("next_token_probs", PROBS, [("top_k, dim=-1)", "top_k + 1, dim=-1)")],
                 "keeps k + 1 tokens", id="probs-top-k-plus-one"),
    pytest.param("next_token_probs", PROBS, [('float("-inf")', "0.0")],
                 "sets the logits outside the top k to 0", id="probs-masked-to-zero"),
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "return logits")],
                 "returns logits, not probabilities", id="probs-returns-logits"),
    pytest.param("next_token_probs", PROBS,
                 [('        logits = logits.masked_fill(logits < threshold, float("-inf"))\n    ' + SOFTMAX,
                   "        return torch.softmax(logits, dim=-1).masked_fill(logits < threshold, 0.0)\n    " + SOFTMAX)],
                 "without renormalising", id="probs-not-renormalised"),
    pytest.param("next_token_probs", PROBS, [("if top_k is not None:", "if False:")],
                 "ignores top_k", id="probs-no-top-k"),
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "return torch.softmax(logits, dim=0)")],
                 "rows that do not sum to 1", id="probs-softmax-wrong-axis"),
    pytest.param("sample_next", SAMPLE, [("torch.multinomial(probs,", "torch.multinomial(logits,")],
                 "sample the logits, not the probabilities", id="sample-logits"),
    pytest.param("sample_next", SAMPLE, [(DRAW, "return probs.argmax(dim=-1, keepdim=True)")],
                 "always pick the most likely token", id="sample-argmax"),
    pytest.param("sample_next", SAMPLE, [(", generator=generator)", ")")],
                 "ignores `generator`", id="sample-generator-unused"),
    pytest.param("sample_next", SAMPLE, [(DRAW, DRAW + ".squeeze(-1)")], "Keep the sample axis", id="sample-squeezed"),
    pytest.param("sample_next", SAMPLE, [("probs = next_token_probs(logits, temperature, top_k)",
                                          "probs = next_token_probs(logits, 1.0, top_k)")],
                 "ignore the temperature", id="sample-no-temperature"),
    pytest.param("sample_next", SAMPLE, [("probs = next_token_probs(logits, temperature, top_k)",
                                          "probs = next_token_probs(logits, temperature, None)")],
                 "ignore top_k", id="sample-no-top-k"),
    pytest.param("sample_next", SAMPLE, [(DRAW, "return probs")], "Return the drawn token ids", id="sample-probs"),
    pytest.param("sample_next", SAMPLE, [(DRAW, DRAW + ".float()")], "token ids are integers", id="sample-float"),
    pytest.param("sample_next", SAMPLE, [("logits = logits / temperature", "logits = logits / temperature ** 2")],
                 # the slip is in next_token_probs, which sample_next calls: that exercise is named, not this one
                 "your `next_token_probs` (earlier in this notebook) is wrong", id="sample-temperature-squared"),
    pytest.param("sample_next", SAMPLE, [(DRAW, "torch.manual_seed(0)\n    " + DRAW.replace(", generator=generator", ""))],
                 "drew the same tokens from generators seeded 1234 and 4321", id="sample-seeds-itself"),
    # How the distribution differs, when no known mistake matches (issue 27, family 3).
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "return torch.softmax(logits / temperature, dim=-1)")],
                 "its probabilities are sharper than softmax(logits / 0.5): they fit a temperature of 0.25",
                 id="probs-temperature-twice"),
    pytest.param("next_token_probs", PROBS, [("logits / temperature", "logits / temperature ** 0.5")],
                 "flatter than softmax(logits / 0.5)", id="probs-root-temperature"),
    pytest.param("sample_next", SAMPLE, [("probs = next_token_probs(logits, temperature, top_k)",
                                          "probs = next_token_probs(logits * temperature, 1.0, top_k)")],
                 "multiplies the logits by the temperature instead of dividing", id="sample-temperature-inverted"),
    pytest.param("sample_next", SAMPLE, [(DRAW, DRAW.replace("(probs,", "(probs[:1],") + ".expand(probs.shape[0], 1)")],
                 "hold the same token in every row of the batch", id="sample-one-draw-for-the-batch"),
    pytest.param("sample_next", SAMPLE, [("probs = next_token_probs(logits, temperature, top_k)",
                                          "probs = next_token_probs(logits, temperature, top_k and top_k + 1)")],
                 "of the draws fall outside the top k", id="sample-top-k-plus-one"),
    pytest.param("generate_with_cache", GENERATE, [(STEP, "logits = model.step(tokens, cache, attend)")],
                 "re-fed the sequence", id="gen-refeeds-everything"),
    pytest.param("generate_with_cache", GENERATE,
                 [(PREFILL, "for j in range(prompt.shape[1]):\n        logits = model.step(prompt[:, j:j + 1], cache, attend)")],
                 "fed the prompt one token at a time", id="gen-no-prefill"),
    pytest.param("generate_with_cache", GENERATE, [("pick(logits[:, -1])", "pick(logits[:, -1:])")],
                 "keeps a time axis", id="gen-kept-time-axis"),
    pytest.param("generate_with_cache", GENERATE, [(STEP, STEP.replace("next_token", "tokens[:, -1]"))],
                 "expects token ids of shape (b, t_new), got (3,)", id="gen-flat-token"),
    pytest.param("generate_with_cache", GENERATE, [("pick(logits[:, -1])", "pick(logits[:, 0])")],
                 "the prompt's first position", id="gen-first-position"),
    pytest.param("generate_with_cache", GENERATE, [("range(n_new)", "range(n_new - 1)")],
                 "One token short", id="gen-one-short"),
    pytest.param("generate_with_cache", GENERATE, [("range(n_new)", "range(n_new + 1)")],
                 "One token too many", id="gen-one-too-many"),
    pytest.param("generate_with_cache", GENERATE, [("        if i < n_new - 1:  # the last token needs no step: nothing reads its logits\n            " + STEP, "        " + STEP)],
                 "fed the last token to the model too", id="gen-steps-the-last-token"),
    pytest.param("generate_with_cache", GENERATE, [(STEP, "new_logits = model.step(next_token, cache, attend)")],
                 "gave pick the same logits at step after step", id="gen-stale-logits"),
    pytest.param("sample_next", SAMPLE, [(DRAW, "u = torch.rand((), generator=generator, dtype=probs.dtype)\n"
                                                "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)")],
                 "one random number serves the whole batch", id="sample-one-uniform"),
    pytest.param("generate_with_cache", GENERATE, [(PREFILL, "logits = model.step(prompt[:, -1].unsqueeze(1), cache, attend)")],
                 "prefilled the cache with 1 position where the prompt has", id="gen-prefill-last-token"),
    pytest.param("next_token_probs", PROBS, [("    logits = logits / temperature\n", "    raw = logits\n    logits = logits / temperature\n"),
                                             ("threshold = torch.topk(logits,", "threshold = torch.topk(raw,")],
                 "a threshold taken from the other tensor", id="probs-threshold-before-temperature"),
    pytest.param("generate_with_cache", GENERATE, [(STEP, "logits = model(tokens)")],
                 "ran the whole model", id="gen-no-cache"),
    pytest.param("generate_with_cache", GENERATE,
                 [(PREFILL, "logits = model.step(prompt, cache)"), (STEP, "logits = model.step(next_token, cache)")],
                 "did not pass `attend` on", id="gen-attend-dropped"),
    pytest.param("generate_with_cache", GENERATE, [("    " + PREFILL, "    cache = type(cache)()\n    " + PREFILL)],
                 "do not make a new one", id="gen-own-cache"),
    pytest.param("generate_with_cache", GENERATE, [("tokens = prompt\n", "tokens = prompt[:, :0]\n")],
                 "Return the prompt followed by the new tokens", id="gen-only-new-tokens"),
    pytest.param("generate_with_cache", GENERATE, [("torch.cat([tokens, next_token]", "torch.cat([next_token, tokens]")],
                 "do not start with the prompt", id="gen-prepends"),
    pytest.param("generate_with_cache", GENERATE, [(STEP, "logits = model.step(next_token.argmax(dim=-1, keepdim=True) * 0, cache, attend)")],
                 "differ from generation with this pick from position", id="gen-feeds-another-token"),
    # Cases that cover the contract: a pick that is not argmax (a second-best pick, a seeded sampler).
    pytest.param("generate_with_cache", GENERATE, [(PICK, "next_token = logits[:, -1].argmax(dim=-1, keepdim=True)")],
                 "ignores the pick it was given", id="gen-argmax-not-pick"),
    pytest.param("generate_with_cache", GENERATE, [(PICK, "next_token = torch.topk(logits[:, -1], 1, dim=-1).indices")],
                 "ignores the pick it was given", id="gen-topk-1-not-pick"),
    pytest.param("generate_with_cache", GENERATE, [(PICK, "next_token = logits[:, -1].max(dim=-1, keepdim=True).indices")],
                 "ignores the pick it was given", id="gen-max-indices-not-pick"),
    pytest.param("generate_with_cache", GENERATE, [("torch.cat([tokens, next_token], dim=1)", "torch.cat([tokens, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)")],
                 "they are not the tokens that pick returned", id="gen-appends-argmax-feeds-pick"),
    # How the kept set of top-k differs: too many, too few, the wrong end (issue 27, family 3).
    pytest.param("next_token_probs", PROBS, [("torch.topk(logits, top_k, dim=-1)", "torch.topk(logits, top_k, dim=-1, largest=False)")],
                 "every logit at or above the k-th SMALLEST", id="probs-kth-smallest"),
    pytest.param("next_token_probs", PROBS, [(KTH, "logits.sort(dim=-1).values[:, top_k - 1:top_k]")],
                 "every logit at or above the k-th SMALLEST", id="probs-ascending-sort"),
    pytest.param("next_token_probs", PROBS, [(KTH, "torch.topk(logits, top_k, dim=-1).values[:, :1]")],
                 "keeps only the largest logit", id="probs-threshold-largest"),
    pytest.param("next_token_probs", PROBS, [(KTH, "logits.max(dim=-1, keepdim=True).values")],
                 "keeps only the largest logit", id="probs-threshold-max"),
    pytest.param("next_token_probs", PROBS, [("logits < threshold", "logits > threshold")],
                 "keeps the smallest logits", id="probs-mask-inverted"),
    pytest.param("next_token_probs", PROBS, [(KTH, "torch.topk(logits, 2 * top_k, dim=-1).values[:, -1:]")],
                 "keeps the 6 largest logits (6 tokens per row where top_k=3 keeps 3), too many", id="probs-2k-th-largest"),
    pytest.param("next_token_probs", PROBS, [(KTH, "torch.topk(logits, top_k, dim=-1).values[:, 1:2]")],
                 "keeps k - 1 tokens, not k", id="probs-second-largest"),
    # exactly k through topk's indices: right without ties, but ties at the k-th logit are kept (the contract)
    pytest.param("next_token_probs", PROBS, list(SCATTER), "(ties kept)", id="probs-scatter-exactly-k"),
    # The exercises' contracts (issue 44): each passed the check before its generated cases.
    # One sequence (b = 1): a squeeze that drops the batch axis with the time axis.
    pytest.param("generate_with_cache", GENERATE, [(PREFILL + "\n", PREFILL + "[:, -1]\n"), (PICK, "next_token = pick(logits)"), (STEP, STEP + ".squeeze()")],
                 "got (13,). The batch axis, of size 1 for one sequence, is gone", id="gen-squeezed-logits-one-sequence"),
    pytest.param("generate_with_cache", GENERATE, [(PICK, PICK + ".squeeze()"), ("torch.cat([tokens, next_token], dim=1)", "torch.cat([tokens, next_token[:, None]], dim=1)"),
                                                   (STEP, STEP.replace("next_token", "next_token[:, None]"))],
                 "differs from them only in that it has B = 1 (a single sequence)", id="gen-squeezed-token-one-sequence"),
    # The tokens preallocated: on the default device, or as floats.
    pytest.param("generate_with_cache", GENERATE, [("    tokens = prompt\n", PREALLOCATED.format(", dtype=torch.long")), (APPEND, "tokens[:, t + i] = next_token[:, 0]")],
                 "the first tensor your code makes off that device comes from `torch.zeros(…)`", id="gen-tokens-on-the-default-device"),
    pytest.param("generate_with_cache", GENERATE, [("    tokens = prompt\n", PREALLOCATED.format(", device=prompt.device")), (APPEND, "tokens[:, t + i] = next_token[:, 0]")],
                 "Your `tokens` has dtype float32 for int64 inputs", id="gen-float-tokens"),
    # float64 inside, not cast back: the model's logits are float32.
    pytest.param("next_token_probs", PROBS, [("logits = logits / temperature", "logits = logits.double() / temperature")],
                 "Your `probs` has dtype float64 for float32 inputs", id="probs-float64-returned"),
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "return torch.softmax(logits, dim=-1, dtype=torch.float64)")],
                 "The first float64 tensor your code makes comes from `torch.softmax(…)`", id="probs-softmax-in-float64"),
    # A tensor made on the default device, not the logits'.
    pytest.param("next_token_probs", PROBS, [('logits.masked_fill(logits < threshold, float("-inf"))', 'torch.where(logits >= threshold, logits, torch.full(logits.shape, float("-inf")))')],
                 "off that device comes from `torch.full(…)`", id="probs-fill-on-the-default-device"),
    pytest.param("next_token_probs", PROBS, [(TOP_K_LINES, "        keep = torch.zeros(logits.shape, dtype=torch.bool)\n        for row in range(logits.shape[0]):\n"
                                                           "            keep[row] = logits[row] >= logits[row].topk(top_k).values[-1]\n"
                                                           '        logits = logits.masked_fill(~keep, float("-inf"))\n')],
                 "off that device comes from `torch.zeros(…)`", id="probs-row-loop-mask-on-the-default-device"),
    # exp without each row's maximum subtracted: NaN once a low temperature scales float32 logits past 88.
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "e = logits.exp()\n    return e / e.sum(dim=-1, keepdim=True)")],
                 "exactly the rows where exp(logits / temperature) overflows float32", id="probs-exp-without-max"),
    # Token ids of another integer dtype than long.
    pytest.param("sample_next", SAMPLE, [(DRAW, DRAW + ".int()")], "Your `tokens` has dtype int32: it must have dtype int64", id="sample-int32-tokens"),
]  # fmt: skip
"""(exercise, learner source, text edits, the phrase the check's message must contain)."""

RIGHT = [
    pytest.param("next_token_probs", PROBS, [], id="probs-learner"),
    pytest.param("next_token_probs", PROBS, [('logits.masked_fill(logits < threshold, float("-inf"))',
                                              "torch.where(logits >= threshold, logits, -torch.inf)")],
                 id="probs-where"),
    pytest.param("sample_next", SAMPLE, [], id="sample-learner"),
    pytest.param("sample_next", SAMPLE, [INVERSE_CDF], id="sample-inverse-cdf"),
    pytest.param("sample_next", SAMPLE, [GUMBEL], id="sample-gumbel-max"),
    pytest.param("generate_with_cache", GENERATE, [], id="gen-learner"),
    pytest.param("generate_with_cache", GENERATE, [("if i < n_new - 1:", "if tokens.shape[1] < prompt.shape[1] + n_new:")],
                 id="gen-stops-when-long-enough"),
    pytest.param("generate_with_cache", GENERATE, [(PICK, "next_token = pick(logits[:, -1, :].clone())")],
                 id="gen-pick-of-a-copy"),
    pytest.param("next_token_probs", PROBS, [(KTH, "torch.kthvalue(logits, logits.shape[-1] - top_k + 1, dim=-1, keepdim=True).values")],
                 id="probs-kthvalue"),
    # Right in other styles on every input the contracts allow (issue 44).
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "return torch.softmax(logits.double(), dim=-1).to(logits.dtype)")],
                 id="probs-float64-inside"),
    pytest.param("next_token_probs", PROBS, [(SOFTMAX, "return (logits - logits.logsumexp(dim=-1, keepdim=True)).exp()")],
                 id="probs-logsumexp"),
    pytest.param("next_token_probs", PROBS, [('logits.masked_fill(logits < threshold, float("-inf"))', 'torch.where(logits >= threshold, logits, torch.full_like(logits, float("-inf")))')],
                 id="probs-full-like"),
    pytest.param("next_token_probs", PROBS, [(TOP_K_LINES, "        keep = torch.zeros_like(logits, dtype=torch.bool)\n        for row in range(logits.shape[0]):\n"
                                                           "            keep[row] = logits[row] >= logits[row].sort(descending=True).values[top_k - 1]\n"
                                                           '        logits = logits.masked_fill(~keep, float("-inf"))\n')],
                 id="probs-row-loop"),
    pytest.param("sample_next", SAMPLE, [(DRAW, "return torch.multinomial(probs.double(), 1, generator=generator).reshape(-1, 1)")],
                 id="sample-float64-draw"),
    pytest.param("generate_with_cache", GENERATE, [("    tokens = prompt\n", PREALLOCATED.format(", dtype=prompt.dtype, device=prompt.device")), (APPEND, "tokens[:, t + i] = next_token[:, 0]")],
                 id="gen-preallocated-on-the-prompts-device"),
    pytest.param("generate_with_cache", GENERATE, [("    tokens = prompt\n", "    tokens = prompt.new_empty((prompt.shape[0], prompt.shape[1] + n_new))\n    tokens[:, :prompt.shape[1]] = prompt\n"),
                                                   (APPEND, "tokens[:, prompt.shape[1] + i] = next_token.squeeze(1)")],
                 id="gen-new-empty"),
    pytest.param("generate_with_cache", GENERATE, [(PREFILL + "\n", PREFILL + "[:, -1]\n"), (PICK, "next_token = pick(logits)"), (STEP, STEP + ".squeeze(1)")],
                 id="gen-squeeze-the-time-axis-alone"),
]  # fmt: skip

CHECKS = {
    "next_token_probs": check_next_token_probs,
    "sample_next": check_sample_next,
    "generate_with_cache": check_generate_with_cache,
}


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), WRONG)
def test_learner_mistakes_are_named(exercise, source, edits, phrase, capsys):
    assert_rejected(CHECKS[exercise], learner(source, exercise, *edits), phrase, capsys)


@pytest.mark.parametrize(("exercise", "source", "edits"), RIGHT)
def test_right_learner_solutions_pass(exercise, source, edits, capsys):
    assert_accepted(CHECKS[exercise], learner(source, exercise, *edits), capsys)


@pytest.mark.parametrize("exercise", sorted(CHECKS))
def test_the_reference_passes(exercise, capsys):
    assert_accepted(CHECKS[exercise], getattr(reference, exercise), capsys)
