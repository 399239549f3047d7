"""Blind set H of learner mistakes and right alternatives, for every exercise of 01-10 with compare inputs.

Written on 2026-12-05 from the solution notebooks (solutions/*.ipynb) and the topic modules
(attn_course/*.py, attn_course/triton_flash/) only, by someone who read no check, no test of a check
and no earlier set of mistakes (only lines 1-69 of tests/learner_mistakes_blind_a.py, for the
record types and `load`, and tests/blind_compare.py, for the inputs). Each mistake is a text edit of
the solution notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`,
occurring exactly once in that cell, replaced by `new`), with the idea of the mistake in one short
phrase, written as a learner who read only the notebook's text might slip or misunderstand; each
alternative is an edit of the same kind that keeps the function right. Four mistakes per exercise,
one alternative per non-Triton exercise. Verified with `blind_compare.verify` (under
TRITON_INTERPRET=1): every mistake loads and differs from `attn_course.reference` on an input the
exercise's contract allows, every alternative agrees on all of them; the Triton mistakes keep every
load and store inside its tensor.
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_H: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "k.T on a batched key tensor reverses every axis",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.T"),
    M("dot_product_scores", "scores laid out keys by queries (k qᵀ)",
      '"...qd,...kd->...qk"', '"...qd,...kd->...kq"'),
    M("dot_product_scores", "query i paired with key i only",
      'torch.einsum("...qd,...kd->...qk", q, k)', "(q * k).sum(dim=-1)"),
    M("dot_product_scores", "divided by √d though raw scores are asked",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      'torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5'),

    M("softmax", "normalised over the last axis whatever dim",
      "exps.sum(dim=dim, keepdim=True)", "exps.sum(dim=-1, keepdim=True)"),
    M("softmax", "no maximum subtracted (the naive softmax)",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"),
    M("softmax", "shifted by the tensor's global maximum, not each row's",
      "x.amax(dim=dim, keepdim=True)", "x.max()"),
    M("softmax", "maximum subtracted in place, changing the caller's tensor",
      "x - x.amax(dim=dim, keepdim=True)", "x.sub_(x.amax(dim=dim, keepdim=True))"),

    M("dot_product_attention", "softmax over the query axis",
      "softmax(dot_product_scores(q, k), dim=-1)", "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "scaled by √d though the unscaled form is asked",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k) / q.shape[-1] ** 0.5, dim=-1)"),
    M("dot_product_attention", "weights average the keys instead of the values",
      "out = weights @ v", "out = weights @ k"),
    M("dot_product_attention", "returns (weights, out) in the wrong order",
      "return out, weights", "return weights, out"),

    # 02 · scaling
    M("score_variance", "uniform components (torch.rand) instead of standard normal ones",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n    k = torch.randn(",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n    k = torch.rand("),
    M("score_variance", "scaled scores divided by d_k, not √d_k",
      "scores = scores / math.sqrt(d_k)", "scores = scores / d_k"),
    M("score_variance", "standard deviation returned instead of the variance",
      "scores.var().item()", "scores.std().item()"),
    M("score_variance", "variance of the single products q_i k_i, not of their sum",
      'einsum(q, k, "n d, n d -> n")', "(q * k).flatten()"),

    M("scaled_dot_product_attention", "d_k read from the values' width",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "scores divided by d_k, not its square root",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q, k) / d_k"),
    M("scaled_dot_product_attention", "the weights scaled after the softmax instead of the scores",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "scale applied twice, to the queries and to the scores",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q / math.sqrt(d_k), k) / math.sqrt(d_k)"),

    # 03 · causal masking
    M("causal_mask", "top-left aligned: query positions without the T_k − T_q offset",
      "torch.arange(t_q, device=device) + (t_k - t_q)", "torch.arange(t_q, device=device)"),
    M("causal_mask", "the diagonal excluded: a token may not see itself",
      'rearrange(key_positions, "k -> 1 k") <= rearrange',
      'rearrange(key_positions, "k -> 1 k") < rearrange'),
    M("causal_mask", "keys after the query allowed instead of before it",
      'rearrange(key_positions, "k -> 1 k") <= rearrange',
      'rearrange(key_positions, "k -> 1 k") >= rearrange'),
    M("causal_mask", "offset with the wrong sign (T_q − T_k)",
      "+ (t_k - t_q)", "+ (t_q - t_k)"),

    M("padding_mask", "<= counts the first pad position as real",
      '< rearrange(lengths, "b -> b 1")', '<= rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "True at the pad positions instead of the real tokens",
      '< rearrange(lengths, "b -> b 1")', '>= rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "mask laid out (t, B): positions as the column",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("padding_mask", "real tokens taken at the end of the row (left padding)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> 1 t") >= t - rearrange(lengths, "b -> b 1")'),

    M("attention", "causal mask OR-ed with the mask instead of AND-ed",
      "allowed = allowed & causal_mask(", "allowed = allowed | causal_mask("),
    M("attention", "causal_mask called with T_k and T_q in the other order",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "causal_mask(k.shape[-2], q.shape[-2], device=q.device)"),
    M("attention", "masked scores set to 0 instead of -inf",
      'scores.masked_fill(~allowed, float("-inf"))', "scores.masked_fill(~allowed, 0.0)"),
    M("attention", "mask read as True = blocked",
      "allowed = allowed & mask", "allowed = allowed & ~mask"),

    # 04 · multi-head attention
    M("split_heads", "last axis factored (d h): every head gets strided features",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "n_heads taken as the width of a head",
      "h=n_heads", "d=n_heads"),
    M("split_heads", "reshaped straight to (b, h, t, d) without a transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "head axis left after the time axis",
      '"b t (h d) -> b h t d"', '"b t (h d) -> b t h d"'),

    M("merge_heads", "merged as (d h): the heads' features interleaved",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshaped without moving the head axis",
      'rearrange(x, "b h t d -> b t (h d)")', "x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "heads averaged instead of concatenated",
      'rearrange(x, "b h t d -> b t (h d)")', "x.mean(dim=1)"),
    M("merge_heads", "view of a transposed, non-contiguous tensor",
      'rearrange(x, "b h t d -> b t (h d)")', "x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),

    M("MultiHeadAttention", "the parts of qkv read in the order k, q, v",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)", "k, q, v = self.qkv(x).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "is_causal not passed on to attention",
      "attention(q, k, v, mask=mask, is_causal=is_causal)", "attention(q, k, v, mask=mask)"),
    M("MultiHeadAttention", "split_heads given the head width instead of the head count",
      "split_heads(z, self.n_heads)", "split_heads(z, z.shape[-1] // self.n_heads)"),
    M("MultiHeadAttention", "mask's head axis put in front of its batch axis",
      'rearrange(mask, "... q k -> ... 1 q k")', 'rearrange(mask, "... q k -> 1 ... q k")'),

    # 05 · RoPE
    M("rope_frequencies", "exponent −i/d: i where 2i is asked",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "positive exponent: frequencies grow with i",
      "base ** (-two_i / d)", "base ** (two_i / d)"),
    M("rope_frequencies", "pair index counted from 1",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(2, d + 2, 2, dtype=torch.float64)"),
    M("rope_frequencies", "operator precedence: base^(−2i) then divided by d",
      "base ** (-two_i / d)", "base ** -two_i / d"),

    M("apply_rope", "pairs taken as the two halves (x_i, x_{i+d/2}), not interleaved",
      "even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")',
      "even, odd = x[..., : d // 2], x[..., d // 2 :]\n"
      "    return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)"),
    M("apply_rope", "turned by the opposite angle (the sign of sin swapped)",
      "torch.stack([even * cos - odd * sin, even * sin + odd * cos])",
      "torch.stack([even * cos + odd * sin, -even * sin + odd * cos])"),
    M("apply_rope", "rotated members concatenated, not interleaved back",
      '"two ... half -> ... (half two)"', '"two ... half -> ... (two half)"'),
    M("apply_rope", "positions argument ignored: always 0 … T-1",
      "    if positions is None:\n        positions = torch.arange(t, device=x.device)",
      "    positions = torch.arange(t, device=x.device)"),

    M("RotaryMultiHeadAttention", "RoPE applied before the split into heads",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "values rotated as well as queries and keys",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "positions not passed on to apply_rope",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(q, base=self.base), apply_rope(k, base=self.base)"),
    M("RotaryMultiHeadAttention", "rotated in the (b, t, h, d) layout: heads taken as positions",
      '(rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))  # each (b, h, t, d_k)\n'
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      '(rearrange(z, "b t (h d) -> b t h d", h=self.n_heads) for z in (q, k, v))\n'
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      "        q, k, v = (z.transpose(1, 2) for z in (q, k, v))"),

    # 06 · FlashAttention
    M("online_softmax", "running sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + ", "denom = denom + "),
    M("online_softmax", "the ragged last block skipped",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] - block_size + 1, block_size)"),
    M("online_softmax", "no guard for a block that is all -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("online_softmax", "running maximum not carried to the next block",
      "        m = m_new\n", ""),

    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + p @", "acc = acc + p @"),
    M("flash_attention_query_block", "tile divided by √d again though q_blk is already scaled",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2) / math.sqrt(q_blk.shape[-1])"),
    M("flash_attention_query_block", "output returned without dividing by the running sum",
      "return acc / denom, ", "return acc, "),
    M("flash_attention_query_block", "lse without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),

    M("flash_attention", "causal k_end from the block's first row instead of its last",
      "k_end = min(t_k, qe + offset) if is_causal else t_k",
      "k_end = min(t_k, qs + 1 + offset) if is_causal else t_k"),
    M("flash_attention", "rows of the in-tile mask without the T_k − T_q offset",
      "rows = torch.arange(qs, qe, device=q.device) + offset",
      "rows = torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "diagonal-crossing test on the block's first key instead of its last",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal and ks > qs + offset:"),
    M("flash_attention", "the diagonal key masked out too",
      "cols[None, :] > rows[:, None]", "cols[None, :] >= rows[:, None]"),

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
    M("block_forward", "residual added in place into the caller's x",
      "x = x + block.attn(", "x += block.attn("),

    M("ablate_heads", "the head's rows of attn.out zeroed instead of its columns",
      "weight[:, head * d_k : (head + 1) * d_k] = 0.0", "weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "shallow copy: the original shares the zeroed weights",
      "copy.deepcopy(model)", "copy.copy(model)"),
    M("ablate_heads", "head index used as the feature offset",
      "weight[:, head * d_k : (head + 1) * d_k]", "weight[:, head : head + d_k]"),
    M("ablate_heads", "the bias of attn.out zeroed too, as if a head owned it",
      "= 0.0\n", "= 0.0\n            ablated.blocks[layer].attn.out.bias.zero_()\n"),

    M("KVCache", "cache grown along the head axis",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([self.keys[layer], k], dim=1)\n"
      "            v = torch.cat([self.values[layer], v], dim=1)"),
    M("KVCache", "new positions put before the cached ones",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([k, self.keys[layer]], dim=-2)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "length read from the feature axis",
      "self.keys[layer].shape[-2]", "self.keys[layer].shape[-1]"),
    M("KVCache", "append returns this step's chunk, not the whole cache",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v",
      "self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)\n"
      "            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)\n"
      "        else:\n"
      "            self.keys[layer], self.values[layer] = k, v"),

    M("cached_attention", "positions restart at 0 for every chunk",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "no causal mask inside the new chunk",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values)"),
    M("cached_attention", "keys cached and used without their rotation",
      "q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)",
      "q = apply_rope(q, positions, attn.base)"),
    M("cached_attention", "attends to the new chunk's keys only, not the cache's",
      "attention(q, keys, values, is_causal=True)", "attention(q, k, v, is_causal=True)"),

    M("generate_with_cache", "the whole sequence fed again at every step",
      "model.step(next_token, cache, attend)", "model.step(tokens, cache, attend)"),
    M("generate_with_cache", "one more step after the last token is chosen",
      "        if i < n_new - 1:\n            logits = model.step", "        logits = model.step"),
    M("generate_with_cache", "logits of the prompt's first position picked",
      "model.step(prompt, cache, attend)[:, -1]", "model.step(prompt, cache, attend)[:, 0]"),
    M("generate_with_cache", "returns the new tokens without the prompt",
      "    return tokens", "    return tokens[:, prompt.shape[1] :]"),

    M("next_token_probs", "logits multiplied by the temperature",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "<= drops the k-th logit too",
      "scaled < kth", "scaled <= kth"),
    M("next_token_probs", "logits outside the top k set to 0, not -inf",
      'float("-inf"))  # (b, vocab_size)', "0.0)  # (b, vocab_size)"),
    M("next_token_probs", "temperature divided in place into the caller's logits",
      "scaled = logits / temperature", "scaled = logits.div_(temperature)"),

    M("sample_next", "temperature and top_k not passed on",
      "probs = next_token_probs(logits, temperature, top_k)", "probs = next_token_probs(logits)"),
    M("sample_next", "generator not passed to the draw",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
    M("sample_next", "the most likely token taken instead of a draw",
      "torch.multinomial(probs, 1, generator=generator)", "probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "logits given to multinomial instead of probabilities",
      "torch.multinomial(probs, 1, generator=generator)",
      "torch.multinomial(logits, 1, generator=generator)"),

    # 08 · Triton
    M("triton_add", "inputs not made contiguous: a view read in storage order",
      "    x, y = x.contiguous(), y.contiguous()\n", ""),
    M("triton_add", "grid rounded down: the ragged tail never computed",
      "grid = (triton.cdiv(n, block),)", "grid = (n // block,)"),
    M("triton_add", "program offsets not multiplied by BLOCK",
      "offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = pid + tl.arange(0, BLOCK)"),
    M("triton_add", "n taken as the first dimension, not numel",
      "n = x.numel()", "n = x.shape[0]"),

    M("triton_softmax", "row stride taken as the row length (rows assumed packed)",
      "x.shape[1], x.stride(0), out.stride(0)", "x.shape[1], x.shape[1], out.stride(0)"),
    M("triton_softmax", "each block written in the first loop, with the partial max and sum",
      "        m = m_new\n"
      "    for start in range(0, n_cols, BLOCK):\n"
      "        cols = start + tl.arange(0, BLOCK)  # (BLOCK,)\n"
      '        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)'
      "  # (BLOCK,)\n"
      "        y = tl.exp(x - m) / total",
      "        m = m_new\n"
      "        y = tl.exp(x - m) / total"),
    M("triton_softmax", "lanes past the row's end loaded as 0, not -inf",
      'other=float("-inf")).to(tl.float32)  # (BLOCK,)\n        m_new',
      "other=0.0).to(tl.float32)  # (BLOCK,)\n        m_new"),
    M("triton_softmax", "second pass forgets to subtract the row's max",
      "y = tl.exp(x - m) / total", "y = tl.exp(x) / total"),

    M("triton_scores", "scale 1/d instead of 1/√d",
      "1.0 / math.sqrt(d)", "1.0 / d"),
    M("triton_scores", "keys indexed with the queries' strides",
      "k.stride(0), k.stride(1), k.stride(2),", "q.stride(0), q.stride(1), q.stride(2),"),
    M("triton_scores", "grid's query-block and key-block axes swapped",
      "grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)",
      "grid = (triton.cdiv(t_k, block_n), triton.cdiv(t_q, block_m), b * h)"),
    M("triton_scores", "key offsets from the query program id",
      "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", "offs_n = pid_m * BLOCK_N + tl.arange(0, BLOCK_N)"),

    M("triton_flash_attention", "causal bound hi from the block's first row",
      "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)",
      "hi = tl.minimum(t_k, pid_m * BLOCK_M + 1 + offset)"),
    M("triton_flash_attention", "causal mask without the T_k − T_q offset",
      "(cols[None, :] <= offs_m[:, None] + offset)", "(cols[None, :] <= offs_m[:, None])"),
    M("triton_flash_attention", "value tile read through the key pointer",
      "v = tl.load(v_head + cols[:, None] * stride_vn", "v = tl.load(k_head + cols[:, None] * stride_kn"),
    M("triton_flash_attention", "keys past T_k masked only by the causal mask",
      "        visible = cols[None, :] < t_k  # (1, BLOCK_N)\n"
      "        if IS_CAUSAL:\n"
      "            visible = visible & (cols[None, :] <= offs_m[:, None] + offset)  # (BLOCK_M, BLOCK_N)\n"
      '        s = tl.where(visible, s, float("-inf"))  # (BLOCK_M, BLOCK_N)',
      "        if IS_CAUSAL:\n"
      '            s = tl.where(cols[None, :] <= offs_m[:, None] + offset, s, float("-inf"))'),

    # 09 · backward
    M("softmax_backward", "only the Jacobian's diagonal: p(1 − p)·g",
      "return p * (grad_p - D)", "return p * (1 - p) * grad_p"),
    M("softmax_backward", "row sum of g without the weights p",
      "(grad_p * p).sum(dim=dim", "grad_p.sum(dim=dim"),
    M("softmax_backward", "row sum over the last axis whatever dim",
      "sum(dim=dim, keepdim=True)", "sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "sign flipped: p(D − g)",
      "p * (grad_p - D)", "p * (D - grad_p)"),

    M("attention_backward", "dV = P dO: P not transposed",
      "dv = p.transpose(-1, -2) @ grad_out", "dv = p @ grad_out"),
    M("attention_backward", "probabilities recomputed without the causal mask",
      "attention(q, k, v, is_causal=is_causal)", "attention(q, k, v)"),
    M("attention_backward", "scale inverted: gradients multiplied by √d",
      "scale = 1 / math.sqrt(q.shape[-1])", "scale = math.sqrt(q.shape[-1])"),
    M("attention_backward", "softmax backward's row sum taken over the queries",
      "(dp * p).sum(dim=-1, keepdim=True)", "(dp * p).sum(dim=-2, keepdim=True)"),

    M("flash_attention_backward", "dK, dV accumulators reset for every query block",
      "        dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)"
      "  # (..., Bk, d), (..., Bk, d_v)\n"
      "        for qs in range(0, t_q, block_size):\n",
      "        for qs in range(0, t_q, block_size):\n"
      "            dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)\n"),
    M("flash_attention_backward", "P recomputed from the tile's own maximum instead of the lse",
      "torch.exp(s - lse[..., qs:qe, None])", "torch.exp(s - s.amax(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "causal skip test on the query block's first row",
      "if is_causal and ks > qe - 1 + offset:", "if is_causal and ks > qs + offset:"),
    M("flash_attention_backward", "dQ without the 1/√d",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] += ds @ k_blk"),

    M("FlashAttentionFunction", "gradients returned in the order dq, dv, dk",
      "return dq, dk, dv, None, None", "return dq, dv, dk, None, None"),
    M("FlashAttentionFunction", "forward run without the causal flag",
      "flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)",
      "flash_attention_forward(q, k, v, block_size=block_size)"),
    M("FlashAttentionFunction", "saved tensors unpacked in another order than saved",
      "q, k, v, out, lse = ctx.saved_tensors", "q, k, v, lse, out = ctx.saved_tensors"),
    M("FlashAttentionFunction", "out and grad_out passed in each other's place",
      "flash_attention_backward(q, k, v, out, lse, grad_out,",
      "flash_attention_backward(q, k, v, grad_out, lse, out,"),

    M("triton_flash_attention_backward", "kernel 1's grid counted in query blocks",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_k, block_n), B * H)]",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_q, block_n), B * H)]"),
    M("triton_flash_attention_backward", "dk and dv passed to kernel 1 in each other's place",
      "q, k, v, grad_out, lse, delta, dk, dv,", "q, k, v, grad_out, lse, delta, dv, dk,"),
    M("triton_flash_attention_backward", "D as the row sum of dO alone, without O",
      "(grad_out.float() * out.float()).sum(dim=-1)", "grad_out.float().sum(dim=-1)"),
    M("triton_flash_attention_backward", "causal flag not passed to the kernels",
      "IS_CAUSAL=is_causal)", "IS_CAUSAL=False)"),

    # 10 · modern attention
    M("repeat_kv", "heads interleaved (r h), not grouped",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "repeated along the time axis",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h (t r) d"'),
    M("repeat_kv", "n_rep read as the total number of heads",
      "r=n_rep", "r=n_rep // x.shape[1]"),
    M("repeat_kv", "group axis left unflattened (a 5-D result)",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x.unsqueeze(2).expand(-1, -1, n_rep, -1, -1)"),

    M("GroupedQueryAttention", "keys and values tiled round-robin (torch.repeat)",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "keys and values split into n_heads heads",
      'h=self.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      '        v = rearrange(self.v(x), "b t (h d) -> b h t d", h=self.n_kv_heads)',
      'h=self.n_heads)  # (b, h_kv, t, d_head)\n'
      '        v = rearrange(self.v(x), "b t (h d) -> b h t d", h=self.n_heads)'),
    M("GroupedQueryAttention", "heads merged as (d h)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("GroupedQueryAttention", "key and value projections sized d_model, as in MHA",
      "self.k = nn.Linear(d_model, n_kv_heads * d_head, bias=False)\n"
      "        self.v = nn.Linear(d_model, n_kv_heads * d_head, bias=False)",
      "self.k = nn.Linear(d_model, d_model, bias=False)\n"
      "        self.v = nn.Linear(d_model, d_model, bias=False)"),

    M("sliding_window_mask", "window of W + 1 keys (distance <= W)",
      "(distance < window)", "(distance <= window)"),
    M("sliding_window_mask", "top-left aligned: no T_k − T_q offset",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "two-sided window: future keys allowed",
      "(distance >= 0) & (distance < window)", "distance.abs() < window"),
    M("sliding_window_mask", "the query's own position excluded from its window",
      "(distance >= 0) & (distance < window)", "(distance > 0) & (distance <= window)"),

    M("sliding_window_flash_attention", "first key block rounded up, not down",
      "first // block_size * block_size", "-(-first // block_size) * block_size"),
    M("sliding_window_flash_attention", "the window's lower edge not masked inside a tile",
      "(distance < 0) | (distance >= window)", "distance < 0"),
    M("sliding_window_flash_attention", "the 1/√d scale forgotten",
      "q[..., qs : qs + block_size, :] / math.sqrt(d)", "q[..., qs : qs + block_size, :]"),
    M("sliding_window_flash_attention", "window one key too wide (distance > W masked)",
      "(distance >= window)", "(distance > window)"),

    M("alibi_score_mod", "the plain formula 2^(−8(h+1)/H) for every head count",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "bias sign flipped: slope·(q − kv)",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "odd-indexed slopes of 2n's list taken",
      "power_of_two_slopes(2 * n)[0::2]", "power_of_two_slopes(2 * n)[1::2]"),
    M("alibi_score_mod", "exponents counted from 0: the first slope is 1",
      "torch.arange(1, n_heads + 1)", "torch.arange(0, n_heads)"),

    M("document_mask_mod", "not causal within a document",
      " & (q_idx >= kv_idx)", ""),
    M("document_mask_mod", "the query's own position excluded",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("document_mask_mod", "earlier documents allowed too (>= on the ids)",
      "document_ids[q_idx] == document_ids[kv_idx]", "document_ids[q_idx] >= document_ids[kv_idx]"),
    M("document_mask_mod", "same document OR causal, instead of AND",
      ") & (q_idx >= kv_idx)", ") | (q_idx >= kv_idx)"),

    M("rotary_window_attention", "window one key too wide",
      "(q_idx - kv_idx < window)", "(q_idx - kv_idx <= window)"),
    M("rotary_window_attention", "block mask not passed: full bidirectional attention",
      "flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "flex_attention(q, k, v, enable_gqa=True)"),
    M("rotary_window_attention", "mask_mod's index arguments read in the other order",
      "def in_window(b, h, q_idx, kv_idx):", "def in_window(b, h, kv_idx, q_idx):"),
    M("rotary_window_attention", "values taken from the key projection",
      "v = rearrange(layer.v(x)", "v = rearrange(layer.k(x)"),
)

ALTERNATIVES_H: tuple[BlindAlternative, ...] = (
    A("dot_product_scores", "matrix product with the batched transpose .mT",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.mT"),
    A("softmax", "exp of x minus its log-sum-exp",
      "return exps / exps.sum(dim=dim, keepdim=True)",
      "return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),
    A("dot_product_attention", "einsum for the weighted sum of the values",
      "out = weights @ v", 'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    A("score_variance", "row-wise sum of the elementwise products",
      'einsum(q, k, "n d, n d -> n")', "(q * k).sum(dim=-1)"),
    A("scaled_dot_product_attention", "queries scaled before the product",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q / math.sqrt(d_k), k)"),
    A("causal_mask", "torch.tril with the offset as its diagonal",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "indexing with None instead of rearrange",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "positions[None, :] < lengths[:, None]"),
    A("attention", "causal part built with tril",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)"
      ".tril(k.shape[-2] - q.shape[-2])"),
    A("split_heads", "reshape, then transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "x.reshape(*x.shape[:2], n_heads, -1).transpose(1, 2)"),
    A("merge_heads", "heads unbound and concatenated on the feature axis",
      'rearrange(x, "b h t d -> b t (h d)")', "torch.cat(x.unbind(dim=1), dim=-1)"),
    A("MultiHeadAttention", "mask given its head axis with unsqueeze",
      'rearrange(mask, "... q k -> ... 1 q k")', "mask.unsqueeze(-3)"),
    A("rope_frequencies", "exp of −2i·ln(base)/d",
      "base ** (-two_i / d)", "torch.exp(-math.log(base) * two_i / d)"),
    A("apply_rope", "complex multiplication by e^{ipθ}",
      "rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")',
      "turned = torch.complex(even.double(), odd.double()) * torch.polar(torch.ones_like(angles), angles)\n"
      "    return torch.stack([turned.real, turned.imag], dim=-1).flatten(-2).to(x.dtype)"),
    A("RotaryMultiHeadAttention", "heads merged with transpose and flatten",
      'self.out(rearrange(out, "b h t d -> b t (h d)"))', "self.out(out.transpose(1, 2).flatten(2))"),
    A("online_softmax", "a running log-sum-exp folded with logaddexp",
      "        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)\n"
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n"
      "        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)\n"
      "        m = m_new\n"
      "    return torch.exp(x - m) / denom",
      "        m = torch.logaddexp(m, torch.logsumexp(block, dim=-1, keepdim=True))  # running lse\n"
      "    return torch.exp(x - m)"),
    A("flash_attention_query_block", "einsum for the value update",
      "p @ v[..., ks : ks + block_size, :]",
      'torch.einsum("...qk,...kd->...qd", p, v[..., ks : ks + block_size, :])'),
    A("flash_attention", "causal mask applied to every visited tile",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal:"),
    A("block_forward", "the stream after attention named h",
      "x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "h = x + block.attn(block.ln1(x), is_causal=True)\n"
      "    out = h + block.mlp(block.ln2(h))\n"
      "    return out"),
    A("ablate_heads", "the head's slice of a (d_model, h, d_k) view zeroed",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.out.weight.view(-1, model.config.n_heads, d_k)[:, head].zero_()"),
    A("KVCache", "cat onto an empty slice when nothing is cached yet",
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        past_k = self.keys.get(layer, k[..., :0, :])\n"
      "        past_v = self.values.get(layer, v[..., :0, :])\n"
      "        self.keys[layer] = torch.cat([past_k, k], dim=-2)\n"
      "        self.values[layer] = torch.cat([past_v, v], dim=-2)\n"
      "        return self.keys[layer], self.values[layer]"),
    A("cached_attention", "explicit bottom-right mask built with tril",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values, mask=torch.ones(t_new, t_past + t_new, dtype=torch.bool,"
      " device=x.device).tril(t_past))"),
    A("generate_with_cache", "new tokens collected in a list, concatenated once",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]"
      "  # (b, vocab_size): the new token only\n"
      "    return tokens",
      "    new = []\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]\n"
      "    while len(new) < n_new:\n"
      "        new.append(pick(logits))\n"
      "        if len(new) < n_new:\n"
      "            logits = model.step(new[-1], cache, attend)[:, -1]\n"
      "    return torch.cat([prompt, *new], dim=1)"),
    A("next_token_probs", "k-th value from a descending sort",
      "scaled.topk(top_k, dim=-1).values[:, -1:]",
      "scaled.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]"),
    A("sample_next", "inverse-CDF draw from one uniform number per row",
      "torch.multinomial(probs, 1, generator=generator)",
      "(probs.cumsum(dim=-1) <= torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype))"
      ".sum(dim=-1, keepdim=True).clamp(max=probs.shape[-1] - 1)"),
    A("softmax_backward", "row sum as a vecdot along dim",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = torch.linalg.vecdot(grad_p, p, dim=dim).unsqueeze(dim)"),
    A("attention_backward", "einsum for dV",
      "dv = p.transpose(-1, -2) @ grad_out", 'dv = torch.einsum("...qk,...qd->...kd", p, grad_out)'),
    A("flash_attention_backward", "D as an einsum of dO and O",
      "D = (grad_out * out).sum(dim=-1, keepdim=True)",
      'D = torch.einsum("...qd,...qd->...q", grad_out, out)[..., None]'),
    A("FlashAttentionFunction", "gradients unpacked straight into the returned tuple",
      "dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "grads = flash_attention_backward(\n"
      "            q, k, v, out, lse, grad_out, is_causal=ctx.is_causal, block_size=ctx.block_size)\n"
      "        return (*grads, None, None)"),
    A("repeat_kv", "repeat_interleave on the head axis",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x.repeat_interleave(n_rep, dim=1)"),
    A("GroupedQueryAttention", "groups made with repeat_interleave",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)"),
    A("sliding_window_mask", "a causal tril minus a lower tril",
      "return (distance >= 0) & (distance < window)",
      "return torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)"
      " & ~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q - window)"),
    A("sliding_window_flash_attention", "every key block up to the diagonal visited, masked inside",
      "range(first // block_size * block_size, t_k, block_size)", "range(0, t_k, block_size)"),
    A("alibi_score_mod", "the extra slopes written as 2^(−4(2i+1)/n)",
      "power_of_two_slopes(2 * n)[0::2][: n_heads - n]",
      "2.0 ** (-4.0 * (2 * torch.arange(n_heads - n) + 1) / n)"),
    A("document_mask_mod", "the future excluded with a negation",
      "(q_idx >= kv_idx)", "~(kv_idx > q_idx)"),
    A("rotary_window_attention", "repeated heads, a dense window mask and torch's SDPA",
      "    def in_window(b, h, q_idx, kv_idx):\n"
      "        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n"
      "\n"
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)\n"
      "    i = torch.arange(t, device=x.device)\n"
      "    distance = i[:, None] - i[None, :]\n"
      "    allowed = (distance >= 0) & (distance < window)\n"
      "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)"),
)
# fmt: on
