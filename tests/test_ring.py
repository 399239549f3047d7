"""Ring attention on real processes (gloo) against SDPA, and the runtime that runs it from a notebook."""

from __future__ import annotations

import linecache
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from attn_course import ranks, ring

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def pools():
    """One pool per world size for the whole module, stopped at its end."""
    yield
    ranks.shutdown()


def _qkv(world: int, block: int, d_v: int = 5, dtype: torch.dtype = torch.float64):
    torch.manual_seed(world)
    t = block * world
    return (
        torch.randn(2, 3, t, 6, dtype=dtype),  # (B, H, T, d)
        torch.randn(2, 3, t, 6, dtype=dtype),
        torch.randn(2, 3, t, d_v, dtype=dtype),  # (B, H, T, d_v)
    )


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("is_causal", [False, True])
def test_ring_attention_on_processes_equals_sdpa(world, is_causal):
    q, k, v = _qkv(world, block=5)
    out = ring.run_ring(ring.ring_attention, q, k, v, world, is_causal=is_causal)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("world", [2, 4])
def test_zigzag_ring_equals_causal_sdpa_and_balances_the_work(world):
    q, k, v = _qkv(world, block=6)
    out = ring.run_ring(ring.zigzag_ring_attention, q, k, v, world, is_causal=None, zigzag=True)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12, rtol=1e-10
    )
    plain = ring.ring_flops(ring.ring_attention, q, k, v, world)
    zigzag = ring.ring_flops(ring.zigzag_ring_attention, q, k, v, world, is_causal=None, zigzag=True)
    assert plain == [plain[0] * (r + 1) for r in range(world)]  # rank r computes r + 1 blocks
    assert (
        len(set(zigzag)) == 1 and sum(zigzag) == sum(plain) and max(zigzag) < max(plain)
    )  # same work, shared


def test_split_and_join_blocks_round_trip():
    x = torch.arange(24.0).reshape(1, 12, 2)  # (B, T, d)
    for zigzag in (False, True):
        assert torch.equal(ring.join_blocks(ring.split_blocks(x, 3, zigzag), zigzag), x)
    assert ring.split_blocks(x, 3, zigzag=True)[0][0, :, 0].tolist() == [0, 2, 20, 22]  # chunks 0 and 5


def _send_to_next_and_receive_from_next(x):
    rank, world = dist.get_rank(), dist.get_world_size()
    buffer = torch.empty_like(x)
    dist.send(x, (rank + 1) % world)  # every rank sends first: nobody receives
    dist.recv(buffer, (rank + 1) % world)
    return buffer


def test_a_deadlock_ends_with_the_waiting_ranks_named_and_the_pool_recovers():
    start = time.monotonic()
    with pytest.raises(ranks.Deadlock) as failed:
        ranks.run_cases(_send_to_next_and_receive_from_next, [[(torch.ones(3),)] * 4], idle=2.0)
    assert time.monotonic() - start < 10
    assert failed.value.waiting == [0, 1, 2, 3]
    assert "ranks 0, 1, 2, 3 were still waiting after 2 s" in str(failed.value)
    assert "rank 0: waiting for rank 1 to receive what it sent" in str(failed.value)
    assert ranks.run_on_ranks(lambda x: x * dist.get_rank(), [(2,)] * 4) == [0, 2, 4, 6]


MAIN_SOURCE = """
import torch.distributed as dist

SCALE = 10


def helper(x):
    return x * SCALE


def by_rank(x):
    if dist.get_rank() == 1:
        raise ValueError("rank one refuses")
    return helper(x)
"""


def _main_function(name):
    """`name` as a notebook defines it: in a module named __main__, its source known to linecache only."""
    filename = "<ipython-input-ring-test>"
    linecache.cache[filename] = (len(MAIN_SOURCE), None, MAIN_SOURCE.splitlines(keepends=True), filename)
    scope = {"__name__": "__main__"}
    exec(compile(MAIN_SOURCE, filename, "exec"), scope)
    return scope[name]


def test_a_function_of_main_travels_by_value_with_what_it_uses():
    helper = _main_function("helper")
    assert helper.__module__ == "__main__"
    assert ranks.run_on_ranks(helper, [(1,), (2,)]) == [10, 20]


def test_an_exception_on_one_rank_names_the_rank_and_the_learners_line():
    with pytest.raises(ranks.RankRaised) as failed:
        ranks.run_on_ranks(_main_function("by_rank"), [(1,), (2,)])
    (raised,) = failed.value.raised
    assert raised.rank == 1 and raised.type_name == "ValueError" and raised.message == "rank one refuses"
    assert (raised.frames[-1][1], raised.frames[-1][2]) == (13, "by_rank")  # the line of the raise
    assert ranks.run_on_ranks(lambda: dist.get_world_size(), [()] * 2) == [2, 2]  # a fresh pool


def test_no_worker_is_left_behind_after_shutdown():
    ranks.run_on_ranks(lambda: os.getpid(), [()] * 2)
    pids = [p.pid for p in ranks.pool(2).processes]
    ranks.shutdown(2)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_torchrun_runs_the_ring_as_users_launch_it():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        "attn_course.ring",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ring attention on 2 ranks agrees with SDPA" in done.stdout


def _pytorch_context_parallel(q, k, v):
    """PyTorch's own context parallelism on this rank: SDPA inside `context_parallel`, its math kernel."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    q, k, v = q.clone(), k.clone(), v.clone()  # sharded in place: rank r keeps chunks r and 2R-1-r
    with sdpa_kernel(SDPBackend.MATH), context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
        return F.scaled_dot_product_attention(q, k, v)  # (B, H, 2·T/(2R), d) this rank's rows


def test_pytorch_context_parallel_agrees_with_the_ring():
    """The outside oracle where torch 2.13's CPU build runs it: non-causal, SDPA's math kernel, on gloo.

    (Causal context parallelism fails on the CPU: SDPA's CPU flash kernel has no sharding strategy, and
    the math kernel mixes DTensors with tensors.) Its shards are the zigzag split's chunks r and 2R-1-r.
    """
    q, k, v = _qkv(2, block=8)
    theirs = ring.join_blocks(ranks.run_on_ranks(_pytorch_context_parallel, [(q, k, v)] * 2), zigzag=True)
    torch.testing.assert_close(theirs, ring.run_ring(ring.ring_attention, q, k, v, 2), atol=1e-12, rtol=1e-10)


def test_what_a_rank_prints_is_shown_after_its_rank(capsys):
    def shout():
        print(f"hello from {dist.get_rank()}")
        return dist.get_rank()

    assert ranks.run_on_ranks(shout, [()] * 2) == [0, 1]
    assert capsys.readouterr().out == "[rank 0] hello from 0\n[rank 1] hello from 1\n"


def _exchange(x, read_early):
    rank = dist.get_rank()
    buffer = torch.empty_like(x)
    requests = [dist.isend(x, 1 - rank), dist.irecv(buffer, 1 - rank)]
    early = (
        buffer * 2 if read_early else buffer.new_zeros(buffer.shape[-1] + len(buffer) - 2 * buffer.size(0))
    )
    for request in requests:
        request.wait()
    return buffer + early.sum()


@pytest.mark.parametrize("read_early", [False, True])
def test_a_received_buffer_read_before_its_wait_is_recorded_its_shape_is_not(read_early):
    (outcome,) = ranks.run_cases(_exchange, [[(torch.ones(3), read_early), (torch.ones(3), read_early)]])
    read = [e for e in outcome.events[0] if e.kind == "read-pending"]
    assert read == ([ranks.Event("read-pending", 1, "irecv")] if read_early else [])
