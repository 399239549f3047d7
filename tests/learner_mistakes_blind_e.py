"""Blind set E of learner mistakes and right alternatives, for every exercise blind_compare has inputs for.

Written 2026-12-05 from the solution notebooks (their exercise cells and the text around them) and the
topic modules only, by someone who read no check, no test of a check and no earlier set of mistakes
(sets A-D and their first runs unread; of learner_mistakes_holdout2.py only `BlindMistake`, `PRELUDE`,
`solution_cells` and `load` were looked up, and the two entries printed next to them glimpsed, whose
ideas this set avoids). Each mistake is a text edit of the solution notebook's exercise cell taken without
its `### BEGIN/END SOLUTION` marker lines (`old`, occurring exactly once in that cell, replaced by `new`),
with the idea of the mistake in one short phrase; each alternative is an edit of the same kind that keeps
the function right. Three mistakes per exercise (four in notebooks 07, 09 and 10, two per Triton
exercise) and one alternative per non-Triton exercise. Verified with tests/blind_compare.py (`verify`,
under TRITON_INTERPRET=1): every mistake differs from `attn_course.reference` on an input the exercise's
contract allows, every alternative agrees on all of them.
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_E: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "scales the raw scores by 1/sqrt(d) already",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      'return torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])'),
    M("dot_product_scores", "k.T reverses every axis, not the last two",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      "return q @ k.T"),
    M("dot_product_scores", "contracts over the positions axis instead of the features",
      '"...qd,...kd->...qk"',
      '"...dq,...dk->...qk"'),
    M("softmax", "no max subtracted: overflows on large scores",
      "shifted = x - x.amax(dim=dim, keepdim=True)",
      "shifted = x"),
    M("softmax", "shifts by the global max, not each slice's own",
      "x - x.amax(dim=dim, keepdim=True)",
      "x - x.max()"),
    M("softmax", "keepdim dropped in the normalising sum",
      "exps / exps.sum(dim=dim, keepdim=True)",
      "exps / exps.sum(dim=dim)"),
    M("dot_product_attention", "softmax over the query axis",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "weights multiply the keys instead of the values",
      "out = weights @ v",
      "out = weights @ k"),
    M("dot_product_attention", "returns the raw scores as the weights",
      "    return out, weights",
      "    return out, dot_product_scores(q, k)"),

    # 02 · scaling
    M("score_variance", "standard deviation instead of the variance",
      "return scores.var().item()",
      "return scores.std().item()"),
    M("score_variance", "uniform components instead of standard normal ones",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)"),
    M("score_variance", "sums over the samples instead of over the components",
      '"n d, n d -> n"',
      '"n d, n d -> d"'),
    M("scaled_dot_product_attention", "scale from the number of keys, not the width",
      "d_k = q.shape[-1]",
      "d_k = k.shape[-2]"),
    M("scaled_dot_product_attention", "divides the weights after the softmax instead of the scores",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "divides by d_k (the variance), not its square root",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q, k) / d_k"),

    # 03 · causal masking
    M("causal_mask", "top-left alignment: no offset when T_q != T_k",
      "torch.arange(t_q, device=device) + (t_k - t_q)",
      "torch.arange(t_q, device=device)"),
    M("causal_mask", "strict inequality hides the query's own key",
      '"k -> 1 k") <= rearrange(',
      '"k -> 1 k") < rearrange('),
    M("causal_mask", "True marks the forbidden keys (convention inverted)",
      '"k -> 1 k") <= rearrange(',
      '"k -> 1 k") > rearrange('),
    M("padding_mask", "<= lets one padding position through",
      '"t -> 1 t") < rearrange(',
      '"t -> 1 t") <= rearrange('),
    M("padding_mask", "positions and lengths on swapped axes: (t, B)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("padding_mask", "real tokens taken at the end of the row (left padding)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> 1 t") >= t - rearrange(lengths, "b -> b 1")'),
    M("attention", "masked scores set to 0 instead of -inf",
      'scores.masked_fill(~allowed, float("-inf"))',
      "scores.masked_fill(~allowed, 0.0)"),
    M("attention", "the causal mask replaces the given mask instead of combining",
      "allowed = allowed & causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "allowed = causal_mask(q.shape[-2], k.shape[-2], device=q.device)"),
    M("attention", "causal via tril of ones: top-left aligned",
      "allowed = allowed & causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "allowed = allowed & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()"),

    # 04 · multi-head attention
    M("split_heads", "head index taken as the inner factor of the last axis",
      '"b t (h d) -> b h t d"',
      '"b t (d h) -> b h t d"'),
    M("split_heads", "reshape straight to (b, h, t, d) without a transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "heads not moved before time: (b, t, h, d)",
      '"b t (h d) -> b h t d"',
      '"b t (h d) -> b t h d"'),
    M("merge_heads", "merges with the feature index outermost",
      '"b h t d -> b t (h d)"',
      '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshape back without moving heads after time",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "averages the heads instead of concatenating them",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.mean(dim=1)"),
    M("MultiHeadAttention", "cross-attention: queries from the context, keys and values from x",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)",
      "q, _, _ = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "head axis of the mask added in front of the batch axis",
      'mask = rearrange(mask, "... q k -> ... 1 q k")',
      "mask = mask.unsqueeze(0)"),
    M("MultiHeadAttention", "output projection W^O left out",
      "return self.out(merge_heads(out))",
      "return merge_heads(out)"),

    # 05 · RoPE
    M("rope_frequencies", "exponent -i/d instead of -2i/d",
      "torch.arange(0, d, 2, dtype=torch.float64)",
      "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "one frequency per dimension instead of per pair",
      "torch.arange(0, d, 2, dtype=torch.float64)",
      "torch.arange(0, d, 1, dtype=torch.float64)"),
    M("rope_frequencies", "integer arange: the frequencies come out float32",
      "torch.arange(0, d, 2, dtype=torch.float64)",
      "torch.arange(0, d, 2)"),
    M("apply_rope", "pairs taken as the two halves, written back interleaved",
      "even, odd = x[..., 0::2], x[..., 1::2]",
      "even, odd = x[..., : d // 2], x[..., d // 2 :]"),
    M("apply_rope", "rotates by minus the angle",
      "torch.stack([even * cos - odd * sin, even * sin + odd * cos])",
      "torch.stack([even * cos + odd * sin, odd * cos - even * sin])"),
    M("apply_rope", "given positions ignored: always 0 .. T-1",
      "    if positions is None:\n        positions = torch.arange(t, device=x.device)",
      "    positions = torch.arange(t, device=x.device)"),
    M("RotaryMultiHeadAttention", "values rotated too",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "RoPE over the whole d_model before the split into heads",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "positions not passed on to apply_rope",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(q, None, self.base), apply_rope(k, None, self.base)"),

    # 06 · flash attention
    M("online_softmax", "running sum not rescaled when the max grows",
      "denom = denom * torch.exp(m - m_safe) + torch.exp",
      "denom = denom + torch.exp"),
    M("online_softmax", "running max not carried to the next block",
      "        m = m_new\n",
      ""),
    M("online_softmax", "no guard for a block that is all -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)",
      "m_safe = m_new"),
    M("flash_attention_query_block", "1/sqrt(d) scale forgotten",
      "q_blk = q_blk / math.sqrt(q_blk.shape[-1])",
      "q_blk = q_blk"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + p @ v",
      "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse without the running max",
      "(m + torch.log(denom)).squeeze(-1)",
      "torch.log(denom).squeeze(-1)"),
    M("flash_attention", "diagonal tile masked without the bottom-right offset",
      "rows = torch.arange(qs, qe, device=q.device) + offset",
      "rows = torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "diagonal-tile test against the block's last row instead of its first",
      "if is_causal and ke - 1 > qs + offset:",
      "if is_causal and ke - 1 > qe - 1 + offset:"),
    M("flash_attention", "no guard for a query row that sees no key",
      "        denom = torch.where(denom == 0, 1.0, denom)",
      "        denom = denom"),

    # 07 · the KV cache
    M("block_forward", "post-norm: LayerNorm after the residual sum",
      "x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "x = block.ln1(x + block.attn(x, is_causal=True))  # (b, t, d_model)\n"
      "    return block.ln2(x + block.mlp(x))"),
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x))"),
    M("block_forward", "the first LayerNorm reused before the MLP",
      "block.mlp(block.ln2(x))",
      "block.mlp(block.ln1(x))"),
    M("block_forward", "MLP reads the block's input, not the stream after attention",
      "x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("ablate_heads", "zeroes the head's rows (output features) of W^O, not its columns",
      "out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "out.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "edits the model itself instead of a copy",
      "ablated = copy.deepcopy(model)",
      "ablated = model"),
    M("ablate_heads", "also zeroes the output bias, which belongs to no head",
      "            ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0\n",
      "            ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0\n"
      "            ablated.blocks[layer].attn.out.bias.zero_()\n"),
    M("ablate_heads", "(layer, head) pairs read as (head, layer)",
      "for layer, head in heads:",
      "for head, layer in heads:"),
    M("KVCache", "concatenates along the head axis instead of time",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([self.keys[layer], k], dim=1)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=1)"),
    M("KVCache", "new entries put before the old ones",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "length read from the head axis",
      "return self.keys[layer].shape[-2] if layer in self.keys else 0",
      "return self.keys[layer].shape[1] if layer in self.keys else 0"),
    M("KVCache", "the dicts are class attributes shared by every cache",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"),
    M("cached_attention", "new tokens rotated from position 0 again",
      "torch.arange(t_past, t_past + t_new, device=x.device)",
      "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "no causal mask within the new chunk",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values)"),
    M("cached_attention", "attends to the new keys only, the cache unused",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, k, v, is_causal=True)"),
    M("cached_attention", "keys cached before RoPE rotates them",
      "q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)"
      "  # each (b, h, t_new, d_k)\n"
      "    keys, values = cache.append(layer, k, v)",
      "keys, values = cache.append(layer, k, v)\n"
      "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)"),
    M("generate_with_cache", "steps on the whole sequence again each time",
      "logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(tokens, cache, attend)[:, -1]"),
    M("generate_with_cache", "one step too many: runs the last token through the model too",
      "        if i < n_new - 1:\n            logits = model.step(next_token, cache, attend)[:, -1]",
      "        logits = model.step(next_token, cache, attend)[:, -1]"),
    M("generate_with_cache", "prefill logits read at the first position",
      "model.step(prompt, cache, attend)[:, -1]",
      "model.step(prompt, cache, attend)[:, 0]"),
    M("generate_with_cache", "loop starts at 1: one token too few",
      "for i in range(n_new):",
      "for i in range(1, n_new):"),
    M("next_token_probs", "multiplies by the temperature instead of dividing",
      "scaled = logits / temperature",
      "scaled = logits * temperature"),
    M("next_token_probs", "the k-th largest itself masked out",
      "scaled.masked_fill(scaled < kth,",
      "scaled.masked_fill(scaled <= kth,"),
    M("next_token_probs", "top-k taken along the batch axis",
      "scaled.topk(top_k, dim=-1).values[:, -1:]",
      "scaled.topk(top_k, dim=0).values[-1:, :]"),
    M("next_token_probs", "dropped logits set to 0 instead of -inf",
      'scaled.masked_fill(scaled < kth, float("-inf"))',
      "scaled.masked_fill(scaled < kth, 0.0)"),
    M("sample_next", "argmax instead of a draw",
      "return torch.multinomial(probs, 1, generator=generator)",
      "return probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "temperature and top-k ignored: plain softmax",
      "probs = next_token_probs(logits, temperature, top_k)",
      "probs = torch.softmax(logits, dim=-1)"),
    M("sample_next", "trailing axis dropped: (b,) instead of (b, 1)",
      "return torch.multinomial(probs, 1, generator=generator)",
      "return torch.multinomial(probs, 1, generator=generator)[:, 0]"),
    M("sample_next", "uniform noise added to the probabilities, then the argmax",
      "return torch.multinomial(probs, 1, generator=generator)",
      "noise = torch.rand(probs.shape, generator=generator, dtype=probs.dtype)\n"
      "    return (probs + noise).argmax(dim=-1, keepdim=True)"),

    # 08 · Triton
    M("triton_add", "grid of n // BLOCK programs: the ragged end dropped",
      "grid = (triton.cdiv(n, block),)",
      "grid = (n // block,)"),
    M("triton_add", "strides ignored: a non-contiguous input read as laid out",
      "    x, y = x.contiguous(), y.contiguous()\n",
      ""),
    M("triton_softmax", "running sum not rescaled when the max grows",
      "total = total * tl.exp(m - m_safe) + tl.sum",
      "total = total + tl.sum"),
    M("triton_softmax", "row start from n_cols instead of the row stride",
      "x_row = x_ptr + row * x_row_stride",
      "x_row = x_ptr + row * n_cols"),
    M("triton_scores", "sm_scale 1/d instead of 1/sqrt(d)",
      "h, t_q, t_k, 1.0 / math.sqrt(d),",
      "h, t_q, t_k, 1.0 / d,"),
    M("triton_scores", "grid covers the first key tile only",
      "grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)",
      "grid = (triton.cdiv(t_q, block_m), 1, b * h)"),
    M("triton_flash_attention", "causal mask inside a tile without the bottom-right offset",
      "visible = visible & (cols[None, :] <= offs_m[:, None] + offset)",
      "visible = visible & (cols[None, :] <= offs_m[:, None])"),
    M("triton_flash_attention", "accumulator not rescaled by alpha",
      "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
      "acc = acc + tl.dot(p.to(v.dtype), v)"),

    # 09 · backward
    M("softmax_backward", "the outer factor p forgotten",
      "return p * (grad_p - D)",
      "return grad_p - D"),
    M("softmax_backward", "D sums grad_p without weighting by p",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = grad_p.sum(dim=dim, keepdim=True)"),
    M("softmax_backward", "row sum always over the last axis",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = (grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "only the diagonal of the Jacobian: p(1 - p) g",
      "return p * (grad_p - D)",
      "return p * (1 - p) * grad_p"),
    M("attention_backward", "dV from P without its transpose",
      "dv = p.transpose(-1, -2) @ grad_out",
      "dv = p @ grad_out"),
    M("attention_backward", "1/sqrt(d) left out of dQ and dK",
      "dq = ds @ k * scale  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q * scale",
      "dq = ds @ k  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "D summed from dP without weighting by P",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))",
      "ds = p * (dp - dp.sum(dim=-1, keepdim=True))"),
    M("attention_backward", "P recomputed without the causal mask",
      "_, p = attention(q, k, v, is_causal=is_causal)",
      "_, p = attention(q, k, v)"),
    M("flash_attention_backward", "D from the tile's own partial row sum",
      "ds = p * (dp - D[..., qs:qe, :])",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "tile skipped by its first query row instead of its last",
      "if is_causal and ks > qe - 1 + offset:",
      "if is_causal and ks > qs + offset:"),
    M("flash_attention_backward", "dK overwritten by each query block instead of summed",
      "dk_acc += ds.transpose(-1, -2) @ q_blk * scale",
      "dk_acc = ds.transpose(-1, -2) @ q_blk * scale"),
    M("flash_attention_backward", "P recomputed from unscaled scores",
      "s = q_blk @ k_blk.transpose(-1, -2) * scale",
      "s = q_blk @ k_blk.transpose(-1, -2)"),
    M("FlashAttentionFunction", "backward returns no None for is_causal and block_size",
      "return dq, dk, dv, None, None",
      "return dq, dk, dv"),
    M("FlashAttentionFunction", "backward forgets the causal flag",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out, block_size=ctx.block_size)"),
    M("FlashAttentionFunction", "upstream gradient replaced by ones",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, torch.ones_like(grad_out), ctx.is_causal,"
      " ctx.block_size)"),
    M("FlashAttentionFunction", "forward ignores is_causal",
      "flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)",
      "flash_attention_forward(q, k, v, block_size=block_size)"),
    M("triton_flash_attention_backward", "D = rowsum(dO) without O",
      "delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()",
      "delta = grad_out.float().sum(dim=-1).contiguous()"),
    M("triton_flash_attention_backward", "dQ kernel's grid sized by T_k instead of T_q",
      "flash_attention_backward_dq_kernel[(triton.cdiv(T_q, block_m), B * H)]",
      "flash_attention_backward_dq_kernel[(triton.cdiv(T_k, block_m), B * H)]"),

    # 10 · modern attention
    M("repeat_kv", "interleaved copies instead of grouped",
      '"b h t d -> b (h r) t d"',
      '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "copies along the time axis",
      '"b h t d -> b (h r) t d"',
      '"b h t d -> b h (t r) d"'),
    M("repeat_kv", "repeat count taken from the number of key/value heads",
      "r=n_rep)",
      "r=x.shape[1])"),
    M("repeat_kv", "group axis not merged into the heads",
      '"b h t d -> b (h r) t d"',
      '"b h t d -> b h r t d"'),
    M("GroupedQueryAttention", "key/value heads tiled: head i reads kv head i mod h_kv",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "causal flag not passed on",
      "attention(q, k, v, mask=head_mask, is_causal=is_causal)",
      "attention(q, k, v, mask=head_mask)"),
    M("GroupedQueryAttention", "repeated n_heads times instead of n_heads // n_kv_heads",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = repeat_kv(k, self.n_heads), repeat_kv(v, self.n_heads)"),
    M("GroupedQueryAttention", "heads merged with the feature index outermost",
      'self.out(rearrange(out, "b h t d -> b t (h d)"))',
      'self.out(rearrange(out, "b h t d -> b t (d h)"))'),
    M("sliding_window_mask", "window one key too wide",
      "(distance < window)",
      "(distance <= window)"),
    M("sliding_window_mask", "symmetric window: future keys allowed",
      "(distance >= 0) & (distance < window)",
      "distance.abs() < window"),
    M("sliding_window_mask", "top-left alignment when T_q != T_k",
      "query_positions = torch.arange(t_q) + (t_k - t_q)",
      "query_positions = torch.arange(t_q)"),
    M("sliding_window_mask", "window looks forward: distance taken key minus query",
      'rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")',
      'rearrange(key_positions, "k -> 1 k") - rearrange(query_positions, "q -> q 1")'),
    M("sliding_window_flash_attention", "first key block from the block's last query",
      "first = max(0, qs + offset - window + 1)",
      "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "window edge off by one inside the tile",
      "(distance >= window), -math.inf)",
      "(distance > window), -math.inf)"),
    M("sliding_window_flash_attention", "the last query block assumed full: ragged end not handled",
      "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset",
      "rows = torch.arange(qs, qs + block_size, device=q.device) + offset"),
    M("sliding_window_flash_attention", "future keys in a visited tile left unmasked",
      "s.masked_fill((distance < 0) | (distance >= window), -math.inf)",
      "s.masked_fill(distance >= window, -math.inf)"),
    M("alibi_score_mod", "bias sign flipped: rewards distance",
      "slopes[h] * (kv_idx - q_idx)",
      "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "non-power-of-two head count given the power-of-two formula",
      "slopes = torch.cat([power_of_two_slopes(n), extra])",
      "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "head index counted from 0 in the exponent: first slope 1",
      "torch.arange(1, n_heads + 1)",
      "torch.arange(n_heads)"),
    M("alibi_score_mod", "extra slopes from the odd positions: repeats of n's slopes",
      "power_of_two_slopes(2 * n)[0::2]",
      "power_of_two_slopes(2 * n)[1::2]"),
    M("document_mask_mod", "not causal: the whole document visible",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "earlier documents visible too",
      "document_ids[q_idx] == document_ids[kv_idx]",
      "document_ids[q_idx] >= document_ids[kv_idx]"),
    M("document_mask_mod", "Python `and` between tensors",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "(document_ids[q_idx] == document_ids[kv_idx]) and (q_idx >= kv_idx)"),
    M("document_mask_mod", "a token may not attend to itself",
      "(q_idx >= kv_idx)",
      "(q_idx > kv_idx)"),
    M("rotary_window_attention", "window one key too wide",
      "(q_idx - kv_idx < window)",
      "(q_idx - kv_idx <= window)"),
    M("rotary_window_attention", "keys not rotated",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q = apply_rope(q, positions)"),
    M("rotary_window_attention", "window on both sides: not causal",
      "(q_idx >= kv_idx) & (q_idx - kv_idx < window)",
      "(q_idx - kv_idx).abs() < window"),
    M("rotary_window_attention", "mask_mod's parameters in the wrong order",
      "def in_window(b, h, q_idx, kv_idx):",
      "def in_window(b, h, kv_idx, q_idx):"),
)

ALTERNATIVES_E: tuple[BlindAlternative, ...] = (
    # 01
    A("dot_product_scores", "matmul with the last two axes of k transposed",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      "return q @ k.transpose(-2, -1)"),
    A("softmax", "exp of x minus its logsumexp",
      "shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
      "    exps = shifted.exp()\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),
    A("dot_product_attention", "einops einsum for the weighted sum of values",
      "out = weights @ v",
      'out = einsum(weights, v, "... q k, ... k e -> ... q e")'),
    # 02
    A("score_variance", "elementwise product summed over the components",
      'scores = einsum(q, k, "n d, n d -> n")  # (n,)',
      "scores = (q * k).sum(dim=-1)  # (n,)"),
    A("scaled_dot_product_attention", "queries scaled before the product",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)",
      "scores = dot_product_scores(q / math.sqrt(d_k), k)"),
    # 03
    A("causal_mask", "tril of ones with the diagonal shifted by T_k - T_q",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "indexing with None instead of rearrange",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "return positions[None, :] < lengths[:, None]"),
    A("attention", "torch.where with -inf instead of masked_fill",
      'scores = scores.masked_fill(~allowed, float("-inf"))',
      'scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))'),
    # 04
    A("split_heads", "reshape then transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2)"),
    A("merge_heads", "transpose then reshape",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)"),
    A("MultiHeadAttention", "head axis of the mask by unsqueeze(-3)",
      'mask = rearrange(mask, "... q k -> ... 1 q k")',
      "mask = mask.unsqueeze(-3)"),
    # 05
    A("rope_frequencies", "reciprocal of base to the i/(d/2)",
      "two_i = torch.arange(0, d, 2, dtype=torch.float64)  # (d/2,): 0, 2, 4, …, d - 2\n"
      "    return base ** (-two_i / d)",
      "i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)\n"
      "    return 1.0 / base ** (i / (d // 2))"),
    A("apply_rope", "rotated pairs written into an empty tensor by strided slices",
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")',
      "    out = torch.empty_like(x)\n"
      "    out[..., 0::2] = even * cos - odd * sin\n"
      "    out[..., 1::2] = even * sin + odd * cos\n"
      "    return out"),
    A("RotaryMultiHeadAttention", "notebook 04's split_heads and merge_heads",
      'q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))',
      "q, k, v = (split_heads(z, self.n_heads) for z in (q, k, v))"),
    # 06
    A("online_softmax", "a running log-sum-exp with logaddexp",
      "    m = torch.full_like(x[..., :1], -math.inf)  # (..., 1): running maximum\n"
      "    denom = torch.zeros_like(x[..., :1])  # (..., 1): running sum of exp(x - m)\n"
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n"
      "        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)\n"
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n"
      "        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)\n"
      "        m = m_new\n"
      "    return torch.exp(x - m) / denom",
      "    lse = torch.full_like(x[..., :1], -math.inf)  # (..., 1): running log of the sum\n"
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n"
      "        lse = torch.logaddexp(lse, torch.logsumexp(block, dim=-1, keepdim=True))\n"
      "    return torch.exp(x - lse)"),
    A("flash_attention_query_block", "einops einsum for the tile's scores",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)",
      's = einsum(q_blk, k[..., ks : ks + block_size, :], "... q d, ... k d -> ... q k")'),
    A("flash_attention", "causal mask applied to every visited tile",
      "if is_causal and ke - 1 > qs + offset:",
      "if is_causal:"),
    # 07
    A("block_forward", "an explicit causal mask instead of is_causal",
      "x = x + block.attn(block.ln1(x), is_causal=True)",
      "t = x.shape[1]\n"
      "    x = x + block.attn(block.ln1(x), mask=causal_mask(t, t, device=x.device))"),
    A("ablate_heads", "W^O's columns viewed per head",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "weight = ablated.blocks[layer].attn.out.weight  # (d_model, h·d_k)\n"
      '            rearrange(weight, "o (h d) -> o h d", d=d_k)[:, head] = 0.0'),
    A("KVCache", "an empty slice as the past before the first append",
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        past_k = self.keys.get(layer, k[..., :0, :])  # (b, h, t_past, d_k)\n"
      "        past_v = self.values.get(layer, v[..., :0, :])  # (b, h, t_past, d_k)\n"
      "        self.keys[layer] = torch.cat([past_k, k], dim=-2)\n"
      "        self.values[layer] = torch.cat([past_v, v], dim=-2)\n"
      "        return self.keys[layer], self.values[layer]"),
    A("cached_attention", "the bottom-right mask built with causal_mask",
      "out, _ = attention(q, keys, values, is_causal=True)",
      "out, _ = attention(q, keys, values, mask=causal_mask(t_new, t_past + t_new, device=x.device))"),
    A("generate_with_cache", "new tokens collected in a list, joined at the end",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]"
      "  # (b, vocab_size): the new token only\n"
      "    return tokens",
      "    chosen = []\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    while len(chosen) < n_new:\n"
      "        chosen.append(pick(logits))  # (b, 1)\n"
      "        if len(chosen) < n_new:\n"
      "            logits = model.step(chosen[-1], cache, attend)[:, -1]\n"
      "    return torch.cat([prompt, *chosen], dim=1)"),
    A("next_token_probs", "top-k on the raw logits, then the temperature",
      "    scaled = logits / temperature  # (b, vocab_size)\n"
      "    if top_k is not None:\n"
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)\n'
      "    return torch.softmax(scaled, dim=-1)",
      "    kept = logits\n"
      "    if top_k is not None:\n"
      "        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (b, 1)\n"
      '        kept = logits.masked_fill(logits < kth, float("-inf"))\n'
      "    return torch.softmax(kept / temperature, dim=-1)"),
    A("sample_next", "inverse CDF: a uniform draw against the cumulative probabilities",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)  # (b, 1)\n"
      "    index = (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)  # (b, 1)\n"
      "    return index.clamp(max=probs.shape[-1] - 1)"),
    # 09
    A("softmax_backward", "the two terms of the product expanded",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)",
      "return p * grad_p - p * (p * grad_p).sum(dim=dim, keepdim=True)"),
    A("attention_backward", "einsum for dV and dK, the scale folded into dS",
      "dq = ds @ k * scale  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q * scale",
      "ds = ds * scale\n"
      "    dq = ds @ k  # (..., T_q, d)\n"
      '    dk = einsum(ds, q, "... q k, ... q d -> ... k d")'),
    A("flash_attention_backward", "scale folded into dS once per tile",
      "ds = p * (dp - D[..., qs:qe, :])  # (..., Bq, Bk)\n"
      "            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)\n"
      "            dk_acc += ds.transpose(-1, -2) @ q_blk * scale",
      "ds = p * (dp - D[..., qs:qe, :]) * scale  # (..., Bq, Bk)\n"
      "            dq[..., qs:qe, :] += ds @ k_blk  # (..., Bq, d)\n"
      "            dk_acc += ds.transpose(-1, -2) @ q_blk"),
    A("FlashAttentionFunction", "backward returns the unpacked gradients and the two Nones in one tuple",
      "dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "grads = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)\n"
      "        return (*grads, None, None)"),
    # 10
    A("repeat_kv", "torch.repeat_interleave on the head axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return torch.repeat_interleave(x, n_rep, dim=1)"),
    A("GroupedQueryAttention", "queries grouped per key/value head instead of repeating keys",
      "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_head)\n",
      '        q = rearrange(q, "b (g r) t d -> b g r t d", r=n_rep)  # (b, h_kv, n_rep, t, d_head)\n'
      "        k, v = k[:, :, None], v[:, :, None]  # (b, h_kv, 1, t, d_head)\n"
      "        head_mask = None if mask is None else mask[:, None, None]  # (b, 1, 1, t, t)\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h_kv, r, t, d_head)\n"
      '        out = rearrange(out, "b g r t d -> b (g r) t d")  # (b, h, t, d_head)\n'),
    A("sliding_window_mask", "difference of two shifted lower triangles",
      "    query_positions = torch.arange(t_q) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k)  # (t_k,)\n"
      '    distance = rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")'
      "  # (t_q, t_k)\n"
      "    return (distance >= 0) & (distance < window)",
      "    ones = torch.ones(t_q, t_k, dtype=torch.bool)\n"
      "    return ones.tril(diagonal=t_k - t_q) & ~ones.tril(diagonal=t_k - t_q - window)"),
    A("sliding_window_flash_attention", "key blocks start at the first needed key, not a block boundary",
      "for ks in range(first // block_size * block_size, t_k, block_size):",
      "for ks in range(first, t_k, block_size):"),
    A("alibi_score_mod", "the extra slopes by their closed form",
      "extra = power_of_two_slopes(2 * n)[0::2][: n_heads - n]",
      "extra = 2.0 ** (-4.0 * (2 * torch.arange(n_heads - n) + 1) / n)"),
    A("document_mask_mod", "each position's document start, by searchsorted",
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "    starts = torch.searchsorted(document_ids, document_ids)  # (T,): where each document starts\n"
      "\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (kv_idx >= starts[q_idx]) & (kv_idx <= q_idx)"),
    A("rotary_window_attention", "the course's attention with a dense window mask and repeated keys",
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    i = torch.arange(t, device=x.device)\n"
      "    allowed = in_window(None, None, i[:, None], i[None, :])  # (t, t)\n"
      "    out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask=allowed)"),
)
# fmt: on
