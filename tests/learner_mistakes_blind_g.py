"""Blind set G of learner mistakes and right alternatives, for every exercise blind_compare has inputs for.

Written on 2026-12-05 from the solution notebooks (solutions/*.ipynb, the text around each exercise and
its solution cell) and the topic modules (attn_course/*.py, attn_course/triton_flash/) only, by someone
who read no check, no test of a check and no earlier set of mistakes. Each mistake is a text edit of
the solution notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`,
occurring exactly once in that cell, replaced by `new`), with the idea of the mistake in one short
phrase: three for every non-Triton exercise of notebooks 01-06, four for every exercise of 07, 09 and 10
and for each Triton exercise (08's four, 09's wrapper). Each alternative is an edit of the same kind that
keeps the function right: one for every non-Triton exercise.

Verified with tests/blind_compare.py (`verify(HOLDOUT_G, ALTERNATIVES_G, folder)` under TRITON_INTERPRET=1
printed []): every edit loads, every mistake differs from `attn_course.reference` on an input the
exercise's contract allows, and every alternative agrees with it on all of them. The Triton mistakes
keep every load and store inside its tensor (masks, strides and grids that stay in bounds).
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_G: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "scores laid out keys × queries",
      '"...qd,...kd->...qk"', '"...qd,...kd->...kq"'),
    M("dot_product_scores", "scaled by √d although raw scores are asked",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      'return torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])'),
    M("dot_product_scores", "k.T reverses every axis, not the last two",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.T"),
    M("softmax", "no shift by the maximum: exp overflows",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"),
    M("softmax", "normalising sum always over the last axis",
      "exps.sum(dim=dim, keepdim=True)", "exps.sum(dim=-1, keepdim=True)"),
    M("softmax", "shifts the input in place",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x.sub_(x.amax(dim=dim, keepdim=True))"),
    M("dot_product_attention", "softmax over the query axis",
      "dim=-1)  # (..., T_q, T_k)", "dim=-2)  # (..., T_q, T_k)"),
    M("dot_product_attention", "weights applied to the keys, not the values",
      "out = weights @ v", "out = weights @ k"),
    M("dot_product_attention", "returns the raw scores as the weights",
      "return out, weights", "return out, dot_product_scores(q, k)"),
    # 02 · scaling
    M("score_variance", "scaled by d_k instead of √d_k",
      "scores / math.sqrt(d_k)", "scores / d_k"),
    M("score_variance", "standard deviation returned, not the variance",
      "scores.var().item()", "scores.std().item()"),
    M("score_variance", "uniform components instead of N(0, 1)",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n    k = torch.randn(",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n    k = torch.rand("),
    M("scaled_dot_product_attention", "divided by d_k instead of √d_k",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q, k) / d_k"),
    M("scaled_dot_product_attention", "d_k read from the values' width",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "scale applied to the weights after the softmax",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    # 03 · causal masking
    M("causal_mask", "aligned top-left: the T_k − T_q offset left out",
      "torch.arange(t_q, device=device) + (t_k - t_q)", "torch.arange(t_q, device=device)"),
    M("causal_mask", "a query may not see its own key",
      'rearrange(key_positions, "k -> 1 k") <= rearrange',
      'rearrange(key_positions, "k -> 1 k") < rearrange'),
    M("causal_mask", "keys on the rows, queries on the columns",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      'return rearrange(key_positions, "k -> k 1") <= rearrange(query_positions, "q -> 1 q")'),
    M("padding_mask", "one position too many: <= the length",
      '< rearrange(lengths, "b -> b 1")', '<= rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "True on the padding instead of the tokens",
      '< rearrange(lengths, "b -> b 1")', '>= rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "positions on the rows, sequences on the columns",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'return rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("attention", "weights masked after the softmax, not renormalised",
      'scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)  # (..., T_q, T_k): NaN in a row that allows no key\n"
      "    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)",
      "weights = softmax(scores, dim=-1)  # (..., T_q, T_k)\n"
      "    weights = weights.masked_fill(~allowed, 0.0)"),
    M("attention", "causal mask aligned top-left",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()"),
    M("attention", "mask read as True = hidden",
      "allowed = allowed & mask", "allowed = allowed & ~mask"),
    # 04 · multi-head attention
    M("split_heads", "features split (d h): heads interleaved",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "reshaped to (b, h, t, d) without moving the time axis",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "n_heads read as the width of a head",
      "h=n_heads", "d=n_heads"),
    M("merge_heads", "merged (d h): features interleaved across heads",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshaped without moving the head axis",
      'return rearrange(x, "b h t d -> b t (h d)")', "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "heads summed instead of concatenated",
      'return rearrange(x, "b h t d -> b t (h d)")', "return x.sum(dim=1)"),
    M("MultiHeadAttention", "cross-attention takes the queries from the context too",
      "_, k, v = self.qkv(context)", "q, k, v = self.qkv(context)"),
    M("MultiHeadAttention", "mask given no head axis",
      'mask = rearrange(mask, "... q k -> ... 1 q k")', "mask = mask"),
    M("MultiHeadAttention", "is_causal not passed on to attention",
      "out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)",
      "out, _ = attention(q, k, v, mask=mask)"),
    # 05 · RoPE
    M("rope_frequencies", "exponent -i/d: the index not doubled",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "exponent's sign flipped: base^(2i/d)",
      "base ** (-two_i / d)", "base ** (two_i / d)"),
    M("rope_frequencies", "floor division in the exponent",
      "base ** (-two_i / d)", "base ** (-(two_i // d))"),
    M("apply_rope", "rotation the other way: the signs of sin swapped",
      "even * cos - odd * sin, even * sin + odd * cos", "even * cos + odd * sin, odd * cos - even * sin"),
    M("apply_rope", "rotated halves concatenated, not interleaved back",
      '"two ... half -> ... (half two)"', '"two ... half -> ... (two half)"'),
    M("apply_rope", "positions argument ignored",
      "if positions is None:\n        positions = torch.arange(t, device=x.device)",
      "positions = torch.arange(t, device=x.device)"),
    M("RotaryMultiHeadAttention", "values rotated too",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "rotation before the split into heads",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "head axis put at dim 1: wrong for a (t, t) mask",
      "mask.unsqueeze(-3)", "mask.unsqueeze(1)"),
    # 06 · FlashAttention
    M("online_softmax", "running sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + ", "denom = denom + "),
    M("online_softmax", "no guard for a block of -inf: NaN",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)", "m_safe = m_new  # (..., 1)"),
    M("online_softmax", "last partial block skipped",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] // block_size * block_size, block_size)"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + ", "acc = acc + "),
    M("flash_attention_query_block", "1/√d scale left out",
      "q_blk = q_blk / math.sqrt(q_blk.shape[-1])", "q_blk = q_blk"),
    M("flash_attention_query_block", "lse without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),
    M("flash_attention", "causal rows inside a tile without the T_k − T_q offset",
      "rows = torch.arange(qs, qe, device=q.device) + offset",
      "rows = torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "causal key bound one short: the last row's own key left out",
      "min(t_k, qe + offset)", "min(t_k, qe - 1 + offset)"),
    M("flash_attention", "tile masked only when its first key is past the first row",
      "ke - 1 > qs + offset", "ks > qs + offset"),
    # 07 · KV cache
    M("block_forward", "post-norm: LayerNorm after each residual sum",
      "x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "x = block.ln1(x + block.attn(x, is_causal=True))  # (b, t, d_model)\n"
      "    return block.ln2(x + block.mlp(x))"),
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x))"),
    M("block_forward", "MLP reads the block's input, not the stream after attention",
      "x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "attention output replaces the stream: no residual",
      "x = x + block.attn(", "x = block.attn("),
    M("ablate_heads", "the head's rows of W^O zeroed (output features), not its columns",
      ".out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      ".out.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "edits the model itself, no copy",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "output bias zeroed as if it belonged to the head",
      ".out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      ".out.weight[:, head * d_k : (head + 1) * d_k] = 0.0\n"
      "            ablated.blocks[layer].attn.out.bias.zero_()"),
    M("ablate_heads", "the head's queries zeroed instead of its output",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.qkv.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("KVCache", "concatenated along the batch axis, not time",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([self.keys[layer], k], dim=0)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=0)"),
    M("KVCache", "new keys and values put before the cached ones",
      "torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "dicts as class attributes, shared by every cache",
      "def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)",
      "keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n\n"
      "    def __init__(self) -> None:\n"
      "        pass"),
    M("KVCache", "each append replaces the layer's cache instead of extending it",
      "if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        ",
      ""),
    M("cached_attention", "positions restart at 0 in every call",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "attends to the new keys only, not the cache",
      "attention(q, keys, values, is_causal=True)", "attention(q, k, v, is_causal=True)"),
    M("cached_attention", "keys cached before they are rotated",
      "q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)"
      "  # each (b, h, t_new, d_k)\n"
      "    keys, values = cache.append(layer, k, v)  # each (b, h, t_past + t_new, d_k)",
      "keys, values = cache.append(layer, k, v)  # each (b, h, t_past + t_new, d_k)\n"
      "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)"),
    M("cached_attention", "no causal mask: a new token may see every cached key anyway",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values)"),
    M("generate_with_cache", "prefill logits keep their time axis ([:, -1:])",
      "model.step(prompt, cache, attend)[:, -1]", "model.step(prompt, cache, attend)[:, -1:]"),
    M("generate_with_cache", "the whole sequence fed again at every step",
      "model.step(next_token, cache, attend)", "model.step(tokens, cache, attend)"),
    M("generate_with_cache", "one step too many: the last token is fed too",
      "if i < n_new - 1:\n            logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(next_token, cache, attend)[:, -1]"),
    M("generate_with_cache", "a step's logits not kept: the prefill's used every time",
      "logits = model.step(next_token, cache, attend)[:, -1]", "model.step(next_token, cache, attend)"),
    M("next_token_probs", "logits multiplied by the temperature",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "logits equal to the k-th dropped too (<=)",
      "scaled < kth", "scaled <= kth"),
    M("next_token_probs", "probabilities zeroed after the softmax, not renormalised",
      'scaled = scaled.masked_fill(scaled < kth, float("-inf"))',
      "return torch.softmax(scaled, dim=-1).masked_fill(scaled < kth, 0.0)"),
    M("next_token_probs", "k-th value without its axis: broadcast against the wrong one",
      ".values[:, -1:]", ".values[:, -1]"),
    M("sample_next", "temperature and top_k not passed on",
      "probs = next_token_probs(logits, temperature, top_k)", "probs = next_token_probs(logits)"),
    M("sample_next", "generator not passed: a seed does not reproduce the draws",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
    M("sample_next", "the most likely token taken, no draw",
      "torch.multinomial(probs, 1, generator=generator)", "probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "one uniform number shared by every row",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(1, generator=generator, dtype=probs.dtype)  # one number for the batch\n"
      "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)"),
    # 08 · Triton
    M("triton_add", "grid rounded down: the last partial block never launched",
      "grid = (triton.cdiv(n, block),)", "grid = (n // block,)"),
    M("triton_add", "strided inputs not made contiguous",
      "x, y = x.contiguous(), y.contiguous()\n    ", ""),
    M("triton_add", "program's start pid * BLOCK left out of the offsets",
      "offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = tl.arange(0, BLOCK)"),
    M("triton_add", "element count from the first axis, not numel",
      "n = x.numel()", "n = x.shape[0]"),
    M("triton_softmax", "running sum not rescaled when the maximum grows",
      "total = total * tl.exp(m - m_safe) + ", "total = total + "),
    M("triton_softmax", "row start from n_cols, ignoring the row stride",
      "x_row = x_ptr + row * x_row_stride", "x_row = x_ptr + row * n_cols"),
    M("triton_softmax", "padding lanes loaded as 0, not -inf, in the first pass",
      'other=float("-inf")).to(tl.float32)  # (BLOCK,)\n        m_new',
      "other=0.0).to(tl.float32)  # (BLOCK,)\n        m_new"),
    M("triton_softmax", "a column-strided x passed on as it is",
      "x = x if x.stride(1) == 1 else x.contiguous()", "x = x"),
    M("triton_scores", "1/√d scale never applied",
      "s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k))"),
    M("triton_scores", "grid axes swapped: key tiles on axis 0",
      "grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)",
      "grid = (triton.cdiv(t_k, block_n), triton.cdiv(t_q, block_m), b * h)"),
    M("triton_scores", "strides computed from the shape, as if contiguous",
      "q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),",
      "h * t_q * d, t_q * d, d, h * t_k * d, t_k * d, d,"),
    M("triton_scores", "one program per batch, not per batch·head",
      "triton.cdiv(t_k, block_n), b * h)", "triton.cdiv(t_k, block_n), b)"),
    M("triton_flash_attention", "causal key bound a block early: pid_m, not pid_m + 1",
      "(pid_m + 1) * BLOCK_M + offset", "pid_m * BLOCK_M + offset"),
    M("triton_flash_attention", "accumulator not rescaled by alpha",
      "acc = acc * alpha[:, None] + tl.dot", "acc = acc + tl.dot"),
    M("triton_flash_attention", "causal mask inside a tile without the T_k − T_q offset",
      "cols[None, :] <= offs_m[:, None] + offset", "cols[None, :] <= offs_m[:, None]"),
    M("triton_flash_attention", "padded keys past T_k left in the softmax",
      "visible = cols[None, :] < t_k  # (1, BLOCK_N)",
      "visible = cols[None, :] >= 0  # (1, BLOCK_N): the masked load gave them 0 already"),
    # 09 · backward
    M("softmax_backward", "row sum D left out",
      "return p * (grad_p - D)", "return p * grad_p"),
    M("softmax_backward", "D summed over the last axis whatever dim is",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "D without keepdim: broadcast against the wrong axis",
      "sum(dim=dim, keepdim=True)", "sum(dim=dim)"),
    M("softmax_backward", "D as the plain sum of the gradient, not weighted by p",
      "(grad_p * p).sum(", "grad_p.sum("),
    M("attention_backward", "1/√d not brought back into dq and dk",
      "dq = ds @ k * scale  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q * scale",
      "dq = ds @ k  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "dv = P dO: P not transposed",
      "dv = p.transpose(-1, -2) @ grad_out", "dv = p @ grad_out"),
    M("attention_backward", "dS without the row sum D",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))", "ds = p * dp"),
    M("attention_backward", "probabilities recomputed without the causal mask",
      "attention(q, k, v, is_causal=is_causal)", "attention(q, k, v)"),
    M("flash_attention_backward", "dK, dV accumulators reset for every query block",
      "dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)  # (..., Bk, d), (..., Bk, d_v)\n"
      "        for qs in range(0, t_q, block_size):\n"
      "            qe = min(qs + block_size, t_q)",
      "for qs in range(0, t_q, block_size):\n"
      "            qe = min(qs + block_size, t_q)\n"
      "            dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)"),
    M("flash_attention_backward", "dQ overwritten by each key block instead of accumulated",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("flash_attention_backward", "causal tile skipped when its first query cannot see it",
      "ks > qe - 1 + offset", "ks > qs + offset"),
    M("flash_attention_backward", "D from the tile's own dP ∘ P, not rowsum(dO ∘ O)",
      "ds = p * (dp - D[..., qs:qe, :])", "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"),
    M("FlashAttentionFunction", "block_size passed into is_causal's slot",
      "grad_out, ctx.is_causal, ctx.block_size)", "grad_out, ctx.block_size)"),
    M("FlashAttentionFunction", "backward returns three gradients, none for the flags",
      "return dq, dk, dv, None, None", "return dq, dk, dv"),
    M("FlashAttentionFunction", "forward ignores is_causal",
      "flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)",
      "flash_attention_forward(q, k, v, block_size=block_size)"),
    M("FlashAttentionFunction", "incoming gradient replaced by ones",
      "lse, grad_out, ctx.is_causal", "lse, torch.ones_like(grad_out), ctx.is_causal"),
    M("triton_flash_attention_backward", "lse turned into base 2 here although the kernels do it",
      "lse = lse.float().contiguous()", "lse = (lse.float() * 1.4426950408889634).contiguous()"),
    M("triton_flash_attention_backward", "kernel 1's grid counts query blocks",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_k, block_n), B * H)]",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_q, block_m), B * H)]"),
    M("triton_flash_attention_backward", "the output passed where kernel 1 reads dO",
      "grad_out, lse, delta, dk, dv", "out, lse, delta, dk, dv"),
    M("triton_flash_attention_backward", "sm_scale 1/d instead of 1/√d",
      "H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n"
      "    flash_attention_backward_dq_kernel[(triton.cdiv(T_q, block_m), B * H)](\n"
      "        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),\n"
      "        H, T_q, T_k, 1 / math.sqrt(d), **blocks)",
      "H, T_q, T_k, 1 / d, **blocks)\n"
      "    flash_attention_backward_dq_kernel[(triton.cdiv(T_q, block_m), B * H)](\n"
      "        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),\n"
      "        H, T_q, T_k, 1 / d, **blocks)"),
    # 10 · modern attention
    M("repeat_kv", "heads tiled (h0 h1 h0 h1), not grouped",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "repeated along the time axis",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h (t r) d"'),
    M("repeat_kv", "group axis left unmerged: (b, h_kv, n_rep, t, d)",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h r t d"'),
    M("repeat_kv", "n_rep read as extra copies: n_rep + 1 in all",
      "r=n_rep", "r=n_rep + 1"),
    M("GroupedQueryAttention", "key/value heads tiled: query head i uses head i mod h_kv",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "is_causal not passed on to attention",
      "mask=head_mask, is_causal=is_causal)", "mask=head_mask)"),
    M("GroupedQueryAttention", "heads merged (d h): features interleaved",
      'self.out(rearrange(out, "b h t d -> b t (h d)"))', 'self.out(rearrange(out, "b h t d -> b t (d h)"))'),
    M("GroupedQueryAttention", "mask given no head axis",
      "head_mask = None if mask is None else mask.unsqueeze(-3)", "head_mask = mask"),
    M("sliding_window_mask", "window one key too wide (<= window)",
      "(distance < window)", "(distance <= window)"),
    M("sliding_window_mask", "symmetric window: keys ahead allowed too",
      "(distance >= 0) & (distance < window)", "distance.abs() < window"),
    M("sliding_window_mask", "aligned top-left: the T_k − T_q offset left out",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "a query's own key left out of its window",
      "(distance >= 0)", "(distance > 0)"),
    M("sliding_window_flash_attention", "first key block from the block's last query, not its first",
      "first = max(0, qs + offset - window + 1)", "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "causal half of the tile mask dropped",
      "(distance < 0) | (distance >= window)", "distance >= window"),
    M("sliding_window_flash_attention", "no guard for a row that sees no key yet in a tile",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1)",
      "m_safe = m_new  # (..., Bq, 1)"),
    M("sliding_window_flash_attention", "query positions without the T_k − T_q offset",
      "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset",
      "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device)"),
    M("alibi_score_mod", "bias sign flipped: q_idx − kv_idx",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "slope exponents counted from 0: the first slope is 1",
      "torch.arange(1, n_heads + 1)", "torch.arange(n_heads)"),
    M("alibi_score_mod", "any head count treated as a power of two",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "head count rounded up to a power of two",
      "n = 2 ** math.floor(math.log2(n_heads))", "n = 2 ** math.ceil(math.log2(n_heads))"),
    M("document_mask_mod", "not causal: the whole document visible",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "a query may not see its own token",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("document_mask_mod", "same document or causal: combined with |",
      ") & (q_idx >= kv_idx)", ") | (q_idx >= kv_idx)"),
    M("document_mask_mod", "earlier documents kept visible (>= on the ids)",
      "document_ids[q_idx] == document_ids[kv_idx]", "document_ids[q_idx] >= document_ids[kv_idx]"),
    M("rotary_window_attention", "window one key too wide",
      "(q_idx - kv_idx < window)", "(q_idx - kv_idx <= window)"),
    M("rotary_window_attention", "only the queries rotated",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)", "q = apply_rope(q, positions)"),
    M("rotary_window_attention", "key/value heads tiled for the groups, not grouped",
      "out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    out = flex_attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1),\n"
      "                         block_mask=block_mask)"),
    M("rotary_window_attention", "RoPE applied before the split into heads",
      'q = rearrange(layer.q(x), "b t (h d) -> b h t d", h=layer.n_heads)  # (b, h, t, d_head)\n'
      '    k = rearrange(layer.k(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      '    v = rearrange(layer.v(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      "    q, k = apply_rope(q, positions), apply_rope(k, positions)  # rotated by position; v is not",
      "q, k = apply_rope(layer.q(x), positions), apply_rope(layer.k(x), positions)  # rotated first\n"
      '    q = rearrange(q, "b t (h d) -> b h t d", h=layer.n_heads)  # (b, h, t, d_head)\n'
      '    k = rearrange(k, "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      '    v = rearrange(layer.v(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)'),
)

ALTERNATIVES_G: tuple[BlindAlternative, ...] = (
    # 01
    A("dot_product_scores", "matmul with the last two axes of k swapped",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.transpose(-2, -1)"),
    A("softmax", "normalised through the log-sum-exp",
      "exps / exps.sum(dim=dim, keepdim=True)",
      "torch.exp(shifted - shifted.logsumexp(dim=dim, keepdim=True))"),
    A("dot_product_attention", "weighted sum of the values by einsum",
      "out = weights @ v", 'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    # 02
    A("score_variance", "dot products as a summed elementwise product",
      'scores = einsum(q, k, "n d, n d -> n")', "scores = (q * k).sum(dim=-1)"),
    A("scaled_dot_product_attention", "queries scaled before the product",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q / math.sqrt(d_k), k)"),
    # 03
    A("causal_mask", "tril of a ones matrix, shifted by T_k − T_q",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(t_k - t_q)"),
    A("padding_mask", "positions expanded to (B, t), compared with lengths[:, None]",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "return positions.expand(len(lengths), t) < lengths[:, None]"),
    A("attention", "masked scores by torch.where",
      'scores = scores.masked_fill(~allowed, float("-inf"))',
      'scores = torch.where(allowed, scores, float("-inf"))'),
    # 04
    A("split_heads", "unflatten the last axis, then transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)"),
    A("merge_heads", "transpose, then flatten the last two axes",
      'return rearrange(x, "b h t d -> b t (h d)")', "return x.transpose(1, 2).flatten(2)"),
    A("MultiHeadAttention", "q from x's projection, k and v from the source's, by slicing",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      "        if context is not None:  # cross-attention: keys and values from the other sequence\n"
      "            _, k, v = self.qkv(context).chunk(3, dim=-1)  # each (b, t_k, d_model)",
      "source = x if context is None else context  # (b, t_k, d_model)\n"
      "        q = self.qkv(x)[..., : x.shape[-1]]  # (b, t, d_model)\n"
      "        k, v = self.qkv(source)[..., x.shape[-1] :].chunk(2, dim=-1)  # each (b, t_k, d_model)"),
    # 05
    A("rope_frequencies", "reciprocal of base to the 2i/d",
      "return base ** (-two_i / d)",
      "return 1.0 / base ** (torch.arange(d // 2, dtype=torch.float64) * 2 / d)"),
    A("apply_rope", "pairs as complex numbers times e^(i·angle)",
      'return rearrange(rotated, "two ... half -> ... (half two)")',
      "pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous())  # (..., T, d/2)\n"
      "    turn = torch.polar(torch.ones_like(angles), angles).to(pairs.dtype)  # (T, d/2)\n"
      "    return torch.view_as_real(pairs * turn).flatten(-2)"),
    A("RotaryMultiHeadAttention", "q and k rotated in one call, stacked",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(torch.stack([q, k]), positions, self.base).unbind(0)"),
    # 06
    A("online_softmax", "streams a running log-sum-exp",
      "m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)\n"
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n"
      "        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)\n"
      "        m = m_new\n"
      "    return torch.exp(x - m) / denom",
      "m = torch.logaddexp(m, block.logsumexp(dim=-1, keepdim=True))  # running log-sum-exp\n"
      "    return torch.exp(x - m)"),
    A("flash_attention_query_block", "keeps the output normalised after every key block",
      "denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n"
      "        m = m_new\n"
      "    return acc / denom,",
      "new_denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "        acc = (alpha * denom * acc + p @ v[..., ks : ks + block_size, :]) / new_denom  # normalised\n"
      "        denom, m = new_denom, m_new\n"
      "    return acc,"),
    A("flash_attention", "the causal mask on every tile",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal:"),
    # 07
    A("block_forward", "causality as an explicit (b, t, t) lower-triangular mask",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x), mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device)"
      ".tril().expand(x.shape[0], -1, -1))"),
    A("ablate_heads", "zeroes the head's value projection (weight and bias rows)",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "v_rows = slice(2 * model.config.d_model + head * d_k, 2 * model.config.d_model + (head + 1) * d_k)\n"
      "            ablated.blocks[layer].attn.qkv.weight[v_rows] = 0.0\n"
      "            ablated.blocks[layer].attn.qkv.bias[v_rows] = 0.0"),
    A("KVCache", "concatenates onto an empty tensor when nothing is cached",
      "if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "empty_k, empty_v = k[..., :0, :], v[..., :0, :]  # (b, h, 0, d_k): nothing cached yet\n"
      "        self.keys[layer] = torch.cat([self.keys.get(layer, empty_k), k], dim=-2)\n"
      "        self.values[layer] = torch.cat([self.values.get(layer, empty_v), v], dim=-2)\n"
      "        return self.keys[layer], self.values[layer]"),
    A("cached_attention", "explicit bottom-right mask by tril(t_past)",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values, mask=torch.ones(t_new, t_past + t_new, dtype=torch.bool, device=x.device)"
      ".tril(t_past))"),
    A("generate_with_cache", "one loop: step, pick, append",
      "tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]"
      "  # (b, vocab_size): the new token only\n"
      "    return tokens",
      "tokens, feed = prompt, prompt  # (b, t): what the next step reads\n"
      "    for _ in range(n_new):\n"
      "        logits = model.step(feed, cache, attend)[:, -1]  # (b, vocab_size)\n"
      "        feed = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, feed], dim=1)\n"
      "    return tokens"),
    A("next_token_probs", "the k-th largest as a kthvalue from below",
      "scaled.topk(top_k, dim=-1).values[:, -1:]",
      "scaled.kthvalue(scaled.shape[-1] - top_k + 1, dim=-1, keepdim=True).values"),
    A("sample_next", "inverse-CDF draw with one uniform per row",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)  # (b, 1)\n"
      "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True).clamp(max=probs.shape[-1] - 1)"),
    # 09
    A("softmax_backward", "vector times the Jacobian diag(p) − p pᵀ",
      "return p * (grad_p - D)",
      "pm, gm = p.movedim(dim, -1), grad_p.movedim(dim, -1)  # (..., n)\n"
      "    jac = torch.diag_embed(pm) - pm[..., :, None] * pm[..., None, :]  # (..., n, n)\n"
      "    return (gm[..., None, :] @ jac).squeeze(-2).movedim(-1, dim)"),
    A("attention_backward", "D as rowsum(dO ∘ O), O recomputed as P V",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))",
      "ds = p * (dp - (grad_out * (p @ v)).sum(dim=-1, keepdim=True))"),
    A("flash_attention_backward", "accumulates into views of dk and dv",
      "dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)",
      "dk_acc, dv_acc = dk[..., ks:ke, :], dv[..., ks:ke, :]"),
    A("FlashAttentionFunction", "flags by keyword, gradients unpacked into the return",
      "dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "grads = flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=ctx.is_causal,\n"
      "                                 block_size=ctx.block_size)\n"
      "        return (*grads, None, None)"),
    # 10
    A("repeat_kv", "expanded view on a new axis, then flattened",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return x[:, :, None].expand(-1, -1, n_rep, -1, -1).flatten(1, 2)"),
    A("GroupedQueryAttention", "groups as a broadcast axis, no copies of k and v",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_head)",
      "q = q.unflatten(1, (self.n_kv_heads, n_rep))  # (b, h_kv, n_rep, t, d_head)\n"
      "        k, v = k.unsqueeze(2), v.unsqueeze(2)  # (b, h_kv, 1, t, d_head)\n"
      "        head_mask = None if mask is None else mask[:, None, None]  # (b, 1, 1, t, t)\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h_kv, n_rep, t, d)\n"
      "        out = out.flatten(1, 2)  # (b, h, t, d_head)"),
    A("sliding_window_mask", "causal tril minus a tril shifted back by the window",
      "return (distance >= 0) & (distance < window)",
      "ones = torch.ones(t_q, t_k, dtype=torch.bool)\n"
      "    return ones.tril(t_k - t_q) & ~ones.tril(t_k - t_q - window)"),
    A("sliding_window_flash_attention", "the key loop bounded by the block's last row, no break",
      "for ks in range(first // block_size * block_size, t_k, block_size):\n"
      "            if ks > rows[-1]:\n"
      "                break  # this block and all later ones are after the diagonal",
      "for ks in range(first // block_size * block_size, min(t_k, int(rows[-1]) + 1), block_size):"),
    A("alibi_score_mod", "slopes as powers of the first slope 2^(-8/n)",
      "return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)",
      "start = 2.0 ** (-8.0 / n_heads)  # the first slope, also the ratio of the sequence\n"
      "        return start ** torch.arange(1, n_heads + 1)"),
    A("document_mask_mod", "keys from the start of the query's document up to the query",
      "def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "starts = torch.searchsorted(document_ids, document_ids)  # each position's document start\n\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (kv_idx >= starts[q_idx]) & (kv_idx <= q_idx)"),
    A("rotary_window_attention", "key/value heads expanded by repeat_interleave, no enable_gqa",
      "out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d_head)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask)"),
)
# fmt: on
