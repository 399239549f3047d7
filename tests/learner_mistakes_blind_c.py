"""Blind set C of learner mistakes and right alternatives, for every exercise of 01-10 that can be compared.

Written from the solution notebooks and the topic modules only (attn_course/*.py outside
attn_course/checks), by someone who never read any check, any test of a check, or any earlier set
of mistakes, on 2026-12-05: the held-out set for the fixes of that day. Each mistake is a text edit
of the solution notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines
(`old`, occurring exactly once in that cell, replaced by `new`), with the idea of the mistake in one
short phrase; each alternative is an edit of the same kind that keeps the function right, written
differently from the solution. Every mistake was verified wrong against `attn_course.reference` on an
input the exercise's contract allows, and every alternative right on all of them, with
tests/blind_compare.py (`verify(HOLDOUT_C, ALTERNATIVES_C, folder)` returns no problem; its inputs
for rotary_window_attention were added with this set). Triton exercises have one mistake each and no
alternative; fast_flash_attention and the two backward kernels of 09 have none (blind_compare has no
inputs for them). The cell of triton_flash_attention_backward does not run alone (its kernels are the
cells before it), so its mistake was also compared with the course's two kernels in scope, where it
differs too.
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_C: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "q @ k.T: .T reverses every axis of a batched k",
      'return torch.einsum("...qd,...kd->...qk", q, k)', "return q @ k.T"),
    M("dot_product_scores", "transposes axes 0 and 1 of k instead of its last two",
      'return torch.einsum("...qd,...kd->...qk", q, k)', "return q @ k.transpose(0, 1)"),
    M("dot_product_scores", "output letters swapped: scores come out (..., T_k, T_q)",
      '"...qd,...kd->...qk"', '"...qd,...kd->...kq"'),
    M("softmax", "sum without keepdim: broadcasts against the wrong axis",
      "return exps / exps.sum(dim=dim, keepdim=True)", "return exps / exps.sum(dim=dim)"),
    M("softmax", "shifts by the maximum of the whole tensor, not of each row",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x - x.max()"),
    M("softmax", "subtracts the maximum in place, changing the caller's x",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x.sub_(x.amax(dim=dim, keepdim=True))"),
    M("dot_product_attention", "softmax over axis 1: the key axis only for unbatched scores",
      "weights = softmax(dot_product_scores(q, k), dim=-1)",
      "weights = softmax(dot_product_scores(q, k), dim=1)"),
    M("dot_product_attention", "divides by √d although this attention is the unscaled one",
      "weights = softmax(dot_product_scores(q, k), dim=-1)",
      "weights = softmax(dot_product_scores(q, k) / math.sqrt(q.shape[-1]), dim=-1)"),
    M("dot_product_attention", "returns (weights, out) in the wrong order",
      "return out, weights", "return weights, out"),

    # 02 · scaling
    M("score_variance", "scales by d_k instead of √d_k",
      "scores = scores / math.sqrt(d_k)", "scores = scores / d_k"),
    M("score_variance", "returns the standard deviation, not the variance",
      "return scores.var().item()", "return scores.std().item()"),
    M("score_variance", "returns a 0-d tensor instead of a Python float",
      "return scores.var().item()", "return scores.var()"),
    M("scaled_dot_product_attention", "divides by d_k, not by its square root",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)", "scores = dot_product_scores(q, k) / d_k"),
    M("scaled_dot_product_attention", "takes the scale from v's width: right only when d_v = d_k",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "scales the weights after the softmax instead of the scores",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),

    # 03 · causal masking
    M("causal_mask", "top-left aligned: no offset when T_q ≠ T_k",
      "query_positions = torch.arange(t_q, device=device) + (t_k - t_q)",
      "query_positions = torch.arange(t_q, device=device)"),
    M("causal_mask", "strict <: a query may not attend its own position",
      'rearrange(key_positions, "k -> 1 k") <= rearrange',
      'rearrange(key_positions, "k -> 1 k") < rearrange'),
    M("causal_mask", "polarity inverted: True where the key is in the future",
      'rearrange(key_positions, "k -> 1 k") <= rearrange',
      'rearrange(key_positions, "k -> 1 k") > rearrange'),
    M("padding_mask", "<= keeps one padding position per row",
      'rearrange(positions, "t -> 1 t") < rearrange', 'rearrange(positions, "t -> 1 t") <= rearrange'),
    M("padding_mask", "axes swapped: returns (t, B)",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'return rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("padding_mask", "polarity inverted: True for the padding",
      'rearrange(positions, "t -> 1 t") < rearrange', 'rearrange(positions, "t -> 1 t") >= rearrange'),
    M("attention", "causal mask from tril: top-left aligned when T_q < T_k",
      "allowed = allowed & causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "allowed = allowed & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()"),
    M("attention", "fills the masked scores with 0 instead of -inf",
      'scores = scores.masked_fill(~allowed, float("-inf"))', "scores = scores.masked_fill(~allowed, 0.0)"),
    M("attention", "mask polarity: keeps the keys the mask forbids",
      "allowed = allowed & mask", "allowed = allowed & ~mask"),

    # 04 · multi-head attention
    M("split_heads", "reshape straight to (b, h, t, d): no transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "head as the inner factor of the last axis: (d h)",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "n_heads given as the head size d",
      "h=n_heads)", "d=n_heads)"),
    M("merge_heads", "reshape to (b, t, h·d) without moving the head axis",
      'return rearrange(x, "b h t d -> b t (h d)")', "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "concatenates feature-major: (d h)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "view after transpose: fails on the non-contiguous result",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("MultiHeadAttention", "cross-attention takes the queries from the context too",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)", "q, k, v = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "mask (b, t, t_k) given no head axis: batch broadcast against heads",
      "        if mask is not None:\n"
      '            mask = rearrange(mask, "... q k -> ... 1 q k")  # (b, 1, t, t_k): the same for every'
      ' head\n',
      ""),
    M("MultiHeadAttention", "heads merged by reshape without the transpose",
      "return self.out(merge_heads(out))", "return self.out(out.reshape(out.shape[0], out.shape[2], -1))"),

    # 05 · RoPE
    M("rope_frequencies", "exponent 2i/(d/2): the even indices divided by half the width",
      "return base ** (-two_i / d)", "return base ** (-two_i / (d / 2))"),
    M("rope_frequencies", "frequencies in float32",
      "two_i = torch.arange(0, d, 2, dtype=torch.float64)",
      "two_i = torch.arange(0, d, 2, dtype=torch.float32)"),
    M("rope_frequencies", "odd exponents 1, 3, 5, …: off by one",
      "two_i = torch.arange(0, d, 2, dtype=torch.float64)",
      "two_i = torch.arange(1, d + 1, 2, dtype=torch.float64)"),
    M("apply_rope", "rotates by minus the angle: the sine's sign flipped",
      "[even * cos - odd * sin, even * sin + odd * cos]", "[even * cos + odd * sin, odd * cos - even * sin]"),
    M("apply_rope", "positions ignored: always 0 … T-1",
      "    if positions is None:\n        positions = torch.arange(t, device=x.device)  # (T,)",
      "    positions = torch.arange(t, device=x.device)  # (T,)"),
    M("apply_rope", "writes the rotated pairs into x in place",
      "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "    even, odd = x[..., 0::2].clone(), x[..., 1::2].clone()  # (..., T, d/2) each\n"
      "    x[..., 0::2] = even * cos - odd * sin\n"
      "    x[..., 1::2] = even * sin + odd * cos\n"
      "    return x"),
    M("RotaryMultiHeadAttention", "rotates the values too",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "RoPE before the head split: frequencies over d_model, not d_k",
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k,'
      ' v))  # each (b, h, t, d_k)\n'
      '        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base) '
      ' # (b, h, t, d_k) each',
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)  # (b, t,"
      " d_model)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "base ignored: RoPE at its default 10000",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)"),

    # 06 · FlashAttention
    M("online_softmax", "running sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + torch.exp", "denom = denom + torch.exp"),
    M("online_softmax", "loop stops before the last ragged block",
      "for start in range(0, x.shape[-1], block_size):",
      "for start in range(0, x.shape[-1] - block_size + 1, block_size):"),
    M("online_softmax", "no guard for a block that is all -inf: exp(-inf - -inf)",
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n",
      "        m_safe = m_new  # (..., 1)\n"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + p @ v", "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse without the running max: log(l) only",
      "return acc / denom, (m + torch.log(denom)).squeeze(-1)",
      "return acc / denom, torch.log(denom).squeeze(-1)"),
    M("flash_attention_query_block", "scale from v's width: right only when d_v = d",
      "q_blk = q_blk / math.sqrt(q_blk.shape[-1])", "q_blk = q_blk / math.sqrt(v.shape[-1])"),
    M("flash_attention", "causal diagonal top-left aligned: offset 0",
      "offset = t_k - t_q  # query i", "offset = 0  # query i"),
    M("flash_attention", "last key block's end not clipped at T_k",
      "ke = min(ks + block_size, t_k)  # the last key block may be shorter",
      "ke = ks + block_size  # the last key block may be shorter"),
    M("flash_attention", "running maximum never advanced",
      "            acc = alpha * acc + p @ v[..., ks:ke, :]  # (..., Bq, d_v)\n            m = m_new\n",
      "            acc = alpha * acc + p @ v[..., ks:ke, :]  # (..., Bq, d_v)\n"),

    # 07 · KV cache and generation
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x))"),
    M("block_forward", "residual added in place: the caller's x changes",
      "x = x + block.attn(", "x += block.attn("),
    M("block_forward", "MLP reads the block's input, not the stream after the attention",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("ablate_heads", "zeros rows of W^O (output features) instead of the head's columns",
      "out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "out.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "no copy: switches the heads off in the caller's model",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "zeros the head's query projection instead of its output",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.qkv.weight[head * d_k : (head + 1) * d_k] = 0.0"),
    M("KVCache", "concatenates along the head axis",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([self.keys[layer], k], dim=1)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=1)"),
    M("KVCache", "new keys and values stored before the old ones",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "dicts as class attributes: every cache shares one store",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"),
    M("cached_attention", "positions restart at 0 for every chunk",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "no causal mask: right for one new token, wrong for a chunk",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values)"),
    M("cached_attention", "heads merged feature-major: (d h)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("generate_with_cache", "feeds the whole sequence so far at every step",
      "logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(tokens, cache, attend)[:, -1]"),
    M("generate_with_cache", "one step too many: the last token is fed too",
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]",
      "        logits = model.step(next_token, cache, attend)[:, -1]"),
    M("generate_with_cache", "prefill logits of the first position instead of the last",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt, cache, attend)[:, 0]"),
    M("next_token_probs", "<= also removes the k-th largest logit",
      "scaled.masked_fill(scaled < kth,", "scaled.masked_fill(scaled <= kth,"),
    M("next_token_probs", "tokens outside the top k set to 0 instead of -inf",
      'scaled.masked_fill(scaled < kth, float("-inf"))', "scaled.masked_fill(scaled < kth, 0.0)"),
    M("next_token_probs", "divides the logits in place",
      "scaled = logits / temperature", "scaled = logits.div_(temperature)"),
    M("sample_next", "argmax instead of a draw",
      "return torch.multinomial(probs, 1, generator=generator)", "return probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "temperature applied twice",
      "probs = next_token_probs(logits, temperature, top_k)",
      "probs = next_token_probs(logits / temperature, temperature, top_k)"),
    M("sample_next", "returns (b,) instead of (b, 1)",
      "return torch.multinomial(probs, 1, generator=generator)",
      "return torch.multinomial(probs, 1, generator=generator).squeeze(-1)"),

    # 08 · Triton (one each)
    M("triton_add", "only x made contiguous: a transposed y is read in storage order",
      "x, y = x.contiguous(), y.contiguous()", "x = x.contiguous()"),
    M("triton_softmax", "first pass pads the last ragged block with 0 instead of -inf",
      'other=float("-inf")).to(tl.float32)  # (BLOCK,)\n        m_new = tl.maximum(m, tl.max(x, axis=0))',
      "other=0.0).to(tl.float32)  # (BLOCK,)\n        m_new = tl.maximum(m, tl.max(x, axis=0))"),
    M("triton_scores", "k's strides copied from q",
      "k.stride(0), k.stride(1), k.stride(2),", "q.stride(0), q.stride(1), q.stride(2),"),
    M("triton_flash_attention", "causal loop bound without the offset: top-left when T_q < T_k",
      "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)", "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M)"),

    # 09 · backward
    M("softmax_backward", "row sum always over the last axis, whatever dim",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)", "D = (grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "row sum without keepdim",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)", "D = (grad_p * p).sum(dim=dim)"),
    M("softmax_backward", "diagonal of the Jacobian only: p(1 - p)·g",
      "return p * (grad_p - D)", "return grad_p * p * (1 - p)"),
    M("attention_backward", "probabilities recomputed without the causal mask",
      "_, p = attention(q, k, v, is_causal=is_causal)", "_, p = attention(q, k, v)"),
    M("attention_backward", "softmax backward without the row term",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))", "ds = p * dp"),
    M("attention_backward", "dv without the transpose of P",
      "dv = p.transpose(-1, -2) @ grad_out", "dv = p @ grad_out"),
    M("flash_attention_backward", "causal tile skip off by one: drops the tile that holds the diagonal's end",
      "if is_causal and ks > qe - 1 + offset:", "if is_causal and ks >= qe - 1 + offset:"),
    M("flash_attention_backward", "P recomputed from unscaled scores",
      "s = q_blk @ k_blk.transpose(-1, -2) * scale", "s = q_blk @ k_blk.transpose(-1, -2)"),
    M("flash_attention_backward", "dq of each key block overwrites the previous ones",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("FlashAttentionFunction", "backward returns three gradients for five inputs",
      "return dq, dk, dv, None, None", "return dq, dk, dv"),
    M("FlashAttentionFunction", "backward called without is_causal",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out, block_size=ctx.block_size)"),
    M("FlashAttentionFunction", "dk and dv returned in swapped places",
      "return dq, dk, dv, None, None", "return dq, dv, dk, None, None"),
    M("triton_flash_attention_backward", "D = rowsum(dO) without the output",
      "delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()",
      "delta = grad_out.float().sum(dim=-1).contiguous()"),

    # 10 · modern attention
    M("repeat_kv", "interleaved (r h): the heads tiled, not grouped",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "expand then view: fails on the expanded strides",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "b, h, t, d = x.shape\n"
      "    return x[:, :, None].expand(b, h, n_rep, t, d).view(b, h * n_rep, t, d)"),
    M("repeat_kv", "repeats along the time axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "return x.repeat_interleave(n_rep, dim=2)"),
    M("GroupedQueryAttention", "repeats each key head n_kv_heads times instead of n_heads // n_kv_heads",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = repeat_kv(k, self.n_kv_heads), repeat_kv(v, self.n_kv_heads)"),
    M("GroupedQueryAttention", "keys and values split into n_heads heads",
      '        k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_kv_heads)  # (b, h_kv,'
      ' t, d_head)\n'
      '        v = rearrange(self.v(x), "b t (h d) -> b h t d", h=self.n_kv_heads)  # (b, h_kv,'
      ' t, d_head)',
      '        k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_heads)\n'
      '        v = rearrange(self.v(x), "b t (h d) -> b h t d", h=self.n_heads)'),
    M("GroupedQueryAttention", "Tensor.repeat tiles the key heads instead of grouping them",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("sliding_window_mask", "window of window + 1 positions: <=",
      "(distance >= 0) & (distance < window)", "(distance >= 0) & (distance <= window)"),
    M("sliding_window_mask", "top-left aligned: no offset when T_q ≠ T_k",
      "query_positions = torch.arange(t_q) + (t_k - t_q)", "query_positions = torch.arange(t_q)"),
    M("sliding_window_mask", "|distance| < window: future keys let in",
      "return (distance >= 0) & (distance < window)", "return distance.abs() < window"),
    M("sliding_window_flash_attention", "window start taken from the block's last row",
      "first = max(0, qs + offset - window + 1)", "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "query positions without the offset when T_q < T_k",
      "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device) + offset",
      "rows = torch.arange(qs, qs + q_blk.shape[-2], device=q.device)"),
    M("sliding_window_flash_attention", "only the causal half of the window masked",
      "s = s.masked_fill((distance < 0) | (distance >= window), -math.inf)",
      "s = s.masked_fill(distance < 0, -math.inf)"),
    M("alibi_score_mod", "geometric slopes of n_heads even when it is not a power of two",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "bias sign flipped: slope · (q_idx - kv_idx)",
      "return score + slopes[h] * (kv_idx - q_idx)", "return score + slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "slopes from 2^0: exponents off by one",
      "torch.arange(1, n_heads + 1)", "torch.arange(0, n_heads)"),
    M("document_mask_mod", "not causal: the whole document both ways",
      "return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "return document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "strictly earlier keys: the token may not see itself",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("document_mask_mod", "documents compared with <=: earlier documents leak in",
      "(document_ids[q_idx] == document_ids[kv_idx])", "(document_ids[kv_idx] <= document_ids[q_idx])"),
    M("rotary_window_attention", "rotates the values too",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q, k, v = apply_rope(q, positions), apply_rope(k, positions), apply_rope(v, positions)"),
    M("rotary_window_attention", "window of window + 1 keys: <=",
      "(q_idx - kv_idx < window)", "(q_idx - kv_idx <= window)"),
    M("rotary_window_attention", "positions not passed to RoPE",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)", "q, k = apply_rope(q), apply_rope(k)"),
)

ALTERNATIVES_C: tuple[BlindAlternative, ...] = (
    A("dot_product_scores", "einops einsum with named axes",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      'return einsum(q, k, "... q d, ... k d -> ... q k")'),
    A("softmax", "exp of x minus its logsumexp",
      "    shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
      "    exps = shifted.exp()\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),
    A("dot_product_attention", "weighted sum written as an einsum",
      "out = weights @ v", 'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    A("score_variance", "row-wise product and sum, torch.var, float()",
      'scores = einsum(q, k, "n d, n d -> n")', "scores = (q * k).sum(dim=-1)"),
    A("scaled_dot_product_attention", "scales q before the product",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)",
      "scores = dot_product_scores(q * d_k**-0.5, k)"),
    A("causal_mask", "tril with the diagonal shifted by T_k - T_q",
      "    query_positions = torch.arange(t_q, device=device) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k, device=device)  # (t_k,)\n"
      '    return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")  # (t_q,'
      ' t_k)',
      "    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "a loop over the rows",
      '    return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")  # (B, t)',
      "    mask = torch.zeros(len(lengths), t, dtype=torch.bool, device=lengths.device)\n"
      "    for row, n in enumerate(lengths.tolist()):\n"
      "        mask[row, :n] = True\n"
      "    return mask"),
    A("attention", "torch.where, torch.softmax and nan_to_num for the empty rows",
      '    scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)  # (..., T_q, T_k): NaN in a row that allows no key\n"
      "    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # such rows: 0, as SDPA\n",
      "    scores = torch.where(allowed, scores, -math.inf)\n"
      "    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key: 0\n"),
    A("split_heads", "unflatten and transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)"),
    A("merge_heads", "concatenate the heads along the last axis",
      'return rearrange(x, "b h t d -> b t (h d)")', "return torch.cat(x.unbind(dim=1), dim=-1)"),
    A("MultiHeadAttention", "PyTorch's scaled_dot_product_attention with a combined boolean mask",
      "        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)  # (b, h, t, d_k)\n",
      "        if is_causal:\n"
      "            causal = causal_mask(q.shape[-2], k.shape[-2], device=x.device)  # (t, t_k)\n"
      "            mask = causal if mask is None else mask & causal\n"
      "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (b, h, t, d_k)\n"),
    A("rope_frequencies", "reciprocal of base to the power 2i/d",
      "    two_i = torch.arange(0, d, 2, dtype=torch.float64)  # (d/2,): 0, 2, 4, …, d - 2\n"
      "    return base ** (-two_i / d)  # (d/2,)",
      "    i = torch.arange(d // 2, dtype=torch.float64)\n"
      "    return 1.0 / base ** (2 * i / d)"),
    A("apply_rope", "complex multiplication by e^(i·angle)",
      "    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each\n"
      "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())  # (..., T, d/2)\n"
      "    turn = torch.polar(torch.ones_like(angles), angles).to(pairs.dtype)  # (T, d/2)\n"
      "    return torch.view_as_real(pairs * turn).flatten(-2)  # (..., T, d)"),
    A("RotaryMultiHeadAttention", "scores, mask and softmax written out with einsum",
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_k)\n",
      '        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])  # (b, h, t, t)\n'
      "        allowed = torch.ones_like(scores, dtype=torch.bool)\n"
      "        if head_mask is not None:\n"
      "            allowed = allowed & head_mask\n"
      "        if is_causal:\n"
      "            allowed = allowed & causal_mask(x.shape[1], device=x.device)\n"
      "        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1).nan_to_num(0.0)\n"
      '        out = torch.einsum("bhqk,bhkd->bhqd", weights, v)  # (b, h, t, d_k)\n'),
    A("online_softmax", "running log-sum-exp with logaddexp",
      "    m = torch.full_like(x[..., :1], -math.inf)  # (..., 1): running maximum\n"
      "    denom = torch.zeros_like(x[..., :1])  # (..., 1): running sum of exp(x - m)\n"
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n"
      "        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)\n"
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n"
      "        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)\n"
      "        m = m_new\n"
      "    return torch.exp(x - m) / denom  # (..., N)",
      "    lse = torch.full_like(x[..., :1], -math.inf)  # (..., 1): log of the running sum\n"
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n"
      "        lse = torch.logaddexp(lse, torch.logsumexp(block, dim=-1, keepdim=True))\n"
      "    return torch.exp(x - lse)  # (..., N)"),
    A("flash_attention_query_block", "normalised partial outputs merged by their log-sum-exp",
      '    m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=q_blk.dtype,'
      ' device=q_blk.device)  # (..., Bq, 1): running max\n'
      '    denom = torch.zeros_like(m)  # (..., Bq, 1): running sum of exp(s - m)\n'
      '    acc = torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q_blk.dtype,'
      ' device=q_blk.device)  # (..., Bq, d_v)\n'
      '    for ks in range(0, k.shape[-2], block_size):\n'
      '        s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)  # (..., Bq, Bk)\n'
      '        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)\n'
      '        p = torch.exp(s - m_new)  # (..., Bq, Bk)\n'
      '        alpha = torch.exp(m - m_new)  # (..., Bq, 1): 0 on the first block, where m is -inf\n'
      '        denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n'
      '        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n'
      '        m = m_new\n'
      '    return acc / denom, (m + torch.log(denom)).squeeze(-1)  # (..., Bq, d_v), (..., Bq)',
      "    lse = torch.full(q_blk.shape[:-1], -math.inf, dtype=q_blk.dtype, device=q_blk.device)  # (...,"
      " Bq)\n"
      "    out = torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q_blk.dtype, device=q_blk.device)\n"
      "    for ks in range(0, k.shape[-2], block_size):\n"
      "        s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)  # (..., Bq, Bk)\n"
      "        block_lse = torch.logsumexp(s, dim=-1)  # (..., Bq)\n"
      "        new_lse = torch.logaddexp(lse, block_lse)  # (..., Bq)\n"
      "        block_out = torch.softmax(s, dim=-1) @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n"
      "        out = (out * torch.exp(lse - new_lse)[..., None]\n"
      "               + block_out * torch.exp(block_lse - new_lse)[..., None])  # (..., Bq, d_v)\n"
      "        lse = new_lse\n"
      "    return out, lse"),
    A("flash_attention", "key blocks outermost over every query at once, empty rows guarded",
      '    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  #'
      ' (..., T_q, d_v)\n'
      '    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)  # (..., T_q)\n'
      '    for qs in range(0, t_q, block_size):\n'
      '        qe = min(qs + block_size, t_q)  # the last query block may be shorter\n'
      '        q_blk = q[..., qs:qe, :] / math.sqrt(d)  # (..., Bq, d)\n'
      '        m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)'
      '  # (..., Bq, 1)\n'
      '        denom = torch.zeros_like(m)  # (..., Bq, 1)\n'
      '        acc = torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q.dtype,'
      ' device=q.device)  # (..., Bq, d_v)\n'
      "        # 1. k_end: T_k, or with is_causal one past the last key the block's last row (qe"
      ' - 1) may see\n'
      '        k_end = min(t_k, qe + offset) if is_causal else t_k\n'
      '        for ks in range(0, max(k_end, 0), block_size):\n'
      '            ke = min(ks + block_size, t_k)  # the last key block may be shorter\n'
      "            # 2. the tile's scores, the causal mask where the block crosses the diagonal,"
      ' the update\n'
      '            s = q_blk @ k[..., ks:ke, :].transpose(-1, -2)  # (..., Bq, Bk)\n'
      '            if is_causal and ke - 1 > qs + offset:  # the block crosses the diagonal:'
      ' mask inside it\n'
      '                rows = torch.arange(qs, qe, device=q.device) + offset  # (Bq,) positions\n'
      '                cols = torch.arange(ks, ke, device=q.device)  # (Bk,)\n'
      '                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)  # (..., Bq, Bk)\n'
      '            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)\n'
      '            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., Bq, 1): rows'
      ' without keys yet\n'
      '            p = torch.exp(s - m_safe)  # (..., Bq, Bk)\n'
      '            alpha = torch.exp(m - m_safe)  # (..., Bq, 1)\n'
      '            denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n'
      '            acc = alpha * acc + p @ v[..., ks:ke, :]  # (..., Bq, d_v)\n'
      '            m = m_new\n'
      "        denom = torch.where(denom == 0, 1.0, denom)  # (..., Bq, 1): a row that sees no key gets"
      " out 0, lse -inf\n"  # the line the solution gained on 2026-12-05, given outside the markers
      "        # 3. the block's rows of out and lse, from its final running state\n"
      '        out[..., qs:qe, :] = acc / denom  # (..., Bq, d_v)\n'
      '        lse[..., qs:qe] = (m + torch.log(denom)).squeeze(-1)  # (..., Bq): after the last'
      ' key block\n'
      '    return (out, lse) if return_lse else out',
      "    rows = torch.arange(t_q, device=q.device)[:, None] + offset  # (T_q, 1) positions\n"
      "    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype, device=q.device)  # (..., T_q, 1)\n"
      "    denom = torch.zeros_like(m)  # (..., T_q, 1)\n"
      "    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., T_q,"
      " d_v)\n"
      "    for ks in range(0, t_k, block_size):\n"
      "        ke = min(ks + block_size, t_k)\n"
      "        s = (q @ k[..., ks:ke, :].transpose(-1, -2)) / math.sqrt(d)  # (..., T_q, Bk)\n"
      "        if is_causal:\n"
      "            cols = torch.arange(ks, ke, device=q.device)[None, :]  # (1, Bk)\n"
      "            s = s.masked_fill(cols > rows, -math.inf)\n"
      "        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))\n"
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)\n"
      "        p = torch.exp(s - m_safe)\n"
      "        alpha = torch.exp(m - m_safe)\n"
      "        denom = alpha * denom + p.sum(dim=-1, keepdim=True)\n"
      "        acc = alpha * acc + p @ v[..., ks:ke, :]\n"
      "        m = m_new\n"
      "    out = acc / torch.where(denom == 0, 1.0, denom)  # a row with no key: 0\n"
      "    lse = (m + torch.log(denom)).squeeze(-1)  # -inf for such a row\n"
      "    return (out, lse) if return_lse else out"),
    A("block_forward", "explicit bottom-right causal mask instead of is_causal",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x), mask=causal_mask(x.shape[1], device=x.device))"),
    A("ablate_heads", "W^O viewed as (d_model, heads, d_k), one head zeroed",
      "            ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "            w = ablated.blocks[layer].attn.out.weight  # (d_model, n_heads · d_k)\n"
      "            w.view(w.shape[0], model.config.n_heads, d_k)[:, head] = 0.0"),
    A("KVCache", "a list of chunks per layer, concatenated when read",
      '        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n'
      '        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n'
      '\n'
      '    def length(self, layer: int) -> int:\n'
      '        """How many positions `layer` has cached (0 before its first append)."""\n'
      '        return self.keys[layer].shape[-2] if layer in self.keys else 0\n'
      '\n'
      '    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor,'
      ' torch.Tensor]:\n'
      '        """Add k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so'
      ' far."""\n'
      '        if layer in self.keys:\n'
      '            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n'
      '            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n'
      '        self.keys[layer], self.values[layer] = k, v\n'
      '        return k, v',
      "        self.keys: dict[int, list[torch.Tensor]] = {}  # layer -> chunks (b, h, t_i, d_k)\n"
      "        self.values: dict[int, list[torch.Tensor]] = {}\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      "        return sum(chunk.shape[-2] for chunk in self.keys.get(layer, []))\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor,"
      " torch.Tensor]:\n"
      "        self.keys.setdefault(layer, []).append(k)\n"
      "        self.values.setdefault(layer, []).append(v)\n"
      "        return torch.cat(self.keys[layer], dim=-2), torch.cat(self.values[layer], dim=-2)"),
    A("cached_attention", "explicit bottom-right mask and merge_heads",
      "    out, _ = attention(q, keys, values, is_causal=True)  # (b, h, t_new, d_k)\n"
      '    return attn.out(rearrange(out, "b h t d -> b t (h d)"))',
      "    allowed = causal_mask(t_new, t_past + t_new, device=x.device)  # (t_new, t_past + t_new)\n"
      "    out, _ = attention(q, keys, values, mask=allowed)  # (b, h, t_new, d_k)\n"
      "    return attn.out(merge_heads(out))"),
    A("generate_with_cache", "a list of pieces, the step before each pick but the first",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new token"
      " only\n"
      "    return tokens",
      "    pieces = [prompt]\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]\n"
      "    for i in range(n_new):\n"
      "        if i > 0:\n"
      "            logits = model.step(pieces[-1], cache, attend)[:, -1]\n"
      "        pieces.append(pick(logits))\n"
      "    return torch.cat(pieces, dim=1)"),
    A("next_token_probs", "sort for the k-th value, where, and exp of x minus logsumexp",
      "    if top_k is not None:\n"
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)\n'
      "    return torch.softmax(scaled, dim=-1)  # (b, vocab_size)",
      "    if top_k is not None:\n"
      "        kth = scaled.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]  # (b, 1)\n"
      "        scaled = torch.where(scaled >= kth, scaled, -math.inf)\n"
      "    return (scaled - scaled.logsumexp(dim=-1, keepdim=True)).exp()"),
    A("sample_next", "inverse of the cumulative distribution with searchsorted",
      "    return torch.multinomial(probs, 1, generator=generator)  # (b, 1)",
      "    cdf = probs.cumsum(dim=-1)  # (b, vocab_size)\n"
      "    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype) * cdf[:, -1:]  # (b,"
      " 1)\n"
      "    return torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[-1] - 1)  # (b, 1)"),
    A("softmax_backward", "the full Jacobian diag(p) - p pᵀ applied to the gradient",
      "    D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)  # same shape as p",
      "    pm, gm = p.movedim(dim, -1), grad_p.movedim(dim, -1)  # (..., n)\n"
      "    jacobian = torch.diag_embed(pm) - pm[..., :, None] * pm[..., None, :]  # (..., n, n)\n"
      "    return (jacobian @ gm[..., None]).squeeze(-1).movedim(-1, dim)"),
    A("attention_backward", "autograd through the course's attention",
      '    scale = 1 / math.sqrt(q.shape[-1])\n'
      '    _, p = attention(q, k, v, is_causal=is_causal)  # (..., T_q, T_k)\n'
      '    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)\n'
      '    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)\n'
      '    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))  # (..., T_q, T_k)\n'
      '    dq = ds @ k * scale  # (..., T_q, d)\n'
      '    dk = ds.transpose(-1, -2) @ q * scale  # (..., T_k, d)\n'
      '    return dq, dk, dv',
      "    with torch.enable_grad():\n"
      "        leaves = [t.detach().requires_grad_() for t in (q, k, v)]\n"
      "        out, _ = attention(*leaves, is_causal=is_causal)  # (..., T_q, d_v)\n"
      "        dq, dk, dv = torch.autograd.grad(out, leaves, grad_out)\n"
      "    return dq, dk, dv"),
    A("flash_attention_backward", "query blocks outermost against every key, empty rows guarded",
      '    dq = torch.zeros_like(q)  # (..., T_q, d)\n'
      '    dk = torch.zeros_like(k)  # (..., T_k, d)\n'
      '    dv = torch.zeros_like(v)  # (..., T_k, d_v)\n'
      '    for ks in range(0, t_k, block_size):\n'
      '        ke = min(ks + block_size, t_k)\n'
      '        k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)\n'
      '        dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)  # (..., Bk,'
      ' d), (..., Bk, d_v)\n'
      '        for qs in range(0, t_q, block_size):\n'
      '            qe = min(qs + block_size, t_q)\n'
      '            if is_causal and ks > qe - 1 + offset:\n'
      '                continue  # every key of the tile comes after every query of it\n'
      '            q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d),'
      ' (..., Bq, d_v)\n'
      '            s = q_blk @ k_blk.transpose(-1, -2) * scale  # (..., Bq, Bk)\n'
      '            if is_causal:\n'
      '                rows = torch.arange(qs, qe, device=q.device)[:, None] + offset  # (Bq, 1)\n'
      '                cols = torch.arange(ks, ke, device=q.device)[None, :]  # (1, Bk)\n'
      '                s = s.masked_fill(cols > rows, float("-inf"))  # (..., Bq, Bk)\n'
      '            p = torch.exp(s - lse[..., qs:qe, None])  # (..., Bq, Bk)\n'
      '            dv_acc += p.transpose(-1, -2) @ do_blk  # (..., Bk, d_v)\n'
      '            dp = do_blk @ v_blk.transpose(-1, -2)  # (..., Bq, Bk)\n'
      '            ds = p * (dp - D[..., qs:qe, :])  # (..., Bq, Bk)\n'
      '            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)\n'
      '            dk_acc += ds.transpose(-1, -2) @ q_blk * scale  # (..., Bk, d)\n'
      '        dk[..., ks:ke, :] = dk_acc\n'
      '        dv[..., ks:ke, :] = dv_acc\n'
      '    return dq, dk, dv',
      "    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)\n"
      "    cols = torch.arange(t_k, device=q.device)[None, :]  # (1, T_k)\n"
      "    for qs in range(0, t_q, block_size):\n"
      "        qe = min(qs + block_size, t_q)\n"
      "        q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, d_v)\n"
      "        s = q_blk @ k.transpose(-1, -2) * scale  # (..., Bq, T_k)\n"
      "        if is_causal:\n"
      "            rows = torch.arange(qs, qe, device=q.device)[:, None] + offset  # (Bq, 1)\n"
      '            s = s.masked_fill(cols > rows, float("-inf"))\n'
      "        lse_blk = lse[..., qs:qe, None]  # (..., Bq, 1)\n"
      "        p = torch.exp(s - torch.where(torch.isinf(lse_blk), 0.0, lse_blk))  # (..., Bq, T_k)\n"
      "        dv += p.transpose(-1, -2) @ do_blk\n"
      "        ds = p * (do_blk @ v.transpose(-1, -2) - D[..., qs:qe, :])  # (..., Bq, T_k)\n"
      "        dq[..., qs:qe, :] = ds @ k * scale\n"
      "        dk += ds.transpose(-1, -2) @ q_blk * scale\n"
      "    return dq, dk, dv"),
    A("FlashAttentionFunction", "saves only q, k, v and recomputes out and lse in the backward",
      '        ctx.save_for_backward(q, k, v, out, lse)\n'
      '        ctx.is_causal, ctx.block_size = is_causal, block_size\n'
      '        return out\n'
      '\n'
      '    @staticmethod\n'
      '    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:\n'
      '        """One gradient per input of forward: dq, dk, dv, None, None."""\n'
      '        q, k, v, out, lse = ctx.saved_tensors',
      "        ctx.save_for_backward(q, k, v)\n"
      "        ctx.is_causal, ctx.block_size = is_causal, block_size\n"
      "        return out\n"
      "\n"
      "    @staticmethod\n"
      "    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:\n"
      '        """One gradient per input of forward: dq, dk, dv, None, None."""\n'
      "        q, k, v = ctx.saved_tensors\n"
      "        out, lse = flash_attention_forward(q, k, v, is_causal=ctx.is_causal,"
      " block_size=ctx.block_size)"),
    A("repeat_kv", "repeat_interleave on the head axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "return x.repeat_interleave(n_rep, dim=1)"),
    A("GroupedQueryAttention", "query heads grouped on their own axis, keys broadcast over it",
      '        n_rep = self.n_heads // self.n_kv_heads\n'
      '        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n'
      '        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n'
      '        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_head)',
      "        g = self.n_kv_heads\n"
      '        q = rearrange(q, "b (g r) t d -> b g r t d", g=g)  # (b, h_kv, n_rep, t, d_head)\n'
      "        k, v = k[:, :, None], v[:, :, None]  # (b, h_kv, 1, t, d_head)\n"
      "        group_mask = None if mask is None else mask[..., None, None, :, :]  # (b, 1, 1, t, t)\n"
      "        out, _ = attention(q, k, v, mask=group_mask, is_causal=is_causal)  # (b, h_kv, n_rep, t,"
      " d_head)\n"
      '        out = rearrange(out, "b g r t d -> b (g r) t d")  # (b, h, t, d_head)'),
    A("sliding_window_mask", "difference of two shifted lower triangles",
      '    query_positions = torch.arange(t_q) + (t_k - t_q)  # (t_q,) absolute positions\n'
      '    key_positions = torch.arange(t_k)  # (t_k,)\n'
      '    distance = rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1'
      ' k")  # (t_q, t_k)\n'
      '    return (distance >= 0) & (distance < window)  # (t_q, t_k)',
      "    ones = torch.ones(t_q, t_k, dtype=torch.bool)\n"
      "    return ones.tril(diagonal=t_k - t_q) & ~ones.tril(diagonal=t_k - t_q - window)"),
    A("sliding_window_flash_attention", "key loop from the window's first key to the last row's position",
      '        for ks in range(first // block_size * block_size, t_k, block_size):\n'
      '            if ks > rows[-1]:\n'
      '                break  # this block and all later ones are after the diagonal',
      "        for ks in range(first, min(t_k, int(rows[-1]) + 1), block_size):"),
    A("alibi_score_mod", "slopes as Python floats from the two geometric ratios",
      '    def power_of_two_slopes(n_heads):  # 2^(-8/n_heads), 2^(-16/n_heads), ..., 2^-8\n'
      '        return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)  # (n_heads,)\n'
      '\n'
      '    n = 2 ** math.floor(math.log2(n_heads))  # the largest power of two <= n_heads\n'
      '    extra = power_of_two_slopes(2 * n)[0::2][: n_heads - n]  # (n_heads - n,): between'
      " n's slopes\n"
      '    slopes = torch.cat([power_of_two_slopes(n), extra])  # (n_heads,)',
      "    n = 1 << (n_heads.bit_length() - 1)  # the largest power of two <= n_heads\n"
      "    slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]\n"
      "    slopes += [2.0 ** (-4.0 * (2 * i + 1) / n) for i in range(n_heads - n)]\n"
      "    slopes = torch.tensor(slopes)  # (n_heads,)"),
    A("document_mask_mod", "a dense (T, T) mask built once and indexed",
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "    allowed = (document_ids[:, None] == document_ids[None, :]).tril()  # (T, T)\n"
      "\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return allowed[q_idx, kv_idx]"),
    A("rotary_window_attention", "dense: repeated keys, a boolean window mask and the course's attention",
      '    def in_window(b, h, q_idx, kv_idx):\n'
      '        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n'
      '\n'
      '    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n'
      '    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)  # (b, h, t, d_head)',
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d_head)\n"
      "    pos = torch.arange(t, device=x.device)\n"
      "    distance = pos[:, None] - pos[None, :]  # (t, t)\n"
      "    out, _ = attention(q, k, v, mask=(distance >= 0) & (distance < window))  # (b, h, t, d_head)"),
)
# fmt: on
