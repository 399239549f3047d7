"""The checks of notebook 11's latent attention reject mistakes written as learners write them (text edits of
a right learner solution) and accept right answers written other ways."""

# ruff: noqa: E501  (tables of learner edits)
from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_code import ABSORBED, ABSORBED_FOLDED, LATENT, LATENT_SDPA, learner

from attn_course import reference
from attn_course.checks import CheckFailed, check_absorbed_latent_attention, check_latent_attention


def plain(*edits: tuple[str, str]):
    return learner(LATENT, "latent_attention", *edits)


def absorbed(*edits: tuple[str, str]):
    return learner(ABSORBED, "absorbed_latent_attention", *edits)


SCALE = ("math.sqrt(attn.d_head + attn.d_rope)", "math.sqrt(attn.d_head)")
INNER = "with the head axis inner, (d h): head i takes every h-th feature"
NO_MASK = (
    '    mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()\n    scores = scores.masked_fill(~mask, float("-inf"))\n',
    "",
)

# ---------------------------------------------------------------------------------------------
# latent_attention

PLAIN_RIGHT = {
    "the learner's template": (),
    "einsum scores": (
        ("    scores = q @ k.transpose(-2, -1) + q_r @ k_r[:, None].transpose(-2, -1)",
         '    scores = torch.einsum("bhtd,bhsd->bhts", q, k) + torch.einsum("bhtr,bsr->bhts", q_r, k_r)'),
    ),
    "SDPA on the concatenated query and key": (
        ("    scores = q @ k.transpose(-2, -1) + q_r @ k_r[:, None].transpose(-2, -1)\n",
         "    q_full = torch.cat([q, q_r], dim=-1)\n"
         "    k_full = torch.cat([k, k_r[:, None].expand(-1, h, -1, -1)], dim=-1)\n"
         "    out = F.scaled_dot_product_attention(q_full, k_full, v, is_causal=True)\n"
         '    return attn.out(rearrange(out, "b h t d -> b t (h d)"))\n'),
    ),
    "view and transpose": (
        ('    q = rearrange(attn.q(x), "b t (h d) -> b h t d", h=h)',
         "    q = attn.q(x).view(b, t, h, attn.d_head).transpose(1, 2)"),
    ),
    "masked with where and a float mask": (
        ('    scores = scores.masked_fill(~mask, float("-inf"))',
         '    scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))'),
    ),
}  # fmt: skip


@pytest.mark.parametrize("edits", PLAIN_RIGHT.values(), ids=PLAIN_RIGHT.keys())
def test_latent_attention_accepts(edits, capsys):
    assert_accepted(check_latent_attention, plain(*edits), capsys)


def test_latent_attention_accepts_sdpa_on_the_concatenations(capsys):
    """Unlike the template: views, [q^C; q^R] and [k^C; k^R] through SDPA, whose default scale is right."""
    assert_accepted(check_latent_attention, learner(LATENT_SDPA, "latent_attention"), capsys)


def test_latent_attention_accepts_the_reference(capsys):
    assert_accepted(check_latent_attention, reference.latent_attention, capsys)


PLAIN_WRONG = {
    "scaled by sqrt(d_head)": ([SCALE], "divided by √d_head"),
    "RoPE on the compressed q and k too": (
        [("    scores = q @ k", "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)\n    scores = q @ k")],
        "rotates the compressed queries and keys too",
    ),
    "RoPE on the latent": (
        [("    c = attn.kv_down(x)", "    c = apply_rope(attn.kv_down(x), positions, attn.base)")],
        "rotates the latent",
    ),
    "not scaled": ([("    scores = scores / math.sqrt(attn.d_head + attn.d_rope)\n", "")], "were not scaled"),
    "RoPE on the latent and the compressed query": (
        [("    c = attn.kv_down(x)", "    c = apply_rope(attn.kv_down(x), positions, attn.base)"),
         ('    q = rearrange(attn.q(x), "b t (h d) -> b h t d", h=h)', '    q = apply_rope(rearrange(attn.q(x), "b t (h d) -> b h t d", h=h), positions, attn.base)')],
        "rotates the latent and the compressed queries",
    ),
    "no rotation at all": (
        [("    q_r = apply_rope(q_r, positions, attn.base)\n", ""),
         ("    k_r = apply_rope(attn.k_rope(x), positions, attn.base)", "    k_r = attn.k_rope(x)")],
        "never rotates the decoupled query and key",
    ),
    "RoPE on the shared key only": (
        [("    q_r = apply_rope(q_r, positions, attn.base)\n", "")],
        "rotates only the shared RoPE key",
    ),
    "RoPE on the query only": (
        [("    k_r = apply_rope(attn.k_rope(x), positions, attn.base)", "    k_r = attn.k_rope(x)")],
        "rotates only the decoupled query",
    ),
    "no RoPE part in the score": (
        [(" + q_r @ k_r[:, None].transpose(-2, -1)", "")],
        "leaves out the RoPE part",
    ),
    "no causal mask": ([NO_MASK], "has no causal mask"),
    "positions ignored": (
        [("q_r = apply_rope(q_r, positions, attn.base)", "q_r = apply_rope(q_r, None, attn.base)"),
         ("k_r = apply_rope(attn.k_rope(x), positions, attn.base)", "k_r = apply_rope(attn.k_rope(x), None, attn.base)")],
        "ignores `positions`",
    ),
    "attn.base ignored": (
        [("q_r = apply_rope(q_r, positions, attn.base)", "q_r = apply_rope(q_r, positions)"),
         ("k_r = apply_rope(attn.k_rope(x), positions, attn.base)", "k_r = apply_rope(attn.k_rope(x), positions)")],
        "ignores attn.base",
    ),
    "values from W^UK": ([("attn.v_up(c)", "attn.k_up(c)")], "up-projects the values with W^UK"),
    "no output projection": ([("    return attn.out(out)", "    return out")], "forgets the output projection"),
    "RoPE query split (r h)": (
        [('"b t (h r) -> b h t r"', '"b t (r h) -> b h t r"')],
        "splits the RoPE queries W^QR x into heads with the head axis inner, (d h)",
    ),
    "keys split (d h)": (
        [('k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h)', 'k = rearrange(attn.k_up(c), "b t (d h) -> b h t d", h=h)')],
        "splits the keys W^UK c into heads with the head axis inner, (d h)",
    ),
    "values split (d h)": (
        [('v = rearrange(attn.v_up(c), "b t (h d) -> b h t d", h=h)', 'v = rearrange(attn.v_up(c), "b t (d h) -> b h t d", h=h)')],
        "splits the values W^UV c into heads with the head axis inner, (d h)",
    ),
    "keys split by a view with the head axis inner": (
        [('k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h)', "k = attn.k_up(c).view(b, t, attn.d_head, h).permute(0, 3, 1, 2)")],
        "splits the keys W^UK c into heads " + INNER,
    ),
    "queries and keys both split (d h) by views": (
        [('q = rearrange(attn.q(x), "b t (h d) -> b h t d", h=h)', "q = attn.q(x).unflatten(-1, (attn.d_head, h)).movedim(-1, 1)"),
         ('k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h)', "k = attn.k_up(c).unflatten(-1, (attn.d_head, h)).movedim(-1, 1)")],
        "splits the queries W^Q x and the keys W^UK c into heads " + INNER,
    ),
    "heads merged with the head axis inner": (
        [('    out = rearrange(weights @ v, "b h t d -> b t (h d)")', "    out = (weights @ v).permute(0, 2, 3, 1).reshape(b, t, -1)")],
        "merges the heads' outputs " + INNER,
    ),
    "scaled by sqrt(d_latent), as a power": (
        [("scores = scores / math.sqrt(attn.d_head + attn.d_rope)", "scores = scores * attn.d_latent ** -0.5")],
        "divided by √d_latent: each score is the dot product",
    ),
    "divided by d_head + d_rope, no square root": (
        [("scores = scores / math.sqrt(attn.d_head + attn.d_rope)", "scores = scores / (q.shape[-1] + q_r.shape[-1])")],
        "divided by d_head + d_rope without the square root",
    ),
    "scaled by sqrt(d_model)": (
        [("scores = scores / math.sqrt(attn.d_head + attn.d_rope)", "scores = scores / x.shape[-1] ** 0.5")],
        "divided by √d_model",
    ),
    "scaled twice as much": (
        [("scores = scores / math.sqrt(attn.d_head + attn.d_rope)", "scores = scores * 0.5 / (attn.d_head + attn.d_rope) ** 0.5")],
        "divided by 2·√(d_head + d_rope), twice the right scale",
    ),
    # no known mistake: named by the property that fails
    "RoPE query heads paired with other heads' keys": (
        [("    q_r = apply_rope(q_r, positions, attn.base)", "    q_r = apply_rope(q_r.flip(1), positions, attn.base)")],
        "is right once W^QR and W^KR are zero",
    ),
    "keys of the heads in reverse order": (
        [('k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h)', 'k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h).flip(1)')],
        "the compressed part of the scores is wrong",
    ),
    "values of the heads in reverse order": (
        [('v = rearrange(attn.v_up(c), "b t (h d) -> b h t d", h=h)', 'v = rearrange(attn.v_up(c), "b t (h d) -> b h t d", h=h).flip(1)')],
        "each query averages the tokens it may see",
    ),
    "softmax over the queries": (
        [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
        "lets a query see later tokens",
    ),
    "mask offset by one (no diagonal): NaN in the first row": (
        [(".tril()", ".tril(-1)")],
        "NaN",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), PLAIN_WRONG.values(), ids=PLAIN_WRONG.keys())
def test_latent_attention_rejects(edits, phrase, capsys):
    assert_rejected(check_latent_attention, plain(*edits), phrase, capsys)


# ---------------------------------------------------------------------------------------------
# absorbed_latent_attention

ABSORBED_RIGHT = {
    "the learner's template": (),
    "W^UK^T W^Q precomputed per head": (
        ('    q = rearrange(attn.q(x), "b t (h d) -> b h t d", h=h)\n', ""),
        ("    w_uk = rearrange(attn.k_up.weight, \"(h d) c -> h d c\", h=h)\n    q_lat = torch.einsum(\"bhtd,hdc->bhtc\", q, w_uk)",
         "    w_q = rearrange(attn.q.weight, \"(h d) m -> h d m\", h=h)\n"
         "    w_uk = rearrange(attn.k_up.weight, \"(h d) c -> h d c\", h=h)\n"
         "    w_absorbed = w_uk.transpose(1, 2) @ w_q\n"
         "    q_lat = torch.einsum(\"hcm,btm->bhtc\", w_absorbed, x)"),
    ),
    "matmuls instead of einsum": (
        ('    q_lat = torch.einsum("bhtd,hdc->bhtc", q, w_uk)', "    q_lat = q @ w_uk"),
        ('    scores = torch.einsum("bhtc,bsc->bhts", q_lat, latents)', "    scores = q_lat @ latents[:, None].transpose(-2, -1)"),
        ('    o_lat = torch.einsum("bhts,bsc->bhtc", weights, latents)', "    o_lat = weights @ latents[:, None]"),
    ),
    "W^UV absorbed into W^O": (
        ('    out = torch.einsum("bhtc,hdc->bhtd", o_lat, w_uv)\n    return attn.out(rearrange(out, "b h t d -> b t (h d)"))',
         '    w_o = rearrange(attn.out.weight, "m (h d) -> h d m", h=h)\n'
         '    w_vo = torch.einsum("hdc,hdm->hcm", w_uv, w_o)\n'
         '    return torch.einsum("bhtc,hcm->btm", o_lat, w_vo)'),
    ),
    "RoPE keys cached unrotated, rotated when used": (
        ("    k_r = apply_rope(attn.k_rope(x), positions, attn.base)", "    k_r = attn.k_rope(x)"),
        ("    t_k = latents.shape[1]", "    t_k = latents.shape[1]\n    rope_keys = apply_rope(rope_keys, None, attn.base)"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("edits", ABSORBED_RIGHT.values(), ids=ABSORBED_RIGHT.keys())
def test_absorbed_accepts(edits, capsys):
    assert_accepted(check_absorbed_latent_attention, absorbed(*edits), capsys)


def test_absorbed_accepts_weights_folded_ahead(capsys):
    """Unlike the template: (W^UK_i)^T W^Q_i and W^UV_i with W^O multiplied out, the mask from positions."""
    assert_accepted(
        check_absorbed_latent_attention, learner(ABSORBED_FOLDED, "absorbed_latent_attention"), capsys
    )


def test_absorbed_accepts_the_reference(capsys):
    assert_accepted(check_absorbed_latent_attention, reference.absorbed_latent_attention, capsys)


PER_HEAD_KEYS = (
    '    w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h)\n    q_lat = torch.einsum("bhtd,hdc->bhtc", q, w_uk)\n    scores = torch.einsum("bhtc,bsc->bhts", q_lat, latents)',
    '    k = rearrange(attn.k_up(latents), "b s (h d) -> b h s d", h=h)\n    scores = q @ k.transpose(-2, -1)',
)
VALUES_FIRST = (
    '    o_lat = torch.einsum("bhts,bsc->bhtc", weights, latents)\n    w_uv = rearrange(attn.v_up.weight, "(h d) c -> h d c", h=h)\n    out = torch.einsum("bhtc,hdc->bhtd", o_lat, w_uv)',
    '    v = rearrange(attn.v_up(latents), "b s (h d) -> b h s d", h=h)\n    out = weights @ v',
)

ABSORBED_WRONG = {
    "positions from 0": (
        [("torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)")],
        "as if they started at position 0",
    ),
    "mask top-left": ([(".tril(diagonal=t_k - t_new)", ".tril()")], "aligns the causal mask top-left"),
    "no causal mask": (
        [('    mask = torch.ones(t_new, t_k, dtype=torch.bool, device=x.device).tril(diagonal=t_k - t_new)\n    scores = scores.masked_fill(~mask, float("-inf"))\n', "")],
        "has no causal mask",
    ),
    "scaled by sqrt(d_head)": ([SCALE], "divided by √d_head"),
    "W^UK without its transpose": ([('"bhtd,hdc->bhtc", q, w_uk', '"bhtd,hcd->bhtc", q, w_uk')], "without its transpose"),
    "attends to the new latents only": (
        [("    latents, rope_keys = cache.append(layer, c, k_r)", "    cache.append(layer, c, k_r)\n    latents, rope_keys = c, k_r")],
        "attends only to the new tokens",
    ),
    "latent rotated before caching": (
        [("    c = attn.kv_down(x)", "    c = apply_rope(attn.kv_down(x), positions, attn.base)")],
        "caches the latents rotated",
    ),
    "a RoPE key per head": (
        [("    k_r = apply_rope(attn.k_rope(x), positions, attn.base)",
          '    k_r = apply_rope(attn.k_rope(x)[:, None].expand(-1, h, -1, -1), positions, attn.base)'),
         ('"bhtr,bsr->bhts", q_r, rope_keys', '"bhtr,bhsr->bhts", q_r, rope_keys')],
        "a RoPE key per head",
    ),
    "per-head keys of the cache built": ([PER_HEAD_KEYS], "the per-head keys W^UK c"),
    "W^UV before the weighted sum": ([VALUES_FIRST], "before the weighted sum"),
    "per-head keys cached": (
        [("    latents, rope_keys = cache.append(layer, c, k_r)", "    latents, rope_keys = cache.append(layer, attn.k_up(c), k_r)")],
        "per-head keys or values, what MLA exists not to cache",
    ),
    "layer ignored": (
        [("    t_past = cache.length(layer)", "    t_past = cache.length(0)"),
         ("cache.append(layer, c, k_r)", "cache.append(0, c, k_r)")],
        "pass `layer` on",
    ),
    "appended twice": (
        [("    latents, rope_keys = cache.append(layer, c, k_r)", "    cache.append(layer, c, k_r)\n    latents, rope_keys = cache.append(layer, c, k_r)")],
        "8 were appended for 4 new ones",
    ),
    "q^R split (r h)": ([('"b t (h r) -> b h t r"', '"b t (r h) -> b h t r"')], "splits the RoPE queries W^QR x into heads " + INNER),
    "W^UK blocks read (d h) by a view": (
        [('w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h)', "w_uk = attn.k_up.weight.view(attn.d_head, h, -1).transpose(0, 1)")],
        "splits the rows of attn.k_up.weight (W^UK) into heads " + INNER,
    ),
    "W^UV blocks read (d h) by a reshape": (
        [('w_uv = rearrange(attn.v_up.weight, "(h d) c -> h d c", h=h)', "w_uv = attn.v_up.weight.reshape(attn.d_head, h, attn.d_latent).permute(1, 0, 2)")],
        "splits the rows of attn.v_up.weight (W^UV) into heads " + INNER,
    ),
    "heads merged (d h)": (
        [('    return attn.out(rearrange(out, "b h t d -> b t (h d)"))', "    return attn.out(out.permute(0, 2, 3, 1).flatten(2))")],
        "merges the heads' outputs " + INNER,
    ),
    "scaled by the cached widths, sqrt(d_latent + d_rope)": (
        [("scores = scores / math.sqrt(attn.d_head + attn.d_rope)", "scores = scores / math.sqrt(latents.shape[-1] + rope_keys.shape[-1])")],
        "divided by √(d_latent + d_rope): divide by √(d_head + d_rope)",
    ),
    "scaled by sqrt(d_model)": (
        [("scores = scores / math.sqrt(attn.d_head + attn.d_rope)", "scores = scores * x.shape[-1] ** -0.5")],
        "divided by √d_model",
    ),
    "not scaled": ([("    scores = scores / math.sqrt(attn.d_head + attn.d_rope)\n", "")], "were not scaled"),
    # no known mistake: named by what the cache holds, or by the part that is wrong
    "q^R heads paired with other heads' keys": (
        [('q_r = apply_rope(rearrange(attn.q_rope(x), "b t (h r) -> b h t r", h=h), positions, attn.base)',
          'q_r = apply_rope(rearrange(attn.q_rope(x), "b t (h r) -> b h t r", h=h).flip(1), positions, attn.base)')],
        "so the RoPE part of the scores is wrong",
    ),
    "RoPE part added after the division": (
        [('    scores = scores + torch.einsum("bhtr,bsr->bhts", q_r, rope_keys)\n    scores = scores / math.sqrt(attn.d_head + attn.d_rope)',
          '    scores = scores / math.sqrt(attn.d_head + attn.d_rope)\n    scores = scores + torch.einsum("bhtr,bsr->bhts", q_r, rope_keys)')],
        "before the division by √(d_head + d_rope)",
    ),
    "W^UK blocks read (d h)": (
        [('attn.k_up.weight, "(h d) c -> h d c"', 'attn.k_up.weight, "(d h) c -> h d c"')],
        "splits the rows of attn.k_up.weight (W^UK) into heads " + INNER,
    ),
    "W^UV blocks read (d h)": (
        [('attn.v_up.weight, "(h d) c -> h d c"', 'attn.v_up.weight, "(d h) c -> h d c"')],
        "splits the rows of attn.v_up.weight (W^UV) into heads " + INNER,
    ),
    "W^UK blocks of the heads in reverse order": (
        [('w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h)', 'w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h).flip(0)')],
        "the compressed part of the scores is wrong, W^UK absorbed",
    ),
    "W^UV blocks of the heads in reverse order": (
        [('w_uv = rearrange(attn.v_up.weight, "(h d) c -> h d c", h=h)', 'w_uv = rearrange(attn.v_up.weight, "(h d) c -> h d c", h=h).flip(0)')],
        "which tokens those are or how they are summed",
    ),
    "RoPE keys rotated one position late": (
        [("    k_r = apply_rope(attn.k_rope(x), positions, attn.base)", "    k_r = apply_rope(attn.k_rope(x), positions + 1, attn.base)")],
        "caches RoPE keys rotated at positions",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("edits", "phrase"), ABSORBED_WRONG.values(), ids=ABSORBED_WRONG.keys())
def test_absorbed_rejects(edits, phrase, capsys):
    assert_rejected(check_absorbed_latent_attention, absorbed(*edits), phrase, capsys)


def test_a_key_rotated_at_its_index_with_positions_given_is_read_with_those_positions(capsys):
    """The diagnosis re-runs the learner's layer on the failing case's own positions: with positions
    given and the shared key rotated at 0 … t−1 instead, nothing lets a query see later tokens."""
    key_ignores_positions = plain(
        ("    k_r = apply_rope(attn.k_rope(x), positions, attn.base)",
         "    k_r = apply_rope(attn.k_rope(x), torch.arange(x.shape[-2]), attn.base)")
    )  # fmt: skip
    assert_rejected(check_latent_attention, key_ignores_positions, "shifted by the same amount", capsys)
    with pytest.raises(CheckFailed) as failure:
        check_latent_attention(key_ignores_positions)
    assert "later tokens" not in str(failure.value)
