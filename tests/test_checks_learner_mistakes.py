"""Learner mistakes, written as learners write them, against the checks: development and hold-out sets.

Every wrong case is a right learner solution from `learner_code.py` with a text edit, never a
checker's simulator with a knob turned. `DEVELOPMENT` is the set the checks were improved against.
`HOLD_OUT` was written afterwards, without looking at the checks' mistake tables, and measured once
before any check was changed for it: the flag `named_when_first_run` records whether the check's
message then named the idea of the mistake (not only "the values differ"). The phrases are what
the checks say now. `RIGHT` are learner spellings that must pass (some were written as mistakes
and turned out to be right: a RoPE position shift common to queries and keys changes no score).
Notebook 08's hold-out kernels are in test_checks_triton.py (`TRITON_HOLD_OUT`).

The hold-out was named 30/46 when first run (with TRITON_HOLD_OUT's 4/10: 34/56, 61%). After the
work of issue 15 part 4 (tests/test_checks_holdout2.py) its phrases name 45/46 (all but the
flash_attention that slices v with the query block's rows, still only "raised RuntimeError"), and
TRITON_HOLD_OUT's 10/10: 55/56.
"""

# ruff: noqa: E501  (tables of learner code, one case a line)
from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_code import (
    APPLY_ROPE,
    ATTENTION,
    CACHED,
    CAUSAL,
    DOT_PRODUCT_ATTENTION,
    FLASH,
    FREQUENCIES,
    KV_CACHE,
    MERGE,
    MHA,
    ONLINE_SOFTMAX,
    PADDING,
    ROTARY,
    SCALED,
    SCORES,
    SOFTMAX,
    SPLIT,
    VARIANCE,
    learner,
)

import attn_course.checks

DEVELOPMENT = [
('softmax', SOFTMAX, [('total = exps.sum(dim=dim, keepdim=True)', 'total = exps.sum(dim=0, keepdim=True)')], 'in every reduction, the max and the sum (with keepdim=True).'),
    ('softmax', SOFTMAX, [('total = exps.sum(dim=dim, keepdim=True)', 'total = exps.sum()')], 'he very exponentials you return (after subtracting the max).'),
    ('softmax', SOFTMAX, [('x_max = x.max(dim=dim, keepdim=True).values', 'x_max = x.max()')], 'um of the whole tensor is not enough when rows differ a lot.'),
    ('softmax', SOFTMAX, [('    return exps / total', '    return torch.softmax(x, dim=dim)')], '(torch.exp, x.amax, .sum and torch.logsumexp are all fine).'),
    ('softmax', SOFTMAX, [('    return exps / total', '    return F.softmax(x, dim)')], '(torch.exp, x.amax, .sum and torch.logsumexp are all fine).'),
    ('softmax', SOFTMAX, [('exps = torch.exp(x - x_max)', 'exps = torch.exp(x) - x_max')], 'did you return x - max, a log-probability or skip the exp?).'),
    ('softmax', SOFTMAX, [('exps = torch.exp(x - x_max)', 'exps = torch.exp(x_max - x)')], 'and take exp of x itself, not of a rescaled or reordered x.'),
    ('softmax', SOFTMAX, [('    return exps / total', '    return exps / total.sum()')], 'he very exponentials you return (after subtracting the max).'),
    ('softmax', SOFTMAX, [('x_max = x.max(dim=dim, keepdim=True).values', 'x_max = x.max(dim=-1, keepdim=True).values')], 'each row along dim is shifted by several different numbers'),
    ('softmax', SOFTMAX, [('x_max = x.max(dim=dim, keepdim=True).values', 'x_max = x.min(dim=dim, keepdim=True).values')], 'inite entry: subtract the row max (not the mean) before exp.'),
    ('dot_product_scores', SCORES, [('q @ k.transpose(-2, -1)', 'q @ k.transpose(0, 1)')], 'raised RuntimeError'),
    ('dot_product_scores', SCORES, [('q @ k.transpose(-2, -1)', '(q * k).sum(-1)')], 'raised RuntimeError'),
    ('dot_product_scores', SCORES, [('q @ k.transpose(-2, -1)', 'q.transpose(-2, -1) @ k')], 'raised RuntimeError'),
    ('dot_product_scores', SCORES, [('q @ k.transpose(-2, -1)', "torch.einsum('...id,...jd->...ji', q, k)")], 'are queries and columns keys, so compute q @ kᵀ, not k @ qᵀ.'),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('out = weights @ v', 'out = weights @ v.transpose(-2, -1)')], 'raised RuntimeError'),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.softmax(scores, dim=0)')], 't sum to 1, so take the softmax over the last axis (dim=-1).'),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('out = weights @ v', 'out = scores @ v')], 'abilities with softmax(..., dim=-1) before multiplying by v.'),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.sigmoid(scores)')], ', with max and sum both taken along that axis, keepdim=True.'),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('weights = torch.softmax(scores, dim=-1)', 'weights = scores.exp() / scores.exp().sum(-1, keepdim=True)')], 'for example your softmax from notebook 01 or torch.softmax.'),
    ('scaled_dot_product_attention', SCALED, [('d_k = q.shape[-1]', 'd_k = k.shape[-2]')], 'square root of the number of keys, not of d_k = q.shape[-1].'),
    ('scaled_dot_product_attention', SCALED, [('/ math.sqrt(d_k)', '/ d_k ** 2')], 'check the scale (what you divide the scores by, and where).'),
    ('scaled_dot_product_attention', SCALED, [('/ math.sqrt(d_k)', '* math.sqrt(d_k)')], 's are multiplied by √d_k: divide the scores by √d_k instead.'),
    ('scaled_dot_product_attention', SCALED, [('d_k = q.shape[-1]', 'd_k = v.shape[-1]')], 'scale uses the width of queries and keys, d_k = q.shape[-1].'),
    ('scaled_dot_product_attention', SCALED, [('d_k = q.shape[-1]', 'd_k = q.shape[1]')], 'are root of the number of queries, not of d_k = q.shape[-1].'),
    ('scaled_dot_product_attention', SCALED, [('out = weights @ v', 'out = weights @ v / math.sqrt(d_k)')], '@ v, of shape (..., T_q, d_v), with nothing else done to it.'),
    ('score_variance', VARIANCE, [('return scores.var().item()', 'return scores.std().item() ** 1')], 'eviation (≈ √d_k): return the variance (.var()), not .std().'),
    ('score_variance', VARIANCE, [('scores = scores / math.sqrt(d_k)', 'scores = scores / d_k')], 'akes it ≈ 1/d_k: with scaled=True divide the scores by √d_k.'),
    ('score_variance', VARIANCE, [('k = torch.randn(n_samples, d_k)', 'k = torch.rand(n_samples, d_k)')], 'torch.rand draws from [0, 1) (mean 1/2, variance 1/12)'),
    ('score_variance', VARIANCE, [('q = torch.randn(n_samples, d_k)', 'q = torch.rand(n_samples, d_k)'), ('k = torch.randn(n_samples, d_k)', 'k = torch.rand(n_samples, d_k)')], 'not from N(0, 1). Draw q and k with torch.randn.'),
    ('score_variance', VARIANCE, [('scores = (q * k).sum(dim=-1)', 'scores = (q * k).sum()')], 'the variance of a single number is NaN. Did you sum everything into one score?'),
    ('score_variance', VARIANCE, [('scores = (q * k).sum(dim=-1)', 'scores = (q * k).mean(dim=-1)')], 'akes it ≈ 1/d_k: with scaled=True divide the scores by √d_k.'),
    ('score_variance', VARIANCE, [('k = torch.randn(n_samples, d_k)', 'k = q')], 'k is q, or drawn as q'),
    ('causal_mask', CAUSAL, [('return cols <= rows', 'return cols < rows')], 'attend to itself (use diagonal=0 for a square mask, not -1).'),
    ('causal_mask', CAUSAL, [('return cols <= rows', 'return cols >= rows')], 'tend (the lower triangle with the diagonal), use torch.tril.'),
    ('causal_mask', CAUSAL, [('+ (t_k - t_q)', '')], "iagonal=t_k - t_q)). torch's is_causal=True aligns top-left."),
    ('causal_mask', CAUSAL, [('+ (t_k - t_q)', '+ (t_q - t_k)')], '=t_k - t_q), or key position <= query position + t_k - t_q).'),
    ('causal_mask', CAUSAL, [('return cols <= rows', 'return (cols <= rows).int()')], 'torch.int32: build it with comparisons or dtype=torch.bool.'),
    ('causal_mask', CAUSAL, [('return cols <= rows', 'return rows <= cols')], 'tend (the lower triangle with the diagonal), use torch.tril.'),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', 'positions[None, :] >= lengths[:, None]')], 'k the real tokens (position < length) and False the padding.'),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', 'positions[:, None] < lengths[None, :]')], '(4, 3): it should be (B, t) = (3, 4), one row per sequence.'),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', 'positions[None, :] >= t - lengths[:, None]')], 'ens are positions 0 … lengths[b] - 1: position < lengths[b].'),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', '(positions[None, :] < lengths[:, None]).float()')], 'orch.float32: build it with comparisons or dtype=torch.bool.'),
    ('attention', ATTENTION, [('scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(mask, float("-inf"))')], "he mask is False (scores.masked_fill(~mask, float('-inf')))."),
    ('attention', ATTENTION, [('scores.masked_fill(~mask, float("-inf"))', 'scores * mask')], "loat('-inf') (or a very negative number) before the softmax."),
    ('attention', ATTENTION, [('mask = causal if mask is None else mask & causal', 'mask = causal if mask is None else mask | causal')], ': a key must be allowed by both, so use AND (mask & causal).'),
    ('attention', ATTENTION, [('tril(diagonal=t_k - t_q)', 'tril()')], "(your causal_mask(t_q, t_k)), unlike torch's is_causal=True."),
    ('attention', ATTENTION, [('tril(diagonal=t_k - t_q)', 'triu(diagonal=1)')], "he mask is False (scores.masked_fill(~mask, float('-inf')))."),
    ('attention', ATTENTION, [('mask = causal if mask is None else mask & causal', 'mask = causal')], 'when is_causal=True: combine both masks with a logical AND.'),
    ('split_heads', SPLIT, [('x.view(b, t, n_heads, d).transpose(1, 2)', 'x.view(b, n_heads, t, d)')], 'e(1, 2), or rearrange(x, "b t (h d) -> b h t d", h=n_heads).'),
    ('split_heads', SPLIT, [('x.view(b, t, n_heads, d).transpose(1, 2)', 'x.view(b, t, d, n_heads).permute(0, 3, 1, 2)')], ', "b t (h d) -> b h t d", h=n_heads), or x.view(b, t, h, d).transpose(1, 2).'),
    ('split_heads', SPLIT, [('x.view(b, t, n_heads, d).transpose(1, 2)', 'x.view(b, t, n_heads, d).transpose(2, 3)')], '5, 12) should have shape (2, 3, 5, 4), but has (2, 5, 4, 3).'),
    ('merge_heads', MERGE, [('x.transpose(1, 2).reshape(b, t, h * d)', 'x.reshape(b, t, h * d)')], 'shape(b, t, h * d), or rearrange(x, "b h t d -> b t (h d)").'),
    ('merge_heads', MERGE, [('x.transpose(1, 2).reshape(b, t, h * d)', 'x.permute(0, 2, 3, 1).reshape(b, t, h * d)')], '…, the grouping (h d): rearrange(x, "b h t d -> b t (h d)").'),
    ('merge_heads', MERGE, [('x.transpose(1, 2).reshape(b, t, h * d)', 'x.transpose(1, 2).reshape(b, t, h * d).flip(-1)')], 'is wrong'),
    ('MultiHeadAttention', MHA, [('/ math.sqrt(d_k)', '/ math.sqrt(d_model)')], 'ds numbers, so divide by √d_k (q.shape[-1] after the split).'),
    ('MultiHeadAttention', MHA, [('return self.out(out)', 'return out')], 's, apply self.out (the W^O that mixes what the heads found).'),
    ('MultiHeadAttention', MHA, [('q, k, v = self.qkv(x).chunk(3, dim=-1)', 'k, q, v = self.qkv(x).chunk(3, dim=-1)')], 'e q, then k, then v: q, k, v = self.qkv(x).chunk(3, dim=-1).'),
    ('MultiHeadAttention', MHA, [('~mask.unsqueeze(-3)', 'mask.unsqueeze(-3)')], "; torch.nn.MultiheadAttention's own masks are the opposite)."),
    ('MultiHeadAttention', MHA, [('torch.ones(t, t, dtype=torch.bool, device=x.device).tril()', 'torch.ones(t, t, dtype=torch.bool, device=x.device).triu()')], 'triangle with the diagonal (torch.tril), and masks the rest.'),
    ('MultiHeadAttention', MHA, [('v = v.view(b, t, self.n_heads, d_k).transpose(1, 2)', 'v = v.reshape(b, self.n_heads, t, d_k)')], 'like q and k (view to (b, t, h, d_k), then transpose(1, 2)).'),
    ('MultiHeadAttention', MHA, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.softmax(scores, dim=1)')], 't sum to 1, so take the softmax over the last axis (dim=-1).'),
    ('rope_frequencies', FREQUENCIES, [('base ** (-i / d)', 'base ** (i / d)')], '1 to about 1/base, θ_i = base^(-2i/d); mind the minus sign.'),
    ('rope_frequencies', FREQUENCIES, [('base ** (-i / d)', '1 / base ** (2 * i / d)')], 'ange(0, d, 2) already gives the 2i; do not double it again.)'),
    ('rope_frequencies', FREQUENCIES, [('torch.arange(0, d, 2, dtype=torch.float64)', 'torch.arange(d // 2, dtype=torch.float64)')], '), so the exponent steps by 2/d (torch.arange(0, d, 2) / d).'),
    ('rope_frequencies', FREQUENCIES, [('base ** (-i / d)', 'torch.exp(-i / d * math.log(10000.0))')], 'e=500) ignores `base`: it uses 10000 whatever base is given.'),
    ('rope_frequencies', FREQUENCIES, [('base ** (-i / d)', 'base ** (-i / (d - 2))')], 'ponent is -(d - 2)/d, not -1; use torch.arange(0, d, 2) / d.'),
    ('apply_rope', APPLY_ROPE, [('out_odd = x_even * sin + x_odd * cos', 'out_odd = x_odd * cos - x_even * sin')], 'the same cos and sin in both, with the two signs as written.'),
    ('apply_rope', APPLY_ROPE, [('torch.stack([out_even, out_odd], dim=-1).flatten(-2)', 'torch.cat([out_even, out_odd], dim=-1)')], "n(-2), or rearrange(..., 'two ... half -> ... (half two)'))."),
    ('apply_rope', APPLY_ROPE, [('theta = base ** (-i / d)', 'theta = 10000.0 ** (-i / d)')], '00 whatever base is given; pass base on to rope_frequencies.'),
    ('apply_rope', APPLY_ROPE, [('angles = positions.to(torch.float64)[:, None] * theta[None, :]', 'angles = positions.to(x.dtype)[:, None] * theta[None, :].to(x.dtype)')], 'loat64 and cast only cos and sin (or the result) to x.dtype.'),
    ('apply_rope', APPLY_ROPE, [('cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)', 'sin, cos = angles.cos().to(x.dtype), angles.sin().to(x.dtype)')], 'on of (a, b) by φ is (a·cos φ - b·sin φ, a·sin φ + b·cos φ).'),
    ('apply_rope', APPLY_ROPE, [('x_even, x_odd = x[..., 0::2], x[..., 1::2]', 'x_even, x_odd = x[..., : d // 2], x[..., d // 2 :]')], 'rotates the pairs (x[i], x[i + d/2])'),
    ('apply_rope', APPLY_ROPE, [('positions = torch.arange(t, device=x.device)', 'positions = torch.arange(1, t + 1, device=x.device)')], 'n 0 and is not rotated at all (positions = torch.arange(T)).'),
    ('apply_rope', APPLY_ROPE, [('angles = positions.to(torch.float64)[:, None]', 'angles = positions.to(torch.float64).flip(0)[:, None]')], '= base^(-2i/d) and p from `positions` (0 … T-1 by default).'),
    ('RotaryMultiHeadAttention', ROTARY, [('k = apply_rope(k, positions, self.base)', 'v = apply_rope(v, positions, self.base)')], 'ct sees the relative position), and v is passed on as it is.'),
    ('RotaryMultiHeadAttention', ROTARY, [('q = apply_rope(q, positions, self.base)', 'q = apply_rope(q, None, self.base)')], 'rotates q by the positions 0 … t-1 instead of the `positions` given'),
    ('RotaryMultiHeadAttention', ROTARY, [('k = apply_rope(k, positions, self.base)\n', 'k = apply_rope(k, positions)\n')], 'rotates k with the default base=10000 instead of self.base'),
    ('RotaryMultiHeadAttention', ROTARY, [('        q = apply_rope(q, positions, self.base)\n        k = apply_rope(k, positions, self.base)\n', '')], 'heir dot products unchanged. Rotate (b, h, t, d_k) tensors.)'),
    ('RotaryMultiHeadAttention', ROTARY, [('q, k, v = self.qkv(x).chunk(3, dim=-1)\n', 'q, k, v = self.qkv(x).chunk(3, dim=-1)\n        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n'), ('        q = apply_rope(q, positions, self.base)\n        k = apply_rope(k, positions, self.base)\n', '')], 'Split into heads first, (b, h, t, d_k), then rotate q and k.'),
    ('online_softmax', ONLINE_SOFTMAX, [('m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)', 'm = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)')], "0 is NaN) for very negative rows. Start it at float('-inf')."),
    ('online_softmax', ONLINE_SOFTMAX, [('total * torch.exp(m - m_safe)', 'total * torch.exp(m_safe - m)')], 'the wrong way round'),
    ('online_softmax', ONLINE_SOFTMAX, [('total * torch.exp(m - m_safe)', 'total')], 'um by exp(m_old - m_new), then add exp(block - m_new).sum().'),
    ('online_softmax', ONLINE_SOFTMAX, [('for start in range(0, n, block_size):', 'for start in range(0, n - block_size + 1, block_size):')], '(x[..., start:start + block_size] simply stops at the end).'),
    ('online_softmax', ONLINE_SOFTMAX, [('torch.exp(block - m_safe).sum(dim=-1, keepdim=True)', 'torch.exp(block - m).sum(dim=-1, keepdim=True)')], 'he very exponentials you return (after subtracting the max).'),
    ('flash_attention', FLASH, [('hi = min(t_k, qe + t_k - t_q) if is_causal else t_k', 'hi = min(t_k, qs + t_k - t_q + 1) if is_causal else t_k')], 'y shows when T_k - T_q is not a multiple of the block size.)'),
    ('flash_attention', FLASH, [('acc = acc * alpha + p @ v[..., ks:ke, :]', 'acc = acc + p @ v[..., ks:ke, :]')], 'adding p @ v_block, exactly as you rescale the running sum.'),
    ('flash_attention', FLASH, [('rows = torch.arange(qs, qe, device=q.device)[:, None] + (t_k - t_q)', 'rows = torch.arange(0, qe - qs, device=q.device)[:, None] + (t_k - t_q)')], 'sal position), not its rows counted from 0 within the block.'),
    ('flash_attention', FLASH, [('out[..., qs:qe, :] = acc / l', 'out[..., qs:qe, :] = acc')], "/ l (the accumulated p @ v over the softmax's denominator)."),
    ('flash_attention', FLASH, [('alpha = torch.exp(m - m_new)', 'alpha = torch.exp(m_new - m)')], 'm_old) (which is inf while m_old is still -inf, hence NaN).'),
    ('flash_attention', FLASH, [('p = torch.exp(s - m_new)', 'p = torch.exp(s - m)')], 'm_old) (which is inf while m_old is still -inf, hence NaN).'),
    ('flash_attention', FLASH, [('scale = 1 / math.sqrt(d)', 'scale = 1 / math.sqrt(v.shape[-1])')], '/√d with d = q.shape[-1], the width of the queries and keys.'),
    ('KVCache', KV_CACHE, [('    def __init__(self):\n        self.keys = {}\n        self.values = {}\n', '    keys = {}\n    values = {}\n\n    def __init__(self):\n        pass\n')], 'tributes (keys = {} in the class body) or default arguments.'),
    ('KVCache', KV_CACHE, [('torch.cat([self.values[layer], v], dim=-2)', 'torch.cat([self.values[layer], v], dim=-1)')], 'ected size 4 but got size 1 for tensor number 1 in the list.'),
    ('KVCache', KV_CACHE, [('            self.values[layer] = v\n', '            self.values[layer] = k\n')], 'alues belong: return (keys, values), each cached separately.'),
    ('KVCache', KV_CACHE, [('        return self.keys[layer], self.values[layer]', '        return self.keys[layer], self.keys[layer]')], 'alues belong: return (keys, values), each cached separately.'),
    ('cached_attention', CACHED, [('positions = torch.arange(t_past, t_past + t_new, device=x.device)', 'positions = torch.arange(t_new, device=x.device)')], 'ch.arange(t_past, t_past + t_new) to apply_rope for q and k.'),
    ('cached_attention', CACHED, [('out, _ = attention(q, keys, values, is_causal=True)', 'out, _ = attention(q, keys, values)')], 'it. Pass is_causal=True to attention (bottom-right aligned).'),
    ('cached_attention', CACHED, [('out, _ = attention(q, keys, values, is_causal=True)', 'out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)')], '_attention(is_causal=True) aligns top-left when t_new ≠ t_k.'),
    ('cached_attention', CACHED, [('    t_past = cache.length(layer)\n', '    t_past = cache.length(0)\n')], 'r) before cache.append, which already counts the new tokens.'),
    ('cached_attention', CACHED, [('keys, values = cache.append(layer, k, v)', 'cache.append(layer, k, v)\n    keys, values = cache.append(layer, k, v)')], 'k, v) once, and attend with the keys and values it returns.'),
]  # fmt: skip
"""(exercise, right solution, edits, phrase the message must contain)."""

HOLD_OUT = [
('dot_product_scores', SCORES, [('q @ k.transpose(-2, -1)', "torch.einsum('...id,...jd->...ij', q, q)")], 'the scores compare the queries with themselves (q @ qᵀ)', False),
    ('dot_product_scores', SCORES, [('q @ k.transpose(-2, -1)', 'q @ k.transpose(-2, -1) / q.shape[-1]')], 'are wrong', True),
    ('softmax', SOFTMAX, [('    return exps / total', '    return exps / total.detach()')], 'tensor autograd saved, or a constant where x should enter).', True),
    ('softmax', SOFTMAX, [('total = exps.sum(dim=dim, keepdim=True)', 'total = torch.exp(x).sum(dim=dim, keepdim=True)')], 'he very exponentials you return (after subtracting the max).', True),
    ('softmax', SOFTMAX, [('    return exps / total', '    return x.softmax(dim)')], '(torch.exp, x.amax, .sum and torch.logsumexp are all fine).', True),
    ('softmax', SOFTMAX, [('exps = torch.exp(x - x_max)', 'exps = torch.exp((x - x_max) / 2)')], 'and take exp of x itself, not of a rescaled or reordered x.', True),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('scores = q @ k.transpose(-2, -1)', 'scores = q @ k.transpose(-2, -1) / k.shape[-2]')], 'check the scale (what you divide the scores by, and where).', True),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('    return out, weights', '    return out, scores')], 'abilities with softmax(..., dim=-1) before multiplying by v.', True),
    ('dot_product_attention', DOT_PRODUCT_ATTENTION, [('out = weights @ v', 'out = weights.transpose(-2, -1) @ v[..., :weights.shape[-2], :] if False else weights @ k')], '@ v, of shape (..., T_q, d_v), with nothing else done to it.', True),
    ('scaled_dot_product_attention', SCALED, [('scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)', 'scores = q @ k.transpose(-2, -1) / d_k ** 0.25')], 'check the scale (what you divide the scores by, and where).', True),
    ('scaled_dot_product_attention', SCALED, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.softmax(scores, dim=-1) + 1e-3')], ', with max and sum both taken along that axis, keepdim=True.', True),
    ('scaled_dot_product_attention', SCALED, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.softmax(scores, dim=-1).detach()')], 'tensor autograd saved, or a constant where q should enter).', True),
    ('score_variance', VARIANCE, [('scores = (q * k).sum(dim=-1)', 'scores = (q * k).sum(dim=0)')], 'not a sum over the samples, dim=0', False),
    ('score_variance', VARIANCE, [('scores = scores / math.sqrt(d_k)', 'scores = scores / math.sqrt(n_samples)')], 'scaled by √d_k alone (nothing involving n_samples)', False),
    ('score_variance', VARIANCE, [('return scores.var().item()', 'return scores.var().sqrt().item() ** 2 * scores.mean().abs().item() + scores.std().item()')], 'eviation (≈ √d_k): return the variance (.var()), not .std().', True),
    ('causal_mask', CAUSAL, [('+ (t_k - t_q)', '- (t_k - t_q)')], '=t_k - t_q), or key position <= query position + t_k - t_q).', True),
    ('causal_mask', CAUSAL, [('rows = torch.arange(t_q, device=device)[:, None] + (t_k - t_q)', 'rows = torch.arange(t_k, device=device)[:t_q, None]')], "iagonal=t_k - t_q)). torch's is_causal=True aligns top-left.", True),
    ('causal_mask', CAUSAL, [('return cols <= rows', 'return ~(cols > rows + 1)')], 'in torch.tril, or use key_position <= query_position, not <.', True),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', 'positions[None, :] < lengths.max()')], 'as if every sequence had the same length', False),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', 'positions[None, :] < lengths[:, None].flip(0)')], '] - 1 (position < lengths[b]; each row uses its own length).', True),
    ('attention', ATTENTION, [('scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(~mask, float("inf"))')], "ask is False, with float('-inf'), and keep the allowed ones.", True),
    ('attention', ATTENTION, [('tril(diagonal=t_k - t_q)', 'tril(diagonal=t_q - t_k)')], 'shift the causal diagonal the wrong way (diagonal=t_q - t_k)', False),
    ('attention', ATTENTION, [('scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(~mask, -1.0)')], "inf') before the softmax, so that their weight is exactly 0.", True),
    ('split_heads', SPLIT, [('x.view(b, t, n_heads, d).transpose(1, 2)', 'x.unflatten(-1, (d, n_heads)).movedim(-1, 1)')], ', "b t (h d) -> b h t d", h=n_heads), or x.view(b, t, h, d).transpose(1, 2).', True),
    ('split_heads', SPLIT, [('x.view(b, t, n_heads, d).transpose(1, 2)', 'x.view(b, t, n_heads, d).permute(0, 2, 1, 3).flip(1)')], 'has every head, but in the wrong order', False),
    ('merge_heads', MERGE, [('x.transpose(1, 2).reshape(b, t, h * d)', 'x.transpose(2, 3).reshape(b, t, h * d)')], 'swaps the token and feature axes (transpose(2, 3))', False),
    ('merge_heads', MERGE, [('x.transpose(1, 2).reshape(b, t, h * d)', 'x.permute(0, 2, 1, 3).flatten(1)')], 'That flattens the tokens into the features too', False),
    ('MultiHeadAttention', MHA, [('/ math.sqrt(d_k)', '/ math.sqrt(self.n_heads)')], 'divided by √n_heads', False),
    ('MultiHeadAttention', MHA, [('torch.ones(t, t, dtype=torch.bool, device=x.device).tril()', 'torch.ones(t, t, dtype=torch.bool, device=x.device).tril(diagonal=-1)')], 'masks the diagonal too (a strict causal mask', False),
    ('MultiHeadAttention', MHA, [('v = v.view(b, t, self.n_heads, d_k).transpose(1, 2)', 'v = x.view(b, t, self.n_heads, d_k).transpose(1, 2)')], 'v was taken from x itself', False),
    ('rope_frequencies', FREQUENCIES, [('base ** (-i / d)', '1.0 / (base ** i / d)')], 'than by its position. Let i run from 0, θ_i = base^(-2i/d).', True),
    ('rope_frequencies', FREQUENCIES, [('torch.arange(0, d, 2, dtype=torch.float64)', 'torch.arange(0, d, 2, dtype=torch.float64)[: d // 2] / 2')], '), so the exponent steps by 2/d (torch.arange(0, d, 2) / d).', True),
    ('apply_rope', APPLY_ROPE, [('cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)', 'cos, sin = angles.cos().to(x.dtype), angles.cos().to(x.dtype)')], 'the same cos and sin in both, with the two signs as written.', True),
    ('apply_rope', APPLY_ROPE, [('out_even = x_even * cos - x_odd * sin', 'out_even = x_even * cos + x_odd * sin')], 'the same cos and sin in both, with the two signs as written.', True),
    ('apply_rope', APPLY_ROPE, [('angles = positions.to(torch.float64)[:, None] * theta[None, :]', 'angles = positions.to(torch.float64)[:, None] * theta[None, :] * 2')], '= base^(-2i/d) and p from `positions` (0 … T-1 by default).', True),
    ('RotaryMultiHeadAttention', ROTARY, [('scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])', 'scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)')], 'looks like the scores were divided by √d_model', False),
    ('RotaryMultiHeadAttention', ROTARY, [('            allowed = allowed.tril()', '            allowed = allowed.triu()')], 'uses an inverted causal mask (the upper triangle, torch.triu)', False),
    ('online_softmax', ONLINE_SOFTMAX, [('        m = m_new\n', '')], 'never updates the running maximum (m = m_new after each block)', False),
    ('online_softmax', ONLINE_SOFTMAX, [('torch.exp(block - m_safe).sum(dim=-1, keepdim=True)', 'torch.exp(block - m_safe).sum()')], 'he very exponentials you return (after subtracting the max).', True),
    ('flash_attention', FLASH, [('acc = acc * alpha + p @ v[..., ks:ke, :]', 'acc = acc * alpha + p @ v[..., qs:qs + (ke - ks), :]')], 'raised RuntimeError', False),
    ('flash_attention', FLASH, [('s = s.masked_fill(cols > rows, float("-inf"))', 's = s.masked_fill(cols >= rows, float("-inf"))')], 'wn position. Keep key j when j <= i + T_k - T_q (<=, not <), and let the key loop reach', True),
    ('flash_attention', FLASH, [('hi = min(t_k, qe + t_k - t_q) if is_causal else t_k', 'hi = min(t_k, qe) if is_causal else t_k')], '- 1 + T_k - T_q. Loop to min(T_k, (qs + block) + T_k - T_q).', False),
    ('KVCache', KV_CACHE, [('    def __init__(self):\n        self.keys = {}\n        self.values = {}\n', '    def __init__(self, keys={}, values={}):\n        self.keys = keys\n        self.values = values\n')], 'tributes (keys = {} in the class body) or default arguments.', True),
    ('KVCache', KV_CACHE, [('        return self.keys[layer].shape[-2]', '        return len(self.keys[layer])')], ': the time axis of (b, h, t, d_k) is dim -2, keys.shape[-2].', True),
    ('KVCache', KV_CACHE, [('torch.cat([self.keys[layer], k], dim=-2)', 'torch.cat([k, self.keys[layer]], dim=-2)')], 'first position to the newest, torch.cat([old, new], dim=-2).', True),
    ('cached_attention', CACHED, [('out, _ = attention(q, keys, values, is_causal=True)', 'out, _ = attention(q, k, v, is_causal=True)')], 'the keys and values that cache.append(layer, k, v) returns.', True),
]  # fmt: skip
"""(exercise, right solution, edits, phrase the message must contain, named when first run)."""

RIGHT = [
    ('attention', ATTENTION, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.softmax(scores, dim=-1).nan_to_num(0.0) * 0.5 + 0.5 * torch.softmax(scores, dim=-1)')]),
    ('cached_attention', CACHED, [('positions = torch.arange(t_past, t_past + t_new, device=x.device)', 'positions = torch.arange(t_past, t_past + t_new, device=x.device) - 1')]),
    ('padding_mask', PADDING, [('positions[None, :] < lengths[:, None]', 'positions[None, :] <= lengths[:, None] - 1')]),
    ('attention', ATTENTION, [('scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(~mask, -1e9)')]),
    ('attention', ATTENTION, [('weights = torch.softmax(scores, dim=-1)', 'weights = torch.softmax(scores, dim=-1) * (mask if mask is not None else 1)')]),
    ('online_softmax', ONLINE_SOFTMAX, [('    return torch.exp(x - m) / total', '    return torch.exp(x - m_new) / total.sum(-1, keepdim=True)')]),
    ('KVCache', KV_CACHE, [('        return self.keys[layer].shape[-2]', '        return self.keys[layer].shape[2] + 0 * len(self.keys)')]),
]  # fmt: skip
"""(exercise, right solution, edits): other right spellings, which every check must accept."""


def _check(exercise):
    return getattr(attn_course.checks, f"check_{exercise}")


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase"), DEVELOPMENT)
def test_development_mistakes_are_named(exercise, source, edits, phrase, capsys):
    assert_rejected(_check(exercise), learner(source, exercise, *edits), phrase, capsys)


@pytest.mark.parametrize(("exercise", "source", "edits", "phrase", "named"), HOLD_OUT)
def test_hold_out_mistakes_are_rejected_with_their_message(exercise, source, edits, phrase, named, capsys):
    assert_rejected(_check(exercise), learner(source, exercise, *edits), phrase, capsys)


@pytest.mark.parametrize(("exercise", "source", "edits"), RIGHT)
def test_other_right_spellings_pass(exercise, source, edits, capsys):
    assert_accepted(_check(exercise), learner(source, exercise, *edits), capsys)


def test_the_right_learner_solutions_pass(capsys):
    solutions = {
        "dot_product_scores": SCORES, "softmax": SOFTMAX, "dot_product_attention": DOT_PRODUCT_ATTENTION,
        "scaled_dot_product_attention": SCALED, "score_variance": VARIANCE, "causal_mask": CAUSAL,
        "padding_mask": PADDING, "attention": ATTENTION, "split_heads": SPLIT, "merge_heads": MERGE,
        "MultiHeadAttention": MHA, "rope_frequencies": FREQUENCIES, "apply_rope": APPLY_ROPE,
        "RotaryMultiHeadAttention": ROTARY, "online_softmax": ONLINE_SOFTMAX, "flash_attention": FLASH,
        "KVCache": KV_CACHE, "cached_attention": CACHED,
    }  # fmt: skip
    for exercise, source in solutions.items():
        assert_accepted(_check(exercise), learner(source, exercise), capsys)


def test_the_hold_out_set_covers_every_python_exercise_and_its_first_named_rate_is_recorded():
    exercises = {case[0] for case in HOLD_OUT}
    python_exercises = {  # the hold-out set was written for notebooks 01-08
        n for stem, names in attn_course.reference.EXERCISES.items() if stem < "09" for n in names
    }
    triton = {  # test_checks_triton, test_checks_triton_fast
        "triton_add", "triton_softmax", "triton_scores", "triton_flash_attention", "fast_flash_attention",
    }  # fmt: skip
    added_after_the_hold_out = {  # their learner cases: test_checks_flash, test_checks_decoder, test_checks_generation
        "flash_attention_query_block", "block_forward", "ablate_heads", "generate_with_cache", "next_token_probs",
        "sample_next",
    }  # fmt: skip
    assert python_exercises - exercises <= triton | added_after_the_hold_out
    named = sum(case[4] for case in HOLD_OUT)
    assert (len(HOLD_OUT), named) == (46, 30)  # measured once, before the checks were changed for them


# ---------------------------------------------------------------------------------------------
# Mistakes whose message no other learner-written case reached (tests/test_checks_mistake_coverage.py
# found them): text edits of the solution notebooks' own cells, loaded as the notebook defines them.

SOLUTION_CELL_EDITS = [
    ("flash_attention", "denom = alpha * denom + p.sum(dim=-1, keepdim=True)", "denom = denom + p.sum(dim=-1, keepdim=True)", "(the softmax denominator) when the running maximum grows"),
    ("softmax", "amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n    exps = shifted.exp()\n    return exps / exps.sum(dim=dim", "amax(dim=-1, keepdim=True)  # same shape as x, largest entry 0\n    exps = shifted.exp()\n    return exps / exps.sum(dim=-1", "use the `dim` argument in both the max and the sum"),
    ("MultiHeadAttention", "        if context is not None:  # cross-attention", "        if False:  # cross-attention", "takes the keys and values from x instead of from `context`"),
    ("KVCache", "        return k, v", "        return v, k", "return (keys, values), each cached separately"),
    ("padding_mask", 'rearrange(lengths, "b -> b 1")', 'rearrange(lengths - 1, "b -> b 1")', "marks one position too few in each row"),
    ("sliding_window_mask", "(distance < window)", "(distance < window - 1)", "lets each query see only window - 1 keys"),
    ("alibi_score_mod", "torch.arange(1, n_heads + 1)", "torch.arange(n_heads, 0, -1)", "gives the heads their slopes in reverse order"),
    ("triton_flash_attention", "h, t_q, t_k, 1.0 / math.sqrt(d),", "h, t_q, t_k, math.sqrt(d),", "multiplies the scores by √d"),
    ("triton_flash_attention", "h, t_q, t_k, 1.0 / math.sqrt(d),", "h, t_q, t_k, 1.4426950408889634 / math.sqrt(d),", "folds log2(e) into the scale but then uses tl.exp"),
]  # fmt: skip
"""(exercise, old, new, phrase): a text edit of the solution notebook's cell, and the phrase its message needs."""


@pytest.fixture(scope="module")
def cell_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("solution_cells")


@pytest.mark.parametrize(("exercise", "old", "new", "phrase"), SOLUTION_CELL_EDITS)
def test_solution_cell_mistakes_are_named(exercise, old, new, phrase, cell_folder, capsys):
    from learner_mistakes_holdout2 import load

    if exercise.startswith("triton"):
        pytest.importorskip("triton")
    assert_rejected(_check(exercise), load((exercise, None, old, new), cell_folder), phrase, capsys)


SOLUTION_CELL_RIGHT = [
    ("dot_product_scores", 'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.mT"),
    ("attention", "dot_product_scores(q, k) / math.sqrt(q.shape[-1])", 'torch.einsum("...qd,...kd->...qk", q / math.sqrt(q.shape[-1]), k)'),
    ("attention", 'scores = scores.masked_fill(~allowed, float("-inf"))', "scores = torch.where(allowed, scores, torch.finfo(scores.dtype).min)"),
    ("padding_mask", 'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")', "positions.unsqueeze(0) < lengths.unsqueeze(1)"),
    ("merge_heads", 'rearrange(x, "b h t d -> b t (h d)")', "x.permute(0, 2, 1, 3).flatten(2)"),
    ("MultiHeadAttention", "out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)", "out = torch.stack([attention(q[:, i], k[:, i], v[:, i], mask=None if mask is None else mask.squeeze(-3), is_causal=is_causal)[0] for i in range(self.n_heads)], dim=1)"),
    ("score_variance", "scores = scores / math.sqrt(d_k)", "scores = scores * d_k**-0.5"),
    ("softmax_backward", "D = (grad_p * p).sum(dim=dim, keepdim=True)", "D = torch.sum(p * grad_p, dim=dim, keepdim=True)"),
    ("attention_backward", "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))", 'ds = p * (dp - torch.einsum("...qk,...qk->...q", dp, p)[..., None])'),
    ("repeat_kv", 'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "return x.repeat_interleave(n_rep, dim=1)"),
    ("sliding_window_mask", "return (distance >= 0) & (distance < window)", "return (distance >= 0) & ~(distance >= window)"),
    ("KVCache", "        return k, v", "        return self.keys[layer], self.values[layer]"),
    ("cached_attention", 'return attn.out(rearrange(out, "b h t d -> b t (h d)"))', "return attn.out(out.transpose(1, 2).flatten(2))"),
]  # fmt: skip
"""(exercise, old, new): other right spellings of the solution cells, which the checks must accept."""


@pytest.mark.parametrize(("exercise", "old", "new"), SOLUTION_CELL_RIGHT)
def test_other_right_solution_cells_pass(exercise, old, new, cell_folder, capsys):
    from learner_mistakes_holdout2 import load

    assert_accepted(_check(exercise), load((exercise, None, old, new), cell_folder), capsys)
