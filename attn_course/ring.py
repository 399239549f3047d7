"""Ring attention: the sequence split over R processes, key/value blocks passed round a ring, merged by lse.

Rank r holds the queries, keys and values of positions r·T/R ... (r+1)·T/R − 1. In R steps each
rank attends its queries to the key/value block in hand, merges the partial result with what it has
(`merging.merge_attention`), and passes the block on to rank r+1 while it receives the next from
rank r−1 (`isend`/`irecv`, overlapped with the compute). At step s the block in hand came from rank
(r − s) mod R. Causal: a block from a later rank lies wholly in the future and is skipped, the
diagonal block (s = 0) is causal, earlier blocks are seen whole; so rank R−1 computes R blocks and
rank 0 one. The zigzag split (rank r holds chunks r and 2R−1−r of 2R) gives every rank the same work.

`run_ring` runs a ring function on R real processes (`attn_course.ranks`) for whole q, k, v.
Launched as `torchrun --nproc-per-node 2 -m attn_course.ring`, this module runs the ring on a small
problem and compares it with SDPA on rank 0.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attn_course.exercise import exercise
from attn_course.merging import merge_attention, partial_attention
from attn_course.ranks import run_on_ranks

RingFunction = Callable[..., torch.Tensor]


@exercise("11_attention_at_scale", 3)
def ring_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> torch.Tensor:
    """This rank's rows of attention over the whole sequence, the blocks passed round a ring: (..., T/R, d_v).

    Called on every rank of a process group with this rank's blocks q, k (..., T/R, d) and
    v (..., T/R, d_v), rank r holding positions r·T/R ... (r+1)·T/R − 1. `is_causal`: query i sees
    keys j <= i of the whole sequence.

    Introduced in 11_attention_at_scale.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    send_to, receive_from = (rank + 1) % world, (rank - 1) % world
    k_block, v_block = k.contiguous(), v.contiguous()  # gloo sends contiguous tensors
    out: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    for step in range(world):
        source = (rank - step) % world  # the rank whose block is in hand
        if step < world - 1:  # pass it on while computing on it
            k_next, v_next = (
                torch.empty_like(k_block),
                torch.empty_like(v_block),
            )  # (..., T/R, d), (..., T/R, d_v)
            requests: list[Any] = [
                dist.isend(k_block, send_to),
                dist.isend(v_block, send_to),
                dist.irecv(k_next, receive_from),
                dist.irecv(v_next, receive_from),
            ]
        if not is_causal or source < rank:  # every key of the block is in every query's past
            part = partial_attention(q, k_block, v_block)  # (..., T/R, d_v), (..., T/R)
        elif source == rank:  # the diagonal block: causal within it
            part = partial_attention(q, k_block, v_block, is_causal=True)
        else:  # a later rank's block lies wholly in the future
            part = None
        if part is not None:
            out, lse = (
                part if out is None or lse is None else merge_attention(out, lse, *part)
            )  # (..., T/R, d_v)
        if step < world - 1:
            for request in requests:
                request.wait()
            k_block, v_block = k_next, v_next
    assert out is not None  # the diagonal block is always seen
    return out


def zigzag_ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal ring attention on the zigzag split: this rank's rows (..., 2·T/(2R), d_v).

    Rank r holds chunks r and 2R−1−r of the 2R chunks of the sequence, concatenated: q, k
    (..., 2c, d), v (..., 2c, d_v). At every step a rank computes two of its four chunk pairs (an
    earlier rank's block: both query chunks against its first chunk; a later rank's: the second query
    chunk against both), so that every rank does the same work.

    Introduced in 11_attention_at_scale.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    c = q.shape[-2] // 2
    k_block, v_block = k.contiguous(), v.contiguous()
    out: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    for step in range(world):
        source = (rank - step) % world
        if step < world - 1:
            k_next, v_next = (
                torch.empty_like(k_block),
                torch.empty_like(v_block),
            )  # (..., 2c, d), (..., 2c, d_v)
            requests: list[Any] = [
                dist.isend(k_block, (rank + 1) % world),
                dist.isend(v_block, (rank + 1) % world),
                dist.irecv(k_next, (rank - 1) % world),
                dist.irecv(v_next, (rank - 1) % world),
            ]
        if source == rank:  # chunks r, 2R−1−r against themselves: causal, the later sees the earlier whole
            merged = partial_attention(q, k_block, v_block, is_causal=True)  # local order is global order
        elif source < rank:  # its first chunk is before both of ours, its second after both
            merged = partial_attention(q, k_block[..., :c, :], v_block[..., :c, :])
        else:  # both of its chunks lie between our two: only our second chunk sees them
            late_out, late_lse = partial_attention(q[..., c:, :], k_block, v_block)  # (..., c, d_v), (..., c)
            none_out = torch.zeros_like(late_out)  # our first chunk sees nothing of this block
            none_lse = torch.full_like(late_lse, float("-inf"))
            merged = torch.cat([none_out, late_out], dim=-2), torch.cat([none_lse, late_lse], dim=-1)
        out, lse = (
            merged if out is None or lse is None else merge_attention(out, lse, *merged)
        )  # (..., 2c, d_v)
        if step < world - 1:
            for request in requests:
                request.wait()
            k_block, v_block = k_next, v_next
    assert out is not None
    return out


def split_blocks(x: torch.Tensor, world: int, zigzag: bool = False) -> list[torch.Tensor]:
    """Each rank's positions of x (..., T, d): R contiguous blocks, or chunks r and 2R−1−r (zigzag)."""
    if not zigzag:
        return [block.contiguous() for block in x.chunk(world, dim=-2)]  # R × (..., T/R, d)
    chunks = x.chunk(2 * world, dim=-2)  # 2R × (..., T/(2R), d)
    return [torch.cat([chunks[r], chunks[2 * world - 1 - r]], dim=-2) for r in range(world)]


def join_blocks(blocks: list[torch.Tensor], zigzag: bool = False) -> torch.Tensor:
    """The whole sequence (..., T, d) from each rank's positions, as `split_blocks` made them."""
    if not zigzag:
        return torch.cat(blocks, dim=-2)  # (..., T, d)
    world = len(blocks)
    halves = [block.chunk(2, dim=-2) for block in blocks]
    chunks = [halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))]
    return torch.cat(chunks, dim=-2)  # (..., T, d)


def _call(ring: RingFunction, is_causal: bool | None, q: Any, k: Any, v: Any) -> Any:
    return ring(q, k, v) if is_causal is None else ring(q, k, v, is_causal=is_causal)


def run_ring(
    ring: RingFunction,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    world: int,
    is_causal: bool | None = False,
    zigzag: bool = False,
) -> torch.Tensor:
    """Run `ring` on `world` processes for whole q, k (..., T, d) and v (..., T, d_v): out (..., T, d_v).

    Splits the sequence (`split_blocks`), calls `ring(q_r, k_r, v_r, is_causal=...)` on rank r
    (`is_causal=None`: no such argument, as `zigzag_ring_attention`), and joins the ranks' rows.
    """
    if q.shape[-2] % (2 * world if zigzag else world):
        raise ValueError(f"T = {q.shape[-2]} does not split into {world} equal blocks")
    blocks = zip(*(split_blocks(x, world, zigzag) for x in (q, k, v)), strict=True)
    outs = run_on_ranks(_call, [(ring, is_causal, *block) for block in blocks])
    return join_blocks(outs, zigzag)


def _counted(ring: RingFunction, is_causal: bool | None, q: Any, k: Any, v: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        _call(ring, is_causal, q, k, v)
    return int(counter.get_total_flops())


def ring_flops(
    ring: RingFunction,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    world: int,
    is_causal: bool | None = True,
    zigzag: bool = False,
) -> list[int]:
    """The floating-point operations each rank's matrix products took, by rank, as `run_ring` runs it."""
    blocks = zip(*(split_blocks(x, world, zigzag) for x in (q, k, v)), strict=True)
    return run_on_ranks(_counted, [(ring, is_causal, *block) for block in blocks])


def _main() -> None:
    """Under torchrun: the ring on a small problem, compared with SDPA on rank 0."""
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same whole sequence on every rank
    q, k, v = (torch.randn(2, 3, 12 * world, 8, dtype=torch.float64) for _ in range(3))  # (B, H, T, d)
    worst = 0.0
    for is_causal in (False, True):
        q_r, k_r, v_r = (split_blocks(x, world)[rank] for x in (q, k, v))  # (B, H, T/R, d) each
        mine = ring_attention(q_r, k_r, v_r, is_causal=is_causal)
        gathered = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, gathered, dst=0)  # (B, H, T/R, d) from each rank
        if gathered is not None:
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # (B, H, T, d)
            worst = max(worst, (torch.cat(gathered, dim=-2) - expected).abs().max().item())
    if rank == 0:
        verdict = "agrees with" if worst < 1e-9 else "DIFFERS from"
        print(f"ring attention on {world} ranks {verdict} SDPA (largest difference {worst:.1e})")
    dist.destroy_process_group()
    if rank == 0 and worst >= 1e-9:
        raise SystemExit(1)


if __name__ == "__main__" and "RANK" in os.environ:
    _main()
elif __name__ == "__main__":
    raise SystemExit("run it as: torchrun --nproc-per-node 2 -m attn_course.ring")
