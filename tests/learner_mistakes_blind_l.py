"""Blind set L of learner mistakes and right alternatives, for every exercise of 01-10 that
tests/blind_compare.py has inputs for (the Triton ones of 08 and 09 included).

Written on 2026-12-07 from the solution notebooks (solutions/*.ipynb: each exercise's text and its
solution cell), the student notebooks and the topic modules (attn_course/*.py, not attn_course/checks
nor attn_course/grading) only, by someone who read no check, no check's message, no test of a check,
no first-run record and no earlier set beyond the lines that give its format. Each mistake is a text
edit of the solution notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines
(`old`, occurring exactly once in that cell, replaced by `new`), applied by
`learner_mistakes_blind_a.load`, with the idea of the mistake in one short phrase: four per exercise
(three for triton_scores), slips and misunderstandings a learner who read only the notebook's text
could make, several of them right on the simple input and wrong on another the exercise allows
(T_q != T_k, batch axes, non-contiguous views, ragged blocks, head counts that are not powers of two,
grouped heads, given positions, dtypes, rows that see no key, inputs edited in place). Each
alternative is an edit of the same kind that keeps the function right while writing it differently
from the solution (one per exercise outside Triton), doing no more work than the notebook allows.
Every mistake was verified wrong against `attn_course.reference` on an input the exercise's contract
allows, every alternative right on all of them, and no edit fails to load
(`blind_compare.verify(HOLDOUT_L, ALTERNATIVES_L, folder)` returns [], run with TRITON_INTERPRET=1).
The Triton mistakes keep every load and store inside its tensor, so that the interpreter cannot crash.
Not covered, as blind_compare.py has no inputs for them: fast_flash_attention (08),
flash_attention_backward_dkdv_kernel and flash_attention_backward_dq_kernel (09, reached through
triton_flash_attention_backward's wrapper only) and rolling_window_step (10).
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_L = (
    # 01 dot_product_scores
    M("dot_product_scores", "transposes k with .T, which reverses every axis of a batched k",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      "return q @ k.T"),
    M("dot_product_scores", "computes the scores in float64 and returns them so",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      'torch.einsum("...qd,...kd->...qk", q.double(), k.double())'),
    M("dot_product_scores", "result laid out (T_k, T_q): keys on the rows",
      '"...qd,...kd->...qk"',
      '"...qd,...kd->...kq"'),
    M("dot_product_scores", "scales the raw scores by 1/sqrt(d) already",
      'return torch.einsum("...qd,...kd->...qk", q, k)',
      'return torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5'),
    # 01 softmax
    M("softmax", "shifts by the maximum of the whole tensor, not of each row",
      "x - x.amax(dim=dim, keepdim=True)",
      "x - x.amax()"),
    M("softmax", "sums over the last axis whatever dim is",
      "exps.sum(dim=dim, keepdim=True)",
      "exps.sum(dim=-1, keepdim=True)"),
    M("softmax", "subtracts the maximum in place, editing the caller's x",
      "shifted = x - x.amax(dim=dim, keepdim=True)",
      "shifted = x.sub_(x.amax(dim=dim, keepdim=True))"),
    M("softmax", "shifts by the row mean instead of the row maximum",
      "x.amax(dim=dim, keepdim=True)",
      "x.mean(dim=dim, keepdim=True)"),
    # 01 dot_product_attention
    M("dot_product_attention", "normalises the weights over the queries (dim=-2)",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "multiplies the values by the transposed weights",
      "out = weights @ v",
      "out = weights.transpose(-2, -1) @ v"),
    M("dot_product_attention", "divides the scores by sqrt(d) in the unscaled exercise",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k) / q.shape[-1] ** 0.5, dim=-1)"),
    M("dot_product_attention", "scores of keys against queries (arguments swapped)",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(k, q), dim=-1)"),
    # 02 score_variance
    M("score_variance", "draws uniform components (torch.rand), variance 1/12",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)"),
    M("score_variance", "divides the scaled scores by d_k, not sqrt(d_k)",
      "scores = scores / math.sqrt(d_k)",
      "scores = scores / d_k"),
    M("score_variance", "returns the standard deviation, not the variance",
      "return scores.var().item()",
      "return scores.std().item()"),
    M("score_variance", "sums the products over the samples, one score per component",
      '"n d, n d -> n"',
      '"n d, n d -> d"'),
    # 02 scaled_dot_product_attention
    M("scaled_dot_product_attention", "takes d_k from the width of the values",
      "d_k = q.shape[-1]",
      "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "divides the scores by d_k, not its square root",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q, k) / d_k"),
    M("scaled_dot_product_attention", "scales q and k each by 1/sqrt(d_k): 1/d_k in all",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q / math.sqrt(d_k), k / math.sqrt(d_k))"),
    M("scaled_dot_product_attention", "reads d_k as axis 1, right only for 2-D q",
      "d_k = q.shape[-1]",
      "d_k = q.shape[1]"),
    # 03 causal_mask
    M("causal_mask", "aligns the mask top-left: no T_k - T_q offset",
      "torch.arange(t_q, device=device) + (t_k - t_q)",
      "torch.arange(t_q, device=device)"),
    M("causal_mask", "strict <: a query may not attend its own position",
      'rearrange(key_positions, "k -> 1 k") <= rearrange',
      'rearrange(key_positions, "k -> 1 k") < rearrange'),
    M("causal_mask", "offset with the wrong sign (t_q - t_k)",
      "+ (t_k - t_q)",
      "+ (t_q - t_k)"),
    M("causal_mask", "returns a float mask of ones and zeros, not a bool one",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.tril(torch.ones(t_q, t_k, device=device), diagonal=t_k - t_q)"),
    # 03 padding_mask
    M("padding_mask", "<= keeps one pad position per row",
      '"t -> 1 t") < rearrange',
      '"t -> 1 t") <= rearrange'),
    M("padding_mask", "sizes the mask by the longest length, not t",
      "positions = torch.arange(t, device=lengths.device)",
      "positions = torch.arange(int(lengths.max()), device=lengths.device)"),
    M("padding_mask", "True on the pad positions (mask sense inverted)",
      '"t -> 1 t") < rearrange',
      '"t -> 1 t") >= rearrange'),
    M("padding_mask", "mask laid out (t, B): positions on the rows",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'return rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    # 03 attention
    M("attention", "fills the forbidden scores with 0 instead of -inf",
      'scores = scores.masked_fill(~allowed, float("-inf"))',
      "scores = scores.masked_fill(~allowed, 0.0)"),
    M("attention", "builds a square (T_q, T_q) causal mask",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "causal_mask(q.shape[-2], device=q.device)"),
    M("attention", "treats mask True as forbidden",
      "allowed = allowed & mask",
      "allowed = allowed & ~mask"),
    M("attention", "multiplies the weights by the mask after the softmax, without renormalising",
      'scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)",
      "weights = softmax(scores, dim=-1) * allowed"),
    # 04 split_heads
    M("split_heads", "factors the features as (d h): heads interleaved",
      '"b t (h d) -> b h t d"',
      '"b t (d h) -> b h t d"'),
    M("split_heads", "reshapes straight to (b, h, t, d) without moving the head axis",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "splits the features but leaves the head axis after time",
      '"b t (h d) -> b h t d"',
      '"b t (h d) -> b t h d"'),
    M("split_heads", "gives n_heads as the size of d",
      "h=n_heads)",
      "d=n_heads)"),
    # 04 merge_heads
    M("merge_heads", "flattens (d h): features of the heads interleaved",
      '"b h t d -> b t (h d)"',
      '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshapes to (b, t, h·d) without moving the head axis back",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "transpose then view, which fails on the non-contiguous result",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "concatenates the heads along time",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return torch.cat(x.unbind(dim=1), dim=1)"),
    # 04 MultiHeadAttention
    M("MultiHeadAttention", "takes the queries from the context too",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)",
      "q, k, v = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "puts the head axis in front of the batch axis of the mask",
      'mask = rearrange(mask, "... q k -> ... 1 q k")',
      "mask = mask.unsqueeze(0)"),
    M("MultiHeadAttention", "keeps the values of x in cross-attention",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)",
      "_, k, _ = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "merges the heads with a reshape, head axis not moved back",
      "return self.out(merge_heads(out))",
      "return self.out(out.reshape(x.shape[0], x.shape[1], -1))"),
    # 05 rope_frequencies
    M("rope_frequencies", "exponent i/d: forgets the factor 2",
      "two_i = torch.arange(0, d, 2, dtype=torch.float64)",
      "two_i = torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "counts i from 1: the first frequency is not 1",
      "torch.arange(0, d, 2, dtype=torch.float64)",
      "torch.arange(2, d + 2, 2, dtype=torch.float64)"),
    M("rope_frequencies", "positive exponent: frequencies grow with i",
      "return base ** (-two_i / d)",
      "return base ** (two_i / d)"),
    M("rope_frequencies", "divides by d - 2 so that the last frequency is 1/base",
      "return base ** (-two_i / d)",
      "return base ** (-two_i / (d - 2))"),
    # 05 apply_rope
    M("apply_rope", "pairs the first half with the second half, not neighbours",
      "even, odd = x[..., 0::2], x[..., 1::2]",
      "even, odd = x[..., : d // 2], x[..., d // 2 :]"),
    M("apply_rope", "rotates by the index 0..T-1 whatever positions says",
      'rearrange(positions.to(x.device, torch.float64), "t -> t 1")',
      'rearrange(torch.arange(t, device=x.device, dtype=torch.float64), "t -> t 1")'),
    M("apply_rope", "puts the rotated halves back one after the other, not interleaved",
      '"two ... half -> ... (half two)"',
      '"two ... half -> ... (two half)"'),
    M("apply_rope", "writes the rotated pairs into x in place",
      "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "    even, odd = x[..., 0::2].clone(), x[..., 1::2].clone()  # (..., T, d/2) each\n"
      "    x[..., 0::2] = even * cos - odd * sin\n"
      "    x[..., 1::2] = even * sin + odd * cos\n"
      "    return x  # (..., T, d)"),
    # 05 RotaryMultiHeadAttention
    M("RotaryMultiHeadAttention", "rotates the values as well",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "rotates the queries at the default positions",
      "apply_rope(q, positions, self.base)",
      "apply_rope(q, None, self.base)"),
    M("RotaryMultiHeadAttention", "forgets the layer's base: apply_rope's default",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)"),
    M("RotaryMultiHeadAttention", "inserts the mask's head axis at 1, wrong for a (t, t) mask",
      "mask.unsqueeze(-3)",
      "mask.unsqueeze(1)"),
    # 06 online_softmax
    M("online_softmax", "forgets to rescale the running sum when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + ",
      "denom = denom + "),
    M("online_softmax", "no guard for a maximum still -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)",
      "m_safe = m_new"),
    M("online_softmax", "keeps the block's maximum, not the running one",
      "        m = m_new",
      "        m = block.amax(dim=-1, keepdim=True)"),
    M("online_softmax", "stops before a last, shorter block",
      "range(0, x.shape[-1], block_size)",
      "range(0, x.shape[-1] - block_size + 1, block_size)"),
    # 06 flash_attention_query_block
    M("flash_attention_query_block", "forgets to rescale the accumulator",
      "acc = alpha * acc + p @ v",
      "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse in base 2",
      "(m + torch.log(denom))",
      "(m + torch.log2(denom))"),
    M("flash_attention_query_block", "slices the values' last axis instead of their rows",
      "p @ v[..., ks : ks + block_size, :]",
      "p @ v[..., ks : ks + block_size]"),
    M("flash_attention_query_block", "never updates the running maximum",
      "        m = m_new\n",
      ""),
    # 06 flash_attention
    M("flash_attention", "masks inside a tile top-left aligned",
      "rows = torch.arange(qs, qe, device=q.device) + offset",
      "rows = torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "divides by a zero sum in rows that see no key",
      "denom = torch.where(denom == 0, 1.0, denom)",
      "denom = denom"),
    M("flash_attention", "lse forgets the running maximum",
      "lse[..., qs:qe] = (m + torch.log(denom)).squeeze(-1)",
      "lse[..., qs:qe] = torch.log(denom).squeeze(-1)"),
    M("flash_attention", "masks only tiles that cross the last row's diagonal",
      "if is_causal and ke - 1 > qs + offset:",
      "if is_causal and ke - 1 > qe - 1 + offset:"),
    # 07 block_forward
    M("block_forward", "attention without the causal mask",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x))"),
    M("block_forward", "the MLP reads the block's input, not the stream after attention",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "adds the attention into x in place",
      "x = x + block.attn(block.ln1(x), is_causal=True)",
      "x += block.attn(block.ln1(x), is_causal=True)"),
    M("block_forward", "normalises both sublayers' inputs with ln1",
      "block.mlp(block.ln2(x))",
      "block.mlp(block.ln1(x))"),
    # 07 ablate_heads
    M("ablate_heads", "zeroes the head's rows of out's weight, not its columns",
      "attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "attn.out.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("ablate_heads", "edits the model itself, no copy",
      "ablated = copy.deepcopy(model)",
      "ablated = model"),
    M("ablate_heads", "assumes the notebook's 4 heads for the head width",
      "d_k = model.config.d_model // model.config.n_heads",
      "d_k = model.config.d_model // 4"),
    M("ablate_heads", "counts layers from 1",
      "ablated.blocks[layer].attn",
      "ablated.blocks[layer - 1].attn"),
    # 07 KVCache
    M("KVCache", "puts the new keys and values before the cached ones",
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "            k = torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "length is the batch size (len of the tensor)",
      "return self.keys[layer].shape[-2] if layer in self.keys else 0",
      "return len(self.keys[layer]) if layer in self.keys else 0"),
    M("KVCache", "class-level dicts, shared by every cache",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "\n"
      "    def __init__(self) -> None:\n"
      "        pass"),
    M("KVCache", "length asks whether anything is cached, not this layer",
      "if layer in self.keys else 0",
      "if self.keys else 0"),
    # 07 cached_attention
    M("cached_attention", "rotates the new tokens from position 0",
      "torch.arange(t_past, t_past + t_new, device=x.device)",
      "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "SDPA's top-left causal mask",
      "out, _ = attention(q, keys, values, is_causal=True)",
      "out = torch.nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=True)"),
    M("cached_attention", "no causal mask: one new token sees every key anyway",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values)"),
    M("cached_attention", "merges the heads as (d h)",
      '"b h t d -> b t (h d)"',
      '"b h t d -> b t (d h)"'),
    # 07 generate_with_cache
    M("generate_with_cache", "feeds the whole sequence at every step",
      "logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(tokens, cache, attend)[:, -1]"),
    M("generate_with_cache", "steps the last token too",
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]",
      "        logits = model.step(next_token, cache, attend)[:, -1]"),
    M("generate_with_cache", "keeps the time axis on the logits handed to pick",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt, cache, attend)[:, -1:]"),
    M("generate_with_cache", "picks from the prefill's first position",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt, cache, attend)[:, 0]"),
    # 07 next_token_probs
    M("next_token_probs", "multiplies by the temperature",
      "scaled = logits / temperature",
      "scaled = logits * temperature"),
    M("next_token_probs", "keeps exactly k tokens, ties cut by position",
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))',
      "        keep = torch.zeros_like(scaled, dtype=torch.bool).scatter(-1, scaled.topk(top_k,"
      " dim=-1).indices, True)\n"
      '        scaled = scaled.masked_fill(~keep, float("-inf"))'),
    M("next_token_probs", "divides the logits by the temperature in place",
      "scaled = logits / temperature",
      "scaled = logits.div_(temperature)"),
    M("next_token_probs", "k-th value without its axis, right for one row only",
      "values[:, -1:]",
      "values[:, -1]"),
    # 07 sample_next
    M("sample_next", "takes the most likely token",
      "return torch.multinomial(probs, 1, generator=generator)",
      "return probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "draws from the global generator",
      "torch.multinomial(probs, 1, generator=generator)",
      "torch.multinomial(probs, 1)"),
    M("sample_next", "samples softmax(logits / T), forgetting top_k",
      "probs = next_token_probs(logits, temperature, top_k)",
      "probs = torch.softmax(logits / temperature, dim=-1)"),
    M("sample_next", "one uniform number for the whole batch",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(1, 1, generator=generator, dtype=probs.dtype)  # (1, 1)\n"
      "    return (probs.cumsum(-1) < u).sum(-1, keepdim=True).clamp(max=probs.shape[-1] - 1)"),
    # 08 triton_add
    M("triton_add", "makes x contiguous but not y",
      "x, y = x.contiguous(), y.contiguous()",
      "x = x.contiguous()"),
    M("triton_add", "rounds the grid down",
      "grid = (triton.cdiv(n, block),)",
      "grid = (n // block,)"),
    M("triton_add", "every program takes the first block",
      "offsets = pid * BLOCK + tl.arange(0, BLOCK)",
      "offsets = tl.arange(0, BLOCK)"),
    M("triton_add", "counts the elements by the first axis",
      "n = x.numel()",
      "n = x.shape[0]"),
    # 08 triton_softmax
    M("triton_softmax", "forgets to rescale the running sum",
      "total = total * tl.exp(m - m_safe) + ",
      "total = total + "),
    M("triton_softmax", "row stride taken from the shape",
      "x.shape[1], x.stride(0), out.stride(0)",
      "x.shape[1], x.shape[1], out.stride(0)"),
    M("triton_softmax", "keeps a transposed x as it is",
      "x = x if x.stride(1) == 1 else x.contiguous()  # (R, N)",
      "x = x  # (R, N)"),
    M("triton_softmax", "pads a ragged block with 0 in the first pass",
      '        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  #'
      " (BLOCK,)\n"
      "        m_new",
      "        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)  # (BLOCK,)\n"
      "        m_new"),
    # 08 triton_scores
    M("triton_scores", "sm_scale 1/d",
      "h, t_q, t_k, 1.0 / math.sqrt(d)",
      "h, t_q, t_k, 1.0 / d"),
    M("triton_scores", "grid's key axis sized by T_q",
      "triton.cdiv(t_k, block_n)",
      "triton.cdiv(t_q, block_n)"),
    M("triton_scores", "q's strides computed from its shape",
      "q.stride(0), q.stride(1), q.stride(2), k.stride(0)",
      "h * t_q * d, t_q * d, d, k.stride(0)"),
    # 08 triton_flash_attention
    M("triton_flash_attention", "causal mask inside a tile aligned top-left",
      "visible & (cols[None, :] <= offs_m[:, None] + offset)",
      "visible & (cols[None, :] <= offs_m[:, None])"),
    M("triton_flash_attention", "lse forgets the running maximum",
      "lse = m + tl.log(total_safe)",
      "lse = tl.log(total_safe)"),
    M("triton_flash_attention", "causal loop stops before the diagonal block",
      "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)",
      "hi = tl.minimum(t_k, pid_m * BLOCK_M + offset)"),
    M("triton_flash_attention", "does not mask the keys past T_k",
      "visible = cols[None, :] < t_k  # (1, BLOCK_N)",
      "visible = cols[None, :] >= 0  # (1, BLOCK_N)"),
    # 09 softmax_backward
    M("softmax_backward", "drops the row sum D",
      "return p * (grad_p - D)",
      "return p * grad_p"),
    M("softmax_backward", "sums D over the last axis whatever dim is",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = (grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "D without keepdim",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = (grad_p * p).sum(dim=dim)"),
    M("softmax_backward", "D as the row mean of the upstream gradient",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)",
      "D = grad_p.mean(dim=dim, keepdim=True)"),
    # 09 attention_backward
    M("attention_backward", "forgets the 1/sqrt(d) in dk",
      "dk = ds.transpose(-1, -2) @ q * scale",
      "dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "dS without the row sum D",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))",
      "ds = p * dp"),
    M("attention_backward", "recomputes the probabilities without the causal mask",
      "attention(q, k, v, is_causal=is_causal)",
      "attention(q, k, v)"),
    M("attention_backward", "scale from the values' width",
      "scale = 1 / math.sqrt(q.shape[-1])",
      "scale = 1 / math.sqrt(v.shape[-1])"),
    # 09 flash_attention_backward
    M("flash_attention_backward", "skips a tile that only the block's first query cannot see",
      "if is_causal and ks > qe - 1 + offset:",
      "if is_causal and ks > qs + offset:"),
    M("flash_attention_backward", "causal mask aligned top-left",
      "rows = torch.arange(qs, qe, device=q.device)[:, None] + offset",
      "rows = torch.arange(qs, qe, device=q.device)[:, None]"),
    M("flash_attention_backward", "D from the tile's own dP and P",
      "ds = p * (dp - D[..., qs:qe, :])",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "dq overwritten by each key block",
      "dq[..., qs:qe, :] += ds @ k_blk * scale",
      "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    # 09 FlashAttentionFunction
    M("FlashAttentionFunction", "returns a gradient for the tensors only",
      "return dq, dk, dv, None, None",
      "return dq, dk, dv"),
    M("FlashAttentionFunction", "backward with the default mask and block size",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out)"),
    M("FlashAttentionFunction", "returns dk in q's place and dq in k's",
      "return dq, dk, dv, None, None",
      "return dk, dq, dv, None, None"),
    M("FlashAttentionFunction", "forward forgets is_causal",
      "flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)",
      "flash_attention_forward(q, k, v, block_size=block_size)"),
    # 09 triton_flash_attention_backward
    M("triton_flash_attention_backward", "the two kernels' grids exchanged",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_k, block_n), B * H)]",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_q, block_m), B * H)]"),
    M("triton_flash_attention_backward", "never passes the causal flag",
      "                  IS_CAUSAL=is_causal)",
      "                  IS_CAUSAL=False)"),
    M("triton_flash_attention_backward", "head dim not padded to a power of two",
      "BLOCK_D=max(16, triton.next_power_of_2(d))",
      "BLOCK_D=d"),
    M("triton_flash_attention_backward", "D from the output alone",
      "delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()",
      "delta = out.float().sum(dim=-1).contiguous()"),
    # 10 repeat_kv
    M("repeat_kv", "tiles the heads (0, 1, 0, 1) with Tensor.repeat",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return x.repeat(1, n_rep, 1, 1)"),
    M("repeat_kv", "repeats along the time axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return torch.repeat_interleave(x, n_rep, dim=2)"),
    M("repeat_kv", "expand then view, which an expanded tensor refuses",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "b, h, t, d = x.shape\n"
      "    return x[:, :, None].expand(b, h, n_rep, t, d).view(b, h * n_rep, t, d)"),
    M("repeat_kv", "repeats the batch",
      '"b h t d -> b (h r) t d"',
      '"b h t d -> (b r) h t d"'),
    # 10 GroupedQueryAttention
    M("GroupedQueryAttention", "repeats k and v tiled, not grouped",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "splits the keys into n_heads heads",
      'k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_kv_heads)',
      'k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_heads)'),
    M("GroupedQueryAttention", "head width from the key/value heads",
      "d_head = d_model // n_heads",
      "d_head = d_model // n_kv_heads"),
    M("GroupedQueryAttention", "passes the mask without a head axis",
      "mask=head_mask",
      "mask=mask"),
    # 10 sliding_window_mask
    M("sliding_window_mask", "window of W + 1 keys (<= window)",
      "(distance < window)",
      "(distance <= window)"),
    M("sliding_window_mask", "aligned top-left",
      "query_positions = torch.arange(t_q) + (t_k - t_q)",
      "query_positions = torch.arange(t_q)"),
    M("sliding_window_mask", "no causal edge: sees the next keys too",
      "return (distance >= 0) & (distance < window)",
      "return distance < window"),
    M("sliding_window_mask", "a query may not attend its own position",
      "(distance >= 0)",
      "(distance > 0)"),
    # 10 sliding_window_flash_attention
    M("sliding_window_flash_attention", "rounds the first key block up",
      "range(first // block_size * block_size, t_k, block_size)",
      "range(-(-first // block_size) * block_size, t_k, block_size)"),
    M("sliding_window_flash_attention", "the window's first key from the block's last row",
      "first = max(0, qs + offset - window + 1)",
      "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "stops at the diagonal without the T_k - T_q offset",
      "if ks > rows[-1]:",
      "if ks > qs + q_blk.shape[-2] - 1:"),
    M("sliding_window_flash_attention", "mask keeps W + 1 keys",
      "(distance >= window)",
      "(distance > window)"),
    # 10 alibi_score_mod
    M("alibi_score_mod", "the power-of-two formula for every head count",
      "slopes = torch.cat([power_of_two_slopes(n), extra])",
      "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "bias with the wrong sign (i - j)",
      "slopes[h] * (kv_idx - q_idx)",
      "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "takes the odd slopes of 2n's list, which n's list has",
      "power_of_two_slopes(2 * n)[0::2]",
      "power_of_two_slopes(2 * n)[1::2]"),
    M("alibi_score_mod", "counts heads from 0: first slope 1",
      "torch.arange(1, n_heads + 1)",
      "torch.arange(n_heads)"),
    # 10 document_mask_mod
    M("document_mask_mod", "same document only, not causal",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "causal condition reversed",
      "(q_idx >= kv_idx)",
      "(q_idx <= kv_idx)"),
    M("document_mask_mod", "lets a query see earlier documents",
      "document_ids[q_idx] == document_ids[kv_idx]",
      "document_ids[q_idx] >= document_ids[kv_idx]"),
    M("document_mask_mod", "strict causal: not its own position",
      "(q_idx >= kv_idx)",
      "(q_idx > kv_idx)"),
    # 10 rotary_window_attention
    M("rotary_window_attention", "rotates at 0..t-1 whatever positions says",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q, k = apply_rope(q), apply_rope(k)"),
    M("rotary_window_attention", "window of W + 1 keys",
      "q_idx - kv_idx < window",
      "q_idx - kv_idx <= window"),
    M("rotary_window_attention", "rotates the values too",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q, k, v = apply_rope(q, positions), apply_rope(k, positions), apply_rope(v, positions)"),
    M("rotary_window_attention", "repeats the key/value heads tiled before attending",
      "    q, k = apply_rope(q, positions), apply_rope(k, positions)  # rotated by position; v is not\n",
      "    q, k = apply_rope(q, positions), apply_rope(k, positions)  # rotated by position; v is not\n"
      "    g = layer.n_heads // layer.n_kv_heads\n"
      "    k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)  # (b, h, t, d_head) each\n"),
)

ALTERNATIVES_L = (
    # 01 dot_product_scores
    A("dot_product_scores", "matmul with the last two axes of k swapped",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      "q @ k.transpose(-2, -1)"),
    # 01 softmax
    A("softmax", "max(...).values for the row maxima",
      "x.amax(dim=dim, keepdim=True)",
      "x.max(dim=dim, keepdim=True).values"),
    # 01 dot_product_attention
    A("dot_product_attention", "einsum for the weighted sum of values",
      "out = weights @ v",
      'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    # 02 score_variance
    A("score_variance", "elementwise product summed over the width",
      'scores = einsum(q, k, "n d, n d -> n")',
      "scores = (q * k).sum(dim=-1)"),
    # 02 scaled_dot_product_attention
    A("scaled_dot_product_attention", "scales q before the scores",
      "dot_product_scores(q, k) / math.sqrt(d_k)",
      "dot_product_scores(q * d_k**-0.5, k)"),
    # 03 causal_mask
    A("causal_mask", "torch.tril with the diagonal offset",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    # 03 padding_mask
    A("padding_mask", "indexing with None for the broadcast",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "return positions[None, :] < lengths[:, None]"),
    # 03 attention
    A("attention", "torch.where instead of masked_fill",
      'scores = scores.masked_fill(~allowed, float("-inf"))',
      'scores = torch.where(allowed, scores, float("-inf"))'),
    # 04 split_heads
    A("split_heads", "unflatten then transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)"),
    # 04 merge_heads
    A("merge_heads", "concatenates the heads along the features",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return torch.cat(x.unbind(dim=1), dim=-1)"),
    # 04 MultiHeadAttention
    A("MultiHeadAttention", "rearrange to cut [q | k | v]",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)",
      'q, k, v = rearrange(self.qkv(x), "b t (three e) -> three b t e", three=3)'),
    # 05 rope_frequencies
    A("rope_frequencies", "one over base to the positive power",
      "return base ** (-two_i / d)",
      "return 1.0 / base ** (two_i / d)"),
    # 05 apply_rope
    A("apply_rope", "stack on a last axis and flatten it",
      'return rearrange(rotated, "two ... half -> ... (half two)")',
      "return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)"),
    # 05 RotaryMultiHeadAttention
    A("RotaryMultiHeadAttention", "rearrange for the mask's head axis",
      "mask.unsqueeze(-3)",
      'rearrange(mask, "... q k -> ... 1 q k")'),
    # 06 online_softmax
    A("online_softmax", "the blocks from split",
      "    for start in range(0, x.shape[-1], block_size):\n"
      "        block = x[..., start : start + block_size]  # (..., B)",
      "    for block in x.split(block_size, dim=-1):  # (..., B) each"),
    # 06 flash_attention_query_block
    A("flash_attention_query_block", "einsum for the tile of scores",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)",
      's = torch.einsum("...qd,...kd->...qk", q_blk, k[..., ks : ks + block_size, :])'),
    # 06 flash_attention
    A("flash_attention", "ends the key block at the causal bound",
      "ke = min(ks + block_size, t_k)",
      "ke = min(ks + block_size, k_end)"),
    # 07 block_forward
    A("block_forward", "an explicit lower-triangular mask instead of is_causal",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x), mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool,"
      " device=x.device).tril())"),
    # 07 ablate_heads
    A("ablate_heads", "zeroes the head's value projection, weight and bias",
      "            ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "            rows = slice(2 * model.config.d_model + head * d_k, 2 * model.config.d_model +"
      " (head + 1) * d_k)\n"
      "            ablated.blocks[layer].attn.qkv.weight[rows] = 0.0\n"
      "            if ablated.blocks[layer].attn.qkv.bias is not None:\n"
      "                ablated.blocks[layer].attn.qkv.bias[rows] = 0.0"),
    # 07 KVCache
    A("KVCache", "lists of chunks, concatenated when asked",
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        old_k, old_v = self.keys.get(layer), self.values.get(layer)\n"
      "        self.keys[layer] = k if old_k is None else torch.cat((old_k, k), dim=2)  # (b, h,"
      " t_past + t_new, d_k)\n"
      "        self.values[layer] = v if old_v is None else torch.cat((old_v, v), dim=2)  # (b, h,"
      " t_past + t_new, d_k)\n"
      "        return self.keys[layer], self.values[layer]"),
    # 07 cached_attention
    A("cached_attention", "positions as an offset arange",
      "torch.arange(t_past, t_past + t_new, device=x.device)",
      "t_past + torch.arange(t_new, device=x.device)"),
    # 07 generate_with_cache
    A("generate_with_cache", "collects the chosen tokens in a list, concatenated once",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new"
      " token only\n"
      "    return tokens",
      "    chosen = [prompt]  # (b, t), then (b, 1) each\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        chosen.append(pick(logits))  # (b, 1)\n"
      "        if i + 1 < n_new:\n"
      "            logits = model.step(chosen[-1], cache, attend)[:, -1]  # (b, vocab_size)\n"
      "    return torch.cat(chosen, dim=1)  # (b, t + n_new)"),
    # 07 next_token_probs
    A("next_token_probs", "scales after choosing the top k",
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))',
      "        kth = logits.topk(top_k, dim=-1).values[..., -1:] / temperature  # (b, 1)\n"
      '        scaled = torch.where(scaled >= kth, scaled, float("-inf"))'),
    # 07 sample_next
    A("sample_next", "inverse CDF with one uniform number per row",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)  # (b, 1)\n"
      "    return (probs.cumsum(-1) < u).sum(-1, keepdim=True).clamp(max=probs.shape[-1] - 1)"),
    # 09 softmax_backward
    A("softmax_backward", "p·g minus p·D, written out",
      "return p * (grad_p - D)",
      "return p * grad_p - p * D"),
    # 09 attention_backward
    A("attention_backward", "einsum for dv",
      "dv = p.transpose(-1, -2) @ grad_out",
      'dv = torch.einsum("...qk,...qd->...kd", p, grad_out)'),
    # 09 flash_attention_backward
    A("flash_attention_backward", "D by einsum",
      "D = (grad_out * out).sum(dim=-1, keepdim=True)",
      'D = torch.einsum("...qd,...qd->...q", grad_out, out)[..., None]'),
    # 09 FlashAttentionFunction
    A("FlashAttentionFunction", "the flags as keywords to the backward",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=ctx.is_causal,"
      " block_size=ctx.block_size)"),
    # 10 repeat_kv
    A("repeat_kv", "repeat_interleave on the head axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "return torch.repeat_interleave(x, n_rep, dim=1)"),
    # 10 GroupedQueryAttention
    A("GroupedQueryAttention", "expand and reshape, as Hugging Face's Llama",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = (z[:, :, None].expand(-1, -1, n_rep, -1, -1).flatten(1, 2) for z in (k, v))"),
    # 10 sliding_window_mask
    A("sliding_window_mask", "two tril masks",
      "    return (distance >= 0) & (distance < window)",
      "    causal = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)\n"
      "    return causal & ~torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q - window)"),
    # 10 sliding_window_flash_attention
    A("sliding_window_flash_attention", "key blocks start at the first key itself",
      "range(first // block_size * block_size, t_k, block_size)",
      "range(first, t_k, block_size)"),
    # 10 alibi_score_mod
    A("alibi_score_mod", "the power-of-two slopes from Python floats",
      "return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)",
      "return torch.tensor([2.0 ** (-8.0 * (i + 1) / n_heads) for i in range(n_heads)])"),
    # 10 document_mask_mod
    A("document_mask_mod", "logical_and with the key not after the query",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "torch.logical_and(document_ids[kv_idx] == document_ids[q_idx], kv_idx <= q_idx)"),
    # 10 rotary_window_attention
    A("rotary_window_attention", "the course's attention with a dense window mask and grouped repeats",
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "    distance = torch.arange(t, device=x.device)[:, None] - torch.arange(t,"
      " device=x.device)[None, :]  # (t, t)\n"
      "    g = layer.n_heads // layer.n_kv_heads\n"
      "    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (b, h, t, d_head) each\n"
      "    out, _ = attention(q, k, v, mask=(distance >= 0) & (distance < window))"),
)
# fmt: on
