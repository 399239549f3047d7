"""Blind set J of learner mistakes and right alternatives, for every exercise of 01-10 that
tests/blind_compare.py has inputs for (the Triton ones of 08 and 09 included).

Written on 2026-12-07, after the change of issue #44, from the solution notebooks (solutions/*.ipynb:
each exercise's text and its solution cell) and the topic modules (attn_course/*.py, not
attn_course/checks) only, by someone who read no check, no test of a check, no earlier set's mistakes
and no first-run record. Each mistake is a text edit of the solution notebook's exercise cell taken
without its `### BEGIN/END SOLUTION` marker lines (`old`, occurring exactly once in that cell, replaced
by `new`), applied by `learner_mistakes_blind_a.load`, with the idea of the mistake in one short phrase:
four per exercise, slips and misunderstandings a learner who read only the notebook's text could make,
several of them right on the simple input and wrong on another the exercise allows (views, T_q ≠ T_k,
batch axes, head counts that are not powers of two, ragged blocks, dtypes, rows that see no key). Each
alternative is an edit of the same kind that keeps the function right while writing it differently
from the solution (one per exercise outside Triton), doing no more work than the notebook allows.
Every mistake was verified wrong against `attn_course.reference` on an input the exercise's contract
allows, every alternative right on all of them, and no edit fails to load
(`blind_compare.verify(HOLDOUT_J, ALTERNATIVES_J, folder)` returns [], run with TRITON_INTERPRET=1).
The Triton mistakes keep every load and store inside its tensor, so that the interpreter cannot crash.
Not covered, as blind_compare.py has no inputs for them: fast_flash_attention (08),
flash_attention_backward_dkdv_kernel and flash_attention_backward_dq_kernel (09, tested through
triton_flash_attention_backward's wrapper only) and rolling_window_step (10).
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_J: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "transposed the first two axes, not the last two",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.transpose(0, 1)"),
    M("dot_product_scores", "written for exactly one batch axis",
      '"...qd,...kd->...qk"', '"bqd,bkd->bqk"'),
    M("dot_product_scores", "reshape where a transpose is needed",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      "q @ k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2])"),
    M("dot_product_scores", "keys read as already (d, T_k)",
      '"...qd,...kd->...qk"', '"...qd,...dk->...qk"'),
    M("softmax", "normalised by the sum over the whole tensor",
      "exps.sum(dim=dim, keepdim=True)", "exps.sum()"),
    M("softmax", "shifted by the tensor's maximum, not each row's",
      "x.amax(dim=dim, keepdim=True)", "x.amax()"),
    M("softmax", "maximum taken along the last axis whatever dim",
      "x.amax(dim=dim, keepdim=True)", "x.amax(dim=-1, keepdim=True)"),
    M("softmax", "shifted by the row minimum",
      "x.amax(dim=dim, keepdim=True)", "x.amin(dim=dim, keepdim=True)"),
    M("dot_product_attention", "values transposed like the keys",
      "out = weights @ v", "out = weights @ v.transpose(-1, -2)"),
    M("dot_product_attention", "scores of the keys against the queries",
      "dot_product_scores(q, k)", "dot_product_scores(k, q)"),
    M("dot_product_attention", "returns the raw scores as the weights",
      "return out, weights", "return out, dot_product_scores(q, k)"),
    M("dot_product_attention", "softmax along the first axis",
      "softmax(dot_product_scores(q, k), dim=-1)", "softmax(dot_product_scores(q, k), dim=0)"),

    # 02 · scaling
    M("score_variance", "returns a tensor, not a float",
      "return scores.var().item()", "return scores.var()"),
    M("score_variance", "the scaled flag read the wrong way round",
      "if scaled:", "if not scaled:"),
    M("score_variance", "variance of the products q_i k_i, not of their sum",
      'einsum(q, k, "n d, n d -> n")', "(q * k).flatten()"),
    M("score_variance", "q and k each divided by √d_k",
      "scores = scores / math.sqrt(d_k)",
      'scores = einsum(q / math.sqrt(d_k), k / math.sqrt(d_k), "n d, n d -> n")'),
    M("scaled_dot_product_attention", "scaled by √T_q, the queries' axis",
      "d_k = q.shape[-1]", "d_k = q.shape[-2]"),
    M("scaled_dot_product_attention", "scores multiplied by √d_k, not divided",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q, k) * math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "output divided by √d_k as well",
      "out = weights @ v", "out = weights @ v / math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "√d_k of the notebook's example width, not the input's",
      "d_k = q.shape[-1]", "d_k = 64"),

    # 03 · causal masking
    M("causal_mask", "the given t_k ignored: a square mask",
      "t_k = t_q if t_k is None else t_k", "t_k = t_q"),
    M("causal_mask", "offset with its sign reversed (T_q - T_k)",
      "+ (t_k - t_q)", "+ (t_q - t_k)"),
    M("causal_mask", "upper triangle kept: keys at or after the query",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(t_k - t_q)"),
    M("causal_mask", "float 0/1 mask from tril, not booleans",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.tril(torch.ones(t_q, t_k, device=device), diagonal=t_k - t_q)"),
    M("padding_mask", "positions counted from 1",
      "torch.arange(t, device=lengths.device)", "torch.arange(1, t + 1, device=lengths.device)"),
    M("padding_mask", "the longest length used for every row",
      'rearrange(lengths, "b -> b 1")', "lengths.max()"),
    M("padding_mask", "as wide as the longest length, not t",
      "torch.arange(t, device=lengths.device)",
      "torch.arange(int(lengths.max()), device=lengths.device)"),
    M("padding_mask", "shaped (B, 1, t) for attention, not (B, t)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> 1 1 t") < rearrange(lengths, "b -> b 1 1")'),
    M("attention", "causal mask of T_q × T_q whatever T_k",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "causal_mask(q.shape[-2], device=q.device)"),
    M("attention", "True read as blocked",
      'scores.masked_fill(~allowed, float("-inf"))', 'scores.masked_fill(allowed, float("-inf"))'),
    M("attention", "scaled by √T_k, the number of keys",
      "/ math.sqrt(q.shape[-1])", "/ math.sqrt(k.shape[-2])"),
    M("attention", "causal mask skipped when a mask is given",
      "    if is_causal:", "    elif is_causal:"),

    # 04 · multi-head attention
    M("split_heads", "heads interleaved: (d h), not (h d)",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "reshaped straight to (b, h, t, d) without a transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "n_heads given as the head width",
      "h=n_heads", "d=n_heads"),
    M("split_heads", "heads split but left after the time axis",
      '"b t (h d) -> b h t d"', '"b t (h d) -> b t h d"'),
    M("merge_heads", "heads interleaved: (d h), not (h d)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshape without moving the head axis",
      'rearrange(x, "b h t d -> b t (h d)")', "x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "heads concatenated along time",
      '"b h t d -> b t (h d)"', '"b h t d -> b (h t) d"'),
    M("merge_heads", "view after a transpose (a non-contiguous tensor)",
      'rearrange(x, "b h t d -> b t (h d)")', "x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("MultiHeadAttention", "queries taken from the context too",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)", "q, k, v = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "the mask's head axis put before the batch axis",
      '"... q k -> ... 1 q k"', '"... q k -> 1 ... q k"'),
    M("MultiHeadAttention", "is_causal not passed on to attention",
      "attention(q, k, v, mask=mask, is_causal=is_causal)", "attention(q, k, v, mask=mask)"),
    M("MultiHeadAttention", "q, k, v read interleaved from the fused projection",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)",
      'q, k, v = rearrange(self.qkv(x), "b t (d three) -> three b t d", three=3)'),

    # 05 · RoPE
    M("rope_frequencies", "exponent i/d, not 2i/d",
      "base ** (-two_i / d)", "base ** (-torch.arange(d // 2, dtype=torch.float64) / d)"),
    M("rope_frequencies", "i counted from 1: the first frequency below 1",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(2, d + 1, 2, dtype=torch.float64)"),
    M("rope_frequencies", "frequencies in float32",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d, 2)"),
    M("rope_frequencies", "exponent divided by d/2, not d",
      "base ** (-two_i / d)", "base ** (-two_i / (d // 2))"),
    M("apply_rope", "rotated by minus the angle",
      "torch.stack([even * cos - odd * sin, even * sin + odd * cos])",
      "torch.stack([even * cos + odd * sin, odd * cos - even * sin])"),
    M("apply_rope", "pairs (i, i + d/2), not neighbours",
      "even, odd = x[..., 0::2], x[..., 1::2]", "even, odd = x[..., : d // 2], x[..., d // 2 :]"),
    M("apply_rope", "the given positions ignored",
      "    if positions is None:\n        positions = torch.arange(t, device=x.device)",
      "    positions = torch.arange(t, device=x.device)"),
    M("apply_rope", "float64 result for a float32 x",
      "cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)",
      "cos, sin = angles.cos(), angles.sin()"),
    M("RotaryMultiHeadAttention", "values rotated too",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "the default base, not self.base",
      "apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "apply_rope(q, positions), apply_rope(k, positions)"),
    M("RotaryMultiHeadAttention", "RoPE across d_model before the heads are split",
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "the (b, t, t) mask given no head axis",
      "head_mask = None if mask is None else mask.unsqueeze(-3)", "head_mask = mask"),

    # 06 · FlashAttention in PyTorch
    M("online_softmax", "running sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + ", "denom = denom + "),
    M("online_softmax", "each block's own maximum, not the running one",
      "m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))",
      "m_new = block.amax(dim=-1, keepdim=True)"),
    M("online_softmax", "the ragged last block dropped",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] - block_size + 1, block_size)"),
    M("online_softmax", "no guard for a block that is all -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("flash_attention_query_block", "scaled by √d_v, the values' width",
      "math.sqrt(q_blk.shape[-1])", "math.sqrt(v.shape[-1])"),
    M("flash_attention_query_block", "accumulator not rescaled",
      "acc = alpha * acc + p @ v", "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse keeps its trailing axis (..., B_q, 1)",
      "(m + torch.log(denom)).squeeze(-1)", "(m + torch.log(denom))"),
    M("flash_attention_query_block", "lse without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),
    M("flash_attention", "causal diagonal top-left: offset dropped",
      "offset = t_k - t_q  # query i", "offset = 0  # query i"),
    M("flash_attention", "causal key loop stops at the block's first row",
      "min(t_k, qe + offset) if is_causal", "min(t_k, qs + offset) if is_causal"),
    M("flash_attention", "no guard for rows that see no key",
      "        denom = torch.where(denom == 0, 1.0, denom)", "        denom = denom"),
    M("flash_attention", "lse from the guarded maximum: 0, not -inf, for a row without keys",
      "lse[..., qs:qe] = (m + torch.log(denom))", "lse[..., qs:qe] = (m_safe + torch.log(denom))"),

    # 07 · KV cache
    M("block_forward", "MLP reads the stream before the attention's residual",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "attention not causal",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x))"),
    M("block_forward", "residual added in place into the caller's x",
      "x = x + block.attn(", "x += block.attn("),
    M("block_forward", "post-norm: LayerNorm after the residual",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    x = block.ln1(x + block.attn(x, is_causal=True))  # (b, t, d_model)\n"
      "    return block.ln2(x + block.mlp(x))"),
    M("ablate_heads", "the head's output rows zeroed, not its input columns",
      "out.weight[:, head * d_k : (head + 1) * d_k]", "out.weight[head * d_k : (head + 1) * d_k, :]"),
    M("ablate_heads", "no copy: the original model switched off",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "the output bias zeroed with the head",
      "= 0.0", "= 0.0\n            ablated.blocks[layer].attn.out.bias.zero_()"),
    M("ablate_heads", "(layer, head) pairs read as (head, layer)",
      "for layer, head in heads:", "for head, layer in heads:"),
    M("KVCache", "new keys and values put before the cached ones",
      "torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("KVCache", "concatenated along the head dim",
      "torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "torch.cat([self.keys[layer], k], dim=-1)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-1)"),
    M("KVCache", "length read from the batch axis",
      "self.keys[layer].shape[-2] if", "self.keys[layer].shape[0] if"),
    M("KVCache", "class-level dicts shared by every cache",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)"),
    M("cached_attention", "positions restart at 0 in every chunk",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "no causal mask: a chunk sees its own future",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values)"),
    M("cached_attention", "RoPE with the default base, not attn.base",
      "apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)",
      "apply_rope(q, positions), apply_rope(k, positions)"),
    M("cached_attention", "attends to the new positions only, not the cache",
      "attention(q, keys, values, is_causal=True)", "attention(q, k, v, is_causal=True)"),
    M("generate_with_cache", "logits keep the time axis",
      "model.step(prompt, cache, attend)[:, -1]", "model.step(prompt, cache, attend)[:, -1:]"),
    M("generate_with_cache", "the whole sequence fed again at every step",
      "model.step(next_token, cache, attend)", "model.step(tokens, cache, attend)"),
    M("generate_with_cache", "a step for the last token too",
      "        if i < n_new - 1:\n            logits = model.step(next_token, cache, attend)[:, -1]",
      "        logits = model.step(next_token, cache, attend)[:, -1]"),
    M("generate_with_cache", "first position's logits after the prefill",
      "model.step(prompt, cache, attend)[:, -1]", "model.step(prompt, cache, attend)[:, 0]"),
    M("next_token_probs", "logits multiplied by the temperature",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "exactly k tokens kept by index, ties broken by position",
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))',
      "        top = scaled.topk(top_k, dim=-1)  # (b, k)\n"
      '        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, top.indices, top.values)'),
    M("next_token_probs", "the largest logit taken as the threshold",
      ".values[:, -1:]", ".values[:, :1]"),
    M("next_token_probs", "dropped logits set to 0, not -inf",
      'scaled.masked_fill(scaled < kth, float("-inf"))', "scaled.masked_fill(scaled < kth, 0.0)"),
    M("sample_next", "argmax, not a draw",
      "torch.multinomial(probs, 1, generator=generator)", "probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "the generator not used",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
    M("sample_next", "temperature and top-k not passed on",
      "probs = next_token_probs(logits, temperature, top_k)", "probs = next_token_probs(logits)"),
    M("sample_next", "one random number shared by every row",
      "    return torch.multinomial(probs, 1, generator=generator)  # (b, 1)",
      "    u = torch.rand(1, generator=generator, dtype=probs.dtype)  # one draw\n"
      "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)  # (b, 1)"),

    # 08 · FlashAttention in Triton
    M("triton_add", "grid rounded down: the tail never added",
      "grid = (triton.cdiv(n, block),)", "grid = (n // block,)"),
    M("triton_add", "y not made contiguous",
      "x, y = x.contiguous(), y.contiguous()", "x = x.contiguous()"),
    M("triton_add", "program id not multiplied by BLOCK",
      "offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = pid + tl.arange(0, BLOCK)"),
    M("triton_add", "n from the first axis, not the element count",
      "n = x.numel()", "n = x.shape[0]"),
    M("triton_softmax", "row stride taken as the row length",
      "x.shape[1], x.stride(0), out.stride(0)", "x.shape[1], x.shape[1], out.stride(0)"),
    M("triton_softmax", "running sum not rescaled when the maximum grows",
      "total = total * tl.exp(m - m_safe) + ", "total = total + "),
    M("triton_softmax", "padding lanes loaded as 0, not -inf, in the first pass",
      'x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  # (BLOCK,)\n'
      "        m_new",
      "x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)  # (BLOCK,)\n"
      "        m_new"),
    M("triton_softmax", "a transposed x not made contiguous",
      "x = x if x.stride(1) == 1 else x.contiguous()", "x = x"),
    M("triton_scores", "scaled by 1/d, not 1/√d",
      "1.0 / math.sqrt(d)", "1.0 / d"),
    M("triton_scores", "keys indexed with the queries' strides",
      "k.stride(0), k.stride(1), k.stride(2)", "q.stride(0), q.stride(1), q.stride(2)"),
    M("triton_scores", "the query tile's head offset forgotten",
      "q_ptr + b * stride_qb + h * stride_qh + ", "q_ptr + b * stride_qb + "),
    M("triton_scores", "key blocks counted from T_q",
      "triton.cdiv(t_k, block_n)", "triton.cdiv(t_q, block_n)"),
    M("triton_flash_attention", "causal diagonal top-left: offset dropped",
      "offset = t_k - t_q  # query i", "offset = 0  # query i"),
    M("triton_flash_attention", "accumulator not rescaled",
      "acc = acc * alpha[:, None] + ", "acc = acc + "),
    M("triton_flash_attention", "causal loop stops at the block's first row",
      "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)",
      "hi = tl.minimum(t_k, pid_m * BLOCK_M + offset)"),
    M("triton_flash_attention", "padding keys past T_k left visible",
      "visible = cols[None, :] < t_k  # (1, BLOCK_N)", "visible = cols[None, :] >= 0  # (1, BLOCK_N)"),

    # 09 · the backward pass
    M("softmax_backward", "row sum without keepdim",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=dim)"),
    M("softmax_backward", "the leading p forgotten",
      "return p * (grad_p - D)", "return grad_p - D"),
    M("softmax_backward", "D sums the gradient without p",
      "D = (grad_p * p).sum(dim=dim, keepdim=True)", "D = grad_p.sum(dim=dim, keepdim=True)"),
    M("softmax_backward", "summed along the last axis whatever dim",
      "sum(dim=dim, keepdim=True)", "sum(dim=-1, keepdim=True)"),
    M("attention_backward", "dq without the 1/√d",
      "dq = ds @ k * scale", "dq = ds @ k"),
    M("attention_backward", "dV = P dO, not Pᵀ dO",
      "dv = p.transpose(-1, -2) @ grad_out", "dv = p @ grad_out"),
    M("attention_backward", "the row-sum term of the softmax backward forgotten",
      "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))", "ds = p * dp"),
    M("attention_backward", "is_causal not passed to the forward",
      "attention(q, k, v, is_causal=is_causal)", "attention(q, k, v)"),
    M("flash_attention_backward", "causal skip without the T_k - T_q offset",
      "ks > qe - 1 + offset", "ks > qe - 1"),
    M("flash_attention_backward", "D taken over the tile, not the whole row",
      "ds = p * (dp - D[..., qs:qe, :])", "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "dq overwritten by each key block, not summed",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("flash_attention_backward", "lse without its trailing axis",
      "lse[..., qs:qe, None]", "lse[..., qs:qe]"),
    M("FlashAttentionFunction", "backward returns one gradient per tensor only",
      "return dq, dk, dv, None, None", "return dq, dk, dv"),
    M("FlashAttentionFunction", "is_causal not passed to the backward",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out)"),
    M("FlashAttentionFunction", "forward not causal",
      "flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)",
      "flash_attention_forward(q, k, v, block_size=block_size)"),
    M("FlashAttentionFunction", "dq and dk returned in each other's place",
      "return dq, dk, dv, None, None", "return dk, dq, dv, None, None"),
    M("triton_flash_attention_backward", "D = rowsum(dO), without O",
      "(grad_out.float() * out.float()).sum(dim=-1)", "grad_out.float().sum(dim=-1)"),
    M("triton_flash_attention_backward", "kernel 1's grid counted in query blocks",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_k, block_n), B * H)]",
      "flash_attention_backward_dkdv_kernel[(triton.cdiv(T_q, block_n), B * H)]"),
    M("triton_flash_attention_backward", "the kernels always launched without the mask",
      "IS_CAUSAL=is_causal", "IS_CAUSAL=False"),
    M("triton_flash_attention_backward", "BLOCK_D the head dim itself, not a power of two",
      "BLOCK_D=max(16, triton.next_power_of_2(d))", "BLOCK_D=d"),

    # 10 · modern attention
    M("repeat_kv", "heads tiled (r h), not grouped",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "the repeat axis left unmerged",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x[:, :, None].expand(-1, -1, n_rep, -1, -1)"),
    M("repeat_kv", "repeated along time",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h (t r) d"'),
    M("repeat_kv", "n_rep read as the total number of heads",
      "r=n_rep)", "r=n_rep // x.shape[1])"),
    M("GroupedQueryAttention", "key/value heads tiled, not grouped",
      "repeat_kv(k, n_rep), repeat_kv(v, n_rep)", "k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "the mask's head axis put before the batch axis",
      "mask.unsqueeze(-3)", "mask.unsqueeze(0)"),
    M("GroupedQueryAttention", "head width from the key/value heads",
      "d_head = d_model // n_heads", "d_head = d_model // n_kv_heads"),
    M("GroupedQueryAttention", "is_causal not passed on to attention",
      "attention(q, k, v, mask=head_mask, is_causal=is_causal)", "attention(q, k, v, mask=head_mask)"),
    M("sliding_window_mask", "window + 1 keys (<= window)",
      "(distance < window)", "(distance <= window)"),
    M("sliding_window_mask", "top-left aligned: offset dropped",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "no causal bound: future keys allowed",
      "return (distance >= 0) & (distance < window)", "return distance < window"),
    M("sliding_window_mask", "distance measured key minus query",
      'rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")',
      'rearrange(key_positions, "k -> 1 k") - rearrange(query_positions, "q -> q 1")'),
    M("sliding_window_flash_attention", "window + 1 keys (> window masked)",
      "(distance >= window)", "(distance > window)"),
    M("sliding_window_flash_attention", "top-left aligned: offset dropped",
      "offset = t_k - t_q  # query i", "offset = 0  # query i"),
    M("sliding_window_flash_attention", "the first key block from the block's last row",
      "first = max(0, qs + offset - window + 1)",
      "first = max(0, qs + q_blk.shape[-2] - 1 + offset - window + 1)"),
    M("sliding_window_flash_attention", "no guard for rows that see no key in a tile",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("alibi_score_mod", "bias sign reversed: grows with distance",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "extra slopes repeat the first n's",
      "power_of_two_slopes(2 * n)[0::2]", "power_of_two_slopes(2 * n)[1::2]"),
    M("alibi_score_mod", "the power-of-two formula for every head count",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "slopes counted from i = 0: the first slope 1",
      "torch.arange(1, n_heads + 1)", "torch.arange(0, n_heads)"),
    M("document_mask_mod", "same document only, not causal",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "a token may not see itself",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("document_mask_mod", "causal or same document, not and",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "(document_ids[q_idx] == document_ids[kv_idx]) | (q_idx >= kv_idx)"),
    M("document_mask_mod", "Python `and` on tensors",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "(document_ids[q_idx] == document_ids[kv_idx]) and (q_idx >= kv_idx)"),
    M("rotary_window_attention", "window + 1 keys (<= window)",
      "(q_idx - kv_idx < window)", "(q_idx - kv_idx <= window)"),
    M("rotary_window_attention", "the given positions ignored",
      "apply_rope(q, positions), apply_rope(k, positions)", "apply_rope(q), apply_rope(k)"),
    M("rotary_window_attention", "values rotated too",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)",
      "q, k, v = apply_rope(q, positions), apply_rope(k, positions), apply_rope(v, positions)"),
    M("rotary_window_attention", "key/value heads tiled, not grouped",
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "    n_rep = layer.n_heads // layer.n_kv_heads\n"
      "    out = flex_attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1),"
      " block_mask=block_mask)"),
)

ALTERNATIVES_J: tuple[BlindAlternative, ...] = (
    # 01
    A("dot_product_scores", "matmul with the last two axes of k swapped",
      'torch.einsum("...qd,...kd->...qk", q, k)', "q @ k.transpose(-2, -1)"),
    A("softmax", "max(...).values and a division by the sum",
      "    shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
      "    exps = shifted.exp()\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "    exps = torch.exp(x - x.max(dim=dim, keepdim=True).values)  # same shape as x\n"
      "    total = exps.sum(dim=dim, keepdim=True)  # 1 along dim\n"
      "    return exps / total"),
    A("dot_product_attention", "einsum for the weighted sum of the values",
      "out = weights @ v", 'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    # 02
    A("score_variance", "mean square about the mean (1/n, not 1/(n-1))",
      "return scores.var().item()", "return float((scores - scores.mean()).pow(2).mean())"),
    A("scaled_dot_product_attention", "queries scaled before the product",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)",
      "scores = (q * d_k ** -0.5) @ k.transpose(-2, -1)"),
    # 03
    A("causal_mask", "tril with the diagonal offset T_k - T_q",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "indexing with None instead of rearrange",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "positions[None, :] < lengths[:, None]"),
    A("attention", "torch.where in place of masked_fill",
      'scores = scores.masked_fill(~allowed, float("-inf"))',
      'scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))'),
    # 04
    A("split_heads", "unflatten and transpose",
      'rearrange(x, "b t (h d) -> b h t d", h=n_heads)', "x.unflatten(-1, (n_heads, -1)).transpose(1, 2)"),
    A("merge_heads", "the heads unbound and concatenated",
      'rearrange(x, "b h t d -> b t (h d)")', "torch.cat(x.unbind(dim=1), dim=-1)"),
    A("MultiHeadAttention", "heads split with unflatten and transpose",
      "q, k, v = (split_heads(z, self.n_heads) for z in (q, k, v))",
      "q, k, v = (z.unflatten(-1, (self.n_heads, -1)).transpose(1, 2) for z in (q, k, v))"),
    # 05
    A("rope_frequencies", "exp of a log",
      "return base ** (-two_i / d)", "return torch.exp(-math.log(base) * two_i / d)"),
    A("apply_rope", "even and odd slots written into an empty tensor",
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "    out = torch.empty_like(x)  # (..., T, d)\n"
      "    out[..., 0::2] = even * cos - odd * sin\n"
      "    out[..., 1::2] = even * sin + odd * cos\n"
      "    return out"),
    A("RotaryMultiHeadAttention", "q and k rotated in one call, stacked",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(torch.stack([q, k]), positions, self.base).unbind(0)"),
    # 06
    A("online_softmax", "-inf handled by where on the rescale and the terms",
      "        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (..., 1)\n"
      "        denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)",
      "        rescale = torch.where(m == m_new, 1.0, torch.exp(m - m_new))  # (..., 1)\n"
      "        terms = torch.where(block == -math.inf, 0.0, torch.exp(block - m_new))  # (..., B)\n"
      "        denom = denom * rescale + terms.sum(dim=-1, keepdim=True)"),
    A("flash_attention_query_block", "a running output kept normalised",
      "        denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n"
      "        m = m_new\n"
      "    return acc / denom,",
      "        new_denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "        acc = (alpha * denom * acc + p @ v[..., ks : ks + block_size, :]) /"
      " new_denom  # (..., Bq, d_v)\n"
      "        denom, m = new_denom, m_new\n"
      "    return acc,"),
    A("flash_attention", "the diagonal tile's mask from triu",
      "                rows = torch.arange(qs, qe, device=q.device) + offset  # (Bq,) positions\n"
      "                cols = torch.arange(ks, ke, device=q.device)  # (Bk,)\n"
      "                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)  # (..., Bq, Bk)",
      "                future = torch.ones(qe - qs, ke - ks, dtype=torch.bool, device=q.device)\n"
      "                future = future.triu(qs + offset - ks + 1)  # (Bq, Bk): keys after each row\n"
      "                s = s.masked_fill(future, -math.inf)  # (..., Bq, Bk)"),
    # 07
    A("block_forward", "an explicit lower-triangular mask for is_causal",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x), mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool,"
      " device=x.device).tril())"),
    A("ablate_heads", "the head's value projection and bias zeroed",
      "            ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "            qkv = ablated.blocks[layer].attn.qkv\n"
      "            rows = slice(2 * model.config.d_model + head * d_k, 2 *"
      " model.config.d_model + (head + 1) * d_k)\n"
      "            qkv.weight[rows] = 0.0\n"
      "            if qkv.bias is not None:\n"
      "                qkv.bias[rows] = 0.0"),
    A("KVCache", "a list of chunks per layer, concatenated on demand",
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      '        """How many positions `layer` has cached (0 before its first append)."""\n'
      "        return self.keys[layer].shape[-2] if layer in self.keys else 0\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) ->"
      " tuple[torch.Tensor, torch.Tensor]:\n"
      '        """Add k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""\n'
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        self.chunks: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # layer -> its appends\n"
      "\n"
      "    def length(self, layer: int) -> int:\n"
      '        """How many positions `layer` has cached (0 before its first append)."""\n'
      "        return sum(k.shape[-2] for k, _ in self.chunks.get(layer, []))\n"
      "\n"
      "    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) ->"
      " tuple[torch.Tensor, torch.Tensor]:\n"
      '        """Add k, v (b, h, t_new, d_k) to `layer`; return all of its keys and values so far."""\n'
      "        self.chunks.setdefault(layer, []).append((k, v))\n"
      "        keys = torch.cat([k for k, _ in self.chunks[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        values = torch.cat([v for _, v in self.chunks[layer]], dim=-2)  # (b, h,"
      " t_past + t_new, d_k)\n"
      "        return keys, values"),
    A("cached_attention", "an explicit mask offset by the cached length",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values, mask=torch.ones(t_new, t_past + t_new, dtype=torch.bool,"
      " device=x.device).tril(t_past))"),
    A("generate_with_cache", "a while loop on the length reached",
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]",
      "    while tokens.shape[1] < prompt.shape[1] + n_new:\n"
      "        tokens = torch.cat([tokens, pick(logits)], dim=1)  # one token longer\n"
      "        if tokens.shape[1] < prompt.shape[1] + n_new:\n"
      "            logits = model.step(tokens[:, -1:], cache, attend)[:, -1]"),
    A("next_token_probs", "probabilities first, then cut and renormalised",
      "    scaled = logits / temperature  # (b, vocab_size)\n"
      "    if top_k is not None:\n"
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)\n'
      "    return torch.softmax(scaled, dim=-1)  # (b, vocab_size)",
      "    probs = torch.softmax(logits / temperature, dim=-1)  # (b, vocab_size)\n"
      "    if top_k is not None:\n"
      "        kth = probs.topk(top_k, dim=-1).values[:, -1:]  # (b, 1)\n"
      "        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))  # (b, vocab_size)\n"
      "        probs = probs / probs.sum(dim=-1, keepdim=True)\n"
      "    return probs"),
    A("sample_next", "inverse CDF with one uniform per row",
      "    return torch.multinomial(probs, 1, generator=generator)  # (b, 1)",
      "    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)  # (b, 1)\n"
      "    index = (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)  # (b, 1)\n"
      "    return index.clamp(max=probs.shape[-1] - 1)"),
    # 09
    A("softmax_backward", "p·g minus p times the row sum, in one line",
      "    D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)  # same shape as p",
      "    pg = p * grad_p  # same shape as p\n"
      "    return pg - p * pg.sum(dim=dim, keepdim=True)"),
    A("attention_backward", "einsum for dk",
      "dk = ds.transpose(-1, -2) @ q * scale", 'dk = torch.einsum("...qk,...qd->...kd", ds, q) * scale'),
    A("flash_attention_backward", "query blocks outside, dk and dv accumulated in place",
      "    for ks in range(0, t_k, block_size):\n"
      "        ke = min(ks + block_size, t_k)\n"
      "        k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)\n"
      "        dk_acc, dv_acc = torch.zeros_like(k_blk), torch.zeros_like(v_blk)  # (...,"
      " Bk, d), (..., Bk, d_v)\n"
      "        for qs in range(0, t_q, block_size):\n"
      "            qe = min(qs + block_size, t_q)\n"
      "            if is_causal and ks > qe - 1 + offset:\n"
      "                continue  # every key of the tile comes after every query of it\n"
      "            q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq,"
      " d), (..., Bq, d_v)\n"
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
      "        q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, d_v)\n"
      "        k_stop = min(t_k, qe + offset) if is_causal else t_k  # one past the last key the block sees\n"
      "        for ks in range(0, max(k_stop, 0), block_size):\n"
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
      "            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)\n"
      "            dk[..., ks:ke, :] += ds.transpose(-1, -2) @ q_blk * scale  # (..., Bk, d)"),
    A("FlashAttentionFunction", "the options kept together, the gradients unpacked",
      "        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out,"
      " ctx.is_causal, ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "        options = dict(is_causal=ctx.is_causal, block_size=ctx.block_size)\n"
      "        return (*flash_attention_backward(q, k, v, out, lse, grad_out, **options), None, None)"),
    # 10
    A("repeat_kv", "repeat_interleave on the head axis",
      'repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "x.repeat_interleave(n_rep, dim=1)"),
    A("GroupedQueryAttention", "query heads grouped against unrepeated keys by broadcasting",
      "        n_rep = self.n_heads // self.n_kv_heads\n"
      "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_head)",
      '        q = rearrange(q, "b (g r) t d -> b g r t d", g=self.n_kv_heads)  # (b, h_kv,'
      ' n_rep, t, d_head)\n'
      "        k, v = k.unsqueeze(2), v.unsqueeze(2)  # each (b, h_kv, 1, t, d_head)\n"
      "        group_mask = None if mask is None else mask.unsqueeze(-3).unsqueeze(-3)  # (b, 1, 1, t, t)\n"
      "        out, _ = attention(q, k, v, mask=group_mask, is_causal=is_causal)  # (b,"
      " h_kv, n_rep, t, d_head)\n"
      '        out = rearrange(out, "b g r t d -> b (g r) t d")  # (b, h, t, d_head)'),
    A("sliding_window_mask", "a band from tril and triu",
      "    return (distance >= 0) & (distance < window)",
      "    lower = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)  # keys up to the query's own\n"
      "    band = torch.ones(t_q, t_k, dtype=torch.bool).triu(t_k - t_q - window + 1)  # within the window\n"
      "    return lower & band"),
    A("sliding_window_flash_attention", "the last key block computed up front, not a break",
      "        for ks in range(first // block_size * block_size, t_k, block_size):\n"
      "            if ks > rows[-1]:\n"
      "                break  # this block and all later ones are after the diagonal\n",
      "        last = min(t_k, qs + q_blk.shape[-2] + offset)  # one past the last row's own key\n"
      "        for ks in range(first // block_size * block_size, max(last, 0), block_size):\n"),
    A("alibi_score_mod", "the ALiBi paper's recursive slopes",
      "    def power_of_two_slopes(n_heads):  # 2^(-8/n_heads), 2^(-16/n_heads), ..., 2^-8\n"
      "        return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)  # (n_heads,)\n"
      "\n"
      "    n = 2 ** math.floor(math.log2(n_heads))  # the largest power of two <= n_heads\n"
      "    extra = power_of_two_slopes(2 * n)[0::2][: n_heads - n]  # (n_heads - n,): between n's slopes\n"
      "    slopes = torch.cat([power_of_two_slopes(n), extra])  # (n_heads,)",
      "    def get_slopes(n):\n"
      "        if math.log2(n).is_integer():\n"
      "            start = 2 ** (-8 / n)\n"
      "            return [start ** (i + 1) for i in range(n)]\n"
      "        c = 2 ** math.floor(math.log2(n))\n"
      "        return get_slopes(c) + get_slopes(2 * c)[0::2][: n - c]\n"
      "\n"
      "    slopes = torch.tensor(get_slopes(n_heads))  # (n_heads,)"),
    A("document_mask_mod", "each document's first index, found by searchsorted",
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "    starts = torch.searchsorted(document_ids, document_ids)  # (T,): where each"
      " token's document begins\n"
      "\n"
      "    def same_document(b, h, q_idx, kv_idx):\n"
      "        return (kv_idx >= starts[q_idx]) & (kv_idx <= q_idx)"),
    A("rotary_window_attention", "SDPA with an explicit window mask",
      "    def in_window(b, h, q_idx, kv_idx):\n"
      "        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n"
      "\n"
      "    block_mask = create_block_mask(in_window, None, None, t, t, device=x.device)\n"
      "    out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)  # (b, h, t, d_head)",
      "    i = torch.arange(t, device=x.device)  # (t,)\n"
      "    back = i[:, None] - i[None, :]  # (t, t): how far back each key is\n"
      "    allowed = (back >= 0) & (back < window)  # (t, t)\n"
      "    out = torch.nn.functional.scaled_dot_product_attention(\n"
      "        q, k, v, attn_mask=allowed, enable_gqa=True)  # (b, h, t, d_head)"),
)
# fmt: on
