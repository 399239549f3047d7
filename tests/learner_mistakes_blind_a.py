"""Blind set A of learner mistakes and right alternatives (issue 27), for every exercise of 01-10.

Written from the solution notebooks and the topic modules only, without reading any check, any
test of a check or any earlier table of mistakes. Each mistake is a text edit of the solution
notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`, occurring
exactly once in that cell, replaced by `new`), with the idea of the mistake in one short phrase;
each alternative is an edit of the same kind that keeps the function right. Every mistake was
verified wrong against `attn_course.reference` on an input the exercise's contract allows, and every
alternative right on all of them (tests/blind_compare.py). Set A is the one fixes may look at; set B
(tests/learner_mistakes_blind_b.py) stays held out. The measurements are in tests/test_checks_blind.py.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any, NamedTuple

from learner_mistakes_holdout2 import PRELUDE, BlindMistake, solution_cells


class BlindAlternative(NamedTuple):
    """A right answer unlike the course's: a text edit of the solution cell of `exercise`."""

    exercise: str
    idea: str
    old: str
    new: str


# The names notebook 07's cells define before ablate_heads and sample_next, which the hold-out's
# prelude leaves out.
BLIND_PRELUDE = PRELUDE + "import copy\n\nfrom attn_course.generation import next_token_probs\n"

_counter = itertools.count()

EARLIER_CELLS = {
    "rotary_window_attention": (
        "from torch.nn.attention.flex_attention import create_block_mask, flex_attention\n"
    ),
    "triton_flash_attention_backward": "from attn_course.triton_flash.kernels import (\n"
    "    flash_attention_backward_dkdv_kernel,\n    flash_attention_backward_dq_kernel,\n)\n",
}
"""What an exercise's cell uses from earlier cells of its notebook (imports; the two kernels of 09's earlier
steps, the course's standing in for the learner's): without them every edit of the cell is a NameError."""


def load(edit: BlindMistake | BlindAlternative | tuple[str, str, str, str], folder: Path) -> Any:
    """The learner's `exercise` with the edit applied (none where `old` is empty), from a file."""
    exercise, _, old, new = edit
    source = solution_cells()[exercise]
    if old:
        if source.count(old) != 1:
            raise ValueError(f"{exercise}: `{old}` occurs {source.count(old)} times in its cell")
        source = source.replace(old, new)
    path = folder / f"blind_{exercise}_{next(_counter)}.py"
    path.write_text(BLIND_PRELUDE + EARLIER_CELLS.get(exercise, "") + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, exercise)


M = BlindMistake
A = BlindAlternative

# fmt: off
HOLDOUT_A: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    M("dot_product_scores", "the scores come out transposed, keys by queries",
      '"...qd,...kd->...qk"', '"...qd,...kd->...kq"'),
    M("dot_product_scores", "k.T reverses every axis of a batched k, not the last two",
      'return torch.einsum("...qd,...kd->...qk", q, k)', "return q @ k.T"),
    M("dot_product_scores", "transpose(0, 1) swaps the batch axis, right for 2-D inputs only",
      'return torch.einsum("...qd,...kd->...qk", q, k)', "return q @ k.transpose(0, 1)"),
    M("softmax", "no maximum subtracted: overflows on large scores",
      "shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"),
    M("softmax", "the maximum taken without keepdim",
      "x.amax(dim=dim, keepdim=True)", "x.amax(dim=dim)"),
    M("softmax", "the sum always over the last axis, whatever dim is",
      "exps / exps.sum(dim=dim, keepdim=True)", "exps / exps.sum(dim=-1, keepdim=True)"),
    M("dot_product_attention", "softmax over the queries (dim=-2)",
      "softmax(dot_product_scores(q, k), dim=-1)", "softmax(dot_product_scores(q, k), dim=-2)"),
    M("dot_product_attention", "the weights transposed before they multiply v",
      "out = weights @ v", "out = weights.transpose(-1, -2) @ v"),
    M("dot_product_attention", "returns the raw scores instead of the weights",
      "return out, weights", "return out, dot_product_scores(q, k)"),
    # 02 · scaling
    M("score_variance", "divides by d_k instead of √d_k",
      "scores / math.sqrt(d_k)", "scores / d_k"),
    M("score_variance", "returns the standard deviation, not the variance",
      "scores.var().item()", "scores.std().item()"),
    M("score_variance", "sums over the samples instead of the features",
      '"n d, n d -> n"', '"n d, n d -> d"'),
    M("scaled_dot_product_attention", "scales by the number of keys T_k",
      "d_k = q.shape[-1]", "d_k = k.shape[-2]"),
    M("scaled_dot_product_attention", "multiplies by √d_k instead of dividing",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q, k) * math.sqrt(d_k)"),
    M("scaled_dot_product_attention", "scales by v's width d_v, right only when d_v = d_k",
      "d_k = q.shape[-1]", "d_k = v.shape[-1]"),
    # 03 · causal masking
    M("causal_mask", "top-left aligned: no offset when t_q < t_k",
      "torch.arange(t_q, device=device) + (t_k - t_q)", "torch.arange(t_q, device=device)"),
    M("causal_mask", "strict <: a query may not see its own key",
      '<= rearrange(query_positions, "q -> q 1")', '< rearrange(query_positions, "q -> q 1")'),
    M("causal_mask", "the offset with the wrong sign (t_q - t_k)",
      "+ (t_k - t_q)", "+ (t_q - t_k)"),
    M("padding_mask", "<= marks the first padding position as real",
      '< rearrange(lengths, "b -> b 1")', '<= rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "the mask inverted: True on the padding",
      '< rearrange(lengths, "b -> b 1")', '>= rearrange(lengths, "b -> b 1")'),
    M("padding_mask", "positions and lengths on swapped axes: a (t, B) mask",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      'rearrange(positions, "t -> t 1") < rearrange(lengths, "b -> 1 b")'),
    M("attention", "the causal mask built square from T_q alone",
      "causal_mask(q.shape[-2], k.shape[-2], device=q.device)", "causal_mask(q.shape[-2], device=q.device)"),
    M("attention", "masked_fill where the mask is True (fills the allowed scores)",
      'scores.masked_fill(~allowed, float("-inf"))', 'scores.masked_fill(allowed, float("-inf"))'),
    M("attention", "with is_causal the causal mask replaces the given mask instead of combining with it",
      "allowed = allowed & causal_mask(", "allowed = causal_mask("),
    # 04 · multi-head attention
    M("split_heads", "groups the features as (d h)",
      '"b t (h d) -> b h t d"', '"b t (d h) -> b h t d"'),
    M("split_heads", "a view to (b, h, t, d) without moving the heads in front of the tokens",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.view(x.shape[0], n_heads, x.shape[1], -1)"),
    M("split_heads", "n_heads taken as the head size d: right only when h = d",
      'h=n_heads)', 'd=n_heads)'),
    M("merge_heads", "concatenates as (d h)",
      '"b h t d -> b t (h d)"', '"b h t d -> b t (d h)"'),
    M("merge_heads", "a reshape without moving the heads behind the tokens",
      'return rearrange(x, "b h t d -> b t (h d)")', "return x.reshape(x.shape[0], x.shape[2], -1)"),
    M("merge_heads", "view after transpose, which fails on the non-contiguous result",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).view(x.shape[0], x.shape[2], -1)"),
    M("MultiHeadAttention", "cross-attention takes its values from x, not from the context",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)", "_, k, _ = self.qkv(context).chunk(3, dim=-1)"),
    M("MultiHeadAttention", "the mask's head axis put in front of the batch: right for batch 1 only",
      'rearrange(mask, "... q k -> ... 1 q k")', 'rearrange(mask, "b q k -> 1 b q k")'),
    M("MultiHeadAttention", "cross-attention takes its queries from the context too",
      "_, k, v = self.qkv(context).chunk(3, dim=-1)", "q, k, v = self.qkv(context).chunk(3, dim=-1)"),
    # 05 · RoPE
    M("rope_frequencies", "the exponent -i/d: i counts 0, 1, 2 instead of 0, 2, 4",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d // 2, dtype=torch.float64)"),
    M("rope_frequencies", "one frequency too many (arange up to d + 1)",
      "torch.arange(0, d, 2, dtype=torch.float64)", "torch.arange(0, d + 1, 2, dtype=torch.float64)"),
    M("rope_frequencies", "operator precedence: base^(-2i) / d",
      "base ** (-two_i / d)", "base ** -two_i / d"),
    M("apply_rope", "rotates the wrong way (the sines' signs swapped)",
      "even * cos - odd * sin, even * sin + odd * cos", "even * cos + odd * sin, odd * cos - even * sin"),
    M("apply_rope", "puts the rotated halves one after the other instead of interleaving the pairs",
      '"two ... half -> ... (half two)"', '"two ... half -> ... (two half)"'),
    M("apply_rope", "takes T from axis 1, right for (b, T, d) inputs only",
      "t, d = x.shape[-2:]", "t, d = x.shape[1], x.shape[-1]"),
    M("RotaryMultiHeadAttention", "rotates the values too",
      "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "q, k, v = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base), "
      "apply_rope(v, positions, self.base)"),
    M("RotaryMultiHeadAttention", "RoPE applied to the whole d_model before the heads are split",
      '    q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'
      "  # each (b, h, t, d_k)\n"
      "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "    q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"
      '        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))'),
    M("RotaryMultiHeadAttention", "the layer's base left out: right for the default base only",
      "apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
      "apply_rope(q, positions), apply_rope(k, positions)"),
    # 06 · FlashAttention
    M("online_softmax", "the running sum not rescaled when the maximum grows",
      "denom = denom * torch.exp(m - m_safe) + ", "denom = denom + "),
    M("online_softmax", "the block maximum without keepdim: right for 1-D x only",
      "block.amax(dim=-1, keepdim=True)", "block.amax(dim=-1)"),
    M("online_softmax", "the loop stops before a ragged last block",
      "range(0, x.shape[-1], block_size)", "range(0, x.shape[-1] - block_size + 1, block_size)"),
    M("flash_attention_query_block", "the lse is log(l) without the running maximum",
      "(m + torch.log(denom)).squeeze(-1)", "torch.log(denom).squeeze(-1)"),
    M("flash_attention_query_block", "the 1/√d scale applied twice (on q and on the scores)",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2)",
      "s = q_blk @ k[..., ks : ks + block_size, :].transpose(-1, -2) / math.sqrt(q_blk.shape[-1])"),
    M("flash_attention_query_block", "the accumulator not rescaled when the maximum grows",
      "acc = alpha * acc + p @", "acc = acc + p @"),
    M("flash_attention", "the causal key loop stops at qe without the offset T_k - T_q",
      "k_end = min(t_k, qe + offset) if is_causal else t_k", "k_end = min(t_k, qe) if is_causal else t_k"),
    M("flash_attention", "the mask inside a diagonal tile without the offset (top-left)",
      "rows = torch.arange(qs, qe, device=q.device) + offset",
      "rows = torch.arange(qs, qe, device=q.device)"),
    M("flash_attention", "ke not clamped to T_k: the ragged last key block's mask has the wrong width",
      "ke = min(ks + block_size, t_k)", "ke = ks + block_size"),
    # 07 · KV cache
    M("block_forward", "post-norm: the LayerNorm after the residual instead of before attention",
      "x = x + block.attn(block.ln1(x), is_causal=True)", "x = block.ln1(x + block.attn(x, is_causal=True))"),
    M("block_forward", "the block attends without the causal mask",
      "block.attn(block.ln1(x), is_causal=True)", "block.attn(block.ln1(x), is_causal=False)"),
    M("block_forward", "the MLP branch reads the block's input, not the attention branch's output",
      "x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return x + block.mlp(block.ln2(x))",
      "h = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)\n"
      "    return h + block.mlp(block.ln2(x))"),
    M("ablate_heads", "zeroes rows of W^O (output features) instead of the head's columns",
      "out.weight[:, head * d_k : (head + 1) * d_k]", "out.weight[head * d_k : (head + 1) * d_k, :]"),
    M("ablate_heads", "edits the model itself instead of a copy",
      "ablated = copy.deepcopy(model)", "ablated = model"),
    M("ablate_heads", "zeroes the head's query weights (uniform attention, not a silent head)",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.qkv.weight[head * d_k : (head + 1) * d_k, :] = 0.0"),
    M("KVCache", "the keys concatenated along the batch axis",
      "k = torch.cat([self.keys[layer], k], dim=-2)", "k = torch.cat([self.keys[layer], k], dim=0)"),
    M("KVCache", "length reads the batch axis",
      "self.keys[layer].shape[-2] if layer in self.keys", "self.keys[layer].shape[0] if layer in self.keys"),
    M("KVCache", "the new positions put before the cached ones",
      "k = torch.cat([self.keys[layer], k], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([self.values[layer], v], dim=-2)",
      "k = torch.cat([k, self.keys[layer]], dim=-2)  # (b, h, t_past + t_new, d_k)\n"
      "            v = torch.cat([v, self.values[layer]], dim=-2)"),
    M("cached_attention", "positions from layer 0's cache length, which the chunk has already grown",
      "torch.arange(t_past, t_past + t_new, device=x.device)",
      "torch.arange(t_new, device=x.device) + cache.length(0)"),
    M("cached_attention", "no causal mask: right for one new token, wrong for a chunk",
      "attention(q, keys, values, is_causal=True)", "attention(q, keys, values, is_causal=False)"),
    M("cached_attention", "attends to the new keys only, not to the cache",
      "out, _ = attention(q, keys, values, is_causal=True)", "out, _ = attention(q, k, v, is_causal=True)"),
    M("generate_with_cache", "feeds the whole sequence to model.step at every step",
      "logits = model.step(next_token, cache, attend)[:, -1]",
      "logits = model.step(tokens, cache, attend)[:, -1]"),
    M("generate_with_cache", "one token too few (range(n_new - 1))",
      "for i in range(n_new):", "for i in range(n_new - 1):"),
    M("generate_with_cache", "picks from the prefill's first position: right for a one-token prompt",
      "logits = model.step(prompt, cache, attend)[:, -1]",
      "logits = model.step(prompt, cache, attend)[:, 0]"),
    M("next_token_probs", "multiplies by the temperature",
      "scaled = logits / temperature", "scaled = logits * temperature"),
    M("next_token_probs", "<= also drops the k-th logit: keeps k - 1",
      "scaled.masked_fill(scaled < kth,", "scaled.masked_fill(scaled <= kth,"),
    M("next_token_probs", "the k-th largest of the first row used for every row",
      "scaled.topk(top_k, dim=-1).values[:, -1:]", "scaled.topk(top_k, dim=-1).values[0, -1]"),
    M("sample_next", "argmax instead of a draw",
      "return torch.multinomial(probs, 1, generator=generator)", "return probs.argmax(dim=-1, keepdim=True)"),
    M("sample_next", "the temperature applied twice",
      "probs = next_token_probs(logits, temperature, top_k)",
      "probs = next_token_probs(logits / temperature, temperature, top_k)"),
    M("sample_next", "one draw shared by every row: right for batch 1 only",
      "return torch.multinomial(probs, 1, generator=generator)",
      "return torch.multinomial(probs[:1], 1, generator=generator).expand(probs.shape[0], 1)"),
    # 08 · Triton
    M("triton_add", "no .contiguous(): wrong on a transposed input",
      "x, y = x.contiguous(), y.contiguous()", "pass"),
    M("triton_softmax", "rows assumed n_cols apart: wrong on a row-sliced x",
      "x_row = x_ptr + row * x_row_stride", "x_row = x_ptr + row * n_cols"),
    M("triton_scores", "the keys masked at t_q instead of t_k",
      "mask=offs_n[:, None] < t_k, other=0.0)", "mask=offs_n[:, None] < t_q, other=0.0)"),
    M("triton_flash_attention", "the accumulator not rescaled by alpha",
      "acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot("),
    # 09 · backward
    M("softmax_backward", "D summed without keepdim",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=dim)"),
    M("softmax_backward", "D always summed over the last axis, whatever dim is",
      "(grad_p * p).sum(dim=dim, keepdim=True)", "(grad_p * p).sum(dim=-1, keepdim=True)"),
    M("softmax_backward", "the factor p left out of the result",
      "return p * (grad_p - D)", "return grad_p - D"),
    M("attention_backward", "dK without the 1/√d scale",
      "dk = ds.transpose(-1, -2) @ q * scale", "dk = ds.transpose(-1, -2) @ q"),
    M("attention_backward", "P recomputed without the causal mask",
      "_, p = attention(q, k, v, is_causal=is_causal)", "_, p = attention(q, k, v)"),
    M("attention_backward", "the row sum of dP∘P taken over the queries (dim=-2)",
      "(dp * p).sum(dim=-1, keepdim=True)", "(dp * p).sum(dim=-2, keepdim=True)"),
    M("flash_attention_backward", "the causal tile skip without the offset T_k - T_q",
      "if is_causal and ks > qe - 1 + offset:", "if is_causal and ks > qe - 1:"),
    M("flash_attention_backward", "dq assigned instead of accumulated over key blocks",
      "dq[..., qs:qe, :] += ds @ k_blk * scale", "dq[..., qs:qe, :] = ds @ k_blk * scale"),
    M("flash_attention_backward", "the scores recomputed without the 1/√d scale before exp(s - lse)",
      "s = q_blk @ k_blk.transpose(-1, -2) * scale", "s = q_blk @ k_blk.transpose(-1, -2)"),
    M("FlashAttentionFunction", "is_causal and block_size not passed to the backward",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out)"),
    M("FlashAttentionFunction", "dq and dk returned in the wrong order",
      "return dq, dk, dv, None, None", "return dk, dq, dv, None, None"),
    M("FlashAttentionFunction", "the forward run without is_causal",
      "flash_attention_forward(q, k, v, is_causal=is_causal, block_size=block_size)",
      "flash_attention_forward(q, k, v, block_size=block_size)"),
    M("triton_flash_attention_backward", "dV stored with the 1/√d scale",
      "tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)",
      "tl.store(dv_ptrs, (dv * sm_scale).to(dv_ptr.dtype.element_ty), mask=kv_mask)"),
    # 10 · modern attention
    M("repeat_kv", "tiles the heads (r h) instead of repeating each in place",
      '"b h t d -> b (h r) t d"', '"b h t d -> b (r h) t d"'),
    M("repeat_kv", "repeats along the time axis",
      '"b h t d -> b (h r) t d"', '"b h t d -> b h (t r) d"'),
    M("GroupedQueryAttention", "the keys split into n_heads heads: right only when n_kv_heads = n_heads",
      'k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_kv_heads)',
      'k = rearrange(self.k(x), "b t (h d) -> b h t d", h=self.n_heads)'),
    M("GroupedQueryAttention", "only the keys repeated, the values left with n_kv_heads heads",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)", "k = repeat_kv(k, n_rep)"),
    M("GroupedQueryAttention", "the mask without its head axis: right for batch 1 only",
      "None if mask is None else mask.unsqueeze(-3)", "mask"),
    M("sliding_window_mask", "top-left aligned: no offset when t_q < t_k",
      "torch.arange(t_q) + (t_k - t_q)", "torch.arange(t_q)"),
    M("sliding_window_mask", "a symmetric window (|distance|): later keys admitted",
      "(distance >= 0) & (distance < window)", "distance.abs() < window"),
    M("sliding_window_mask", "the distance key minus query: the window points forward",
      'rearrange(query_positions, "q -> q 1") - rearrange(key_positions, "k -> 1 k")',
      'rearrange(key_positions, "k -> 1 k") - rearrange(query_positions, "q -> q 1")'),
    M("sliding_window_flash_attention", "the first key block taken from the block's last row",
      "first = max(0, qs + offset - window + 1)", "first = max(0, int(rows[-1]) - window + 1)"),
    M("sliding_window_flash_attention", "the loop breaks one block early (>= instead of >)",
      "if ks > rows[-1]:", "if ks >= rows[-1]:"),
    M("sliding_window_flash_attention", "the mask inside a tile without the causal side",
      "(distance < 0) | (distance >= window)", "distance >= window"),
    M("alibi_score_mod", "the slopes start at head 0 (a slope of 1)",
      "torch.arange(1, n_heads + 1) / n_heads", "torch.arange(0, n_heads) / n_heads"),
    M("alibi_score_mod", "the slopes 2^-(h+1): right for 8 heads only",
      "2.0 ** (-8.0 * torch.arange(1, n_heads + 1) / n_heads)",
      "2.0 ** (-1.0 * torch.arange(1, n_heads + 1))"),
    M("alibi_score_mod", "minus the absolute distance: right on the causal half only",
      "slopes[h] * (kv_idx - q_idx)", "slopes[h] * -(kv_idx - q_idx).abs()"),
    M("document_mask_mod", "not causal: the whole document",
      "(document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)",
      "document_ids[q_idx] == document_ids[kv_idx]"),
    M("document_mask_mod", "causal the wrong way round (kv_idx >= q_idx)",
      "(q_idx >= kv_idx)", "(kv_idx >= q_idx)"),
    M("document_mask_mod", "| instead of &: other documents' earlier tokens admitted",
      ") & (q_idx >= kv_idx)", ") | (q_idx >= kv_idx)"),
)
"""Set A: learner mistakes over every exercise of notebooks 01-10, written blind."""

ALTERNATIVES_A: tuple[BlindAlternative, ...] = (
    A("dot_product_scores", "matmul with the last two axes transposed",
      'return torch.einsum("...qd,...kd->...qk", q, k)', "return q @ k.transpose(-2, -1)"),
    A("softmax", "exp(x - logsumexp)",
      "return exps / exps.sum(dim=dim, keepdim=True)",
      "return torch.exp(shifted - torch.logsumexp(shifted, dim=dim, keepdim=True))"),
    A("dot_product_attention", "einsum for weights @ v",
      "out = weights @ v", 'out = torch.einsum("...qk,...kd->...qd", weights, v)'),
    A("score_variance", "(q * k).sum(-1) for the row-wise dot products",
      'einsum(q, k, "n d, n d -> n")', "(q * k).sum(dim=-1)"),
    A("scaled_dot_product_attention", "q scaled before the product",
      "dot_product_scores(q, k) / math.sqrt(d_k)", "dot_product_scores(q * d_k**-0.5, k)"),
    A("causal_mask", "tril with the diagonal offset t_k - t_q",
      'return rearrange(key_positions, "k -> 1 k") <= rearrange(query_positions, "q -> q 1")',
      "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)"),
    A("padding_mask", "indexing with None instead of rearrange",
      'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
      "positions[None, :] < lengths[:, None]"),
    A("attention", "torch.where instead of masked_fill",
      'scores = scores.masked_fill(~allowed, float("-inf"))',
      'scores = torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))'),
    A("split_heads", "reshape then transpose",
      'return rearrange(x, "b t (h d) -> b h t d", h=n_heads)',
      "return x.reshape(*x.shape[:2], n_heads, -1).transpose(1, 2)"),
    A("merge_heads", "transpose then reshape",
      'return rearrange(x, "b h t d -> b t (h d)")',
      "return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)"),
    A("MultiHeadAttention", "split by width instead of chunk",
      "q, k, v = self.qkv(x).chunk(3, dim=-1)", "q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)"),
    A("rope_frequencies", "1 / base^(2i/d)", "base ** (-two_i / d)", "1.0 / base ** (two_i / d)"),
    A("apply_rope", "stack on the last axis and flatten",
      'return rearrange(rotated, "two ... half -> ... (half two)")',
      "return torch.stack([rotated[0], rotated[1]], dim=-1).flatten(-2)"),
    A("RotaryMultiHeadAttention", "the mask's head axis by rearrange",
      "mask.unsqueeze(-3)", 'rearrange(mask, "... q k -> ... 1 q k")'),
    A("online_softmax", "normalise by subtracting log(denom)",
      "return torch.exp(x - m) / denom", "return torch.exp(x - m - torch.log(denom))"),
    A("flash_attention_query_block", "einsum for p @ v",
      "acc = alpha * acc + p @ v[..., ks : ks + block_size, :]",
      'acc = alpha * acc + torch.einsum("...qk,...kd->...qd", p, v[..., ks : ks + block_size, :])'),
    A("flash_attention", "the causal mask applied in every visited tile",
      "if is_causal and ke - 1 > qs + offset:", "if is_causal:"),
    A("block_forward", "an explicit lower-triangular mask instead of is_causal",
      "block.attn(block.ln1(x), is_causal=True)",
      "block.attn(block.ln1(x), mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril())"),
    A("ablate_heads", "the head's columns through a (d_model, h, d_k) view",
      "ablated.blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0",
      "ablated.blocks[layer].attn.out.weight.view(-1, model.config.n_heads, d_k)[:, head] = 0.0"),
    A("KVCache", "length from size(2)",
      "self.keys[layer].shape[-2] if layer in self.keys", "self.keys[layer].size(2) if layer in self.keys"),
    A("cached_attention", "an explicit bottom-right causal mask",
      "attention(q, keys, values, is_causal=True)",
      "attention(q, keys, values, mask=causal_mask(t_new, keys.shape[-2], device=x.device))"),
    A("generate_with_cache", "hstack for the concatenation",
      "tokens = torch.cat([tokens, next_token], dim=1)", "tokens = torch.hstack([tokens, next_token])"),
    A("next_token_probs", "torch.where for the top-k cut",
      'scaled.masked_fill(scaled < kth, float("-inf"))', 'torch.where(scaled >= kth, scaled, float("-inf"))'),
    A("sample_next", "inverse-CDF sampling with torch.rand and searchsorted",
      "return torch.multinomial(probs, 1, generator=generator)",
      "u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)\n"
      "    return torch.searchsorted(probs.cumsum(-1), u).clamp(max=probs.shape[-1] - 1)"),
    A("triton_add", "a smaller block", "block = 1024", "block = 256"),
    A("softmax_backward", "p·g - p·D", "return p * (grad_p - D)", "return p * grad_p - p * D"),
    A("attention_backward", "einsum for dV",
      "dv = p.transpose(-1, -2) @ grad_out", 'dv = torch.einsum("...qk,...qd->...kd", p, grad_out)'),
    A("flash_attention_backward", "D by einsum",
      "D = (grad_out * out).sum(dim=-1, keepdim=True)",
      'D = torch.einsum("...qd,...qd->...q", grad_out, out)[..., None]'),
    A("FlashAttentionFunction", "keyword arguments and a contiguous grad_out",
      "flash_attention_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.block_size)",
      "flash_attention_backward(q, k, v, out, lse, grad_out.contiguous(), is_causal=ctx.is_causal,"
      " block_size=ctx.block_size)"),
    A("repeat_kv", "repeat_interleave on the head axis",
      'return repeat(x, "b h t d -> b (h r) t d", r=n_rep)', "return x.repeat_interleave(n_rep, dim=1)"),
    A("GroupedQueryAttention", "repeat_interleave instead of repeat_kv",
      "k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)",
      "k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)"),
    A("sliding_window_mask", "distance <= window - 1",
      "(distance >= 0) & (distance < window)", "(distance >= 0) & (distance <= window - 1)"),
    A("sliding_window_flash_attention", "nan_to_num for the safe maximum",
      "m_safe = torch.where(m_new == -math.inf, 0.0, m_new)", "m_safe = m_new.nan_to_num(neginf=0.0)"),
    A("alibi_score_mod", "minus the slope times q_idx - kv_idx",
      "return score + slopes[h] * (kv_idx - q_idx)", "return score - slopes[h] * (q_idx - kv_idx)"),
    A("document_mask_mod", "the causal condition written kv_idx <= q_idx",
      "(q_idx >= kv_idx)", "(kv_idx <= q_idx)"),
)
# fmt: on
"""Set A's right alternatives: one per exercise where a natural one exists."""
