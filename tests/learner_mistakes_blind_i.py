"""Blind set I of learner mistakes and right alternatives, for every exercise of 01-10 that
tests/blind_compare.py has inputs for (the Triton ones of 08 and 09 included).

Written on 2026-12-05 from the solution notebooks (solutions/*.ipynb: each exercise's text and its
solution cell) and the topic modules (attn_course/*.py) only, by someone who read no check, no test of
a check and no earlier set of mistakes. Each mistake is a text edit of the solution notebook's exercise
cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`, occurring exactly once in that
cell, replaced by `new`), applied by `learner_mistakes_blind_a.load`, with the idea of the mistake in one
short phrase: four per exercise, slips and misunderstandings a learner who read only the notebook's text
could make. Each alternative is an edit of the same kind that keeps the function right while writing it
differently from the solution (one per exercise outside Triton), doing no more work than the notebook
allows. Every mistake was verified wrong against `attn_course.reference` on an input the exercise's
contract allows, every alternative right on all of them, and no edit fails to load
(`blind_compare.verify(HOLDOUT_I, ALTERNATIVES_I, folder)` returns [], run with TRITON_INTERPRET=1).
The Triton mistakes keep every load and store inside its tensor, so that the interpreter cannot crash.
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_I: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "k.T on batched keys reverses every axis",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.T"),
    M("dot_product_scores", "divided by √d although the scores must be raw",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      'torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5'),
    M("dot_product_scores", "result laid out keys by queries",
      '"...qd,...kd->...qk"', '"...qd,...kd->...kq"'),
    M("dot_product_scores", "one score per position pair, not every query against every key",
      'torch.einsum("...qd,...kd->...qk", q, k)', "(q * k).sum(dim=-1)"),
    M("softmax", "normalised along the last axis whatever dim",
      "exps.sum(dim=dim, keepdim=True)", "exps.sum(dim=-1, keepdim=True)"),
    M("softmax", "no shift by the row maximum (naive softmax)",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"),
    M("softmax", "row maximum taken without keepdim",
      "x.amax(dim=dim, keepdim=True)", "x.amax(dim=dim)"),
    M("softmax", "maximum subtracted in place from the caller's x",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x.sub_(x.amax(dim=dim, keepdim=True))"),
    M("dot_product_attention", "softmax over the query axis",
      "softmax(dot_product_scores(q, k), dim=-1)", "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "scaled by √d_k in the unscaled exercise",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k) / q.shape[-1] ** 0.5, dim=-1)"),
    M("dot_product_attention", "returns (weights, out) in the wrong order",
      "return out, weights", "return weights, out"),
    M("dot_product_attention", "weights average the keys, not the values",
      "out = weights @ v", "out = weights @ k"),

    # 02 · scaling
    M("score_variance", "uniform torch.rand in place of the standard normal",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n"
      "    k = torch.randn(n_samples, d_k, dtype=torch.float64)",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)  # (n, d_k)\n"
      "    k = torch.rand(n_samples, d_k, dtype=torch.float64)"),
    M("score_variance", "scaled by d_k instead of √d_k",
      "scores = scores / math.sqrt(d_k)", "scores = scores / d_k"),
    M("score_variance", "one draw used as both query and key",
      'einsum(q, k, "n d, n d -> n")', 'einsum(q, q, "n d, n d -> n")'),
    M("score_variance", "returns the standard deviation, not the variance",
      "return scores.var().item()", "return scores.std().item()"),
    M("scaled_dot_product_attention", "scaled by the width of the values",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "scale applied to the weights after the softmax",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "queries and keys each divided by √d_k (scaled twice)",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q / math.sqrt(d_k), k / math.sqrt(d_k))"),
    M("scaled_dot_product_attention", "returns the scores in place of the weights",
      "return out, weights", "return out, scores"),

    # 03 · causal masking
    M("causal_mask", "aligned top-left, without the T_k - T_q offset",
      "torch.arange(t_q, device=device) + (t_k - t_q)", "torch.arange(t_q, device=device)"),
    M("causal_mask", "strict <: a query may not attend to its own position",
      '"k -> 1 k") <= rearrange(', '"k -> 1 k") < rearrange('),
    M("causal_mask", "True marks the forbidden (future) pairs",
      '"k -> 1 k") <= rearrange(', '"k -> 1 k") > rearrange('),
    M("causal_mask", "mask laid out keys by queries",
      '"k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      '"k -> k 1") <= rearrange(query_positions, "q -> 1 q")'),
    M("padding_mask", "<= counts the first pad as a real token",
      '"t -> 1 t") < rearrange', '"t -> 1 t") <= rearrange'),
    M("padding_mask", "True on the pads",
      '"t -> 1 t") < rearrange', '"t -> 1 t") >= rearrange'),
    M("padding_mask", "positions as a column and lengths as a row: (t, B)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("padding_mask", "real tokens taken at the end of the row (left padding)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> 1 t") >= t - rearrange(lengths, "b -> b 1")'),
    M("attention", "weights zeroed after the softmax, not renormalised",
      'scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)",
      "weights = softmax(scores, dim=-1).masked_fill(~allowed, 0.0)"),
    M("attention", "fills the allowed scores with -inf, not the forbidden ones",
      'scores.masked_fill(~allowed, float("-inf"))', 'scores.masked_fill(allowed, float("-inf"))'),
    M("attention", "causal mask made top-left with tril",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()"),
    M("attention", "mask and causal mask combined with OR",
      "allowed = allowed & causal_mask(", "allowed = allowed | causal_mask("),

    # 04 · multi-head attention
    M("split_heads", "last axis factored as (d h): each head gets strided features",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "head axis left after the tokens",
      '"b t (h d) -> b h t d"', '"b t (h d) -> b t h d"'),
    M("split_heads", "reshaped straight to (b, h, t, d) without a transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)', "x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "n_heads taken as the width of a head",
      "h=n_heads", "d=n_heads"),
    M("merge_heads", "features of the heads interleaved (d h)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshaped without moving the head axis",
      'rearrange(x, "b h t d -> b t (h d)")', "x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "heads summed instead of concatenated",
      'rearrange(x, "b h t d -> b t (h d)")', "x.sum(dim=1)"),
    M("merge_heads", "transposes time and features instead of heads and time",
      'rearrange(x, "b h t d -> b t (h d)")', "x.transpose(-1, -2).reshape(x.shape[0], x.shape[2], -1)"),
    M("MultiHeadAttention", "cross-attention takes its queries from the context too",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)", "q, k, v = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "mask given no head axis",
      "        if mask is not None:\n"
      '            mask = rearrange(mask, "... q k -> ... 1 q k")  # (b, 1, t, t_k): the same for every'
      ' head\n',
      ""),
    M("MultiHeadAttention", "output projection W^O left out",
      "return self.out(merge_heads(out))", "return merge_heads(out)"),
    M("MultiHeadAttention", "is_causal not passed on to attention",
      "attention(q, k, v, mask=mask, is_causal=is_causal)", "attention(q, k, v, mask=mask)"),

    # 05 · RoPE
    M("rope_frequencies", "exponent built from i instead of 2i",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "floor division makes every exponent 0",
      "base ** (-two_i / d)", "base ** (-(two_i // d))"),
    M("rope_frequencies", "exponent positive: frequencies grow with i",
      "base ** (-two_i / d)", "base ** (two_i / d)"),
    M("rope_frequencies", "pairs counted from 1: θ_0 is not 1",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(2, d + 1, 2, dtype=torch.float64)"),
    M("apply_rope", "pairs turned the other way (sign of sin flipped)",
      "torch.stack([even * cos - odd * sin, even * sin + odd * cos])",
      "torch.stack([even * cos + odd * sin, odd * cos - even * sin])"),
    M("apply_rope", "pairs taken as the two halves, not interleaved",
      "even, odd = x[..., 0::2], x[..., 1::2]", "even, odd = x[..., : d // 2], x[..., d // 2 :]"),
    M("apply_rope", "given positions ignored: always 0 … T-1",
      "    if positions is None:\n        positions = torch.arange(t, device=x.device)",
      "    positions = torch.arange(t, device=x.device)"),
    M("apply_rope", "rotated pairs written into x in place",
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "    x[..., 0::2], x[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos\n"
      "    return x"),
    M("RotaryMultiHeadAttention", "values rotated as well",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "rotated before the split into heads, over d_model",
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "RoPE base left at its default",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)"),
    M("RotaryMultiHeadAttention", "head axis inserted at 1, wrong for a (t, t) mask",
      "mask.unsqueeze(-3)", "mask.unsqueeze(1)"),

    # 06 · FlashAttention
    M("online_softmax", "old sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + torch.exp", "denom = denom + torch.exp"),
    M("online_softmax", "no guard while the running maximum is -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("online_softmax", "running maximum never carried to the next block",
      "        m = m_new\n", ""),
    M("online_softmax", "loop bound drops the last, shorter block",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] - block_size + 1, block_size)"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + p @ v", "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),
    M("flash_attention_query_block", "each tile's probabilities normalised on their own",
      "p = torch.exp(s - m_new)", "p = torch.softmax(s, dim=-1)"),
    M("flash_attention_query_block", "output returned unnormalised (acc, not acc / denom)",
      "return acc / denom,", "return acc,"),
    M("flash_attention", "k_end from the block's first row, not its last",
      "k_end = min(t_k, qe + offset) if is_causal", "k_end = min(t_k, qs + offset + 1) if is_causal"),
    M("flash_attention", "diagonal mask inside a tile without the T_k - T_q offset",
      "rows = torch.arange(qs, qe, device=q.device) + offset",
      "rows = torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "only tiles that cross the last row's diagonal are masked",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal and ke - 1 > qe - 1 + offset:"),
    M("flash_attention", "1/√d applied a second time to the scores",
      "s = q_blk @ k[..., ks:ke, :].transpose(-1, -2)",
      "s = q_blk @ k[..., ks:ke, :].transpose(-1, -2) / math.sqrt(d)"),

    # 07 · decoder and KV cache
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x))"),
    M("block_forward", "post-norm: LayerNorm after each residual sum",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    x = block.ln1(x + block.attn(x, is_causal=True))  # (b, t, d_model)\n"
      "    return block.ln2(x + block.mlp(x))"),
    M("block_forward", "MLP reads the block's input, not the stream after attention",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "residual added in place to the caller's x",
      "x = x + block.attn(", "x += block.attn("),
    M("ablate_heads", "zeroes the head's rows of W^O, not its columns",
      "out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "out.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "no copy: the original model is switched off",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "zeroes the head's query weights instead of its output",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.qkv.weight[head * d_k : (head + 1) * d_k] = 0.0"),
    M("ablate_heads", "the output bias zeroed too",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0\n"
      "            ablated.blocks[layer].attn.out.bias.zero_()"),
    M("KVCache", "concatenated along the head axis",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([self.keys[layer], k], dim=1)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=1)"),
    M("KVCache", "new keys and values put before the cached ones",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "dicts shared by every cache (class attributes)",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "\n"
      "    def __init__(self) -> None:\n"
      "        pass\n"),
    M("KVCache", "append returns only this step's keys and values",
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n",
      "            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)\n"
      "            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)\n"
      "        else:\n"
      "            self.keys[layer], self.values[layer] = k, v\n"),
    M("cached_attention", "positions restart at 0 for every chunk",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "no causal mask among the chunk's new tokens",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values)"),
    M("cached_attention", "attends to this chunk's keys only, not the cache",
      "attention(q, keys, values, is_causal=True)", "attention(q, k, v, is_causal=True)"),
    M("cached_attention", "the chunk appended to the cache twice",
      "    keys, values = cache.append(layer, k, v)",
      "    cache.append(layer, k, v)\n    keys, values = cache.append(layer, k, v)"),
    M("generate_with_cache", "every step fed the whole sequence so far",
      "logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(tokens, cache, attend)[:, -1]"),
    M("generate_with_cache", "picks from the first position's logits of the prompt",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt, cache, attend)[:, 0]"),
    M("generate_with_cache", "prefill with the prompt's last token only",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt[:, -1:], cache, attend)[:, -1]"),
    M("generate_with_cache", "logits never updated after the prefill",
      "            logits = model.step(next_token, cache, attend)[:, -1]",
      "            model.step(next_token, cache, attend)[:, -1]"),
    M("next_token_probs", "temperature multiplies the logits",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "top-k threshold from the raw logits, applied to the scaled ones",
      "kth = scaled.topk(", "kth = logits.topk("),
    M("next_token_probs", "dropped logits set to 0, not -inf",
      'masked_fill(scaled < kth, float("-inf"))', "masked_fill(scaled < kth, 0.0)"),
    M("next_token_probs", "softmax over the batch axis",
      "torch.softmax(scaled, dim=-1)", "torch.softmax(scaled, dim=0)"),
    M("sample_next", "generator not passed: draws not reproducible",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
    M("sample_next", "argmax instead of a draw",
      "torch.multinomial(probs, 1, generator=generator)", "probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "one uniform number shared by every row",
      "torch.multinomial(probs, 1, generator=generator)",
      "(probs.cumsum(dim=-1) < torch.rand(1, generator=generator, dtype=probs.dtype)).sum(dim=-1,"
      " keepdim=True)"),
    M("sample_next", "temperature and top-k ignored",
      "probs = next_token_probs(logits, temperature, top_k)", "probs = torch.softmax(logits, dim=-1)"),

    # 08 · Triton
    M("triton_add", "grid of n // BLOCK programs: the ragged end is never computed",
      "grid = (triton.cdiv(n, block),)", "grid = (n // block,)"),
    M("triton_add", "offsets ignore the program id",
      "offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = tl.arange(0, BLOCK)"),
    M("triton_add", "inputs not made contiguous",
      "    x, y = x.contiguous(), y.contiguous()\n", ""),
    M("triton_add", "n taken as the first dimension, not numel()",
      "n = x.numel()", "n = x.shape[0]"),
    M("triton_softmax", "running sum not rescaled when the maximum grows",
      "total = total * tl.exp(m - m_safe) + tl.sum", "total = total + tl.sum"),
    M("triton_softmax", "row stride taken as the row length",
      "x.shape[1], x.stride(0), out.stride(0)", "x.shape[1], x.shape[1], out.stride(0)"),
    M("triton_softmax", "lanes past the row loaded as 0, not -inf",
      'other=float("-inf")).to(tl.float32)  # (BLOCK,)\n        m_new',
      "other=0.0).to(tl.float32)  # (BLOCK,)\n        m_new"),
    M("triton_softmax", "one pass: each block stored with the max and sum seen so far",
      "        m = m_new\n"
      "    for start in range(0, n_cols, BLOCK):\n"
      "        cols = start + tl.arange(0, BLOCK)  # (BLOCK,)\n"
      '        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  #'
      ' (BLOCK,)\n'
      "        y = tl.exp(x - m) / total  # (BLOCK,)\n",
      "        m = m_new\n"
      "        y = tl.exp(x - m) / total  # (BLOCK,)\n"),
    M("triton_scores", "1/√d scale left out",
      "h, t_q, t_k, 1.0 / math.sqrt(d),", "h, t_q, t_k, 1.0,"),
    M("triton_scores", "strides of q assumed contiguous",
      "q.stride(0), q.stride(1), q.stride(2), k.stride(0)", "h * t_q * d, t_q * d, d, k.stride(0)"),
    M("triton_scores", "grid axes of query and key tiles swapped",
      "grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)",
      "grid = (triton.cdiv(t_k, block_n), triton.cdiv(t_q, block_m), b * h)"),
    M("triton_scores", "key tile not transposed in tl.dot",
      "s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, k) * sm_scale"),
    M("triton_flash_attention", "causal loop bound without the T_k - T_q offset",
      "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)", "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M)"),
    M("triton_flash_attention", "value tile read through the key pointer",
      "v = tl.load(v_head + cols[:, None] * stride_vn", "v = tl.load(k_head + cols[:, None] * stride_kn"),
    M("triton_flash_attention", "scores not multiplied by sm_scale",
      "s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k))"),
    M("triton_flash_attention", "key positions start at the program's query block",
      "cols = start_n + offs_n", "cols = pid_m * BLOCK_M + start_n + offs_n"),

    # 09 · backward
    M("softmax_backward", "the row sum D left out",
      "return p * (grad_p - D)", "return p * grad_p"),
    M("softmax_backward", "D summed along the last axis whatever dim",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "D as the plain sum of the incoming gradient",
      "D = (grad_p * p).sum(", "D = grad_p.sum("),
    M("softmax_backward", "leading factor p forgotten",
      "return p * (grad_p - D)", "return grad_p - D"),
    M("attention_backward", "1/√d left out of dq and dk",
      "    dq = ds @ k * scale  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q * scale",
      "    dq = ds @ k  # (..., T_q, d)\n    dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "dK from dS without its transpose",
      "dk = ds.transpose(-1, -2) @ q * scale", "dk = ds @ q * scale"),
    M("attention_backward", "probabilities recomputed without the causal mask",
      "attention(q, k, v, is_causal=is_causal)", "attention(q, k, v)"),
    M("attention_backward", "softmax's backward skipped: dS = dP",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))", "ds = dp"),
    M("flash_attention_backward", "P from the tile's own maximum instead of the lse",
      "p = torch.exp(s - lse[..., qs:qe, None])", "p = torch.exp(s - s.amax(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "dQ overwritten by each key block, not accumulated",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("flash_attention_backward", "causal skip tested on the block's first query",
      "if is_causal and ks > qe - 1 + offset:", "if is_causal and ks > qs + offset:"),
    M("flash_attention_backward", "D summed over the tile's keys only",
      "ds = p * (dp - D[..., qs:qe, :])", "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"),
    M("FlashAttentionFunction", "gradients returned in the wrong order",
      "return dq, dk, dv, None, None", "return dk, dq, dv, None, None"),
    M("FlashAttentionFunction", "backward drops the causal flag",
      "grad_out, ctx.is_causal, ctx.block_size)", "grad_out, block_size=ctx.block_size)"),
    M("FlashAttentionFunction", "three gradients for five inputs",
      "return dq, dk, dv, None, None", "return dq, dk, dv"),
    M("FlashAttentionFunction", "is_causal and block_size passed in each other's place",
      "grad_out, ctx.is_causal, ctx.block_size)", "grad_out, ctx.block_size, ctx.is_causal)"),
    M("triton_flash_attention_backward", "sm_scale 1/d instead of 1/√d",
      "        H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n"
      "    flash_attention_backward_dq_kernel[(triton.cdiv(T_q, block_m), B * H)](\n"
      "        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),\n"
      "        H, T_q, T_k, 1 / math.sqrt(d), **blocks)",
      "        H, T_q, T_k, 1 / d, **blocks)\n"
      "    flash_attention_backward_dq_kernel[(triton.cdiv(T_q, block_m), B * H)](\n"
      "        q, k, v, grad_out, lse, delta, dq, *strides, dq.stride(0), dq.stride(1), dq.stride(2),\n"
      "        H, T_q, T_k, 1 / d, **blocks)"),
    M("triton_flash_attention_backward", "D as the row sum of dO alone",
      "delta = (grad_out.float() * out.float()).sum(dim=-1)", "delta = grad_out.float().sum(dim=-1)"),
    M("triton_flash_attention_backward", "dK/dV kernel's grid sized by T_q",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_k, block_n), B * H)]",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_q, block_n), B * H)]"),
    M("triton_flash_attention_backward", "kernels launched with IS_CAUSAL=False always",
      "IS_CAUSAL=is_causal)", "IS_CAUSAL=False)"),

    # 10 · modern attention
    M("repeat_kv", "heads tiled (interleaved) with x.repeat",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x.repeat(1, n_rep, 1, 1)"),
    M("repeat_kv", "repeated along the time axis",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h (t r) d"'),
    M("repeat_kv", "n_rep read as the number of heads wanted",
      "r=n_rep)", "r=n_rep // x.shape[1])"),
    M("repeat_kv", "group axis never merged into the head axis",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x[:, :, None].expand(-1, -1, n_rep, -1, -1)"),
    M("GroupedQueryAttention", "key/value heads tiled, not grouped",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "values taken from the key projection",
      "v = rearrange(self.v(x),", "v = rearrange(self.k(x),"),
    M("GroupedQueryAttention", "key and value projections as wide as the queries'",
      "self.k = nn.Linear(d_model, n_kv_heads * d_head, bias=False)\n"
      "        self.v = nn.Linear(d_model, n_kv_heads * d_head, bias=False)",
      "self.k = nn.Linear(d_model, d_model, bias=False)\n"
      "        self.v = nn.Linear(d_model, d_model, bias=False)"),
    M("GroupedQueryAttention", "features split into heads as (d h)",
      'q = rearrange(self.q(x), "b t (h d) -> b h t d"', 'q = rearrange(self.q(x), "b t (d h) -> b h t d"'),
    M("sliding_window_mask", "window admits W + 1 keys",
      "(distance < window)", "(distance <= window)"),
    M("sliding_window_mask", "window on both sides: later keys visible",
      "return (distance >= 0) & (distance < window)", "return distance.abs() < window"),
    M("sliding_window_mask", "aligned top-left, without the T_k - T_q offset",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "own position excluded, one key further back instead",
      "return (distance >= 0) & (distance < window)", "return (distance > 0) & (distance <= window)"),
    M("sliding_window_flash_attention", "first key block from the block's last row",
      "first = max(0, qs + offset - window + 1)",
      "first = max(0, qs + q_blk.shape[-2] - 1 + offset - window + 1)"),
    M("sliding_window_flash_attention", "stop test off by one: a block starting at the last row is skipped",
      "if ks > rows[-1]:", "if ks >= rows[-1]:"),
    M("sliding_window_flash_attention", "window edge inclusive: W + 1 keys",
      "(distance >= window)", "(distance > window)"),
    M("sliding_window_flash_attention", "1/√d scale forgotten",
      "q_blk = q[..., qs : qs + block_size, :] / math.sqrt(d)", "q_blk = q[..., qs : qs + block_size, :]"),
    M("alibi_score_mod", "plain 2^(-8(h+1)/H) slopes for every head count",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "bias sign reversed: distant keys favoured",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "extra slopes from the odd places, repeats of n's",
      "[0::2]", "[1::2]"),
    M("alibi_score_mod", "bias on the absolute distance: later keys penalised too",
      "score + slopes[h] * (kv_idx - q_idx)", "score - slopes[h] * (kv_idx - q_idx).abs()"),
    M("document_mask_mod", "causal bound dropped: the whole document visible",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "causal direction reversed",
      "(q_idx >= kv_idx)", "(q_idx <= kv_idx)"),
    M("document_mask_mod", "document and causal conditions joined with OR",
      ") & (q_idx >= kv_idx)", ") | (q_idx >= kv_idx)"),
    M("document_mask_mod", "strict causal: a token may not see itself",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("rotary_window_attention", "window without the causal bound",
      "(q_idx >= kv_idx) & (q_idx - kv_idx < window)", "q_idx - kv_idx < window"),
    M("rotary_window_attention", "queries pre-scaled, and FlexAttention scales them again",
      "out = flex_attention(q, k, v,", "out = flex_attention(q / math.sqrt(q.shape[-1]), k, v,"),
    M("rotary_window_attention", "RoPE turns the pairs along the head axis",
      '    q = rearrange(layer.q(x), "b t (h d) -> b h t d", h=layer.n_heads)  # (b, h, t, d_head)\n'
      '    k = rearrange(layer.k(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      '    v = rearrange(layer.v(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      "    q, k = apply_rope(q, positions), apply_rope(k, positions)",
      '    q = rearrange(layer.q(x), "b t (h d) -> b t h d", h=layer.n_heads)  # (b, t, h, d_head)\n'
      '    k = rearrange(layer.k(x), "b t (h d) -> b t h d", h=layer.n_kv_heads)  # (b, t, h_kv, d_head)\n'
      '    v = rearrange(layer.v(x), "b t (h d) -> b h t d", h=layer.n_kv_heads)  # (b, h_kv, t, d_head)\n'
      "    q, k = apply_rope(q, positions).transpose(1, 2), apply_rope(k, positions).transpose(1, 2)"),
    M("rotary_window_attention", "positions not passed to RoPE",
      "apply_rope(q, positions), apply_rope(k, positions)", "apply_rope(q), apply_rope(k)"),
)
ALTERNATIVES_I: tuple[BlindAlternative, ...] = (
    A("dot_product_scores", "matmul with the batched transpose .mT",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.mT"),
    A("softmax", "max(...).values, and a product with the reciprocal of the sum",
      "    shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
      "    exps = shifted.exp()\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "    exps = torch.exp(x - x.max(dim=dim, keepdim=True).values)\n"
      "    return exps * exps.sum(dim=dim, keepdim=True).reciprocal()"),
    A("dot_product_attention", "einsum for the weighted sum of the values",
      "out = weights @ v", 'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    A("score_variance", "products summed over the features, scale as a power",
      '    scores = einsum(q, k, "n d, n d -> n")  # (n,)\n'
      "    if scaled:\n"
      "        scores = scores / math.sqrt(d_k)",
      "    scores = (q * k).sum(dim=-1)  # (n,)\n"
      "    scores = scores * d_k**-0.5 if scaled else scores"),
    A("scaled_dot_product_attention", "queries scaled once before the product",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)", "scores = dot_product_scores(q * d_k**-0.5, k)"),
    A("causal_mask", "torch.tril with diagonal t_k - t_q",
      "    query_positions = torch.arange(t_q, device=device) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k, device=device)  # (t_k,)\n"
      '    return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "None-indexing instead of rearrange",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "positions[None, :] < lengths[:, None]"),
    A("attention", "torch.softmax, NaN rows of a fully masked row set to 0 with nan_to_num",
      "    weights = softmax(scores, dim=-1)  # (..., T_q, T_k): NaN in a row that allows no key\n"
      "    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # such rows: 0, as SDPA\n",
      "    weights = torch.softmax(scores, dim=-1).nan_to_num(nan=0.0)  # a row that allows no key: 0\n"),
    A("split_heads", "unflatten the features, then transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)', "x.unflatten(-1, (n_heads, -1)).transpose(1, 2)"),
    A("merge_heads", "heads unbound and concatenated along the features",
      'rearrange(x, "b h t d -> b t (h d)")', "torch.cat(x.unbind(dim=1), dim=-1)"),
    A("MultiHeadAttention", "mask.unsqueeze(-3), and heads merged by transpose and flatten",
      "        if mask is not None:\n"
      '            mask = rearrange(mask, "... q k -> ... 1 q k")  # (b, 1, t, t_k): the same for every'
      ' head\n'
      "        out, _ = attention(q, k, v, mask=mask, is_causal=is_causal)  # (b, h, t, d_k)\n"
      "        return self.out(merge_heads(out))",
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t_k)\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_k)\n"
      "        return self.out(out.transpose(1, 2).flatten(2))"),
    A("rope_frequencies", "exp of -log(base)·2i/d",
      "base ** (-two_i / d)", "torch.exp(-math.log(base) * two_i / d)"),
    A("apply_rope", "pairs as complex numbers turned by e^{iθ}",
      "    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each\n"
      "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      '    pairs = torch.view_as_complex(rearrange(x, "... (half two) -> ... half two",'
      ' two=2).contiguous())\n'
      "    turns = torch.polar(torch.ones_like(angles), angles).to(pairs.dtype)  # (T, d/2)\n"
      "    return torch.view_as_real(pairs * turns).flatten(-2)  # (..., T, d)"),
    A("RotaryMultiHeadAttention", "the layer's own project() for q, k and v per head",
      "        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (b, t, d_model)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n",
      "        q, k, v = self.project(x)  # each (b, h, t, d_k)\n"),
    A("online_softmax", "blocks from x.split",
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n",
      "    for block in x.split(block_size, dim=-1):  # (..., B) each, the last maybe shorter\n"),
    A("flash_attention_query_block", "einsum for the tile of scores",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)",
      's = torch.einsum("...qd,...kd->...qk", q_blk, k[..., ks : ks + block_size, :])'),
    A("flash_attention", "torch.where keeps the visible scores",
      "s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)",
      "s = torch.where(cols[None, :] <= rows[:, None], s, -math.inf)"),
    A("block_forward", "the two residual sublayers in a loop",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    for norm, sublayer in ((block.ln1, lambda h: block.attn(h, is_causal=True)), (block.ln2,"
      " block.mlp)):\n"
      "        x = x + sublayer(norm(x))  # (b, t, d_model)\n"
      "    return x"),
    A("ablate_heads", "W^O's columns viewed per head",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.out.weight.view(-1, model.config.n_heads, d_k)[:, head] = 0.0"),
    A("KVCache", "chunks kept in lists, concatenated when asked for",
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      '        """How many positions `layer` has cached (0 before its first append)."""\n'
      "        return self.keys[layer].shape[-2] if layer in self.keys else 0\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor,"
      " torch.Tensor]:\n"
      '        """Add k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""\n'
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        self.keys: dict[int, list[torch.Tensor]] = {}  # layer -> chunks (b, h, t_new, d_k)\n"
      "        self.values: dict[int, list[torch.Tensor]] = {}  # layer -> chunks (b, h, t_new, d_k)\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      '        """How many positions `layer` has cached (0 before its first append)."""\n'
      "        return sum(chunk.shape[-2] for chunk in self.keys.get(layer, []))\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor,"
      " torch.Tensor]:\n"
      '        """Add k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""\n'
      "        self.keys.setdefault(layer, []).append(k)\n"
      "        self.values.setdefault(layer, []).append(v)\n"
      "        return torch.cat(self.keys[layer], dim=-2), torch.cat(self.values[layer], dim=-2)"),
    A("cached_attention", "bottom-right causal mask given as a tril mask",
      "out, _ = attention(q, keys, values, is_causal=True)",
      "out, _ = attention(q, keys, values, mask=torch.ones(t_new, t_past + t_new, dtype=torch.bool,"
      " device=x.device).tril(t_past))"),
    A("generate_with_cache", "new tokens collected in a list, concatenated once",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new token"
      " only\n"
      "    return tokens",
      "    chosen = []\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        chosen.append(pick(logits))  # (b, 1)\n"
      "        if i + 1 < n_new:\n"
      "            logits = model.step(chosen[-1], cache, attend)[:, -1]  # (b, vocab_size)\n"
      "    return torch.cat([prompt, *chosen], dim=1)"),
    A("next_token_probs", "k-th largest from a descending sort, kept with torch.where",
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)\n',
      "        kth = scaled.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]  # (b, 1)\n"
      '        scaled = torch.where(scaled >= kth, scaled, float("-inf"))  # (b, vocab_size)\n'),
    A("sample_next", "inverse CDF: one uniform per row, searchsorted in the cumulative sum",
      "    return torch.multinomial(probs, 1, generator=generator)",
      "    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)  # (b, 1)\n"
      "    return torch.searchsorted(probs.cumsum(dim=-1), u).clamp_max(probs.shape[-1] - 1)"),
    A("softmax_backward", "p·g minus p times its row sum",
      "    D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)",
      "    pg = p * grad_p\n"
      "    return pg - p * pg.sum(dim=dim, keepdim=True)"),
    A("attention_backward", "each product written as an einsum",
      "    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)\n"
      "    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)\n"
      "    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))  # (..., T_q, T_k)\n"
      "    dq = ds @ k * scale  # (..., T_q, d)\n"
      "    dk = ds.transpose(-1, -2) @ q * scale",
      '    dv = torch.einsum("...qk,...qe->...ke", p, grad_out)  # (..., T_k, d_v)\n'
      '    dp = torch.einsum("...qe,...ke->...qk", grad_out, v)  # (..., T_q, T_k)\n'
      "    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))  # (..., T_q, T_k)\n"
      '    dq = torch.einsum("...qk,...kd->...qd", ds, k) * scale  # (..., T_q, d)\n'
      '    dk = torch.einsum("...qk,...qd->...kd", ds, q) * scale'),
    A("flash_attention_backward", "query blocks outside, key blocks inside",
      "    for ks in range(0, t_k, block_size):\n"
      "        ke = min(ks + block_size, t_k)\n"
      "        k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)\n"
      "        dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)  # (..., Bk, d), (..., Bk,"
      " d_v)\n"
      "        for qs in range(0, t_q, block_size):\n"
      "            qe = min(qs + block_size, t_q)\n"
      "            if is_causal and ks > qe - 1 + offset:\n"
      "                continue  # every key of the tile comes after every query of it\n"
      "            q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq,"
      " d_v)\n"
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
      "        dv[..., ks:ke, :] = dv_acc\n",
      "    for qs in range(0, t_q, block_size):\n"
      "        qe = min(qs + block_size, t_q)\n"
      "        q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, d_v)\n"
      "        dq_acc = torch.zeros_like(q_blk)  # (..., Bq, d): sum of dS K, unscaled\n"
      "        for ks in range(0, t_k, block_size):\n"
      "            if is_causal and ks > qe - 1 + offset:\n"
      "                break  # this key block and every later one come after all queries of the block\n"
      "            ke = min(ks + block_size, t_k)\n"
      "            k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)\n"
      "            s = q_blk @ k_blk.transpose(-1, -2) * scale  # (..., Bq, Bk)\n"
      "            if is_causal:\n"
      "                rows = torch.arange(qs, qe, device=q.device)[:, None] + offset  # (Bq, 1)\n"
      "                cols = torch.arange(ks, ke, device=q.device)[None, :]  # (1, Bk)\n"
      '                s = s.masked_fill(cols > rows, float("-inf"))  # (..., Bq, Bk)\n'
      "            p = torch.exp(s - lse[..., qs:qe, None])  # (..., Bq, Bk)\n"
      "            dv[..., ks:ke, :] += p.transpose(-1, -2) @ do_blk  # (..., Bk, d_v)\n"
      "            ds = p * (do_blk @ v_blk.transpose(-1, -2) - D[..., qs:qe, :])  # (..., Bq, Bk)\n"
      "            dq_acc += ds @ k_blk  # (..., Bq, d)\n"
      "            dk[..., ks:ke, :] += ds.transpose(-1, -2) @ q_blk * scale  # (..., Bk, d)\n"
      "        dq[..., qs:qe, :] = dq_acc * scale\n"),
    A("FlashAttentionFunction", "the two options kept as one tuple on ctx",
      "        ctx.is_causal, ctx.block_size = is_causal, block_size\n"
      "        return out\n"
      "\n"
      "    @staticmethod\n"
      "    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:\n"
      '        """One gradient per input of forward: dq, dk, dv, None, None."""\n'
      "        q, k, v, out, lse = ctx.saved_tensors\n"
      "        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal,"
      " ctx.block_size)",
      "        ctx.options = (is_causal, block_size)\n"
      "        return out\n"
      "\n"
      "    @staticmethod\n"
      "    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:\n"
      '        """One gradient per input of forward: dq, dk, dv, None, None."""\n'
      "        q, k, v, out, lse = ctx.saved_tensors\n"
      "        is_causal, block_size = ctx.options\n"
      "        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, is_causal, block_size)"),
    A("repeat_kv", "repeat_interleave on the head axis",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x.repeat_interleave(n_rep, dim=1)"),
    A("GroupedQueryAttention", "expand a group axis and flatten it into the heads",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = (z[:, :, None].expand(-1, -1, n_rep, -1, -1).flatten(1, 2) for z in (k, v))"),
    A("sliding_window_mask", "band of tril and triu",
      "    query_positions = torch.arange(t_q) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k)  # (t_k,)\n"
      '    distance = rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")  #'
      ' (t_q, t_k)\n'
      "    return (distance >= 0) & (distance < window)",
      "    ones = torch.ones(t_q, t_k, dtype=torch.bool)\n"
      "    return ones.tril(diagonal=t_k - t_q) & ones.triu(diagonal=t_k - t_q - window + 1)"),
    A("sliding_window_flash_attention", "key loop ends at the diagonal instead of breaking",
      "        for ks in range(first // block_size * block_size, t_k, block_size):\n"
      "            if ks > rows[-1]:\n"
      "                break  # this block and all later ones are after the diagonal\n",
      "        last = min(t_k, qs + q_blk.shape[-2] + offset)  # one past the last row's own key\n"
      "        for ks in range(first // block_size * block_size, last, block_size):\n"),
    A("alibi_score_mod", "slopes as a Python list, the paper's get_slopes",
      "    def power_of_two_slopes(n_heads):  # 2^(-8/n_heads), 2^(-16/n_heads), ..., 2^-8\n"
      "        return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)  # (n_heads,)\n"
      "\n"
      "    n = 2 ** math.floor(math.log2(n_heads))  # the largest power of two <= n_heads\n"
      "    extra = power_of_two_slopes(2 * n)[0::2][: n_heads - n]  # (n_heads - n,): between n's slopes\n"
      "    slopes = torch.cat([power_of_two_slopes(n), extra])  # (n_heads,)\n",
      "    def get_slopes(n):  # a geometric sequence from 2^(-8/n), ratio 2^(-8/n)\n"
      "        start = 2.0 ** (-8.0 / n)\n"
      "        return [start ** (i + 1) for i in range(n)]\n"
      "\n"
      "    n = 1 << (n_heads.bit_length() - 1)  # the largest power of two <= n_heads\n"
      "    slopes = torch.tensor(get_slopes(n) + get_slopes(2 * n)[::2][: n_heads - n])  # (n_heads,)\n"),
    A("document_mask_mod", "each query's document start from searchsorted",
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)\n",
      "    starts = torch.searchsorted(document_ids, document_ids)  # (T,): where each position's document"
      " begins\n"
      "\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (kv_idx >= starts[q_idx]) & (kv_idx <= q_idx)\n"),
    A("rotary_window_attention", "dense window mask, repeated heads and a plain softmax",
      "    def in_window(b, h, q_idx, kv_idx):\n"
      "        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n"
      "\n"
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)  # (b, h, t, d_head)\n",
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d_head)\n"
      "    i = torch.arange(t, device=x.device)\n"
      "    allowed = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)  # (t, t)\n"
      "    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (b, h, t, t)\n"
      '    out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v  # (b, h, t,'
      ' d_head)\n'),
)
# fmt: on
