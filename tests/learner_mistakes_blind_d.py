"""Blind set D of learner mistakes and right alternatives, for every exercise of 01-10 that can be compared.

Written from the solution notebooks and the topic modules only (attn_course/*.py outside
attn_course/checks), by someone who never read any check, any test of a check, or any earlier set
of mistakes, on 2026-12-05: the held-out set for the second round of that day's fixes. Each mistake
is a text edit of the solution notebook's exercise cell taken without its `### BEGIN/END SOLUTION`
marker lines (`old`, occurring exactly once in that cell, replaced by `new`), with the idea of the
mistake in one short phrase; each alternative is an edit of the same kind that keeps the function
right, written differently from the solution. Every mistake was verified wrong against
`attn_course.reference` on an input the exercise's contract allows and on which the unmodified
solution cell agrees with the reference (notebook 06's solution flash_attention gives NaN where the
reference gives 0, on the rows that see no key when causal with T_q > T_k), and every alternative
right on all of them, with tests/blind_compare.py (`verify(HOLDOUT_D, ALTERNATIVES_D, folder)`
returns no problem). The non-Triton exercises have three mistakes and one alternative each; the
Triton exercises that blind_compare has inputs for (08's triton_add, triton_softmax, triton_scores
and triton_flash_attention, 09's triton_flash_attention_backward, run with the course's two kernels
in scope) have one mistake each and no alternative; fast_flash_attention and 09's two backward
kernels have none.
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_D: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "k.T, which reverses every axis of a batched k",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      "return q @ k.T"),
    M("dot_product_scores", "scores transposed, (T_k, T_q)",
      '"...qd,...kd->...qk"',
      '"...qd,...kd->...kq"'),
    M("dot_product_scores", "scaled by 1/sqrt(d) though the raw scores are asked",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      'return torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])'),
    M("softmax", "shifted by the maximum of the whole tensor, not of each row",
      "x - x.amax(dim=dim, keepdim=True)",
      "x - x.max()"),
    M("softmax", "sums over the last axis whatever dim is",
      "exps.sum(dim=dim, keepdim=True)",
      "exps.sum(dim=-1, keepdim=True)"),
    M("softmax", "the shift done in place on the caller's tensor",
      "shifted = x - x.amax(dim=dim, keepdim=True)",
      "shifted = x.sub_(x.amax(dim=dim, keepdim=True))"),
    M("dot_product_attention", "softmax over the queries axis",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "returns (weights, out)",
      "return out, weights",
      "return weights, out"),
    M("dot_product_attention", "the values mixed by the raw scores, not the weights",
      "weights = softmax(dot_product_scores(q, k), dim=-1)  # (..., T_q, T_k)\n"
      "    out = weights @ v",
      "scores = dot_product_scores(q, k)\n"
      "    weights = softmax(scores, dim=-1)\n"
      "    out = scores @ v"),
    # 02 · scaling
    M("score_variance", "uniform components from torch.rand",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)"),
    M("score_variance", "standard deviation returned instead of the variance",
      "return scores.var().item()",
      "return scores.std().item()"),
    M("score_variance", "scaled by 1/d_k instead of 1/sqrt(d_k)",
      "scores = scores / math.sqrt(d_k)",
      "scores = scores / d_k"),
    M("scaled_dot_product_attention", "scaled by the width of the values",
      "d_k = q.shape[-1]",
      "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "divided by d_k, not its square root",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q, k) / d_k"),
    M("scaled_dot_product_attention", "the weights scaled after the softmax",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    # 03 · causal masking
    M("causal_mask", "top-left aligned: a plain lower triangle of (t_q, t_k)",
      "query_positions = torch.arange(t_q, device=device) + (t_k - t_q)",
      "query_positions = torch.arange(t_q, device=device)"),
    M("causal_mask", "offset with the wrong sign",
      "+ (t_k - t_q)",
      "+ (t_q - t_k)"),
    M("causal_mask", "a float mask of ones from tril",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, device=device).tril(diagonal=t_k - t_q)"),
    M("padding_mask", "the first pad position counted as real",
      'rearrange(positions, "t -> 1 t") < rearrange',
      'rearrange(positions, "t -> 1 t") <= rearrange'),
    M("padding_mask", "True at the pad positions",
      'rearrange(positions, "t -> 1 t") < rearrange',
      'rearrange(positions, "t -> 1 t") >= rearrange'),
    M("padding_mask", "the result laid out (t, B)",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'return rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("attention", "the causal mask replaces the given mask instead of AND-ing with it",
      "allowed = allowed & causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "allowed = causal_mask(q.shape[-2], k.shape[-2], device=q.device).expand_as(scores)"),
    M("attention", "the mask applied to the weights after the softmax, not renormalised",
      'scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)",
      "weights = softmax(scores, dim=-1) * allowed"),
    M("attention", "causal_mask called as (T_k, T_q)",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "causal_mask(k.shape[-2], q.shape[-2], device=q.device)"),
    # 04 · multi-head attention
    M("split_heads", "the last axis factored as (d h)",
      '"b t (h d) -> b h t d"',
      '"b t (d h) -> b h t d"'),
    M("split_heads", "a reshape where a transpose is needed",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "n_heads given as the size of each head",
      '"b t (h d) -> b h t d", h=n_heads',
      '"b t (h d) -> b h t d", d=n_heads'),
    M("merge_heads", "the heads merged as (d h)",
      '"b h t d -> b t (h d)"',
      '"b h t d -> b t (d h)"'),
    M("merge_heads", "a reshape without moving the head axis",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "view on the transposed tensor",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("MultiHeadAttention", "queries taken from the context too",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)",
      "q, k, v = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "the mask given no head axis",
      "        if mask is not None:\n"
      '            mask = rearrange(mask, "... q k -> ... 1 q k")  # (b, 1, t, t_k): the same for every '
      "head\n",
      ""),
    M("MultiHeadAttention", "is_causal not passed on to attention",
      "attention(q, k, v, mask=mask, is_causal=is_causal)",
      "attention(q, k, v, mask=mask)"),
    # 05 · RoPE
    M("rope_frequencies", "i used where 2i belongs",
      "two_i = torch.arange(0, d, 2, dtype=torch.float64)",
      "two_i = torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "i counted from 1",
      "two_i = torch.arange(0, d, 2, dtype=torch.float64)",
      "two_i = torch.arange(2, d + 2, 2, dtype=torch.float64)"),
    M("rope_frequencies", "exponent without its minus sign",
      "return base ** (-two_i / d)",
      "return base ** (two_i / d)"),
    M("apply_rope", "pairs taken as the two halves (rotate-half) though they are interleaved",
      "even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")',
      "even, odd = x[..., : d // 2], x[..., d // 2 :]\n"
      "    return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)"),
    M("apply_rope", "the given positions ignored",
      "    if positions is None:\n"
      "        positions = torch.arange(t, device=x.device)",
      "    positions = torch.arange(t, device=x.device)"),
    M("apply_rope", "turned by minus the angle",
      "even * cos - odd * sin, even * sin + odd * cos",
      "even * cos + odd * sin, odd * cos - even * sin"),
    M("RotaryMultiHeadAttention", "RoPE applied before the split into heads",
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))  # each '
      "(b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "self.base not passed to apply_rope",
      "apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "apply_rope(q, positions), apply_rope(k, positions)"),
    M("RotaryMultiHeadAttention", "head axis inserted at dim 1, wrong for a (t, t) mask",
      "mask.unsqueeze(-3)",
      "mask.unsqueeze(1)"),
    # 06 · FlashAttention
    M("online_softmax", "running sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + torch.exp",
      "denom = denom + torch.exp"),
    M("online_softmax", "no guard for a block that is all -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)",
      "m_safe = m_new"),
    M("online_softmax", "the ragged last block never read",
      "for start in range(0, x.shape[-1], block_size):",
      "for start in range(0, x.shape[-1] - block_size + 1, block_size):"),
    M("flash_attention_query_block", "scaled by sqrt(d_v)",
      "q_blk = q_blk / math.sqrt(q_blk.shape[-1])",
      "q_blk = q_blk / math.sqrt(v.shape[-1])"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + p @ v",
      "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)",
      "torch.log(denom).squeeze(-1)"),
    M("flash_attention", "causal mask aligned top-left (offset 0)",
      "offset = t_k - t_q  # query i",
      "offset = 0  # query i"),
    M("flash_attention", "tile masked only when it crosses the last row's diagonal",
      "if is_causal and ke - 1 > qs + offset:",
      "if is_causal and ke - 1 > qe - 1 + offset:"),
    M("flash_attention", "key block end not clipped at T_k",
      "ke = min(ks + block_size, t_k)",
      "ke = ks + block_size"),
    # 07 · KV cache
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x))"),
    M("block_forward", "the MLP reads the block's input, not the stream after attention",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "the residual added in place to the caller's tensor",
      "    x = x + block.attn(block.ln1(x), is_causal=True)",
      "    x += block.attn(block.ln1(x), is_causal=True)"),
    M("ablate_heads", "rows of W^O zeroed instead of the head's columns",
      "out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "out.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "no copy: the original model is switched off",
      "ablated = copy.deepcopy(model)",
      "ablated = model"),
    M("ablate_heads", "the head's value weights zeroed but not their bias",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "d_model = model.config.d_model\n"
      "            ablated.blocks[layer].attn.qkv.weight[2 * d_model + head * d_k : 2 * d_model + (head + "
      "1) * d_k] = 0.0"),
    M("KVCache", "new keys put before the cached ones",
      "k = torch.cat([self.keys[layer], k], dim=-2)",
      "k = torch.cat([k, self.keys[layer]], dim=-2)"),
    M("KVCache", "length read from the last axis",
      "return self.keys[layer].shape[-2] if layer in self.keys else 0",
      "return self.keys[layer].shape[-1] if layer in self.keys else 0"),
    M("KVCache", "the dicts are class attributes, shared by every cache",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n",
      "    keys: dict[int, torch.Tensor] = {}\n"
      "    values: dict[int, torch.Tensor] = {}\n"),
    M("cached_attention", "not causal: right for one new token only",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values)"),
    M("cached_attention", "only the queries rotated, the keys cached unrotated",
      "q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)",
      "q = apply_rope(q, positions, attn.base)"),
    M("cached_attention", "the chunk appended to the cache twice",
      "keys, values = cache.append(layer, k, v)",
      "cache.append(layer, k, v)\n"
      "    keys, values = cache.append(layer, k, v)"),
    M("generate_with_cache", "the whole sequence fed to every cached step",
      "logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(tokens, cache, attend)[:, -1]"),
    M("generate_with_cache", "pick given the logits with the time axis kept",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt, cache, attend)[:, -1:]"),
    M("generate_with_cache", "one step too many: the last token fed though nothing reads it",
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]",
      "        logits = model.step(next_token, cache, attend)[:, -1]"),
    M("next_token_probs", "logits multiplied by the temperature",
      "scaled = logits / temperature",
      "scaled = logits * temperature"),
    M("next_token_probs", "the k-th largest logit dropped too (<= for <)",
      "scaled.masked_fill(scaled < kth",
      "scaled.masked_fill(scaled <= kth"),
    M("next_token_probs", "the caller's logits divided in place",
      "scaled = logits / temperature",
      "scaled = logits.div_(temperature)"),
    M("sample_next", "drawn from the plain softmax, temperature and top_k ignored",
      "probs = next_token_probs(logits, temperature, top_k)",
      "probs = next_token_probs(logits)"),
    M("sample_next", "the generator not passed",
      "torch.multinomial(probs, 1, generator=generator)",
      "torch.multinomial(probs, 1)"),
    M("sample_next", "returns (b,) instead of (b, 1)",
      "torch.multinomial(probs, 1, generator=generator)",
      "torch.multinomial(probs, 1, generator=generator)[:, 0]"),
    # 08 · FlashAttention in Triton
    M("triton_add", "inputs not made contiguous before the flat kernel",
      "    x, y = x.contiguous(), y.contiguous()\n",
      ""),
    M("triton_softmax", "row stride taken as the row length",
      "x.shape[1], x.stride(0), out.stride(0)",
      "x.shape[1], x.shape[1], x.shape[1]"),
    M("triton_scores", "grid axes of queries and keys swapped",
      "grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)",
      "grid = (triton.cdiv(t_k, block_n), triton.cdiv(t_q, block_m), b * h)"),
    M("triton_flash_attention", "causal mask inside the tile aligned top-left",
      "visible = visible & (cols[None, :] <= offs_m[:, None] + offset)",
      "visible = visible & (cols[None, :] <= offs_m[:, None])"),
    # 09 · backward
    M("softmax_backward", "the row sum D dropped",
      "return p * (grad_p - D)",
      "return p * grad_p"),
    M("softmax_backward", "D summed over the last axis whatever dim is",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = (grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "keepdim forgotten in D",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = (grad_p * p).sum(dim=dim)"),
    M("attention_backward", "1/sqrt(d) missing from dK",
      "dk = ds.transpose(-1, -2) @ q * scale",
      "dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "P of the backward computed without the causal mask",
      "_, p = attention(q, k, v, is_causal=is_causal)",
      "_, p = attention(q, k, v)"),
    M("attention_backward", "P not transposed in dV",
      "dv = p.transpose(-1, -2) @ grad_out",
      "dv = p @ grad_out"),
    M("flash_attention_backward", "D taken from the tile's own row sums of dP ∘ P",
      "ds = p * (dp - D[..., qs:qe, :])",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "dQ overwritten by each key block instead of accumulated",
      "dq[..., qs:qe, :] += ds @ k_blk * scale",
      "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("flash_attention_backward", "tiles skipped from the first row's diagonal",
      "if is_causal and ks > qe - 1 + offset:",
      "if is_causal and ks > qs + offset:"),
    M("FlashAttentionFunction", "dk and dv returned in each other's place",
      "return dq, dk, dv, None, None",
      "return dq, dv, dk, None, None"),
    M("FlashAttentionFunction", "is_causal not passed to the backward",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out, block_size=ctx.block_size)"),
    M("FlashAttentionFunction", "forward returns (out, lse)",
      "        ctx.is_causal, ctx.block_size = is_causal, block_size\n"
      "        return out",
      "        ctx.is_causal, ctx.block_size = is_causal, block_size\n"
      "        return out, lse"),
    M("triton_flash_attention_backward", "D taken as rowsum(dO), without O",
      "delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()",
      "delta = grad_out.float().sum(dim=-1).contiguous()"),
    # 10 · modern attention
    M("repeat_kv", "heads tiled (r h), not grouped",
      '"b h t d -> b (h r) t d"',
      '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "repeated along the time axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return torch.repeat_interleave(x, n_rep, dim=2)"),
    M("repeat_kv", "n_rep read as the number of query heads",
      "r=n_rep)",
      "r=n_rep // x.shape[1])"),
    M("GroupedQueryAttention", "key/value heads tiled with .repeat instead of grouped",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "keys split into n_heads heads",
      'k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_kv_heads)',
      'k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_heads)'),
    M("GroupedQueryAttention", "group size taken as n_kv_heads",
      "n_rep = self.n_heads // self.n_kv_heads",
      "n_rep = self.n_kv_heads"),
    M("sliding_window_mask", "window + 1 keys (<= window)",
      "(distance < window)",
      "(distance <= window)"),
    M("sliding_window_mask", "aligned top-left",
      "query_positions = torch.arange(t_q) + (t_k - t_q)",
      "query_positions = torch.arange(t_q)"),
    M("sliding_window_mask", "a two-sided window, future keys allowed",
      "return (distance >= 0) & (distance < window)",
      "return distance.abs() < window"),
    M("sliding_window_flash_attention", "first key block rounded up",
      "range(first // block_size * block_size, t_k, block_size)",
      "range(-(-first // block_size) * block_size, t_k, block_size)"),
    M("sliding_window_flash_attention", "the window's lower edge off by one",
      "(distance < 0) | (distance >= window)",
      "(distance < 0) | (distance > window)"),
    M("sliding_window_flash_attention", "no guard for a row whose window misses the whole key block",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)",
      "m_safe = m_new"),
    M("alibi_score_mod", "the power-of-two formula for every head count",
      "slopes = torch.cat([power_of_two_slopes(n), extra])",
      "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "bias with the wrong sign",
      "slopes[h] * (kv_idx - q_idx)",
      "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "exponents counted from 0",
      "torch.arange(1, n_heads + 1)",
      "torch.arange(n_heads)"),
    M("document_mask_mod", "own position excluded (q_idx > kv_idx)",
      "(q_idx >= kv_idx)",
      "(q_idx > kv_idx)"),
    M("document_mask_mod", "not causal: the whole document visible",
      "return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "return document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "later keys allowed instead of earlier ones",
      "(q_idx >= kv_idx)",
      "(kv_idx >= q_idx)"),
    M("rotary_window_attention", "window + 1 keys",
      "(q_idx - kv_idx < window)",
      "(q_idx - kv_idx <= window)"),
    M("rotary_window_attention", "the given positions ignored",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q, k = apply_rope(q), apply_rope(k)"),
    M("rotary_window_attention", "the values rotated too",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q, k, v = apply_rope(q, positions), apply_rope(k, positions), apply_rope(v, positions)"),
)

ALTERNATIVES_D: tuple[BlindAlternative, ...] = (
    # 01 · dot-product attention
    A("dot_product_scores", "matmul with the last two axes of k transposed",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      "return q @ k.transpose(-2, -1)"),
    A("softmax", "exp of x minus its log-sum-exp",
      "shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
      "    exps = shifted.exp()\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),
    A("dot_product_attention", "einsum for the weighted sum of the values",
      "out = weights @ v",
      'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    # 02 · scaling
    A("score_variance", "q and k from one draw, the score as a sum of products, variance by hand",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n"
      "    k = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n"
      '    scores = einsum(q, k, "n d, n d -> n")  # (n,)',
      "q, k = torch.randn(2, n_samples, d_k, dtype=torch.float64)\n"
      "    scores = (q * k).sum(dim=1)"),
    A("scaled_dot_product_attention", "the queries scaled before the scores",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)",
      "scores = dot_product_scores(q * d_k**-0.5, k)"),
    # 03 · causal masking
    A("causal_mask", "tril of a boolean matrix with the diagonal shifted by T_k - T_q",
      "query_positions = torch.arange(t_q, device=device) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k, device=device)  # (t_k,)\n"
      '    return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "one row per length, stacked",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "return torch.stack([positions < n for n in lengths])"),
    A("attention", "an additive -inf bias and nan_to_num for rows without a key",
      'scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)  # (..., T_q, T_k): NaN in a row that allows no key\n"
      "    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)",
      'bias = torch.zeros_like(scores).masked_fill(~allowed, float("-inf"))\n'
      "    weights = torch.nan_to_num(softmax(scores + bias, dim=-1), nan=0.0)"),
    # 04 · multi-head attention
    A("split_heads", "view into heads, then transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.view(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2)"),
    A("merge_heads", "the heads concatenated along the features",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return torch.cat(x.unbind(dim=1), dim=-1)"),
    A("MultiHeadAttention", "PyTorch's SDPA with the causal mask AND-ed in",
      "out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)",
      "if is_causal:\n"
      "            causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)\n"
      "            mask = causal if mask is None else mask & causal\n"
      "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
    # 05 · RoPE
    A("rope_frequencies", "exp of a multiple of log(base)",
      "return base ** (-two_i / d)",
      "return torch.exp(-math.log(base) * two_i / d)"),
    A("apply_rope", "pairs as complex numbers, turned by a complex multiplication",
      "cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each\n"
      "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())\n"
      "    turned = pairs * torch.polar(torch.ones_like(angles), angles)  # (..., T, d/2)\n"
      "    return torch.view_as_real(turned).flatten(-2).to(x.dtype)"),
    A("RotaryMultiHeadAttention", "the attention written out with einsum",
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): the same for every "
      "head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)",
      '        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])\n'
      "        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=x.device)\n"
      "        if is_causal:\n"
      "            allowed = allowed.tril()\n"
      "        if mask is not None:\n"
      "            allowed = allowed & mask.unsqueeze(-3)\n"
      '        out = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v'),
    # 06 · FlashAttention
    A("online_softmax", "a running log-sum-exp merged block by block with logaddexp",
      "    m = torch.full_like(x[..., :1], -math.inf)  # (..., 1): running maximum\n"
      "    denom = torch.zeros_like(x[..., :1])  # (..., 1): running sum of exp(x - m)\n"
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n"
      "        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)\n"
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n"
      "        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)\n"
      "        m = m_new\n"
      "    return torch.exp(x - m) / denom",
      "    lse = torch.full_like(x[..., :1], -math.inf)  # (..., 1): log of the running sum\n"
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block_lse = torch.logsumexp(x[..., start : start + block_size], dim=-1, keepdim=True)\n"
      "        lse = torch.logaddexp(lse, block_lse)\n"
      "    return torch.exp(x - lse)"),
    A("flash_attention_query_block", "the accumulator kept normalised at every step (FlashAttention-1)",
      "        denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n"
      "        m = m_new\n"
      "    return acc / denom, (m + torch.log(denom)).squeeze(-1)",
      "        denom_new = alpha * denom + p.sum(dim=-1, keepdim=True)\n"
      "        acc = (alpha * denom * acc + p @ v[..., ks : ks + block_size, :]) / denom_new\n"
      "        denom, m = denom_new, m_new\n"
      "    return acc, (m + torch.log(denom)).squeeze(-1)"),
    A("flash_attention", "every causal tile masked with torch.where, and the sum clamped away from 0",
      "            if is_causal and ke - 1 > qs + offset:  # the block crosses the diagonal: mask inside "
      "it\n"
      "                rows = torch.arange(qs, qe, device=q.device) + offset  # (Bq,) positions\n"
      "                cols = torch.arange(ks, ke, device=q.device)  # (Bk,)\n"
      "                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)  # (..., Bq, Bk)\n"
      "            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)\n"
      "            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1): rows without keys "
      "yet\n"
      "            p = torch.exp(s - m_safe)  # (..., Bq, Bk)\n"
      "            alpha = torch.exp(m - m_safe)  # (..., Bq, 1)\n"
      "            denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "            acc = alpha * acc + p @ v[..., ks:ke, :]  # (..., Bq, d_v)\n"
      "            m = m_new\n"
      "        denom = torch.where(denom == 0, 1.0, denom)  # (..., Bq, 1): a row that sees no key gets"
      " out 0, lse -inf\n"  # the line the solution gained on 2026-12-05, given outside the markers
      "        # 3. the block's rows of out and lse, from its final running state\n"
      "        out[..., qs:qe, :] = acc / denom",
      "            if is_causal:\n"
      "                rows = torch.arange(qs, qe, device=q.device)[:, None] + offset\n"
      "                seen = torch.arange(ks, ke, device=q.device)[None, :] <= rows\n"
      "                s = torch.where(seen, s, -math.inf)\n"
      "            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))\n"
      "            m_safe = m_new.nan_to_num(neginf=0.0)\n"
      "            p = torch.exp(s - m_safe)\n"
      "            alpha = torch.exp(m - m_safe)\n"
      "            denom = alpha * denom + p.sum(dim=-1, keepdim=True)\n"
      "            acc = alpha * acc + p @ v[..., ks:ke, :]\n"
      "            m = m_new\n"
      "        out[..., qs:qe, :] = acc / denom.clamp_min(torch.finfo(q.dtype).tiny)"),
    # 07 · KV cache
    A("block_forward", "an explicit (t, t) causal mask",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x), mask=causal_mask(x.shape[1]))"),
    A("ablate_heads", "the head's value rows of qkv and their bias zeroed",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "start = 2 * model.config.d_model + head * d_k\n"
      "            ablated.blocks[layer].attn.qkv.weight[start : start + d_k] = 0.0\n"
      "            ablated.blocks[layer].attn.qkv.bias[start : start + d_k] = 0.0"),
    A("KVCache", "a list of chunks per layer, concatenated on every append",
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      '        """How many positions `layer` has cached (0 before its first append)."""\n'
      "        return self.keys[layer].shape[-2] if layer in self.keys else 0\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, "
      "torch.Tensor]:\n"
      '        """Add k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""\n'
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        self.chunks: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      "        return sum(k.shape[-2] for k, _ in self.chunks.get(layer, []))\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, "
      "torch.Tensor]:\n"
      "        self.chunks.setdefault(layer, []).append((k, v))\n"
      "        keys, values = zip(*self.chunks[layer], strict=True)\n"
      "        return torch.cat(keys, dim=-2), torch.cat(values, dim=-2)"),
    A("cached_attention", "the bottom-right mask built explicitly, heads merged with merge_heads",
      "    out, _ = attention(q, keys, values, is_causal=True)  # (b, h, t_new, d_k)\n"
      '    return attn.out(rearrange(out, "b h t d -> b t (h d)"))',
      "    mask = causal_mask(t_new, keys.shape[-2], device=x.device)\n"
      "    out, _ = attention(q, keys, values, mask=mask)\n"
      "    return attn.out(merge_heads(out))"),
    A("generate_with_cache", "a list of tokens, concatenated at the end",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new token "
      "only\n"
      "    return tokens",
      "    chosen = [prompt]\n"
      "    logits = model.step(prompt, cache, attend)[:, -1, :]\n"
      "    for _ in range(n_new):\n"
      "        chosen.append(pick(logits))\n"
      "        if len(chosen) <= n_new:\n"
      "            logits = model.step(chosen[-1], cache, attend)[:, -1, :]\n"
      "    return torch.cat(chosen, dim=1)"),
    A("next_token_probs", "the k-th largest from kthvalue, the rest set by torch.where",
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))',
      "        kth = scaled.kthvalue(scaled.shape[-1] - top_k + 1, dim=-1, keepdim=True).values\n"
      '        scaled = torch.where(scaled >= kth, scaled, float("-inf"))'),
    A("sample_next", "inverse-CDF sampling with uniform draws",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)\n"
      "    index = (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)\n"
      "    return index.clamp_max(probs.shape[-1] - 1)"),
    # 09 · backward
    A("softmax_backward", "the Jacobian diag(p) - p pᵀ built per row",
      "    D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)  # same shape as p",
      "    p_row, g_row = p.movedim(dim, -1), grad_p.movedim(dim, -1)\n"
      "    jacobian = torch.diag_embed(p_row) - p_row.unsqueeze(-1) * p_row.unsqueeze(-2)\n"
      "    return (jacobian @ g_row.unsqueeze(-1)).squeeze(-1).movedim(-1, dim)"),
    A("attention_backward", "einsum throughout, D from rowsum(dO ∘ O)",
      "    _, p = attention(q, k, v, is_causal=is_causal)  # (..., T_q, T_k)\n"
      "    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)\n"
      "    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)\n"
      "    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))  # (..., T_q, T_k)\n"
      "    dq = ds @ k * scale  # (..., T_q, d)\n"
      "    dk = ds.transpose(-1, -2) @ q * scale  # (..., T_k, d)\n"
      "    return dq, dk, dv",
      "    out, p = attention(q, k, v, is_causal=is_causal)\n"
      '    dv = torch.einsum("...qk,...qd->...kd", p, grad_out)\n'
      '    dp = torch.einsum("...qd,...kd->...qk", grad_out, v)\n'
      "    ds = p * (dp - (grad_out * out).sum(dim=-1, keepdim=True))\n"
      '    dq = torch.einsum("...qk,...kd->...qd", ds, k) * scale\n'
      '    dk = torch.einsum("...qk,...qd->...kd", ds, q) * scale\n'
      "    return dq, dk, dv"),
    A("flash_attention_backward", "query blocks outside, key blocks inside, every tile visited",
      "    for ks in range(0, t_k, block_size):\n"
      "        ke = min(ks + block_size, t_k)\n"
      "        k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)\n"
      "        dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)  # (..., Bk, d), (..., Bk, "
      "d_v)\n"
      "        for qs in range(0, t_q, block_size):\n"
      "            qe = min(qs + block_size, t_q)\n"
      "            if is_causal and ks > qe - 1 + offset:\n"
      "                continue  # every key of the tile comes after every query of it\n"
      "            q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, "
      "d_v)\n"
      "            s = q_blk @ k_blk.transpose(-1, -2) * scale  # (..., Bq, Bk)\n"
      "            if is_causal:\n"
      "                rows = torch.arange(qs, qe, device=q.device)[:, None] + offset  # (Bq, 1)\n"
      "                cols = torch.arange(ks, ke, device=q.device)[None, :]  # (1, Bk)\n"
      '                s = s.masked_fill(cols > rows, float("-inf"))  # (..., Bq, Bk)\n'
      "            p = torch.exp(s - lse[..., qs:qe, None])  # (..., Bq, Bk)\n"
      "            dv_acc += p.transpose(-1, -2) @ do_blk  # (..., Bk, d_v)\n"
      "            dp = do_blk @ v_blk.transpose(-1, -2)  # (..., Bq, Bk)\n"
      "            ds = p * (dp - D[..., qs:qe, :])  # (..., Bq, Bk)\n"
      "            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)\n"
      "            dk_acc += ds.transpose(-1, -2) @ q_blk * scale  # (..., Bk, d)\n"
      "        dk[..., ks:ke, :] = dk_acc\n"
      "        dv[..., ks:ke, :] = dv_acc",
      "    for qs in range(0, t_q, block_size):\n"
      "        qe = min(qs + block_size, t_q)\n"
      "        q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]\n"
      "        rows = torch.arange(qs, qe, device=q.device)[:, None] + offset\n"
      "        for ks in range(0, t_k, block_size):\n"
      "            ke = min(ks + block_size, t_k)\n"
      "            s = q_blk @ k[..., ks:ke, :].transpose(-1, -2) * scale\n"
      "            if is_causal:\n"
      "                s = torch.where(torch.arange(ks, ke, device=q.device)[None, :] <= rows, s, "
      "-math.inf)\n"
      "            p = torch.exp(s - lse[..., qs:qe].unsqueeze(-1))\n"
      "            dv[..., ks:ke, :] += p.transpose(-1, -2) @ do_blk\n"
      "            ds = p * (do_blk @ v[..., ks:ke, :].transpose(-1, -2) - D[..., qs:qe, :])\n"
      "            dq[..., qs:qe, :] += ds @ k[..., ks:ke, :] * scale\n"
      "            dk[..., ks:ke, :] += ds.transpose(-1, -2) @ q_blk * scale"),
    A("FlashAttentionFunction", "flash_attention with return_lse, the options kept as keywords",
      "        out, lse = flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)  # "
      "(..., T_q, d_v), (..., T_q)\n"
      "        ctx.save_for_backward(q, k, v, out, lse)\n"
      "        ctx.is_causal, ctx.block_size = is_causal, block_size\n"
      "        return out\n"
      "\n"
      "    @staticmethod\n"
      "    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:\n"
      '        """One gradient per input of forward: dq, dk, dv, None, None."""\n'
      "        q, k, v, out, lse = ctx.saved_tensors\n"
      "        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, "
      "ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "        from attn_course.flash import flash_attention\n"
      "\n"
      "        out, lse = flash_attention(q, k, v, is_causal, block_size, return_lse=True)\n"
      "        ctx.save_for_backward(q, k, v, out, lse)\n"
      '        ctx.options = {"is_causal": is_causal, "block_size": block_size}\n'
      "        return out\n"
      "\n"
      "    @staticmethod\n"
      "    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:\n"
      "        q, k, v, out, lse = ctx.saved_tensors\n"
      "        return (*flash_attention_backward(q, k, v, out, lse, grad_out, **ctx.options), None, None)"),
    # 10 · modern attention
    A("repeat_kv", "repeat_interleave on the head axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return torch.repeat_interleave(x, n_rep, dim=1)"),
    A("GroupedQueryAttention", "SDPA with enable_gqa, no repeated keys",
      "        n_rep = self.n_heads // self.n_kv_heads\n"
      "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)",
      "        allowed = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device)\n"
      "        if is_causal:\n"
      "            allowed = allowed.tril()\n"
      "        if mask is not None:\n"
      "            allowed = allowed & mask.unsqueeze(-3)\n"
      "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)"),
    A("sliding_window_mask", "the difference of two shifted lower triangles",
      "    query_positions = torch.arange(t_q) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k)  # (t_k,)\n"
      '    distance = rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")  # '
      "(t_q, t_k)\n"
      "    return (distance >= 0) & (distance < window)",
      "    ones = torch.ones(t_q, t_k, dtype=torch.bool)\n"
      "    return ones.tril(diagonal=t_k - t_q) & ~ones.tril(diagonal=t_k - t_q - window)"),
    A("sliding_window_flash_attention", "per query block, the window's keys sliced out and a dense softmax",
      "    outs = []\n"
      "    for qs in range(0, t_q, block_size):\n"
      "        q_blk = q[..., qs : qs + block_size, :] / math.sqrt(d)  # (..., Bq, d)\n"
      "        rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset  # (Bq,) positions\n"
      "        m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)  # (..., "
      "Bq, 1)\n"
      "        denom = torch.zeros_like(m)  # (..., Bq, 1)\n"
      "        acc = torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., "
      "Bq, d_v)\n"
      "        first = max(0, qs + offset - window + 1)  # the first row's first key\n"
      "        for ks in range(first // block_size * block_size, t_k, block_size):\n"
      "            if ks > rows[-1]:\n"
      "                break  # this block and all later ones are after the diagonal\n"
      "            s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)  # (..., Bq, Bk)\n"
      "            cols = torch.arange(ks, ks + s.shape[-1], device=q.device)  # (Bk,)\n"
      "            distance = rows[:, None] - cols[None, :]  # (Bq, Bk): how far back each key is\n"
      "            s = s.masked_fill((distance < 0) | (distance >= window), -math.inf)  # (..., Bq, Bk)\n"
      "            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)\n"
      "            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1)\n"
      "            p = torch.exp(s - m_safe)  # (..., Bq, Bk)\n"
      "            alpha = torch.exp(m - m_safe)  # (..., Bq, 1)\n"
      "            denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "            acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n"
      "            m = m_new\n"
      "        outs.append(acc / denom)  # (..., Bq, d_v)\n"
      "    return torch.cat(outs, dim=-2)",
      "    outs = []\n"
      "    for qs in range(0, t_q, block_size):\n"
      "        qe = min(qs + block_size, t_q)\n"
      "        lo, hi = max(0, qs + offset - window + 1), max(0, min(t_k, qe + offset))\n"
      "        s = q[..., qs:qe, :] @ k[..., lo:hi, :].transpose(-1, -2) / math.sqrt(d)\n"
      "        back = torch.arange(qs, qe, device=q.device)[:, None] + offset - torch.arange(lo, hi, "
      "device=q.device)\n"
      "        s = s.masked_fill((back < 0) | (back >= window), -math.inf)\n"
      "        outs.append(torch.softmax(s, dim=-1) @ v[..., lo:hi, :])\n"
      "    return torch.cat(outs, dim=-2)"),
    A("alibi_score_mod", "the paper's get_slopes, recursive, in Python floats",
      "    def power_of_two_slopes(n_heads):  # 2^(-8/n_heads), 2^(-16/n_heads), ..., 2^-8\n"
      "        return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)  # (n_heads,)\n"
      "\n"
      "    n = 2 ** math.floor(math.log2(n_heads))  # the largest power of two <= n_heads\n"
      "    extra = power_of_two_slopes(2 * n)[0::2][: n_heads - n]  # (n_heads - n,): between n's slopes\n"
      "    slopes = torch.cat([power_of_two_slopes(n), extra])  # (n_heads,)",
      "    def get_slopes(n):\n"
      "        if math.log2(n).is_integer():\n"
      "            start = 2 ** (-(2 ** -(math.log2(n) - 3)))\n"
      "            return [start * start**i for i in range(n)]\n"
      "        closest = 2 ** math.floor(math.log2(n))\n"
      "        return get_slopes(closest) + get_slopes(2 * closest)[0::2][: n - closest]\n"
      "\n"
      "    slopes = torch.tensor(get_slopes(n_heads))"),
    A("document_mask_mod", "each token's document start, found once with cummax",
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "    positions = torch.arange(len(document_ids))\n"
      "    new_doc = torch.ones(len(document_ids), dtype=torch.bool)\n"
      "    new_doc[1:] = document_ids[1:] != document_ids[:-1]\n"
      "    start = torch.where(new_doc, positions, 0).cummax(dim=0).values  # first position of its "
      "document\n"
      "\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (kv_idx >= start[q_idx]) & (kv_idx <= q_idx)"),
    A("rotary_window_attention", "the course's attention with a dense window mask and repeated keys",
      "    def in_window(b, h, q_idx, kv_idx):\n"
      "        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n"
      "\n"
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "    back = torch.arange(t)[:, None] - torch.arange(t)[None, :]\n"
      "    window_mask = ((back >= 0) & (back < window)).to(x.device)\n"
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask=window_mask)"),
)
# fmt: on
