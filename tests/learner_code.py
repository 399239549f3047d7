"""Right solutions written as a learner writes them, and mistakes made from them by text edits.

A wrong case is a correct learner solution with some text replaced (`learner(SOURCE, name, (old,
new), ...)`), never the checker's own simulator with a knob turned: a check must name the mistake
in a learner's code, not recognise itself. Each replacement must match exactly once, so that an
edit of a template cannot silently turn a wrong case into a right one. (Triton kernels are in
`triton_variants.py`, imported from files because Triton reads a kernel's source.)
"""

from __future__ import annotations

import itertools
import linecache
from typing import Any

_COUNT = itertools.count()

PRELUDE = """
import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn
"""

SCORES = """
def dot_product_scores(q, k):
    return q @ k.transpose(-2, -1)
"""

SOFTMAX = """
def softmax(x, dim=-1):
    x_max = x.max(dim=dim, keepdim=True).values
    exps = torch.exp(x - x_max)
    total = exps.sum(dim=dim, keepdim=True)
    return exps / total
"""

DOT_PRODUCT_ATTENTION = """
def dot_product_attention(q, k, v):
    scores = q @ k.transpose(-2, -1)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v
    return out, weights
"""

SCALED = """
def scaled_dot_product_attention(q, k, v):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v
    return out, weights
"""

VARIANCE = """
def score_variance(d_k, n_samples=20_000, scaled=False):
    q = torch.randn(n_samples, d_k)
    k = torch.randn(n_samples, d_k)
    scores = (q * k).sum(dim=-1)
    if scaled:
        scores = scores / math.sqrt(d_k)
    return scores.var().item()
"""

CAUSAL = """
def causal_mask(t_q, t_k=None, device=None):
    if t_k is None:
        t_k = t_q
    rows = torch.arange(t_q, device=device)[:, None] + (t_k - t_q)
    cols = torch.arange(t_k, device=device)[None, :]
    return cols <= rows
"""

PADDING = """
def padding_mask(lengths, t):
    positions = torch.arange(t, device=lengths.device)
    return positions[None, :] < lengths[:, None]
"""

ATTENTION = """
def attention(q, k, v, mask=None, is_causal=False):
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        causal = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:  # a row that may attend no key: 0, as SDPA
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
"""

SPLIT = """
def split_heads(x, n_heads):
    b, t, d_model = x.shape
    d = d_model // n_heads
    return x.view(b, t, n_heads, d).transpose(1, 2)
"""

MERGE = """
def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)
"""

MHA = """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, context=None):
        b, t, d_model = x.shape
        d_k = d_model // self.n_heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, t, self.n_heads, d_k).transpose(1, 2)
        k = k.view(b, t, self.n_heads, d_k).transpose(1, 2)
        v = v.view(b, t, self.n_heads, d_k).transpose(1, 2)
        if context is not None:  # cross-attention: keys and values of the other sequence
            _, k, v = self.qkv(context).chunk(3, dim=-1)
            k = k.view(b, context.shape[1], self.n_heads, d_k).transpose(1, 2)
            v = v.view(b, context.shape[1], self.n_heads, d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        if is_causal:
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, t, d_model)
        return self.out(out)
"""

FREQUENCIES = """
def rope_frequencies(d, base=10000.0):
    i = torch.arange(0, d, 2, dtype=torch.float64)
    return base ** (-i / d)
"""

APPLY_ROPE = """
def apply_rope(x, positions=None, base=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(t, device=x.device)
    i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)
    theta = base ** (-i / d)
    angles = positions.to(torch.float64)[:, None] * theta[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    out_even = x_even * cos - x_odd * sin
    out_odd = x_even * sin + x_odd * cos
    return torch.stack([out_even, out_odd], dim=-1).flatten(-2)
"""

ROTARY = (
    APPLY_ROPE
    + """
class RotaryMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, base=10000.0):
        super().__init__()
        self.n_heads, self.base = n_heads, base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, is_causal=False, positions=None):
        b, t, d_model = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (rearrange(z, "b t (h d) -> b h t d", h=self.n_heads) for z in (q, k, v))
        q = apply_rope(q, positions, self.base)
        k = apply_rope(k, positions, self.base)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        allowed = torch.ones(t, t, dtype=torch.bool, device=x.device)
        if is_causal:
            allowed = allowed.tril()
        if mask is not None:
            allowed = allowed & mask.unsqueeze(-3)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.out(rearrange(out, "b h t d -> b t (h d)"))
"""
)

ONLINE_SOFTMAX = """
def online_softmax(x, block_size):
    n = x.shape[-1]
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    total = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1, keepdim=True).values)
        m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)
        total = total * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / total
"""

FLASH_QUERY_BLOCK = """
def flash_attention_query_block(q_blk, k, v, block_size=64):
    scale = 1 / math.sqrt(q_blk.shape[-1])
    m = torch.full(q_blk.shape[:-1] + (1,), float("-inf"), dtype=q_blk.dtype, device=q_blk.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(q_blk.shape[:-1] + (v.shape[-1],), dtype=q_blk.dtype, device=q_blk.device)
    for ks in range(0, k.shape[-2], block_size):
        s = q_blk @ k[..., ks:ks + block_size, :].transpose(-2, -1) * scale
        m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., ks:ks + block_size, :]
        m = m_new
    return acc / l, (m + torch.log(l)).squeeze(-1)
"""

FLASH = """
def flash_attention(q, k, v, is_causal=False, block_size=64, return_lse=False):
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(d)
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        q_blk = q[..., qs:qe, :]
        m = torch.full(q_blk.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(q_blk.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
        hi = min(t_k, qe + t_k - t_q) if is_causal else t_k
        for ks in range(0, hi, block_size):
            ke = min(ks + block_size, t_k)
            s = q_blk @ k[..., ks:ke, :].transpose(-2, -1) * scale
            if is_causal:
                rows = torch.arange(qs, qe, device=q.device)[:, None] + (t_k - t_q)
                cols = torch.arange(ks, ke, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
            m_new = torch.where(m_new == -math.inf, 0.0, m_new)  # a row whose keys so far are all masked
            p = torch.exp(s - m_new)
            alpha = torch.exp(m - m_new)
            l = l * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ v[..., ks:ke, :]
            m = m_new
        out[..., qs:qe, :] = acc / l
        out[..., qs:qe, :].masked_fill_(l == 0, 0.0)  # a row with no key at all: 0, as attention
        lse[..., qs:qe] = (m + torch.log(l)).squeeze(-1)
    if return_lse:
        return out, lse
    return out
"""

FLASH_SKELETON = """
def flash_attention(q, k, v, is_causal=False, block_size=64, return_lse=False):
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    offset = t_k - t_q
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(q.shape[:-1])
    for qs in range(0, t_q, block_size):
        qe = min(qs + block_size, t_q)
        q_blk = q[..., qs:qe, :] / math.sqrt(d)
        m = q.new_full((*q_blk.shape[:-1], 1), -math.inf)
        denom = q.new_zeros((*q_blk.shape[:-1], 1))
        acc = q.new_zeros((*q_blk.shape[:-1], v.shape[-1]))
        k_end = min(t_k, qe + offset) if is_causal else t_k
        for ks in range(0, max(k_end, 0), block_size):
            ke = min(ks + block_size, t_k)
            s = q_blk @ k[..., ks:ke, :].transpose(-1, -2)
            if is_causal and ke - 1 > qs + offset:
                rows = torch.arange(qs, qe, device=q.device) + offset
                cols = torch.arange(ks, ke, device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
            p = torch.exp(s - m_safe)
            alpha = torch.exp(m - m_safe)
            denom = alpha * denom + p.sum(dim=-1, keepdim=True)
            acc = alpha * acc + p @ v[..., ks:ke, :]
            m = m_new
        denom = torch.where(denom == 0, 1.0, denom)  # given: a row that sees no key gets out 0, lse -inf
        out[..., qs:qe, :] = acc / denom
        lse[..., qs:qe] = (m + torch.log(denom)).squeeze(-1)
    return (out, lse) if return_lse else out
"""
"""Notebook 06's skeleton as a learner fills it: the tiles that cross the diagonal are masked inside."""

KV_CACHE = """
class KVCache:
    def __init__(self):
        self.keys = {}
        self.values = {}

    def length(self, layer):
        if layer not in self.keys:
            return 0
        return self.keys[layer].shape[-2]

    def append(self, layer, k, v):
        if layer in self.keys:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
        else:
            self.keys[layer] = k
            self.values[layer] = v
        return self.keys[layer], self.values[layer]
"""

CACHED = """
from attn_course.attention import attention
from attn_course.heads import merge_heads
from attn_course.rope import apply_rope


def cached_attention(attn, x, cache, layer):
    t_new = x.shape[-2]
    t_past = cache.length(layer)
    positions = torch.arange(t_past, t_past + t_new, device=x.device)
    q, k, v = attn.project(x)
    q = apply_rope(q, positions, attn.base)
    k = apply_rope(k, positions, attn.base)
    keys, values = cache.append(layer, k, v)
    out, _ = attention(q, keys, values, is_causal=True)
    return attn.out(merge_heads(out))
"""

BLOCK = """
def block_forward(block, x):
    h = block.ln1(x)
    x = x + block.attn(h, is_causal=True)
    h = block.ln2(x)
    x = x + block.mlp(h)
    return x
"""

BLOCK_SHORT = """
def block_forward(block, x):
    attended = x + block.attn(block.ln1(x), is_causal=True)
    return attended + block.mlp(block.ln2(attended))
"""

ABLATE = """
import copy


def ablate_heads(model, heads):
    new_model = copy.deepcopy(model)
    d_head = model.config.d_model // model.config.n_heads
    for layer, head in heads:
        weight = new_model.blocks[layer].attn.out.weight
        with torch.no_grad():
            weight[:, head * d_head:(head + 1) * d_head] = 0
    return new_model
"""

GENERATE = """
def generate_with_cache(model, prompt, n_new, pick, cache, attend):
    logits = model.step(prompt, cache, attend)
    tokens = prompt
    for i in range(n_new):
        next_token = pick(logits[:, -1])
        tokens = torch.cat([tokens, next_token], dim=1)
        if i < n_new - 1:  # the last token needs no step: nothing reads its logits
            logits = model.step(next_token, cache, attend)
    return tokens
"""

PROBS = """
def next_token_probs(logits, temperature=1.0, top_k=None):
    logits = logits / temperature
    if top_k is not None:
        threshold = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    return torch.softmax(logits, dim=-1)
"""

SAMPLE_ONLY = """
def sample_next(logits, temperature, top_k, generator):
    probs = next_token_probs(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)
"""

SAMPLE = PROBS + SAMPLE_ONLY
"""sample_next with the learner's next_token_probs above it, as the notebook defines both."""


def learner(source: str, name: str, *edits: tuple[str, str]) -> Any:
    """`name` defined by `source` with each (old, new) text replacement applied once."""
    for old, new in edits:
        assert source.count(old) == 1, f"{old!r} should occur once in the solution"
        source = source.replace(old, new)
    scope: dict[str, Any] = {}
    filename = f"<learner's {name} {next(_COUNT)}>"
    text = PRELUDE + source
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)  # as IPython does
    exec(compile(text, filename, "exec"), scope)
    return scope[name]


ROLLING = """
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope


def rolling_window_step(layer, x, buffer, position):
    window = buffer.window
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), torch.tensor([position]))
    k, v = split_heads(layer.k(x), layer.n_kv_heads), split_heads(layer.v(x), layer.n_kv_heads)
    buffer.keys[:, :, position % window] = k[:, :, 0]  # stored as projected: rotated when read
    buffer.values[:, :, position % window] = v[:, :, 0]
    n = min(position + 1, window)
    slots = torch.arange(n)
    keys = apply_rope(buffer.keys[:, :, :n], position - (position - slots) % window)  # each slot's position
    n_rep = layer.n_heads // layer.n_kv_heads
    keys = keys.repeat_interleave(n_rep, dim=1)
    values = buffer.values[:, :, :n].repeat_interleave(n_rep, dim=1)
    weights = torch.softmax(q @ keys.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
    return layer.out(merge_heads(weights @ values))
"""

GATHER = """
def gather_kv(pool_keys, pool_values, block_table, length):
    blocks_k = pool_keys[block_table]
    blocks_v = pool_values[block_table]
    keys = rearrange(blocks_k, "n h s d -> h (n s) d")
    values = rearrange(blocks_v, "n h s d -> h (n s) d")
    return keys[:, :length], values[:, :length]
"""

APPEND = """
def append_kv(cache, seq, k, v):
    pool = cache.pool
    table = cache.tables[seq]
    length = cache.lengths[seq]
    slot = length % pool.block_size
    if slot == 0:
        table.append(pool.allocate())
    elif pool.refcount[table[-1]] > 1:
        new_block = pool.allocate()
        pool.keys[new_block] = pool.keys[table[-1]]
        pool.values[new_block] = pool.values[table[-1]]
        pool.release(table[-1])
        table[-1] = new_block
    block = table[-1]
    pool.keys[block, :, slot] = k
    pool.values[block, :, slot] = v
    cache.lengths[seq] = length + 1
"""

GATHER_LOOP = """
def gather_kv(pool_keys, pool_values, block_table, length):
    keys = torch.cat([pool_keys[b] for b in block_table], dim=1)
    values = torch.cat([pool_values[b] for b in block_table], dim=1)
    return keys[:, :length], values[:, :length]
"""
"""Exercise 4 of 11 another way: the blocks joined along time one by one (a right learner's, for SWAPS)."""

APPEND_DIVMOD = """
def append_kv(cache, seq, k, v):
    pool, table = cache.pool, cache.tables[seq]
    n_full, slot = divmod(cache.lengths[seq], pool.block_size)
    if n_full == len(table):
        table.append(pool.allocate())
    block = table[n_full]
    if pool.refcount[block] > 1:
        copy = pool.allocate()
        pool.keys[copy].copy_(pool.keys[block])
        pool.values[copy].copy_(pool.values[block])
        pool.release(block)
        table[n_full] = block = copy
    pool.keys[block][:, slot] = k
    pool.values[block][:, slot] = v
    cache.lengths[seq] += 1
"""
"""Exercise 5 of 11 another way: the block and slot by divmod, the copy by copy_ (for SWAPS)."""

MERGE_ATTENTION = """
def merge_attention(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - lse_safe)
    w_b = torch.exp(lse_b - lse_safe)
    out = w_a.unsqueeze(-1) * out_a + w_b.unsqueeze(-1) * out_b
    return out, lse
"""

FLASH_DECODE = """
from attn_course.merging import partial_attention


def flash_decode(q, k, v, chunk_size):
    outs, lses = [], []
    for start in range(0, k.shape[-2], chunk_size):
        chunk_k, chunk_v = k[..., start:start + chunk_size, :], v[..., start:start + chunk_size, :]
        out_c, lse_c = partial_attention(q, chunk_k, chunk_v)
        outs.append(out_c)
        lses.append(lse_c)
    lses = torch.stack(lses)
    lse = torch.logsumexp(lses, dim=0)
    weights = torch.exp(lses - lse)
    return (weights.unsqueeze(-1) * torch.stack(outs)).sum(dim=0)
"""

FLASH_DECODE_LOOP = (
    MERGE_ATTENTION
    + """
from attn_course.merging import partial_attention


def flash_decode(q, k, v, chunk_size):
    out, lse = None, None
    for start in range(0, k.shape[-2], chunk_size):
        chunk = slice(start, start + chunk_size)
        out_c, lse_c = partial_attention(q, k[..., chunk, :], v[..., chunk, :])
        if out is None:
            out, lse = out_c, lse_c
        else:
            out, lse = merge_attention(out, lse, out_c, lse_c)
    return out
"""
)
"""flash_decode as a loop of the learner's own merge_attention (defined above it, as in the notebook)."""

MERGE_ATTENTION_STACKED = """
def merge_attention(out_a, lse_a, out_b, lse_b):
    lses = torch.stack([lse_a, lse_b])  # (2, ..., T_q)
    outs = torch.stack([out_a, out_b])  # (2, ..., T_q, d_v)
    lse = torch.logsumexp(lses, dim=0)
    safe = lse.masked_fill(lse == float("-inf"), 0.0)
    weights = torch.exp(lses - safe)
    return (weights[..., None] * outs).sum(dim=0), lse
"""
"""merge_attention over the two lse stacked, with a guard: a right answer unlike the course's (for SWAPS)."""

FLASH_DECODE_PADDED = """
from attn_course.merging import partial_attention


def flash_decode(q, k, v, chunk_size):
    t_k = k.shape[-2]
    n = -(-t_k // chunk_size)
    pad = n * chunk_size - t_k
    k = F.pad(k, (0, 0, 0, pad))
    v = F.pad(v, (0, 0, 0, pad))
    valid = torch.arange(n * chunk_size, device=k.device) < t_k
    k = rearrange(k, "... (n c) d -> ... n c d", c=chunk_size)
    v = rearrange(v, "... (n c) d -> ... n c d", c=chunk_size)
    mask = rearrange(valid, "(n c) -> n 1 c", c=chunk_size)
    out_c, lse_c = partial_attention(q.unsqueeze(-3), k, v, mask=mask)  # (..., n, T_q, d_v), (..., n, T_q)
    lse = torch.logsumexp(lse_c, dim=-2, keepdim=True)
    weights = torch.exp(lse_c - lse)
    return (weights.unsqueeze(-1) * out_c).sum(dim=-3)
"""
"""flash_decode with the cache padded to whole chunks and the padding masked: one call for every chunk."""

LATENT = """
from attn_course.rope import apply_rope


def latent_attention(attn, x, positions=None):
    b, t, _ = x.shape
    h = attn.n_heads
    c = attn.kv_down(x)
    q = rearrange(attn.q(x), "b t (h d) -> b h t d", h=h)
    k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h)
    v = rearrange(attn.v_up(c), "b t (h d) -> b h t d", h=h)
    q_r = rearrange(attn.q_rope(x), "b t (h r) -> b h t r", h=h)
    q_r = apply_rope(q_r, positions, attn.base)
    k_r = apply_rope(attn.k_rope(x), positions, attn.base)
    scores = q @ k.transpose(-2, -1) + q_r @ k_r[:, None].transpose(-2, -1)
    scores = scores / math.sqrt(attn.d_head + attn.d_rope)
    mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = rearrange(weights @ v, "b h t d -> b t (h d)")
    return attn.out(out)
"""

ABSORBED = """
from attn_course.rope import apply_rope


def absorbed_latent_attention(attn, x, cache, layer):
    b, t_new, _ = x.shape
    h = attn.n_heads
    t_past = cache.length(layer)
    positions = torch.arange(t_past, t_past + t_new, device=x.device)
    c = attn.kv_down(x)
    k_r = apply_rope(attn.k_rope(x), positions, attn.base)
    latents, rope_keys = cache.append(layer, c, k_r)
    t_k = latents.shape[1]
    q = rearrange(attn.q(x), "b t (h d) -> b h t d", h=h)
    q_r = apply_rope(rearrange(attn.q_rope(x), "b t (h r) -> b h t r", h=h), positions, attn.base)
    w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h)
    q_lat = torch.einsum("bhtd,hdc->bhtc", q, w_uk)
    scores = torch.einsum("bhtc,bsc->bhts", q_lat, latents)
    scores = scores + torch.einsum("bhtr,bsr->bhts", q_r, rope_keys)
    scores = scores / math.sqrt(attn.d_head + attn.d_rope)
    mask = torch.ones(t_new, t_k, dtype=torch.bool, device=x.device).tril(diagonal=t_k - t_new)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    o_lat = torch.einsum("bhts,bsc->bhtc", weights, latents)
    w_uv = rearrange(attn.v_up.weight, "(h d) c -> h d c", h=h)
    out = torch.einsum("bhtc,hdc->bhtd", o_lat, w_uv)
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))
"""


LATENT_SDPA = """
from attn_course.rope import apply_rope


def latent_attention(attn, x, positions=None):
    b, t, _ = x.shape
    h = attn.n_heads
    c = attn.kv_down(x)
    q = attn.q(x).view(b, t, h, attn.d_head).transpose(1, 2)
    k = attn.k_up(c).view(b, t, h, attn.d_head).transpose(1, 2)
    v = attn.v_up(c).view(b, t, h, attn.d_head).transpose(1, 2)
    q_r = apply_rope(attn.q_rope(x).view(b, t, h, attn.d_rope).transpose(1, 2), positions, attn.base)
    k_r = apply_rope(attn.k_rope(x), positions, attn.base)[:, None].expand(b, h, t, attn.d_rope)
    q_full, k_full = torch.cat([q, q_r], dim=-1), torch.cat([k, k_r], dim=-1)
    out = F.scaled_dot_product_attention(q_full, k_full, v, is_causal=True)
    return attn.out(out.transpose(1, 2).reshape(b, t, h * attn.d_head))
"""

ABSORBED_FOLDED = """
from attn_course.rope import apply_rope


def absorbed_latent_attention(attn, x, cache, layer):
    b, t_new, _ = x.shape
    h, d, c = attn.n_heads, attn.d_head, attn.d_latent
    start = cache.length(layer)
    pos = torch.arange(start, start + t_new, device=x.device)
    latents, rope_keys = cache.append(layer, attn.kv_down(x), apply_rope(attn.k_rope(x), pos, attn.base))
    w_q = attn.q.weight.view(h, d, attn.d_model)
    w_uk = attn.k_up.weight.view(h, d, c)
    w_q_absorbed = w_uk.transpose(1, 2) @ w_q
    q_lat = torch.einsum("hcm,btm->bhtc", w_q_absorbed, x)
    q_r = apply_rope(attn.q_rope(x).view(b, t_new, h, attn.d_rope).transpose(1, 2), pos, attn.base)
    scores = (q_lat @ latents.unsqueeze(1).transpose(-1, -2) + q_r @ rope_keys.unsqueeze(1).transpose(-1, -2))
    scores = scores / math.sqrt(d + attn.d_rope)
    t_k = latents.shape[1]
    future = torch.arange(t_k, device=x.device)[None, :] > (pos[:, None])
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    o_lat = weights @ latents.unsqueeze(1)
    w_uv = attn.v_up.weight.view(h, d, c)
    w_o = attn.out.weight.view(attn.d_model, h, d)
    w_vo = torch.einsum("hdc,mhd->hcm", w_uv, w_o)
    return torch.einsum("bhtc,hcm->btm", o_lat, w_vo)
"""

RING_BLOCKING = """
def ring_attention(q, k, v, is_causal=False):
    rank, world = dist.get_rank(), dist.get_world_size()
    kv = torch.cat([k, v], dim=-1).contiguous()
    d = k.shape[-1]
    out = lse = None
    for step in range(world):
        src = (rank - step) % world
        if not (is_causal and src > rank):
            o, l = partial_attention(q, kv[..., :d], kv[..., d:], is_causal=is_causal and src == rank)
            out, lse = (o, l) if out is None else merge_attention(out, lse, o, l)
        if step == world - 1:
            break
        incoming = torch.empty_like(kv)
        if rank % 2 == 0:
            dist.send(kv, (rank + 1) % world)
            dist.recv(incoming, (rank - 1) % world)
        else:
            dist.recv(incoming, (rank - 1) % world)
            dist.send(kv, (rank + 1) % world)
        kv = incoming
    return out
"""
"""Exercise 3 of 11 another way: keys and values sent as one tensor, blocking send/recv ordered by rank
parity (for SWAPS)."""
