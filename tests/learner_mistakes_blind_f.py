"""Blind set F of learner mistakes and right alternatives, for every exercise of 01-10 that
tests/blind_compare.py has inputs for.

Written 2026-12-05 from the solution notebooks (solutions/*.ipynb: each exercise's text and its
solution cell) and the topic modules (attn_course/*.py, attn_course/triton_flash/) only, by someone
who read no check, no test of a check and no earlier set of mistakes. Each mistake is a text edit of
the solution notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`,
occurring exactly once in that cell, replaced by `new`, applied by `learner_mistakes_blind_a.load`),
with the idea of the mistake in one short phrase: three per exercise of 01-06, four per exercise of
07, 09 and 10, two per Triton exercise of 08 and 09. Each alternative is an edit of the same kind that
keeps the function right: one per exercise that is not a Triton one.

Verified with `blind_compare.verify(HOLDOUT_F, ALTERNATIVES_F, folder)` under TRITON_INTERPRET=1: every
mistake loads and differs from `attn_course.reference` on an input the exercise's contract allows, and
every alternative agrees with it on all of blind_compare's inputs (verify returned []).
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_F: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "scores transposed: (T_k, T_q) instead of (T_q, T_k)",
      '"...qd,...kd->...qk"', '"...qd,...kd->...kq"'),
    M("dot_product_scores", "raw scores asked, scaled by 1/sqrt(d) anyway",
      "q, k)  # (..., T_q, T_k)", "q, k) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)"),
    M("dot_product_scores", ".T reverses every axis, batch axes too",
      'return torch.einsum("...qd,...kd->...qk", q, k)', "return q @ k.T"),
    M("softmax", "no max subtracted before exp (overflow)",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"),
    M("softmax", "max subtracted in place: the caller's x changed",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x.sub_(x.amax(dim=dim, keepdim=True))"),
    M("softmax", "keepdim forgotten in the normalising sum",
      "exps / exps.sum(dim=dim, keepdim=True)", "exps / exps.sum(dim=dim)"),
    M("dot_product_attention", "softmax over the query axis",
      "softmax(dot_product_scores(q, k), dim=-1)", "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "weights average the keys instead of the values",
      "out = weights @ v", "out = weights @ k"),
    M("dot_product_attention", "returns (weights, out) in the wrong order",
      "return out, weights", "return weights, out"),
    # 02 · scaling
    M("score_variance", "scaled by d_k instead of sqrt(d_k)",
      "scores / math.sqrt(d_k)", "scores / d_k"),
    M("score_variance", "k is the same draw as q",
      "    k = torch.randn(n_samples, d_k, dtype=torch.float64)", "    k = q"),
    M("score_variance", "standard deviation returned instead of variance",
      "return scores.var().item()", "return scores.std().item()"),
    M("scaled_dot_product_attention", "scale taken from the values' width d_v",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "divided by d_k, not its square root",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q, k) / d_k"),
    M("scaled_dot_product_attention", "scale applied to the weights after the softmax",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    # 03 · causal masking
    M("causal_mask", "top-left aligned: no T_k - T_q offset",
      "torch.arange(t_q, device=device) + (t_k - t_q)", "torch.arange(t_q, device=device)"),
    M("causal_mask", "strict <: a query may not see its own key",
      '"k -> 1 k") <= rearrange(', '"k -> 1 k") < rearrange('),
    M("causal_mask", "polarity inverted: True marks the future keys",
      '"k -> 1 k") <= rearrange(', '"k -> 1 k") > rearrange('),
    M("padding_mask", "<= length: one padding position counted as real",
      '"t -> 1 t") < rearrange(', '"t -> 1 t") <= rearrange('),
    M("padding_mask", "mask laid out (t, B) instead of (B, t)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("padding_mask", "padding assumed at the front of each row",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> 1 t") >= t - rearrange(lengths, "b -> b 1")'),
    M("attention", "mask applied to the weights after the softmax, not renormalised",
      'scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)",
      "weights = softmax(scores, dim=-1).masked_fill(~allowed, 0.0)"),
    M("attention", "a given mask makes is_causal ignored",
      "    if is_causal:", "    elif is_causal:"),
    M("attention", "masked scores set to 0 instead of -inf",
      '~allowed, float("-inf")', "~allowed, 0.0"),
    # 04 · multi-head attention
    M("split_heads", "features grouped (d h): heads interleaved",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "n_heads read as the width of a head",
      "h=n_heads)", "d=n_heads)"),
    M("split_heads", "reshaped to (b, h, t, d) without a transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)', "x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("merge_heads", "merged in (d h) order",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshaped without moving the head axis back",
      'rearrange(x, "b h t d -> b t (h d)")', "x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "view of the transposed tensor (not contiguous)",
      'rearrange(x, "b h t d -> b t (h d)")', "x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("MultiHeadAttention", "cross-attention takes the queries from the context too",
      "_, k, v = self.qkv(context)", "q, k, v = self.qkv(context)"),
    M("MultiHeadAttention", "mask not given a head axis",
      '            mask = rearrange(mask, "... q k -> ... 1 q k")', "            pass"),
    M("MultiHeadAttention", "is_causal not passed on to attention",
      "mask=mask, is_causal=is_causal)", "mask=mask)"),
    # 05 · RoPE
    M("rope_frequencies", "exponent uses i instead of 2i",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "sign of the exponent dropped: base^(2i/d)",
      "base ** (-two_i / d)", "base ** (two_i / d)"),
    M("rope_frequencies", "one frequency per feature instead of per pair",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d, 1, dtype=torch.float64)"),
    M("apply_rope", "rotation by minus the angle",
      "[even * cos - odd * sin, even * sin + odd * cos]", "[even * cos + odd * sin, odd * cos - even * sin]"),
    M("apply_rope", "pairs taken from the two halves, output interleaved",
      "even, odd = x[..., 0::2], x[..., 1::2]", "even, odd = x[..., : d // 2], x[..., d // 2 :]"),
    M("apply_rope", "rotated pairs written into x in place",
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")',
      "    x[..., 0::2], x[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos\n"
      "    return x"),
    M("RotaryMultiHeadAttention", "values rotated too",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "RoPE with the default base, not self.base",
      "apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "apply_rope(q, positions), apply_rope(k, positions)"),
    M("RotaryMultiHeadAttention", "rotation over d_model before the heads are split",
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    # 06 · FlashAttention
    M("online_softmax", "running sum not rescaled when the max grows",
      "denom = denom * torch.exp(m - m_safe) + ", "denom = denom + "),
    M("online_softmax", "no guard: -inf - -inf gives NaN on an all -inf block",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("online_softmax", "last partial block never read",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] - block_size + 1, block_size)"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + ", "acc = acc + "),
    M("flash_attention_query_block", "lse without the running max",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),
    M("flash_attention_query_block", "probabilities shifted by the stale max m",
      "p = torch.exp(s - m_new)", "p = torch.exp(s - m)"),
    M("flash_attention", "key loop stops at the block's first row, not its last",
      "k_end = min(t_k, qe + offset)", "k_end = min(t_k, qs + 1 + offset)"),
    M("flash_attention", "diagonal mask from relative rows (offset left out)",
      "torch.arange(qs, qe, device=q.device) + offset", "torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "running max not carried to the next key block",
      "            m = m_new\n        denom = torch.where", "        denom = torch.where"),
    # 07 · KV cache and generation
    M("block_forward", "post-norm: LayerNorm after each residual sum",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    x = block.ln1(x + block.attn(x, is_causal=True))  # (b, t, d_model)\n"
      "    return block.ln2(x + block.mlp(x))"),
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x))"),
    M("block_forward", "MLP reads the block's input, not the stream after attention",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "residual added in place into the caller's x",
      "    x = x + block.attn(", "    x += block.attn("),
    M("ablate_heads", "rows of out.weight zeroed instead of columns",
      "weight[:, head * d_k : (head + 1) * d_k]", "weight[head * d_k : (head + 1) * d_k, :]"),
    M("ablate_heads", "the original model switched off, no copy",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "out's bias zeroed too, as if it belonged to the head",
      "weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "weight[:, head * d_k : (head + 1) * d_k] = 0.0\n"
      "            ablated.blocks[layer].attn.out.bias.zero_()"),
    M("ablate_heads", "layers counted from 1",
      "ablated.blocks[layer].attn", "ablated.blocks[layer - 1].attn"),
    M("KVCache", "appended along the feature axis",
      "dim=-2)  # (b, h, t_past + t_new, d_k)\n            v = torch.cat([self.values[layer], v], dim=-2)",
      "dim=-1)  # (b, h, t_past + t_new, d_k)\n            v = torch.cat([self.values[layer], v], dim=-1)"),
    M("KVCache", "new keys and values put before the cached ones",
      "torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "storage on the class, shared by every cache",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"),
    M("KVCache", "append returns only this step's keys and values",
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n",
      "            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)\n"
      "            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)\n"
      "        else:\n"
      "            self.keys[layer], self.values[layer] = k, v\n"),
    M("cached_attention", "positions restart at 0 in every chunk",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "SDPA's top-left causal mask over the cache",
      "out, _ = attention(q, keys, values, is_causal=True)",
      "out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)"),
    M("cached_attention", "keys cached before RoPE, never rotated",
      "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)"
      "  # each (b, h, t_new, d_k)\n"
      "    keys, values = cache.append(layer, k, v)",
      "    keys, values = cache.append(layer, k, v)\n"
      "    q = apply_rope(q, positions, attn.base)"),
    M("cached_attention", "attends to this chunk's keys only, not the cache's",
      "attention(q, keys, values, is_causal=True)", "attention(q, k, v, is_causal=True)"),
    M("generate_with_cache", "whole sequence stepped again despite the cache",
      "logits = model.step(next_token, cache, attend)", "logits = model.step(tokens, cache, attend)"),
    M("generate_with_cache", "prefill logits of the first position, not the last",
      "model.step(prompt, cache, attend)[:, -1]", "model.step(prompt, cache, attend)[:, 0]"),
    M("generate_with_cache", "logits not updated after each new token",
      "logits = model.step(next_token, cache, attend)", "model.step(next_token, cache, attend)"),
    M("generate_with_cache", "one token short: the loop runs n_new - 1 times",
      "for i in range(n_new):", "for i in range(n_new - 1):"),
    M("next_token_probs", "temperature multiplies the logits",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "top-k threshold from the k smallest logits",
      "scaled.topk(top_k, dim=-1)", "scaled.topk(top_k, dim=-1, largest=False)"),
    M("next_token_probs", "top-k cut after the softmax, not renormalised",
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))',
      "        return torch.softmax(scaled, dim=-1).masked_fill(scaled < kth, 0.0)"),
    M("next_token_probs", "temperature applied in place to the caller's logits",
      "scaled = logits / temperature", "scaled = logits.div_(temperature)"),
    M("sample_next", "draws from softmax(logits): temperature and top-k ignored",
      "probs = next_token_probs(logits, temperature, top_k)", "probs = torch.softmax(logits, dim=-1)"),
    M("sample_next", "generator not passed: a seed does not reproduce",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
    M("sample_next", "argmax instead of a draw",
      "torch.multinomial(probs, 1, generator=generator)", "probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "returns (b,) instead of (b, 1)",
      "torch.multinomial(probs, 1, generator=generator)",
      "torch.multinomial(probs, 1, generator=generator)[:, 0]"),
    # 08 · Triton
    M("triton_add", "grid rounded down: the last partial block has no program",
      "grid = (triton.cdiv(n, block),)", "grid = (n // block,)"),
    M("triton_add", "y's layout ignored: only x made contiguous",
      "x, y = x.contiguous(), y.contiguous()", "x = x.contiguous()"),
    M("triton_softmax", "running sum not rescaled when the max grows",
      "total = total * tl.exp(m - m_safe) + ", "total = total + "),
    M("triton_softmax", "lanes past the row's end loaded as 0 in the first pass",
      'other=float("-inf")).to(tl.float32)  # (BLOCK,)\n        m_new',
      "other=0.0).to(tl.float32)  # (BLOCK,)\n        m_new"),
    M("triton_scores", "1/sqrt(d) scale left out",
      "h, t_q, t_k, 1.0 / math.sqrt(d),", "h, t_q, t_k, 1.0,"),
    M("triton_scores", "q's strides assumed contiguous",
      "q.stride(0), q.stride(1), q.stride(2),", "h * t_q * d, t_q * d, d,"),
    M("triton_flash_attention", "causal key bound from the block's first row",
      "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)",
      "hi = tl.minimum(t_k, pid_m * BLOCK_M + offset)"),
    M("triton_flash_attention", "lse without the running max",
      "lse = m + tl.log(total_safe)", "lse = tl.log(total_safe)"),
    # 09 · backward
    M("softmax_backward", "sign flipped: p (D - g)",
      "p * (grad_p - D)", "p * (D - grad_p)"),
    M("softmax_backward", "D summed over the last axis whatever dim is",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "D without the factor p: sum of g alone",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "grad_p.sum(dim=dim, keepdim=True)"),
    M("softmax_backward", "only the Jacobian's diagonal: p (1 - p) g",
      "return p * (grad_p - D)", "return p * (1 - p) * grad_p"),
    M("attention_backward", "1/sqrt(d) left out of dq",
      "dq = ds @ k * scale", "dq = ds @ k"),
    M("attention_backward", "dS = P dP: the softmax's D term missing",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))", "ds = p * dp"),
    M("attention_backward", "probabilities recomputed without the causal mask",
      "_, p = attention(q, k, v, is_causal=is_causal)", "_, p = attention(q, k, v)"),
    M("attention_backward", "D of the softmax summed over the query axis",
      "(dp * p).sum(dim=-1, keepdim=True)", "(dp * p).sum(dim=-2, keepdim=True)"),
    M("flash_attention_backward", "dq tile overwritten instead of accumulated",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("flash_attention_backward", "P recomputed without subtracting the lse",
      "p = torch.exp(s - lse[..., qs:qe, None])", "p = torch.exp(s)"),
    M("flash_attention_backward", "causal tile skip tested on the block's first row",
      "ks > qe - 1 + offset", "ks > qs + offset"),
    M("flash_attention_backward", "tiles on the diagonal not masked inside",
      "            if is_causal:\n"
      "                rows = torch.arange(qs, qe, device=q.device)[:, None] + offset  # (Bq, 1)\n"
      "                cols = torch.arange(ks, ke, device=q.device)[None, :]  # (1, Bk)\n"
      '                s = s.masked_fill(cols > rows, float("-inf"))  # (..., Bq, Bk)\n',
      ""),
    M("FlashAttentionFunction", "gradients returned in the wrong order",
      "return dq, dk, dv, None, None", "return dk, dq, dv, None, None"),
    M("FlashAttentionFunction", "backward ignores is_causal and block_size",
      "grad_out, ctx.is_causal, ctx.block_size)", "grad_out)"),
    M("FlashAttentionFunction", "upstream gradient replaced by ones",
      "lse, grad_out, ctx.is_causal", "lse, torch.ones_like(grad_out), ctx.is_causal"),
    M("FlashAttentionFunction", "no None for the two non-tensor inputs",
      "return dq, dk, dv, None, None", "return dq, dk, dv"),
    M("triton_flash_attention_backward", "kernel 1's grid counts query blocks",
      "[(triton.cdiv(T_k, block_n), B * H)]", "[(triton.cdiv(T_q, block_n), B * H)]"),
    M("triton_flash_attention_backward", "causal flag not passed to the kernels",
      "IS_CAUSAL=is_causal)", "IS_CAUSAL=False)"),
    # 10 · modern attention
    M("repeat_kv", "interleaved (r h) order instead of grouped",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "repeated along the time axis",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h (t r) d"'),
    M("repeat_kv", "n_rep read as the total number of heads",
      "r=n_rep)", "r=n_rep // x.shape[1])"),
    M("repeat_kv", "view of an expanded tensor",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "x[:, :, None].expand(-1, -1, n_rep, -1, -1).view(x.shape[0], -1, *x.shape[2:])"),
    M("GroupedQueryAttention", "key/value heads tiled (interleaved) by .repeat",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "values from the key projection",
      "v = rearrange(self.v(x)", "v = rearrange(self.k(x)"),
    M("GroupedQueryAttention", "heads merged in (d h) order",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("GroupedQueryAttention", "output projection left out",
      'return self.out(rearrange(out, "b h t d -> b t (h d)"))',
      'return rearrange(out, "b h t d -> b t (h d)")'),
    M("sliding_window_mask", "window one key too wide (<= window)",
      "(distance < window)", "(distance <= window)"),
    M("sliding_window_mask", "top-left aligned: no T_k - T_q offset",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "future keys not excluded",
      "(distance >= 0) & (distance < window)", "(distance.abs() < window)"),
    M("sliding_window_mask", "mask laid out (t_k, t_q)",
      'rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")',
      'rearrange(query_positions, "q -> 1 q") - rearrange(key_positions, "k -> k 1")'),
    M("sliding_window_flash_attention", "first key block from the block's last row",
      "first = max(0, qs + offset - window + 1)", "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "window one key too wide inside the tile",
      "(distance >= window)", "(distance > window)"),
    M("sliding_window_flash_attention", "future keys not masked inside the tile",
      "(distance < 0) | (distance >= window)", "distance >= window"),
    M("sliding_window_flash_attention", "1/sqrt(d) scale left out",
      "q[..., qs : qs + block_size, :] / math.sqrt(d)", "q[..., qs : qs + block_size, :]"),
    M("alibi_score_mod", "bias sign reversed: slope (i - j)",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "slopes start at exponent 0 (first head's slope 1)",
      "torch.arange(1, n_heads + 1)", "torch.arange(n_heads)"),
    M("alibi_score_mod", "non-power-of-two head counts: plain geometric sequence",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "slopes indexed by the batch index",
      "score + slopes[h] *", "score + slopes[b] *"),
    M("document_mask_mod", "not causal: the whole document visible",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "same document OR causal",
      "document_ids[kv_idx]) & (q_idx", "document_ids[kv_idx]) | (q_idx"),
    M("document_mask_mod", "earlier documents visible too",
      "document_ids[q_idx] == document_ids[kv_idx]", "document_ids[q_idx] >= document_ids[kv_idx]"),
    M("document_mask_mod", "a token may not see itself",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("rotary_window_attention", "window one key too wide (<= window)",
      "q_idx - kv_idx < window", "q_idx - kv_idx <= window"),
    M("rotary_window_attention", "given positions ignored",
      "apply_rope(q, positions), apply_rope(k, positions)", "apply_rope(q), apply_rope(k)"),
    M("rotary_window_attention", "RoPE on the queries only",
      "apply_rope(q, positions), apply_rope(k, positions)", "apply_rope(q, positions), k"),
    M("rotary_window_attention", "window distance measured key minus query",
      "(q_idx - kv_idx < window)", "(kv_idx - q_idx < window)"),
)
ALTERNATIVES_F: tuple[BlindAlternative, ...] = (
    A("dot_product_scores", "matmul with the last two axes of k swapped",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.transpose(-2, -1)"),
    A("softmax", "exp of x minus its logsumexp",
      "return exps / exps.sum(dim=dim, keepdim=True)",
      "return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),
    A("dot_product_attention", "torch.softmax of q @ kᵀ",
      "weights = softmax(dot_product_scores(q, k), dim=-1)",
      "weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)"),
    A("score_variance", "dot products as an elementwise product summed",
      'einsum(q, k, "n d, n d -> n")', "(q * k).sum(dim=-1)"),
    A("scaled_dot_product_attention", "queries scaled before the product",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q / math.sqrt(d_k), k)"),
    A("causal_mask", "tril with the diagonal shifted by T_k - T_q",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "indexing with None instead of rearrange",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "positions[None, :] < lengths[:, None]"),
    A("attention", "causal part built with tril",
      "allowed & causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "allowed & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)"
      ".tril(k.shape[-2] - q.shape[-2])"),
    A("split_heads", "reshape then transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "x.reshape(*x.shape[:2], n_heads, -1).transpose(1, 2)"),
    A("merge_heads", "transpose then reshape",
      'rearrange(x, "b h t d -> b t (h d)")', "x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)"),
    A("MultiHeadAttention", "heads merged by transpose and flatten",
      "return self.out(merge_heads(out))", "return self.out(out.transpose(1, 2).flatten(2))"),
    A("rope_frequencies", "reciprocal of base to the 2i/d",
      "return base ** (-two_i / d)",
      "return 1.0 / base ** (torch.arange(d // 2, dtype=torch.float64) * 2 / d)"),
    A("apply_rope", "pairs as complex numbers times e^(i angle)",
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")',
      "    pairs = torch.view_as_complex(torch.stack([even, odd], dim=-1).contiguous())  # (..., T, d/2)\n"
      "    return torch.view_as_real(pairs * torch.complex(cos, sin)).flatten(-2)"),
    A("RotaryMultiHeadAttention", "q and k rotated in one call",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(torch.stack([q, k]), positions, self.base).unbind(0)"),
    A("online_softmax", "final division folded into the log-sum-exp",
      "return torch.exp(x - m) / denom", "return torch.exp(x - (m + torch.log(denom)))"),
    A("flash_attention_query_block", "p @ v written as an einsum",
      "p @ v[..., ks : ks + block_size, :]",
      'torch.einsum("...qk,...kd->...qd", p, v[..., ks : ks + block_size, :])'),
    A("flash_attention", "every causal tile masked, crossing the diagonal or not",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal:"),
    A("block_forward", "normed input named first",
      "    x = x + block.attn(block.ln1(x), is_causal=True)",
      "    h = block.ln1(x)\n    x = x + block.attn(h, is_causal=True)"),
    A("ablate_heads", "weight viewed per head, the head's slice zeroed",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.out.weight.view(-1, model.config.n_heads, d_k)[:, head] = 0.0"),
    A("KVCache", "cat with an empty slice where nothing is cached",
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n",
      "        k = torch.cat([self.keys.get(layer, k[..., :0, :]), k], dim=-2)\n"
      "        v = torch.cat([self.values.get(layer, v[..., :0, :]), v], dim=-2)\n"),
    A("cached_attention", "unrotated keys cached, all rotated at each step",
      "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)"
      "  # each (b, h, t_new, d_k)\n"
      "    keys, values = cache.append(layer, k, v)",
      "    keys, values = cache.append(layer, k, v)\n"
      "    q = apply_rope(q, positions, attn.base)\n"
      "    keys = apply_rope(keys, torch.arange(t_past + t_new, device=x.device), attn.base)"),
    A("generate_with_cache", "one loop: step, then pick",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]"
      "  # (b, vocab_size): the new token only\n",
      "    tokens, fed = prompt, prompt\n"
      "    for _ in range(n_new):\n"
      "        fed = pick(model.step(fed, cache, attend)[:, -1])  # (b, 1)\n"
      "        tokens = torch.cat([tokens, fed], dim=1)\n"),
    A("next_token_probs", "k-th largest from a descending sort",
      "scaled.topk(top_k, dim=-1).values[:, -1:]",
      "scaled.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]"),
    A("sample_next", "inverse-CDF draw from a uniform",
      "    return torch.multinomial(probs, 1, generator=generator)",
      "    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)\n"
      "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True).clamp(max=probs.shape[-1] - 1)"),
    A("softmax_backward", "p g minus p times its row sum",
      "    D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)",
      "    pg = p * grad_p\n    return pg - p * pg.sum(dim=dim, keepdim=True)"),
    A("attention_backward", "D from rowsum(dO * O)",
      "    _, p = attention(q, k, v, is_causal=is_causal)  # (..., T_q, T_k)\n"
      "    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)\n"
      "    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)\n"
      "    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))",
      "    out, p = attention(q, k, v, is_causal=is_causal)  # (..., T_q, T_k)\n"
      "    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)\n"
      "    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)\n"
      "    ds = p * (dp - (grad_out * out).sum(dim=-1, keepdim=True))"),
    A("flash_attention_backward", "1/sqrt(d) folded into dS once",
      "ds = p * (dp - D[..., qs:qe, :])  # (..., Bq, Bk)\n"
      "            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)\n"
      "            dk_acc += ds.transpose(-1, -2) @ q_blk * scale",
      "ds = p * (dp - D[..., qs:qe, :]) * scale  # (..., Bq, Bk): dS / sqrt(d)\n"
      "            dq[..., qs:qe, :] += ds @ k_blk  # (..., Bq, d)\n"
      "            dk_acc += ds.transpose(-1, -2) @ q_blk"),
    A("FlashAttentionFunction", "backward's result unpacked into one return",
      "        dq, dk, dv = flash_attention_backward("
      "q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "        grads = flash_attention_backward(\n"
      "            q, k, v, out, lse, grad_out, is_causal=ctx.is_causal, block_size=ctx.block_size\n"
      "        )\n"
      "        return (*grads, None, None)"),
    A("repeat_kv", "repeat_interleave along the head axis",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x.repeat_interleave(n_rep, dim=1)"),
    A("GroupedQueryAttention", "query heads grouped, keys broadcast over each group",
      "        n_rep = self.n_heads // self.n_kv_heads\n"
      "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_head)\n"
      '        return self.out(rearrange(out, "b h t d -> b t (h d)"))',
      '        q = rearrange(q, "b (g r) t d -> b g r t d", g=self.n_kv_heads)\n'
      "        k, v = k[:, :, None], v[:, :, None]  # (b, h_kv, 1, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3).unsqueeze(-3)\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)\n"
      '        return self.out(rearrange(out, "b g r t d -> b t (g r d)"))'),
    A("sliding_window_mask", "difference of two shifted lower triangles",
      "    return (distance >= 0) & (distance < window)",
      "    ones = torch.ones(t_q, t_k, dtype=torch.bool)\n"
      "    return ones.tril(t_k - t_q) & ~ones.tril(t_k - t_q - window)"),
    A("sliding_window_flash_attention", "loop bound from the last row instead of a break",
      "        for ks in range(first // block_size * block_size, t_k, block_size):\n"
      "            if ks > rows[-1]:\n"
      "                break  # this block and all later ones are after the diagonal\n",
      "        last = min(t_k, qs + q_blk.shape[-2] + offset)  # one past the last row's own key\n"
      "        for ks in range(first - first % block_size, last, block_size):\n"),
    A("alibi_score_mod", "slopes as powers of the first slope",
      "return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)",
      "return (2.0 ** (-8.0 / n_heads)) ** torch.arange(1, n_heads + 1)"),
    A("document_mask_mod", "key at or after its document's first token",
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "    starts = torch.searchsorted(document_ids, document_ids)  # each token's document start\n\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (kv_idx >= starts[q_idx]) & (kv_idx <= q_idx)"),
    A("rotary_window_attention", "the course's attention with a window mask and repeated heads",
      "    def in_window(b, h, q_idx, kv_idx):\n"
      "        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n\n"
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "    i = torch.arange(t, device=x.device)\n"
      "    mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)  # (t, t)\n"
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask=mask)"),
)
# fmt: on
