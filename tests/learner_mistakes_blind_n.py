"""Blind set N of learner mistakes and right alternatives, for the seven exercises of notebook 11.

Written on 2026-12-07 from the solution and student notebooks 11 (each exercise's text and its
solution cell) and the topic modules (attn_course/merging.py, ring.py, ranks.py, paged_cache.py,
latent.py, kv_cache.py, rope.py) only, by someone who read no check, no check's message, no test of a
check and no earlier set, and never ran a check. Each mistake is a text edit of the solution
notebook's exercise cell taken without its `### BEGIN/END SOLUTION` marker lines (`old`, occurring
exactly once in that cell, replaced by `new`), with the idea of the mistake in one short phrase: five
per exercise, many right on the simple input and wrong on another the exercise allows (batch axes,
ragged chunks, rows with no key, lse past float32's exp, 4 ranks, blocks of 1, forks at and inside a
block, uneven positions, a second cache layer). Each alternative keeps the exercise right while
writing it differently (one per exercise). The writer's own script showed every mistake wrong against
`attn_course.reference` (the ring's through `attn_course.ring.run_ring` on real processes) on an input
the exercise allows, and every alternative right on several. `blind_n_namespace.namespace` loads an
edit as a learner's notebook holds it; `tests/test_checks_blind_n.py` runs the set
(`make test-blind`), and `blind_first_run_n.json` keeps what each edit got the first time.
"""

from __future__ import annotations

from learner_mistakes_blind_a import BlindAlternative, BlindMistake

# fmt: off
HOLDOUT_N = (
    # ---------------------------------------------------------------- merge_attention
    BlindMistake(
        "merge_attention",
        "no safe lse: -inf - (-inf) gives NaN for a row with no key in either part",
        "lse_safe = torch.where(torch.isinf(lse), 0.0, lse)",
        "lse_safe = lse",
    ),
    BlindMistake(
        "merge_attention",
        "weights as e^lse_A / (e^lse_A + e^lse_B): overflows for large lse",
        "return weight_a * out_a + weight_b * out_b, lse",
        "exp_a, exp_b = torch.exp(lse_a).unsqueeze(-1), torch.exp(lse_b).unsqueeze(-1)\n"
        "    return (exp_a * out_a + exp_b * out_b) / (exp_a + exp_b), lse",
    ),
    BlindMistake(
        "merge_attention",
        "merged lse as the larger of the two lse (running max), not their logaddexp",
        "lse = torch.logaddexp(lse_a, lse_b)",
        "lse = torch.maximum(lse_a, lse_b)",
    ),
    BlindMistake(
        "merge_attention",
        "weights without the trailing axis: (..., T_q) broadcast against (..., T_q, d_v)",
        "weight_a = torch.exp(lse_a - lse_safe).unsqueeze(-1)",
        "weight_a = torch.exp(lse_a - lse_safe)",
    ),
    BlindMistake(
        "merge_attention",
        "returns the safe lse: a row with no key comes out with lse 0, not -inf",
        "return weight_a * out_a + weight_b * out_b, lse",
        "return weight_a * out_a + weight_b * out_b, lse_safe",
    ),
    # ---------------------------------------------------------------- flash_decode
    BlindMistake(
        "flash_decode",
        "drops the shorter last chunk (and every key when chunk_size > T_k)",
        "for start in range(0, k.shape[-2], chunk_size):",
        "for start in range(0, k.shape[-2] - chunk_size + 1, chunk_size):",
    ),
    BlindMistake(
        "flash_decode",
        "slices the first axis, not the key axis: right only without batch axes",
        "partial_attention(q, k[..., chunk, :], v[..., chunk, :])",
        "partial_attention(q, k[chunk], v[chunk])",
    ),
    BlindMistake(
        "flash_decode",
        "plain mean of the chunks' outputs, lse ignored",
        "return (weights * torch.stack(outs)).sum(dim=0)",
        "return torch.stack(outs).mean(dim=0)",
    ),
    BlindMistake(
        "flash_decode",
        "logsumexp over the query axis instead of the chunks",
        "lse = torch.logsumexp(lses, dim=0)",
        "lse = torch.logsumexp(lses, dim=-1, keepdim=True)",
    ),
    BlindMistake(
        "flash_decode",
        "running merge started from an empty part with lse 0 instead of -inf",
        "    lses = torch.stack(lses)",
        "    out, lse = torch.zeros_like(outs[0]), torch.zeros_like(lses[0])  # nothing merged yet\n"
        "    for out_c, lse_c in zip(outs, lses):\n"
        "        out, lse = merge_attention(out, lse, out_c, lse_c)\n"
        "    return out\n"
        "    lses = torch.stack(lses)",
    ),
    # ---------------------------------------------------------------- ring_attention
    BlindMistake(
        "ring_attention",
        "causal mask on every block, not only the diagonal one",
        "is_causal=is_causal and source == rank",
        "is_causal=is_causal",
    ),
    BlindMistake(
        "ring_attention",
        "skips the earlier ranks' blocks instead of the later ones",
        "if not (is_causal and source > rank):",
        "if not (is_causal and source < rank):",
    ),
    BlindMistake(
        "ring_attention",
        "block in hand taken as rank + step's (right on 2 ranks only)",
        "source = (rank - step) % world",
        "source = (rank + step) % world",
    ),
    BlindMistake(
        "ring_attention",
        "forgets to move on to the received values: v stays its own block",
        "k_block, v_block = k_next, v_next",
        "k_block = k_next",
    ),
    BlindMistake(
        "ring_attention",
        "receives from rank + 1, the rank it sends to (deadlock on 4 ranks)",
        "                dist.irecv(k_next, (rank - 1) % world),\n"
        "                dist.irecv(v_next, (rank - 1) % world),",
        "                dist.irecv(k_next, (rank + 1) % world),\n"
        "                dist.irecv(v_next, (rank + 1) % world),",
    ),
    # ---------------------------------------------------------------- gather_kv
    BlindMistake(
        "gather_kv",
        "merges (slot, block) into time, slot the slower axis",
        '    keys = rearrange(pool_keys[index], "n h s d -> h (n s) d")',
        '    keys = rearrange(pool_keys[index], "n h s d -> h (s n) d")',
    ),
    BlindMistake(
        "gather_kv",
        "blocks in the pool's order (table sorted), not the table's",
        "index = torch.tensor(block_table, dtype=torch.long",
        "index = torch.tensor(sorted(block_table), dtype=torch.long",
    ),
    BlindMistake(
        "gather_kv",
        "no cut to length: the last block's stale slots come along",
        "return keys[:, :length], values[:, :length]",
        "return keys, values",
    ),
    BlindMistake(
        "gather_kv",
        "reshape (n, H, B, d) to (H, n·B, d) without moving the head axis",
        '    values = rearrange(pool_values[index], "n h s d -> h (n s) d")',
        "    values = pool_values[index].reshape(pool_values.shape[1], -1, pool_values.shape[-1])",
    ),
    BlindMistake(
        "gather_kv",
        "per-block loop into a torch.zeros buffer of the default dtype (float32)",
        '    keys = rearrange(pool_keys[index], "n h s d -> h (n s) d")  # (H, n·block_size, d)\n'
        '    values = rearrange(pool_values[index], "n h s d -> h (n s) d")  # (H, n·block_size, d)\n',
        "    _, n_heads, block_size, d = pool_keys.shape\n"
        "    keys = torch.zeros(n_heads, len(block_table) * block_size, d, device=pool_keys.device)\n"
        "    values = torch.zeros(n_heads, len(block_table) * block_size, d, device=pool_keys.device)\n"
        "    for i, block in enumerate(block_table):  # block i holds positions i·B … (i+1)·B - 1\n"
        "        keys[:, i * block_size : (i + 1) * block_size] = pool_keys[block]\n"
        "        values[:, i * block_size : (i + 1) * block_size] = pool_values[block]\n",
    ),
    # ---------------------------------------------------------------- append_kv
    BlindMistake(
        "append_kv",
        "copy-on-write takes a new block but copies nothing into it",
        "        pool.keys[copy] = pool.keys[shared]  # (H, block_size, d)\n"
        "        pool.values[copy] = pool.values[shared]  # (H, block_size, d)\n",
        "",
    ),
    BlindMistake(
        "append_kv",
        "copy-on-write never releases the shared block",
        "        pool.release(shared)\n",
        "",
    ),
    BlindMistake(
        "append_kv",
        "copies a shared last block even when it is full (sharing checked before fullness)",
        "    if slot == 0:  # the last block is full, or there is none: a new one\n"
        "        table.append(pool.allocate())\n"
        "    elif pool.refcount[table[-1]] > 1:  # shared with another sequence: copy it before writing\n"
        "        shared, copy = table[-1], pool.allocate()\n"
        "        pool.keys[copy] = pool.keys[shared]  # (H, block_size, d)\n"
        "        pool.values[copy] = pool.values[shared]  # (H, block_size, d)\n"
        "        pool.release(shared)\n"
        "        table[-1] = copy\n",
        "    if table and pool.refcount[table[-1]] > 1:  # shared with another sequence: copy it before writing\n"
        "        shared, copy = table[-1], pool.allocate()\n"
        "        pool.keys[copy] = pool.keys[shared]  # (H, block_size, d)\n"
        "        pool.values[copy] = pool.values[shared]  # (H, block_size, d)\n"
        "        pool.release(shared)\n"
        "        table[-1] = copy\n"
        "    if slot == 0:  # the last block is full, or there is none: a new one\n"
        "        table.append(pool.allocate())\n",
    ),
    BlindMistake(
        "append_kv",
        "a new block only when the table is empty, never when the last block is full",
        "if slot == 0:",
        "if not table:",
    ),
    BlindMistake(
        "append_kv",
        "copy-on-write when the count is 1 too (copies a block it holds alone)",
        "elif pool.refcount[table[-1]] > 1:",
        "elif pool.refcount[table[-1]] >= 1:",
    ),
    # ---------------------------------------------------------------- latent_attention
    BlindMistake(
        "latent_attention",
        "scores divided by sqrt(d_head), the RoPE width left out",
        "scores = scores / math.sqrt(attn.d_head + attn.d_rope)",
        "scores = scores / math.sqrt(attn.d_head)",
    ),
    BlindMistake(
        "latent_attention",
        "keys split into heads as (d h) (right with one head)",
        'k = rearrange(attn.k_up(c), "b t (h d) -> b h t d", h=h)',
        'k = rearrange(attn.k_up(c), "b t (d h) -> b h t d", h=h)',
    ),
    BlindMistake(
        "latent_attention",
        "RoPE key rotated at 0 … t-1 whatever `positions` says",
        "k_rope = apply_rope(attn.k_rope(x), positions, attn.base)",
        "k_rope = apply_rope(attn.k_rope(x), None, attn.base)",
    ),
    BlindMistake(
        "latent_attention",
        "RoPE applied to the compressed queries and keys too",
        "scores = q @ k.transpose(-2, -1) + q_rope",
        "q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)\n"
        "    scores = q @ k.transpose(-2, -1) + q_rope",
    ),
    BlindMistake(
        "latent_attention",
        "shared RoPE key transposed with no head axis: batch broadcast against heads",
        'q_rope @ rearrange(k_rope, "b t r -> b 1 r t")',
        "q_rope @ k_rope.transpose(-2, -1)",
    ),
    # ---------------------------------------------------------------- absorbed_latent_attention
    BlindMistake(
        "absorbed_latent_attention",
        "new tokens placed at positions 0 … t_new-1, t_past ignored",
        "positions = torch.arange(t_past, t_past + t_new, device=x.device)",
        "positions = torch.arange(t_new, device=x.device)",
    ),
    BlindMistake(
        "absorbed_latent_attention",
        "top-left aligned causal mask over the cache",
        "allowed = causal_mask(t_new, latents.shape[-2], device=x.device)",
        "allowed = torch.ones(t_new, latents.shape[-2], dtype=torch.bool, device=x.device).tril()",
    ),
    BlindMistake(
        "absorbed_latent_attention",
        "W^UK's rows split into heads as (d h)",
        'w_uk = rearrange(attn.k_up.weight, "(h d) c -> h d c", h=h)',
        'w_uk = rearrange(attn.k_up.weight, "(d h) c -> h d c", h=h)',
    ),
    BlindMistake(
        "absorbed_latent_attention",
        "scaled by the absorbed query's width, sqrt(d_latent + d_rope)",
        "scores = scores / math.sqrt(attn.d_head + attn.d_rope)",
        "scores = scores / math.sqrt(attn.d_latent + attn.d_rope)",
    ),
    BlindMistake(
        "absorbed_latent_attention",
        "past length read from layer 0 whatever the layer",
        "cache.length(layer)",
        "cache.length(0)",
    ),
)

ALTERNATIVES_N = (
    BlindAlternative(
        "merge_attention",
        "shift by the larger lse, safe denominator, lse = m + log(sum)",
        "    lse = torch.logaddexp(lse_a, lse_b)  # (..., T_q), -inf only where neither part saw a key\n"
        "    lse_safe = torch.where(torch.isinf(lse), 0.0, lse)  # (..., T_q): never -inf - (-inf)\n"
        "    weight_a = torch.exp(lse_a - lse_safe).unsqueeze(-1)  # (..., T_q, 1), 0 where A saw no key\n"
        "    weight_b = torch.exp(lse_b - lse_safe).unsqueeze(-1)  # (..., T_q, 1)\n"
        "    return weight_a * out_a + weight_b * out_b, lse  # (..., T_q, d_v), (..., T_q)",
        "    m = torch.maximum(lse_a, lse_b)  # (..., T_q)\n"
        "    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # 0 where neither part saw a key\n"
        "    e_a, e_b = torch.exp(lse_a - m), torch.exp(lse_b - m)  # (..., T_q), each in [0, 1]\n"
        "    total = e_a + e_b  # (..., T_q), 0 only where neither part saw a key\n"
        "    lse = m + torch.log(total)  # -inf where total is 0\n"
        "    denom = torch.where(total > 0, total, torch.ones_like(total))\n"
        "    out = (e_a[..., None] * out_a + e_b[..., None] * out_b) / denom[..., None]\n"
        "    return out, lse",
    ),
    BlindAlternative(
        "flash_decode",
        "chunks by tensor.split, merged chunk after chunk with merge_attention",
        "    outs, lses = [], []\n"
        "    for start in range(0, k.shape[-2], chunk_size):  # the last chunk may be shorter\n"
        "        chunk = slice(start, start + chunk_size)\n"
        "        out_c, lse_c = partial_attention(q, k[..., chunk, :], v[..., chunk, :])  # (..., T_q, d_v), (..., T_q)\n"
        "        outs.append(out_c)\n"
        "        lses.append(lse_c)\n"
        "    lses = torch.stack(lses)  # (n_chunks, ..., T_q)\n"
        "    lse = torch.logsumexp(lses, dim=0)  # (..., T_q): the whole cache's\n"
        "    weights = torch.exp(lses - lse).unsqueeze(-1)  # (n_chunks, ..., T_q, 1), summing to 1 over the chunks\n"
        "    return (weights * torch.stack(outs)).sum(dim=0)  # (..., T_q, d_v)",
        "    out = lse = None\n"
        "    for k_c, v_c in zip(k.split(chunk_size, dim=-2), v.split(chunk_size, dim=-2)):\n"
        "        part = partial_attention(q, k_c, v_c)  # (..., T_q, d_v), (..., T_q)\n"
        "        out, lse = part if out is None else merge_attention(out, lse, *part)\n"
        "    return out",
    ),
    BlindAlternative(
        "ring_attention",
        "start from an empty part (zeros, lse -inf) and merge every block computed",
        "    out, lse = None, None\n",
        "    out = q.new_zeros(*q.shape[:-1], v.shape[-1])  # (..., T/R, d_v): nothing seen yet\n"
        "    lse = q.new_full(q.shape[:-1], float(\"-inf\"))  # (..., T/R)\n",
    ),
    BlindAlternative(
        "gather_kv",
        "per-position gather: block table[t // B], slot t % B",
        "    return keys[:, :length], values[:, :length]",
        "    block_size = pool_keys.shape[-2]\n"
        "    t = torch.arange(length, device=pool_keys.device)  # (length,)\n"
        "    blocks, slots = index[t // block_size], t % block_size  # (length,) each\n"
        "    return pool_keys[blocks, :, slots].transpose(0, 1), pool_values[blocks, :, slots].transpose(0, 1)",
    ),
    BlindAlternative(
        "append_kv",
        "divmod for block and slot, copy_ into the new block, write through a view",
        "    pool, table, length = cache.pool, cache.tables[seq], cache.lengths[seq]\n"
        "    slot = length % pool.block_size\n"
        "    if slot == 0:  # the last block is full, or there is none: a new one\n"
        "        table.append(pool.allocate())\n"
        "    elif pool.refcount[table[-1]] > 1:  # shared with another sequence: copy it before writing\n"
        "        shared, copy = table[-1], pool.allocate()\n"
        "        pool.keys[copy] = pool.keys[shared]  # (H, block_size, d)\n"
        "        pool.values[copy] = pool.values[shared]  # (H, block_size, d)\n"
        "        pool.release(shared)\n"
        "        table[-1] = copy\n"
        "    pool.keys[table[-1], :, slot] = k  # (H, d) into slot `slot` of every head\n"
        "    pool.values[table[-1], :, slot] = v\n"
        "    cache.lengths[seq] = length + 1",
        "    pool, table = cache.pool, cache.tables[seq]\n"
        "    n_full, slot = divmod(cache.lengths[seq], pool.block_size)\n"
        "    if len(table) == n_full:  # no room in the table's blocks\n"
        "        table.append(pool.allocate())\n"
        "    block = table[-1]\n"
        "    if pool.refcount[block] > 1:  # shared: write into a private copy\n"
        "        new = pool.allocate()\n"
        "        pool.keys[new].copy_(pool.keys[block])\n"
        "        pool.values[new].copy_(pool.values[block])\n"
        "        pool.release(block)\n"
        "        table[-1] = block = new\n"
        "    pool.keys[block][:, slot] = k\n"
        "    pool.values[block][:, slot] = v\n"
        "    cache.lengths[seq] += 1",
    ),
    BlindAlternative(
        "latent_attention",
        "per-head keys [k^C; k^R] concatenated, then SDPA (causal, default scale)",
        "    scores = q @ k.transpose(-2, -1) + q_rope @ rearrange(k_rope, \"b t r -> b 1 r t\")  # (b, h, t, t)\n"
        "    scores = scores / math.sqrt(attn.d_head + attn.d_rope)\n"
        "    scores = scores.masked_fill(~causal_mask(t, device=x.device), float(\"-inf\"))  # (b, h, t, t)\n"
        "    weights = torch.softmax(scores, dim=-1)  # (b, h, t, t)\n"
        "    return attn.out(rearrange(weights @ v, \"b h t d -> b t (h d)\"))  # (b, t, d_model)",
        "    k_rope = repeat(k_rope, \"b t r -> b h t r\", h=h)  # (b, h, t, d_rope): one for every head\n"
        "    queries = torch.cat([q, q_rope], dim=-1)  # (b, h, t, d_head + d_rope)\n"
        "    keys = torch.cat([k, k_rope], dim=-1)  # (b, h, t, d_head + d_rope)\n"
        "    out = F.scaled_dot_product_attention(queries, keys, v, is_causal=True)  # scale 1/sqrt(d_head + d_rope)\n"
        "    return attn.out(rearrange(out, \"b h t d -> b t (h d)\"))  # (b, t, d_model)",
    ),
    BlindAlternative(
        "absorbed_latent_attention",
        "broadcast matmuls instead of einsum (latents a view per head)",
        "    q_latent = torch.einsum(\"bhtd,hdc->bhtc\", q, w_uk)  # (b, h, t_new, d_latent): W^UK absorbed\n"
        "    scores = torch.einsum(\"bhtc,bsc->bhts\", q_latent, latents)  # (b, h, t_new, t_k)\n"
        "    scores = scores + torch.einsum(\"bhtr,bsr->bhts\", q_rope, rope_keys)  # (b, h, t_new, t_k)\n",
        "    q_latent = q @ w_uk  # (b, h, t_new, d_latent): (h, d_head, d_latent) broadcast over b\n"
        "    scores = q_latent @ latents.unsqueeze(1).transpose(-2, -1)  # (b, h, t_new, t_k)\n"
        "    scores = scores + q_rope @ rope_keys.unsqueeze(1).transpose(-2, -1)  # (b, h, t_new, t_k)\n",
    ),
)
# fmt: on
