"""The course's Triton kernels: a warm-up add, a streaming row softmax, one tile of scores, FlashAttention.

This module needs Triton, and imports it after `setup_triton()`; `attn_course.triton_flash.launchers` wraps
each kernel in a function that allocates the output, picks the grid and launches it, and says how to get
Triton where it is missing. Every kernel takes raw pointers and strides, so it works on views.

Introduced in 08_triton_flash_attention (the backward kernels in 09_backward).
"""

from attn_course.triton_flash.runtime import setup_triton

setup_triton()  # before triton is imported: interpret kernels where no GPU can run them

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for i < n; program p handles the elements p·BLOCK to p·BLOCK + BLOCK - 1."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    inside = offsets < n  # (BLOCK,): the last program's block runs past the end
    x = tl.load(x_ptr + offsets, mask=inside)  # (BLOCK,)
    y = tl.load(y_ptr + offsets, mask=inside)  # (BLOCK,)
    tl.store(out_ptr + offsets, x + y, mask=inside)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    """Softmax of one row per program, streaming the row in blocks with a running max and sum."""
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    m = tl.full([BLOCK], float("-inf"), tl.float32)  # (BLOCK,): running max of each lane
    total = tl.zeros([BLOCK], tl.float32)  # (BLOCK,): running sum of exp(x - m) of each lane
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # (BLOCK,)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  # (BLOCK,)
        m_new = tl.maximum(m, x)  # (BLOCK,)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no -inf - -inf = NaN in empty lanes
        total = total * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, axis=0)  # the lanes' maxima brought to one
    row_sum = tl.sum(total * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # (BLOCK,)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  # (BLOCK,)
        y = tl.exp(x - row_max) / row_sum  # (BLOCK,)
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def scores_kernel(
    q_ptr, k_ptr, scores_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_sb, stride_sh, stride_sm,
    heads, t_q, t_k, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program per (query block, key block, batch·head): one BLOCK_M × BLOCK_N tile of QKᵀ·sm_scale.

    The first step of the FlashAttention kernel on its own: strided 2-D loads of a query and a key
    tile, masked at the ragged ends, one `tl.dot`, a masked 2-D store. HEAD_DIM is a power of two, at
    least 16, and the head dim is contiguous.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_bh = tl.program_id(2)
    b = pid_bh // heads
    h = pid_bh % heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,): query rows
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,): key rows
    offs_d = tl.arange(0, HEAD_DIM)  # (HEAD_DIM,)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < t_q, other=0.0)  # (BLOCK_M, HEAD_DIM)
    k = tl.load(k_ptrs, mask=offs_n[:, None] < t_k, other=0.0)  # (BLOCK_N, HEAD_DIM)
    s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N), float32
    s_ptrs = scores_ptr + b * stride_sb + h * stride_sh + offs_m[:, None] * stride_sm + offs_n[None, :]
    inside = (offs_m[:, None] < t_q) & (offs_n[None, :] < t_k)  # (BLOCK_M, BLOCK_N)
    tl.store(s_ptrs, s.to(scores_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _attend_key_blocks(
    acc, m, total, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, start, stop, t_k, offset,
    qk_scale, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Fold key blocks [start, stop) into the running (acc, m, total) of one query block.

    Unmasked blocks must lie wholly below the diagonal and inside t_k, with an unpadded head dim.
    """
    d_inside = tl.arange(0, BLOCK_D)[None, :] < HEAD_DIM  # (1, BLOCK_D)
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n  # (BLOCK_N,): key positions
        if MASKED:
            inside = (cols[:, None] < t_k) & d_inside  # (BLOCK_N, BLOCK_D)
            k = tl.load(k_ptrs + start_n * stride_kn, mask=inside, other=0.0)  # (BLOCK_N, BLOCK_D)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn)  # (BLOCK_N, D)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N): scores in base-2 units
        if MASKED:
            allowed = cols[None, :] < t_k  # (1, BLOCK_N): the ragged tail
            if IS_CAUSAL:
                allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)  # (BLOCK_M, BLOCK_N)
            s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # (BLOCK_M,)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no key yet
        alpha = tl.exp2(m - m_safe)  # (BLOCK_M,): how much the old terms shrink
        p = tl.exp2(s - m_safe[:, None])  # (BLOCK_M, BLOCK_N)
        total = total * alpha + tl.sum(p, axis=1)
        if MASKED:
            v = tl.load(v_ptrs + start_n * stride_vn, mask=inside, other=0.0)  # (BLOCK_N, BLOCK_D)
        else:
            v = tl.load(v_ptrs + start_n * stride_vn)  # (BLOCK_N, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # (BLOCK_M, D)
        m = m_new
    return acc, m, total


@triton.jit
def flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
    heads, t_q, t_k, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    """One program per (query block, batch·head): out = softmax(QKᵀ/√d) V for BLOCK_M queries, and the lse.

    Queries sit at positions i + t_k - t_q (the bottom-right causal alignment). Key blocks that
    every query of the block may see are folded in without masks; the blocks that cross the
    diagonal or the ragged end are masked; blocks above the diagonal are never read. A query row
    that sees no key (causal with T_q > T_k) gets output 0 and lse -inf, as `attention` and SDPA.
    """
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest causal rows first
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    offset = t_k - t_q
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,): query rows
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,): head dim padded to a power of two
    d_inside = offs_d[None, :] < HEAD_DIM  # (1, BLOCK_D)
    q_ptrs = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < t_q) & d_inside, other=0.0)  # (BLOCK_M, BLOCK_D)
    k_ptrs = k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # (BLOCK_M,): running max, base-2 units
    total = tl.zeros([BLOCK_M], tl.float32)  # (BLOCK_M,): running sum of exp2(s - m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # (BLOCK_M, BLOCK_D): unnormalised output
    qk_scale = sm_scale * 1.4426950408889634  # 1/√d and the change to base 2 in one factor

    if IS_CAUSAL:
        stop = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)  # one past the block's last visible key
        first_row_sees = pid_m * BLOCK_M + offset + 1  # keys every row of the block may attend
    else:
        stop = t_k
        first_row_sees = t_k
    stop = tl.maximum(stop, 0)
    full_stop = tl.maximum(tl.minimum(first_row_sees, t_k), 0) // BLOCK_N * BLOCK_N
    if HEAD_DIM == BLOCK_D:
        acc, m, total = _attend_key_blocks(
            acc, m, total, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, 0, full_stop, t_k,
            offset, qk_scale, MASKED=False, IS_CAUSAL=IS_CAUSAL, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM,
            BLOCK_D=BLOCK_D,
        )  # fmt: skip
        masked_start = full_stop
    else:  # a padded head dim needs masked loads everywhere
        masked_start = 0
    acc, m, total = _attend_key_blocks(
        acc, m, total, q, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, masked_start, stop, t_k,
        offset, qk_scale, MASKED=True, IS_CAUSAL=IS_CAUSAL, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM,
        BLOCK_D=BLOCK_D,
    )  # fmt: skip

    total_safe = tl.where(total == 0.0, 1.0, total)  # (BLOCK_M,): a row that saw no key has acc 0, total 0
    out = acc / total_safe[:, None]  # (BLOCK_M, BLOCK_D); 0 for rows that see no key, as SDPA gives
    out_ptrs = out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < t_q) & d_inside)
    lse = (m + tl.log2(total_safe)) / 1.4426950408889634  # (BLOCK_M,): natural log-sum-exp; -inf: no key
    tl.store(lse_ptr + pid_bh * t_q + offs_m, lse, mask=offs_m < t_q)


# ---------------------------------------------------------------------------------------------
# The backward pass (notebook 09): two kernels, no atomics.
#
# `flash_attention_backward_dkdv_kernel` has one program per (key block, batch·head): it keeps its
# keys, values and the accumulators dK and dV on chip and streams the query blocks that may see its
# keys. `flash_attention_backward_dq_kernel` has one program per (query block, batch·head) and
# streams the key blocks its queries may see, accumulating dQ. Both recompute the tile's
# probabilities from the forward's log-sum-exp: P = exp(S - lse). Splitting dQ off costs the two
# products that recompute S and dP a second time, and buys a result without atomic adds
# (deterministic, and the same in the interpreter as on a GPU). D = rowsum(dO ∘ O) comes in
# precomputed, one float32 per query row, like the lse.


@triton.jit
def flash_attention_backward_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn,
    heads, t_q, t_k, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    """One program per (key block, batch·head): dK and dV of BLOCK_N keys, over the queries that see them.

    Works on the transposed tile (keys × queries), so that dV += Pᵀ dO and dK += dSᵀ Q are plain
    products. Queries sit at positions i + t_k - t_q (bottom-right causal alignment); with
    IS_CAUSAL the loop starts at the first query block that may see the block's first key. A query
    row that sees no key (lse -inf) has every score masked, so it adds nothing to dK and dV.
    """
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    offset = t_k - t_q
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,): key rows
    offs_m = tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    d_inside = offs_d[None, :] < HEAD_DIM  # (1, BLOCK_D)
    kv_mask = (offs_n[:, None] < t_k) & d_inside  # (BLOCK_N, BLOCK_D)
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :],
                mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)  # fmt: skip
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)  # fmt: skip
    q_head = q_ptr + b * stride_qb + h * stride_qh
    do_head = do_ptr + b * stride_dob + h * stride_doh
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # (BLOCK_N, BLOCK_D)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # (BLOCK_N, BLOCK_D)
    qk_scale = sm_scale * 1.4426950408889634  # 1/√d and the change to base 2 in one factor

    lo = 0
    if IS_CAUSAL:
        lo = tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M  # first query block seeing a key
    for start_m in range(lo, t_q, BLOCK_M):
        rows = start_m + offs_m  # (BLOCK_M,): query positions
        q_mask = (rows[:, None] < t_q) & d_inside  # (BLOCK_M, BLOCK_D)
        q_ptrs = q_head + rows[:, None] * stride_qm + offs_d[None, :]  # (BLOCK_M, BLOCK_D)
        do_ptrs = do_head + rows[:, None] * stride_dom + offs_d[None, :]  # (BLOCK_M, BLOCK_D)
        q = tl.load(q_ptrs, mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
        do = tl.load(do_ptrs, mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
        lse = tl.load(lse_ptr + pid_bh * t_q + rows, mask=rows < t_q, other=0.0)  # (BLOCK_M,)
        delta = tl.load(delta_ptr + pid_bh * t_q + rows, mask=rows < t_q, other=0.0)  # (BLOCK_M,)
        s_t = tl.dot(k, tl.trans(q)) * qk_scale  # (BLOCK_N, BLOCK_M): scores, base 2, transposed
        allowed = (offs_n[:, None] < t_k) & (rows[None, :] < t_q)  # (BLOCK_N, BLOCK_M)
        if IS_CAUSAL:
            allowed = allowed & (offs_n[:, None] <= rows[None, :] + offset)
        p_t = tl.where(allowed, tl.exp2(s_t - lse[None, :] * 1.4426950408889634), 0.0)  # (BLOCK_N, BLOCK_M)
        dv += tl.dot(p_t.to(do.dtype), do)  # (BLOCK_N, BLOCK_D): Pᵀ dO
        dp_t = tl.dot(v, tl.trans(do))  # (BLOCK_N, BLOCK_M): (dO Vᵀ)ᵀ
        ds_t = tl.where(allowed, p_t * (dp_t - delta[None, :]), 0.0)  # (BLOCK_N, BLOCK_M): dSᵀ
        dk += tl.dot(ds_t.to(q.dtype), q)  # (BLOCK_N, BLOCK_D): dSᵀ Q, scaled once at the end

    dk_ptrs = dk_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    dv_ptrs = dv_ptr + b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    tl.store(dk_ptrs, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def flash_attention_backward_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn, stride_dob, stride_doh, stride_dom,
    stride_dqb, stride_dqh, stride_dqm,
    heads, t_q, t_k, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    """One program per (query block, batch·head): dQ of BLOCK_M queries, over the keys they see.

    With IS_CAUSAL the key loop stops after the block's last visible key, as in the forward.
    """
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest causal rows first
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    offset = t_k - t_q
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,): query rows
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    d_inside = offs_d[None, :] < HEAD_DIM  # (1, BLOCK_D)
    q_mask = (offs_m[:, None] < t_q) & d_inside  # (BLOCK_M, BLOCK_D)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)  # fmt: skip
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :],
                 mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)  # fmt: skip
    lse = tl.load(lse_ptr + pid_bh * t_q + offs_m, mask=offs_m < t_q, other=0.0)  # (BLOCK_M,)
    delta = tl.load(delta_ptr + pid_bh * t_q + offs_m, mask=offs_m < t_q, other=0.0)  # (BLOCK_M,)
    k_head = k_ptr + b * stride_kb + h * stride_kh
    v_head = v_ptr + b * stride_vb + h * stride_vh
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # (BLOCK_M, BLOCK_D)
    qk_scale = sm_scale * 1.4426950408889634

    hi = t_k
    if IS_CAUSAL:
        hi = tl.maximum(tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset), 0)  # one past the last visible key
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,): key positions
        kv_mask = (cols[:, None] < t_k) & d_inside  # (BLOCK_N, BLOCK_D)
        k_ptrs = k_head + cols[:, None] * stride_kn + offs_d[None, :]  # (BLOCK_N, BLOCK_D)
        v_ptrs = v_head + cols[:, None] * stride_vn + offs_d[None, :]  # (BLOCK_N, BLOCK_D)
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N): scores, base 2
        allowed = (cols[None, :] < t_k) & (offs_m[:, None] < t_q)  # (BLOCK_M, BLOCK_N)
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)
        p = tl.where(allowed, tl.exp2(s - lse[:, None] * 1.4426950408889634), 0.0)  # (BLOCK_M, BLOCK_N)
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N): dO Vᵀ
        ds = tl.where(allowed, p * (dp - delta[:, None]), 0.0)  # (BLOCK_M, BLOCK_N)
        dq += tl.dot(ds.to(k.dtype), k)  # (BLOCK_M, BLOCK_D): dS K, scaled once at the end

    dq_ptrs = dq_ptr + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :]
    tl.store(dq_ptrs, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=q_mask)
