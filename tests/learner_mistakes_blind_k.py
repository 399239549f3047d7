"""Blind set K of learner mistakes and right alternatives, for every exercise of 01-10 that
tests/blind_compare.py has inputs for (the Triton ones of 08 and 09 included).

Written on 2026-12-07, after the fixes of issue #44, from the solution notebooks (solutions/*.ipynb:
each exercise's text and its solution cell), the student notebooks and the topic modules
(attn_course/*.py, not attn_course/checks) only, by someone who read no check, no check's message,
no test of a check and no first-run record. Each mistake is a text edit of the solution notebook's
exercise cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`, occurring exactly once
in that cell, replaced by `new`), applied by `learner_mistakes_blind_a.load`, with the idea of the
mistake in one short phrase: four per exercise (three for triton_scores), slips and misunderstandings
a learner who read only the notebook's text could make, several of them right on the simple input and
wrong on another the exercise allows (T_q != T_k, batch axes, non-contiguous views, ragged blocks,
head counts that are not powers of two, grouped heads, given positions, dtypes, rows that see no key,
inputs edited in place). Each alternative is an edit of the same kind that keeps the function right
while writing it differently from the solution (one per exercise outside Triton), doing no more work
than the notebook allows. Every mistake was verified wrong against `attn_course.reference` on an input
the exercise's contract allows, every alternative right on all of them, and no edit fails to load
(`blind_compare.verify(HOLDOUT_K, ALTERNATIVES_K, folder)` returns [], run with TRITON_INTERPRET=1).
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
HOLDOUT_K: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "raw scores divided by √d, a step too early",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      'torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])'),
    M("dot_product_scores", "result tensor made without the inputs' dtype",
      '    return torch.einsum("...qd,...kd->...qk", q, k)  # (..., T_q, T_k)',
      "    scores = torch.zeros(*q.shape[:-1], k.shape[-2])  # (..., T_q, T_k)\n"
      "    for j in range(k.shape[-2]):\n"
      "        scores[..., j] = (q * k[..., j : j + 1, :]).sum(dim=-1)\n"
      "    return scores"),
    M("dot_product_scores", "broadcast product summed over the key axis, not the feature axis",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      "(q.unsqueeze(-2) * k.unsqueeze(-3)).sum(dim=-2)"),
    M("dot_product_scores", "cosine similarity in place of the dot product",
      'torch.einsum("...qd,...kd->...qk", q, k)',
      "F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)"),
    M("softmax", "no shift by the maximum: large scores overflow",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"),
    M("softmax", "shifted by the maximum of the whole tensor, not of each row",
      "x.amax(dim=dim, keepdim=True)", "x.max()"),
    M("softmax", "normalised along the last axis whatever dim is",
      "exps.sum(dim=dim, keepdim=True)", "exps.sum(dim=-1, keepdim=True)"),
    M("softmax", "shifted by the row's mean instead of its maximum",
      "x.amax(dim=dim, keepdim=True)", "x.mean(dim=dim, keepdim=True)"),
    M("dot_product_attention", "scores normalised by their sum, without the exponential",
      "weights = softmax(dot_product_scores(q, k), dim=-1)",
      "scores = dot_product_scores(q, k)\n    weights = scores / scores.sum(dim=-1, keepdim=True)"),
    M("dot_product_attention", "values mixed by the transposed weights",
      "out = weights @ v", "out = weights.transpose(-2, -1) @ v"),
    M("dot_product_attention", "scaled by √d in the unscaled exercise",
      "softmax(dot_product_scores(q, k), dim=-1)",
      "softmax(dot_product_scores(q, k) / q.shape[-1] ** 0.5, dim=-1)"),
    M("dot_product_attention", "broadcast product summed over the query axis",
      "out = weights @ v", "out = (weights[..., :, :, None] * v[..., None, :, :]).sum(dim=-3)"),
    # 02 · scaling
    M("score_variance", "scaled by 1/d_k instead of 1/√d_k",
      "scores / math.sqrt(d_k)", "scores / d_k"),
    M("score_variance", "the standard deviation returned for the variance",
      "scores.var().item()", "scores.std().item()"),
    M("score_variance", "a tensor returned, not a float",
      "return scores.var().item()", "return scores.var()"),
    M("score_variance", "uniform samples instead of standard normal ones",
      "q = torch.randn(n_samples, d_k, dtype=torch.float64)",
      "q = torch.rand(n_samples, d_k, dtype=torch.float64)"),
    M("scaled_dot_product_attention", "divided by d_k instead of √d_k",
      "/ math.sqrt(d_k)", "/ d_k"),
    M("scaled_dot_product_attention", "scaled by the width of v, not of the keys",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    M("scaled_dot_product_attention", "the weights scaled after the softmax",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1)",
      "scores = dot_product_scores(q, k)  # (..., T_q, T_k)\n"
      "    weights = softmax(scores, dim=-1) / math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "d_k read from axis 1, right only without batch axes",
      "d_k = q.shape[-1]", "d_k = q.shape[1]"),
    # 03 · causal masking
    M("causal_mask", "aligned top-left: the offset T_k - T_q left out",
      "torch.arange(t_q, device=device) + (t_k - t_q)", "torch.arange(t_q, device=device)"),
    M("causal_mask", "strict inequality: a query cannot see its own key",
      '"k -> 1 k") <= rearrange', '"k -> 1 k") < rearrange'),
    M("causal_mask", "mask sense inverted: True on the future",
      '"k -> 1 k") <= rearrange', '"k -> 1 k") > rearrange'),
    M("causal_mask", "a 0/1 float mask instead of booleans",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      'return (rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")).float()'),
    M("padding_mask", "one position too many: <= the length",
      '"t -> 1 t") < rearrange', '"t -> 1 t") <= rearrange'),
    M("padding_mask", "mask sense inverted: True on the padding",
      '"t -> 1 t") < rearrange', '"t -> 1 t") >= rearrange'),
    M("padding_mask", "padding assumed on the left",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'return rearrange(positions, "t -> 1 t") >= t - rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "mask laid out (t, B) instead of (B, t)",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("attention", "mask sense inverted: the allowed keys filled with -inf",
      "scores.masked_fill(~allowed, float(\"-inf\"))", "scores.masked_fill(allowed, float(\"-inf\"))"),
    M("attention", "causal mask from torch.tril, aligned top-left",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)",
      "torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()"),
    M("attention", "a given mask switches the causal mask off",
      "    if is_causal:", "    elif is_causal:"),
    M("attention", "masked scores set to 0 instead of -inf",
      "scores = scores.masked_fill(~allowed, float(\"-inf\"))", "scores = scores * allowed"),
    # 04 · multi-head attention
    M("split_heads", "the last axis split as (d h), heads strided through it",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "reshaped to (b, h, t, d) without a transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "the head axis left after the time axis",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.view(x.shape[0], x.shape[1], n_heads, -1)"),
    M("split_heads", "n_heads taken as the width of a head",
      "h=n_heads)", "d=n_heads)"),
    M("merge_heads", "heads merged as (d h)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "reshaped without moving the head axis back",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", ".view on the transposed, non-contiguous tensor",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "flattened from axis 1, folding time in",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.permute(0, 2, 1, 3).flatten(1)"),
    M("MultiHeadAttention", "cross-attention takes its queries from the context too",
      "_, k, v = self.qkv(context)", "q, k, v = self.qkv(context)"),
    M("MultiHeadAttention", "the mask given no head axis",
      "        if mask is not None:\n"
      '            mask = rearrange(mask, "... q k -> ... 1 q k")  # (b, 1, t, t_k): the same for every'
      ' head\n',
      ""),
    M("MultiHeadAttention", "heads split as (d h) in a hand-written rearrange",
      "(split_heads(z, self.n_heads) for z in (q, k, v))",
      '(rearrange(z, "b t (d h) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("MultiHeadAttention", "x flattened with .view, failing on a non-contiguous input",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)",
      "b, t, _ = x.shape\n"
      "        q, k, v = self.qkv(x.view(b * t, -1)).view(b, t, -1).chunk(3, dim=-1)"),
    # 05 · RoPE
    M("rope_frequencies", "exponent i/d instead of 2i/d",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "exponent's sign flipped: frequencies above 1",
      "base ** (-two_i / d)", "base ** (two_i / d)"),
    M("rope_frequencies", "frequencies in float32, not float64",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d, 2)"),
    M("rope_frequencies", "exponent normalised by d/2 instead of d",
      "base ** (-two_i / d)", "base ** (-two_i / (d // 2))"),
    M("apply_rope", "pairs taken from the two halves, results interleaved",
      "even, odd = x[..., 0::2], x[..., 1::2]", "even, odd = x[..., : d // 2], x[..., d // 2 :]"),
    M("apply_rope", "rotated the other way (sign of sin flipped)",
      "[even * cos - odd * sin, even * sin + odd * cos]",
      "[even * cos + odd * sin, odd * cos - even * sin]"),
    M("apply_rope", "the given positions ignored",
      "    if positions is None:\n        positions = torch.arange(t, device=x.device)  # (T,)",
      "    positions = torch.arange(t, device=x.device)  # (T,)"),
    M("apply_rope", "x rotated in place",
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      "    even, odd = even.clone(), odd.clone()\n"
      "    x[..., 0::2] = even * cos - odd * sin\n"
      "    x[..., 1::2] = even * sin + odd * cos\n"
      "    return x"),
    M("RotaryMultiHeadAttention", "the values rotated as well",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))"),
    M("RotaryMultiHeadAttention", "the layer's base not passed to apply_rope",
      "apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "apply_rope(q, positions), apply_rope(k, positions)"),
    M("RotaryMultiHeadAttention", "RoPE over the whole d_model before the heads are split",
      'q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))  # each (b, h,'
      ' t, d_k)\n'
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)  # (b, t, d_model)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "head axis inserted at axis 1, wrong for a (t, t) mask",
      "mask.unsqueeze(-3)", "mask.unsqueeze(1)"),
    # 06 · FlashAttention
    M("online_softmax", "the running sum not rescaled when the maximum grows",
      "denom * torch.exp(m - m_safe)", "denom"),
    M("online_softmax", "each block shifted by its own maximum",
      "torch.exp(block - m_safe)", "torch.exp(block - block.amax(dim=-1, keepdim=True))"),
    M("online_softmax", "no guard for a block that is all -inf",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("online_softmax", "the ragged last block dropped",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] // block_size * block_size, block_size)"),
    M("flash_attention_query_block", "scaled by √d_v instead of √d",
      "q_blk / math.sqrt(q_blk.shape[-1])", "q_blk / math.sqrt(v.shape[-1])"),
    M("flash_attention_query_block", "accumulator not rescaled by alpha",
      "acc = alpha * acc + p @ v", "acc = acc + p @ v"),
    M("flash_attention_query_block", "lse without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),
    M("flash_attention_query_block", "lse returned with a trailing axis of 1",
      "(m + torch.log(denom)).squeeze(-1)", "m + torch.log(denom)"),
    M("flash_attention", "causal mask aligned top-left: offset 0",
      "offset = t_k - t_q  #", "offset = 0  #"),
    M("flash_attention", "causal key loop stops one key early",
      "k_end = min(t_k, qe + offset)", "k_end = min(t_k, qe + offset - 1)"),
    M("flash_attention", "lse of a row that sees no key set to 0",
      "lse[..., qs:qe] = (m + torch.log(denom)).squeeze(-1)",
      "lse[..., qs:qe] = torch.nan_to_num((m + torch.log(denom)).squeeze(-1), neginf=0.0)"),
    M("flash_attention", "last key block's end not clipped at T_k",
      "ke = min(ks + block_size, t_k)", "ke = ks + block_size"),
    # 07 · KV cache
    M("block_forward", "post-norm: the LayerNorm after the residual sum",
      "x = x + block.attn(block.ln1(x), is_causal=True)", "x = block.ln1(x + block.attn(x, is_causal=True))"),
    M("block_forward", "attention not causal over the whole sequence",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x))"),
    M("block_forward", "the MLP reads the block's input, not the attention's sum",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "    h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("block_forward", "residual added in place into the caller's x",
      "x = x + block.attn(block.ln1(x), is_causal=True)", "x += block.attn(block.ln1(x), is_causal=True)"),
    M("ablate_heads", "rows of W^O zeroed (output features) instead of the head's columns",
      "out.weight[:, head * d_k : (head + 1) * d_k] = 0.0", "out.weight[head * d_k : (head + 1) * d_k] ="
      " 0.0"),
    M("ablate_heads", "the model itself edited, not a copy",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "the head's slice ends one column early",
      "head * d_k : (head + 1) * d_k", "head * d_k : (head + 1) * d_k - 1"),
    M("ablate_heads", "the head's queries zeroed instead of its output",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.qkv.weight[head * d_k : (head + 1) * d_k] = 0.0"),
    M("KVCache", "keys appended along the head axis",
      "k = torch.cat([self.keys[layer], k], dim=-2)", "k = torch.cat([self.keys[layer], k], dim=1)"),
    M("KVCache", "new positions put before the cached ones",
      "torch.cat([self.keys[layer], k], dim=-2)", "torch.cat([k, self.keys[layer]], dim=-2)"),
    M("KVCache", "dicts made at class level, shared by every cache",
      "    def __init__(self) -> None:\n"
      "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n",
      "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
      "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"),
    M("KVCache", "length counted with len(), the batch size",
      "self.keys[layer].shape[-2]", "len(self.keys[layer])"),
    M("cached_attention", "positions restart at 0 in every call",
      "torch.arange(t_past, t_past + t_new, device=x.device)", "torch.arange(t_new, device=x.device)"),
    M("cached_attention", "no causal mask among the new positions",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values)"),
    M("cached_attention", "keys cached before they are rotated",
      "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)  # each (b, h,"
      " t_new, d_k)\n"
      "    keys, values = cache.append(layer, k, v)",
      "    keys, values = cache.append(layer, k, v)\n"
      "    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)  # each (b, h,"
      " t_new, d_k)"),
    M("cached_attention", "the new queries attend to the new keys only",
      "attention(q, keys, values, is_causal=True)", "attention(q, k, v, is_causal=True)"),
    M("generate_with_cache", "the prefill's logits taken at the first position",
      "[:, -1]  # (b, vocab_size): the prefill", "[:, 0]  # (b, vocab_size): the prefill"),
    M("generate_with_cache", "the whole sequence fed again with the cache",
      "logits = model.step(next_token, cache, attend)", "logits = model.step(tokens, cache, attend)"),
    M("generate_with_cache", "one step too many, after the last token",
      "        if i < n_new - 1:\n            logits = model.step(next_token, cache, attend)[:, -1]",
      "        logits = model.step(next_token, cache, attend)[:, -1]"),
    M("generate_with_cache", "argmax taken instead of calling pick",
      "next_token = pick(logits)", "next_token = logits.argmax(dim=-1, keepdim=True)"),
    M("next_token_probs", "logits multiplied by the temperature",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "the k-th largest read one place too far (index k)",
      "kth = scaled.topk(top_k, dim=-1).values[:, -1:]",
      "kth = scaled.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]"),
    M("next_token_probs", "top-k applied after the softmax, not renormalised",
      "    if top_k is not None:\n"
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)\n'
      "    return torch.softmax(scaled, dim=-1)  # (b, vocab_size)",
      "    probs = torch.softmax(scaled, dim=-1)  # (b, vocab_size)\n"
      "    if top_k is not None:\n"
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1)\n"
      "        probs = probs.masked_fill(scaled < kth, 0.0)  # (b, vocab_size)\n"
      "    return probs"),
    M("next_token_probs", "the caller's logits divided in place",
      "scaled = logits / temperature", "logits /= temperature\n    scaled = logits"),
    M("sample_next", "generator not passed to the draw",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)"),
    M("sample_next", "one uniform number shared by every row",
      "return torch.multinomial(probs, 1, generator=generator)  # (b, 1)",
      "u = torch.rand(1, generator=generator, dtype=probs.dtype)\n"
      "    return (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)  # (b, 1)"),
    M("sample_next", "temperature and top-k ignored: plain softmax of the logits",
      "probs = next_token_probs(logits, temperature, top_k)", "probs = torch.softmax(logits, dim=-1)"),
    M("sample_next", "draws returned as (b,), the token axis squeezed",
      "torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1,"
      " generator=generator).squeeze(-1)"),
    # 08 · Triton (every load and store stays masked inside its tensor)
    M("triton_add", "strided inputs passed without .contiguous()",
      "x, y = x.contiguous(), y.contiguous()", "pass"),
    M("triton_add", "grid rounded down: the ragged tail never added",
      "grid = (triton.cdiv(n, block),)", "grid = (n // block,)"),
    M("triton_add", "y loaded from x's pointer (copy-paste slip)",
      "y = tl.load(y_ptr + offsets, mask=inside)", "y = tl.load(x_ptr + offsets, mask=inside)"),
    M("triton_add", "offsets without the program's start",
      "offsets = pid * BLOCK + tl.arange(0, BLOCK)", "offsets = tl.arange(0, BLOCK)"),
    M("triton_softmax", "row stride assumed to be the row length",
      "x.shape[1], x.stride(0), out.stride(0)", "x.shape[1], x.shape[1], out.stride(0)"),
    M("triton_softmax", "the running sum not rescaled when the maximum grows",
      "total = total * tl.exp(m - m_safe) + tl.sum", "total = total + tl.sum"),
    M("triton_softmax", "padding loaded as 0 instead of -inf in the first pass",
      'x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  # (BLOCK,)\n'
      "        m_new",
      "x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)  # (BLOCK,)\n"
      "        m_new"),
    M("triton_softmax", "a strided last axis read as if contiguous",
      "x = x if x.stride(1) == 1 else x.contiguous()  # (R, N)", "pass"),
    M("triton_scores", "scores divided by d instead of √d",
      "h, t_q, t_k, 1.0 / math.sqrt(d)", "h, t_q, t_k, 1.0 / d"),
    M("triton_scores", "strides worked out from the shape, assuming contiguous q",
      "q.stride(0), q.stride(1), q.stride(2), k.stride(0)", "h * t_q * d, t_q * d, d, k.stride(0)"),
    M("triton_scores", "grid rounded down: ragged tiles never computed",
      "grid = (triton.cdiv(t_q, block_m), triton.cdiv(t_k, block_n), b * h)",
      "grid = (t_q // block_m, t_k // block_n, b * h)"),
    M("triton_flash_attention", "causal mask aligned top-left: offset 0",
      "offset = t_k - t_q  #", "offset = 0  #"),
    M("triton_flash_attention", "causal loop stops before the diagonal block",
      "(pid_m + 1) * BLOCK_M + offset)", "pid_m * BLOCK_M + offset)"),
    M("triton_flash_attention", "accumulator not rescaled by alpha",
      "acc = acc * alpha[:, None] + tl.dot", "acc = acc + tl.dot"),
    M("triton_flash_attention", "lse without the running maximum",
      "lse = m + tl.log(total_safe)", "lse = tl.log(total_safe)"),
    # 09 · backward
    M("softmax_backward", "row sum taken over the last axis whatever dim is",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "the factor p left out",
      "return p * (grad_p - D)", "return grad_p - D"),
    M("softmax_backward", "row sum without keepdim, broadcast against the wrong axis",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=dim)"),
    M("softmax_backward", "only the Jacobian's diagonal, p(1 - p)",
      "return p * (grad_p - D)", "return p * (1 - p) * grad_p"),
    M("attention_backward", "dk without the 1/√d scale",
      "dk = ds.transpose(-1, -2) @ q * scale", "dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "the causal mask left out of the recomputed weights",
      "attention(q, k, v, is_causal=is_causal)", "attention(q, k, v)"),
    M("attention_backward", "the softmax's row sum taken over the query axis",
      "(dp * p).sum(dim=-1, keepdim=True)", "(dp * p).sum(dim=-2, keepdim=True)"),
    M("attention_backward", "scale from the values' width",
      "scale = 1 / math.sqrt(q.shape[-1])", "scale = 1 / math.sqrt(v.shape[-1])"),
    M("flash_attention_backward", "D taken from the tile, not from the whole row",
      "ds = p * (dp - D[..., qs:qe, :])", "ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))"),
    M("flash_attention_backward", "causal tile skip decided by the block's first row",
      "if is_causal and ks > qe - 1 + offset:", "if is_causal and ks > qs + offset:"),
    M("flash_attention_backward", "lse subtracted without a key axis",
      "torch.exp(s - lse[..., qs:qe, None])", "torch.exp(s - lse[..., qs:qe])"),
    M("flash_attention_backward", "dq without the 1/√d scale",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] += ds @ k_blk"),
    M("FlashAttentionFunction", "backward returns one gradient per tensor only",
      "return dq, dk, dv, None, None", "return dq, dk, dv"),
    M("FlashAttentionFunction", "is_causal not passed on to the backward",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out)"),
    M("FlashAttentionFunction", "dq and dk returned in each other's place",
      "return dq, dk, dv, None, None", "return dk, dq, dv, None, None"),
    M("FlashAttentionFunction", "forward returns (out, lse), not out",
      "        return out\n", "        return out, lse\n"),
    # 09 · Triton backward (the wrapper around the two kernels)
    M("triton_flash_attention_backward", "D left at zero",
      "delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()",
      "delta = torch.zeros(B, H, T_q, device=q.device, dtype=torch.float32)"),
    M("triton_flash_attention_backward", "dk and dv passed in each other's place",
      "q, k, v, grad_out, lse, delta, dk, dv,", "q, k, v, grad_out, lse, delta, dv, dk,"),
    M("triton_flash_attention_backward", "is_causal not passed to the kernels",
      "IS_CAUSAL=is_causal)", "IS_CAUSAL=False)"),
    M("triton_flash_attention_backward", "dq kernel given 1/d as its scale",
      "H, T_q, T_k, 1 / math.sqrt(d), **blocks)\n    return",
      "H, T_q, T_k, 1 / d, **blocks)\n    return"),
    # 10 · modern attention
    M("repeat_kv", "the heads tiled (r h), not each repeated in place",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", ".view of an expanded tensor",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "b, h, t, d = x.shape\n"
      "    return x[:, :, None].expand(b, h, n_rep, t, d).view(b, h * n_rep, t, d)"),
    M("repeat_kv", "repeated along the time axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "return x.repeat_interleave(n_rep, dim=2)"),
    M("repeat_kv", "n_rep read as the number of heads wanted",
      "r=n_rep)", "r=n_rep // x.shape[1])"),
    M("GroupedQueryAttention", "key/value heads tiled with .repeat",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)"),
    M("GroupedQueryAttention", "keys repeated, values not",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)", "k = repeat_kv(k, n_rep)"),
    M("GroupedQueryAttention", "query heads split as (d h)",
      '"b t (h d) -> b h t d", h=self.n_heads)', '"b t (d h) -> b h t d", h=self.n_heads)'),
    M("GroupedQueryAttention", "heads merged as (d h) before the output projection",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("sliding_window_mask", "window one key too wide (<= window)",
      "(distance < window)", "(distance <= window)"),
    M("sliding_window_mask", "window open both ways: |i - j| < window",
      "(distance >= 0) & (distance < window)", "distance.abs() < window"),
    M("sliding_window_mask", "aligned top-left: offset left out",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "the query's own key left out of its window",
      "(distance >= 0) & (distance < window)", "(distance > 0) & (distance <= window)"),
    M("sliding_window_flash_attention", "first key block found from the block's last row",
      "first = max(0, qs + offset - window + 1)", "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "window mask one key too wide inside a tile",
      "(distance >= window)", "(distance > window)"),
    M("sliding_window_flash_attention", "key loop stopped one block early (>= for >)",
      "if ks > rows[-1]:", "if ks >= rows[-1]:"),
    M("sliding_window_flash_attention", "no guard for a row whose tile is all masked",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new"),
    M("alibi_score_mod", "power-of-two slopes used for any head count",
      "slopes = torch.cat([power_of_two_slopes(n), extra])", "slopes = power_of_two_slopes(n_heads)"),
    M("alibi_score_mod", "bias sign flipped: q_idx - kv_idx",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * (q_idx - kv_idx)"),
    M("alibi_score_mod", "slopes start at 2^0 instead of 2^(-8/n)",
      "torch.arange(1, n_heads + 1)", "torch.arange(0, n_heads)"),
    M("alibi_score_mod", "extra slopes taken at the odd places, repeating the first ones",
      "[0::2][: n_heads - n]", "[1::2][: n_heads - n]"),
    M("document_mask_mod", "not causal within a document",
      " & (q_idx >= kv_idx)", ""),
    M("document_mask_mod", "strictly causal: a token cannot see itself",
      "(q_idx >= kv_idx)", "(q_idx > kv_idx)"),
    M("document_mask_mod", "causal sense inverted: the future seen",
      "(q_idx >= kv_idx)", "(q_idx <= kv_idx)"),
    M("document_mask_mod", "either condition enough: | for &",
      ") & (q_idx", ") | (q_idx"),
    M("rotary_window_attention", "window one key too wide",
      "q_idx - kv_idx < window", "q_idx - kv_idx <= window"),
    M("rotary_window_attention", "the given positions not passed to RoPE",
      "q, k = apply_rope(q, positions), apply_rope(k, positions)", "q, k = apply_rope(q), apply_rope(k)"),
    M("rotary_window_attention", "key/value heads tiled with .repeat instead of grouped",
      "out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)",
      "rep = layer.n_heads // layer.n_kv_heads\n"
      "    out = flex_attention(q, k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1), block_mask=block_mask)"),
    M("rotary_window_attention", "window open both ways, not causal",
      "(q_idx >= kv_idx) & (q_idx - kv_idx < window)", "(q_idx - kv_idx).abs() < window"),
)

ALTERNATIVES_K: tuple[BlindAlternative, ...] = (
    # 01
    A("dot_product_scores", "torch.matmul with .mT",
      'torch.einsum("...qd,...kd->...qk", q, k)', "torch.matmul(q, k.mT)"),
    A("softmax", "max by .max(...).values, sum by torch.sum",
      "shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
      "    exps = shifted.exp()\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "biggest = x.max(dim=dim, keepdim=True).values  # per row\n"
      "    exps = torch.exp(x - biggest)  # same shape as x\n"
      "    return exps / torch.sum(exps, dim, keepdim=True)"),
    A("dot_product_attention", "einops einsum for the weighted sum",
      "out = weights @ v", 'out = einsum(weights, v, "... q k, ... k e -> ... q e")'),
    # 02
    A("score_variance", "dot product as an elementwise product summed, variance by hand",
      'scores = einsum(q, k, "n d, n d -> n")  # (n,)\n'
      "    if scaled:\n"
      "        scores = scores / math.sqrt(d_k)\n"
      "    return scores.var().item()",
      "scores = (q * k).sum(dim=1) * (d_k ** -0.5 if scaled else 1.0)  # (n,)\n"
      "    centred = scores - scores.mean()\n"
      "    return float((centred ** 2).sum() / (n_samples - 1))"),
    A("scaled_dot_product_attention", "queries scaled before the product",
      "scores = dot_product_scores(q, k) / math.sqrt(d_k)",
      "scores = dot_product_scores(q * d_k ** -0.5, k)"),
    # 03
    A("causal_mask", "torch.tril with a diagonal offset",
      '    return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")  # (t_q,'
      ' t_k)',
      "    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "indexing with None and expand",
      'return rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "return positions.expand(lengths.shape[0], t) < lengths[:, None]"),
    A("attention", "torch.where for the mask, nan_to_num for rows with no key",
      '    scores = scores.masked_fill(~allowed, float("-inf"))  # (..., T_q, T_k)\n'
      "    weights = softmax(scores, dim=-1)  # (..., T_q, T_k): NaN in a row that allows no key\n"
      "    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # such rows: 0, as SDPA\n",
      '    scores = torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))\n'
      "    weights = torch.nan_to_num(softmax(scores, dim=-1), nan=0.0)  # (..., T_q, T_k)\n"),
    # 04
    A("split_heads", "unflatten and transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)"),
    A("merge_heads", "transpose then flatten the last two axes",
      'return rearrange(x, "b h t d -> b t (h d)")', "return x.transpose(1, 2).flatten(start_dim=2)"),
    A("MultiHeadAttention", "heads split with unflatten and transpose",
      "(split_heads(z, self.n_heads) for z in (q, k, v))",
      "(z.unflatten(-1, (self.n_heads, -1)).transpose(1, 2) for z in (q, k, v))"),
    # 05
    A("rope_frequencies", "reciprocal of base to the power 2i/d",
      "    two_i = torch.arange(0, d, 2, dtype=torch.float64)  # (d/2,): 0, 2, 4, …, d - 2\n"
      "    return base ** (-two_i / d)",
      "    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)\n"
      "    return 1.0 / torch.pow(base, 2 * i / d)"),
    A("apply_rope", "complex multiplication",
      "    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each\n"
      "    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each\n"
      "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos])  # (2, ..., T, d/2)\n"
      '    return rearrange(rotated, "two ... half -> ... (half two)")  # (..., T, d)',
      '    pairs = rearrange(x.to(torch.float64), "... (half two) -> ... half two", two=2).contiguous()\n'
      "    turned = torch.view_as_complex(pairs) * torch.polar(torch.ones_like(angles), angles)  # (..., T,"
      " d/2)\n"
      '    return rearrange(torch.view_as_real(turned), "... half two -> ... (half two)").to(x.dtype)'),
    A("RotaryMultiHeadAttention", "head axis added to the mask by indexing with None",
      "        head_mask = None if mask is None else mask.unsqueeze(-3)",
      "        head_mask = None if mask is None else mask[..., None, :, :]"),
    # 06
    A("online_softmax", "a running log-sum-exp with torch.logaddexp",
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
      "    start = 0\n"
      "    while start < x.shape[-1]:\n"
      "        block = x[..., start : start + block_size]  # (..., B)\n"
      "        lse = torch.logaddexp(lse, torch.logsumexp(block, dim=-1, keepdim=True))  # (..., 1)\n"
      "        start += block_size\n"
      "    return torch.exp(x - lse)  # (..., N)"),
    A("flash_attention_query_block", "a normalised running output and a running lse",
      "    m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=q_blk.dtype, device=q_blk.device)  #"
      " (..., Bq, 1): running max\n"
      "    denom = torch.zeros_like(m)  # (..., Bq, 1): running sum of exp(s - m)\n"
      "    acc = torch.zeros((*q_blk.shape[:-1], v.shape[-1]), dtype=q_blk.dtype, device=q_blk.device)  #"
      " (..., Bq, d_v)\n"
      "    for ks in range(0, k.shape[-2], block_size):\n"
      "        s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)  # (..., Bq, Bk)\n"
      "        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)\n"
      "        p = torch.exp(s - m_new)  # (..., Bq, Bk)\n"
      "        alpha = torch.exp(m - m_new)  # (..., Bq, 1): 0 on the first block, where m is -inf\n"
      "        denom = alpha * denom + p.sum(dim=-1, keepdim=True)  # (..., Bq, 1)\n"
      "        acc = alpha * acc + p @ v[..., ks : ks + block_size, :]  # (..., Bq, d_v)\n"
      "        m = m_new\n"
      "    return acc / denom, (m + torch.log(denom)).squeeze(-1)",
      "    lse = q_blk.new_full((*q_blk.shape[:-1], 1), -math.inf)  # (..., Bq, 1)\n"
      "    out = q_blk.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # (..., Bq, d_v), normalised so far\n"
      "    for ks in range(0, k.shape[-2], block_size):\n"
      '        s = torch.einsum("...qd,...kd->...qk", q_blk, k[..., ks : ks + block_size, :])  # (..., Bq,'
      ' Bk)\n'
      "        lse_new = torch.logaddexp(lse, torch.logsumexp(s, dim=-1, keepdim=True))  # (..., Bq, 1)\n"
      "        out = out * torch.exp(lse - lse_new) + torch.exp(s - lse_new) @ v[..., ks : ks + block_size,"
      " :]\n"
      "        lse = lse_new\n"
      "    return out, lse[..., 0]"),
    A("flash_attention", "the causal mask applied in every visited block",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal:"),
    # 07
    A("block_forward", "torch.add and an explicit causal mask",
      "    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)",
      "    causal = causal_mask(x.shape[1], device=x.device)  # (t, t)\n"
      "    x = torch.add(x, block.attn(block.ln1(x), mask=causal))  # (b, t, d_model)"),
    A("ablate_heads", "the head's columns zeroed through a (d_model, h, d_k) view",
      "            ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "            w = ablated.blocks[layer].attn.out.weight  # (d_model, d_model)\n"
      "            w.view(w.shape[0], model.config.n_heads, d_k)[:, head].zero_()"),
    A("KVCache", "an empty slice as the past, dict.get",
      "        if layer in self.keys:\n"
      "            k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.keys[layer], self.values[layer] = k, v\n"
      "        return k, v",
      "        past_k = self.keys.get(layer, k[..., :0, :])  # (b, h, t_past, d_k)\n"
      "        past_v = self.values.get(layer, v[..., :0, :])  # (b, h, t_past, d_k)\n"
      "        self.keys[layer] = torch.cat((past_k, k), dim=2)  # (b, h, t_past + t_new, d_k)\n"
      "        self.values[layer] = torch.cat((past_v, v), dim=2)  # (b, h, t_past + t_new, d_k)\n"
      "        return self.keys[layer], self.values[layer]"),
    A("cached_attention", "an explicit bottom-right causal mask",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values, mask=causal_mask(t_new, t_past + t_new, device=x.device))"),
    A("generate_with_cache", "new tokens collected in a list, the step at the loop's top",
      "    tokens = prompt  # (b, t)\n"
      "    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill\n"
      "    for i in range(n_new):\n"
      "        next_token = pick(logits)  # (b, 1)\n"
      "        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)\n"
      "        if i < n_new - 1:\n"
      "            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new token"
      " only\n"
      "    return tokens",
      "    chosen = []  # each (b, 1)\n"
      "    for i in range(n_new):\n"
      "        fed = prompt if i == 0 else chosen[-1]  # the prefill, then the last token alone\n"
      "        logits = model.step(fed, cache, attend)[:, -1]  # (b, vocab_size)\n"
      "        chosen.append(pick(logits))\n"
      "    if n_new == 0:\n"
      "        model.step(prompt, cache, attend)\n"
      "    return torch.cat([prompt, *chosen], dim=1)  # (b, t + n_new)"),
    A("next_token_probs", "the k-th largest by sorting, masking with torch.where",
      "        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row\n"
      '        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)',
      "        kth = scaled.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]  # (b, 1)\n"
      '        scaled = torch.where(scaled >= kth, scaled, torch.full_like(scaled, float("-inf")))'),
    A("sample_next", "inverse CDF with one uniform number per row",
      "    return torch.multinomial(probs, 1, generator=generator)  # (b, 1)",
      "    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)  # (b, 1)\n"
      "    picks = torch.searchsorted(probs.cumsum(dim=-1), u, right=True)  # (b, 1)\n"
      "    return picks.clamp(max=probs.shape[-1] - 1)"),
    # 09
    A("softmax_backward", "the product p ∘ g named once and reused",
      "    D = (grad_p * p).sum(dim=dim, keepdim=True)  # one number per row: sum_i g_i p_i\n"
      "    return p * (grad_p - D)",
      "    weighted = torch.mul(p, grad_p)  # same shape as p\n"
      "    return weighted - p * weighted.sum(dim, keepdim=True)"),
    A("attention_backward", "every product as an einops einsum",
      "    dv = p.transpose(-1, -2) @ grad_out  # (..., T_k, d_v)\n"
      "    dp = grad_out @ v.transpose(-1, -2)  # (..., T_q, T_k)\n"
      "    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))  # (..., T_q, T_k)\n"
      "    dq = ds @ k * scale  # (..., T_q, d)\n"
      "    dk = ds.transpose(-1, -2) @ q * scale  # (..., T_k, d)",
      '    dv = einsum(p, grad_out, "... q k, ... q e -> ... k e")  # (..., T_k, d_v)\n'
      '    dp = einsum(grad_out, v, "... q e, ... k e -> ... q k")  # (..., T_q, T_k)\n'
      "    ds = p * dp - p * (p * dp).sum(dim=-1, keepdim=True)  # (..., T_q, T_k)\n"
      '    dq = einsum(ds, k, "... q k, ... k d -> ... q d") * scale  # (..., T_q, d)\n'
      '    dk = einsum(ds, q, "... q k, ... q d -> ... k d") * scale  # (..., T_k, d)'),
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
      "        dv[..., ks:ke, :] = dv_acc",
      "    for qs in range(0, t_q, block_size):\n"
      "        qe = min(qs + block_size, t_q)\n"
      "        q_blk, do_blk = q[..., qs:qe, :], grad_out[..., qs:qe, :]  # (..., Bq, d), (..., Bq, d_v)\n"
      "        rows = torch.arange(qs, qe, device=q.device)[:, None] + offset  # (Bq, 1)\n"
      "        for ks in range(0, t_k, block_size):\n"
      "            if is_causal and ks > qe - 1 + offset:\n"
      "                break  # this key block and the later ones are all in the future\n"
      "            ke = min(ks + block_size, t_k)\n"
      "            k_blk, v_blk = k[..., ks:ke, :], v[..., ks:ke, :]  # (..., Bk, d), (..., Bk, d_v)\n"
      '            s = torch.einsum("...qd,...kd->...qk", q_blk, k_blk) * scale  # (..., Bq, Bk)\n'
      "            if is_causal:\n"
      "                cols = torch.arange(ks, ke, device=q.device)[None, :]  # (1, Bk)\n"
      '                s = torch.where(cols <= rows, s, float("-inf"))  # (..., Bq, Bk)\n'
      "            p = (s - lse[..., qs:qe].unsqueeze(-1)).exp()  # (..., Bq, Bk)\n"
      "            dv[..., ks:ke, :] += p.transpose(-1, -2) @ do_blk  # (..., Bk, d_v)\n"
      "            ds = p * (do_blk @ v_blk.transpose(-1, -2) - D[..., qs:qe, :])  # (..., Bq, Bk)\n"
      "            dq[..., qs:qe, :] += ds @ k_blk * scale  # (..., Bq, d)\n"
      "            dk[..., ks:ke, :] += ds.transpose(-1, -2) @ q_blk * scale  # (..., Bk, d)"),
    A("FlashAttentionFunction", "keyword arguments and the gradients unpacked into the tuple",
      "        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal,"
      " ctx.block_size)\n"
      "        return dq, dk, dv, None, None",
      "        grads = flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=ctx.is_causal,\n"
      "                                         block_size=ctx.block_size)\n"
      "        return (*grads, None, None)"),
    # 10
    A("repeat_kv", "expand a new axis, then reshape",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)',
      "b, h, t, d = x.shape\n"
      "    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)"),
    A("GroupedQueryAttention", "queries grouped, keys and values broadcast over each group",
      "        n_rep = self.n_heads // self.n_kv_heads\n"
      "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # each (b, h, t, d_head)\n"
      "        head_mask = None if mask is None else mask.unsqueeze(-3)  # (b, 1, t, t): every head\n"
      "        out, _ = attention(q, k, v, mask=head_mask, is_causal=is_causal)  # (b, h, t, d_head)\n"
      '        return self.out(rearrange(out, "b h t d -> b t (h d)"))',
      "        n_rep = self.n_heads // self.n_kv_heads\n"
      '        q = rearrange(q, "b (g r) t d -> b g r t d", r=n_rep)  # (b, h_kv, n_rep, t, d_head)\n'
      "        k, v = k.unsqueeze(2), v.unsqueeze(2)  # (b, h_kv, 1, t, d_head) each\n"
      "        group_mask = None if mask is None else mask[:, None, None]  # (b, 1, 1, t, t)\n"
      "        out, _ = attention(q, k, v, mask=group_mask, is_causal=is_causal)  # (b, h_kv, n_rep, t,"
      " d_head)\n"
      '        return self.out(rearrange(out, "b g r t d -> b t (g r d)"))'),
    A("sliding_window_mask", "a causal tril minus a shifted tril",
      "    query_positions = torch.arange(t_q) + (t_k - t_q)  # (t_q,) absolute positions\n"
      "    key_positions = torch.arange(t_k)  # (t_k,)\n"
      '    distance = rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")  #'
      ' (t_q, t_k)\n'
      "    return (distance >= 0) & (distance < window)  # (t_q, t_k)",
      "    ones = torch.ones(t_q, t_k, dtype=torch.bool)  # (t_q, t_k)\n"
      "    return ones.tril(t_k - t_q) & ~ones.tril(t_k - t_q - window)  # (t_q, t_k)"),
    A("sliding_window_flash_attention", "blocks before the window skipped with continue",
      "        for ks in range(first // block_size * block_size, t_k, block_size):\n",
      "        for ks in range(0, t_k, block_size):\n"
      "            if ks + block_size <= first:\n"
      "                continue  # the whole block is before every row's window\n"),
    A("alibi_score_mod", "slopes from a list comprehension of powers",
      "    def power_of_two_slopes(n_heads):  # 2^(-8/n_heads), 2^(-16/n_heads), ..., 2^-8\n"
      "        return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)  # (n_heads,)",
      "    def power_of_two_slopes(count):  # the geometric series starting at 2^(-8/count)\n"
      "        start = 2.0 ** (-8.0 / count)\n"
      "        return torch.tensor([start ** (i + 1) for i in range(count)])  # (count,)"),
    A("document_mask_mod", "torch.logical_and, kv_idx <= q_idx",
      "return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "return torch.logical_and(document_ids[kv_idx] == document_ids[q_idx], kv_idx <= q_idx)"),
    A("rotary_window_attention", "window written as kv_idx > q_idx - window",
      "return (q_idx >= kv_idx) & (q_idx - kv_idx < window)",
      "return (kv_idx <= q_idx) & (kv_idx > q_idx - window)"),
)
# fmt: on
