"""The check of notebook 11's ring attention, on real processes: learner-written mistakes and right variants."""

# ruff: noqa: E501  (tables of learner cases)
from __future__ import annotations

import pytest
from check_assertions import assert_accepted, assert_rejected
from learner_code import RING_BLOCKING, learner

from attn_course import ranks
from attn_course.checks import CheckFailed, check_ring_attention
from attn_course.checks import ring as ring_checks


@pytest.fixture(scope="module", autouse=True)
def pools():
    """The 2- and 4-rank pools, shared by every case of this module and stopped at its end."""
    yield
    ranks.shutdown()


@pytest.fixture(autouse=True)
def quick_deadlocks(monkeypatch):
    """A deadlock said after 2 s of no progress instead of the check's 4: the cases here take milliseconds."""
    monkeypatch.setattr(ring_checks, "IDLE_SECONDS", 2.0)


RING = """
import torch.distributed as dist
from attn_course.merging import merge_attention, partial_attention


def ring_attention(q, k, v, is_causal=False):
    rank = dist.get_rank()
    world = dist.get_world_size()
    nxt = (rank + 1) % world
    prv = (rank - 1) % world
    k_cur, v_cur = k, v
    out, lse = None, None
    for step in range(world):
        if step < world - 1:
            k_new = torch.empty_like(k_cur)
            v_new = torch.empty_like(v_cur)
            reqs = [dist.isend(k_cur, nxt), dist.isend(v_cur, nxt), dist.irecv(k_new, prv), dist.irecv(v_new, prv)]
        src = (rank - step) % world
        if is_causal and src > rank:
            pass
        else:
            o, l = partial_attention(q, k_cur, v_cur, is_causal=is_causal and src == rank)
            if out is None:
                out, lse = o, l
            else:
                out, lse = merge_attention(out, lse, o, l)
        if step < world - 1:
            for r in reqs:
                r.wait()
            k_cur, v_cur = k_new, v_new
    return out
"""

PARITY = (
    "\nimport torch.distributed as dist\nfrom attn_course.merging import merge_attention, partial_attention\n\n"
    + RING_BLOCKING
)

BATCHED = """
import torch.distributed as dist
from attn_course.merging import merge_attention, partial_attention


def ring_attention(q, k, v, is_causal=False):
    rank, world = dist.get_rank(), dist.get_world_size()
    blocks = {}
    k_cur, v_cur = k.contiguous(), v.contiguous()
    for step in range(world):
        src = (rank - step) % world
        if step + 1 < world:
            k_in, v_in = torch.empty_like(k_cur), torch.empty_like(v_cur)
            ops = [
                dist.P2POp(dist.isend, k_cur, (rank + 1) % world),
                dist.P2POp(dist.isend, v_cur, (rank + 1) % world),
                dist.P2POp(dist.irecv, k_in, (rank - 1) % world),
                dist.P2POp(dist.irecv, v_in, (rank - 1) % world),
            ]
            reqs = dist.batch_isend_irecv(ops)
        if not is_causal or src <= rank:
            blocks[src] = partial_attention(q, k_cur, v_cur, is_causal=is_causal and src == rank)
        if step + 1 < world:
            for req in reqs:
                req.wait()
            k_cur, v_cur = k_in, v_in
    # merged in the order of the sequence, not the order they arrived
    out, lse = None, None
    for src in sorted(blocks):
        o, l = blocks[src]
        out, lse = (o, l) if out is None else merge_attention(out, lse, o, l)
    return out
"""

EINSUM = """
import torch.distributed as dist


def ring_attention(q, k, v, is_causal=False):
    rank, world = dist.get_rank(), dist.get_world_size()
    n = q.shape[-2]
    scale = q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    num = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    den = torch.zeros(q.shape[:-1], dtype=q.dtype)
    kb, vb = k.contiguous(), v.contiguous()
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:
            kn, vn = torch.empty_like(kb), torch.empty_like(vb)
            sends = [dist.isend(kb, (rank + 1) % world), dist.isend(vb, (rank + 1) % world)]
            recvs = [dist.irecv(kn, (rank - 1) % world), dist.irecv(vn, (rank - 1) % world)]
        if not is_causal or src <= rank:
            s = torch.einsum("...id,...jd->...ij", q, kb) * scale
            if is_causal and src == rank:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            c = torch.exp(m - m_new)
            num = num * c[..., None] + torch.einsum("...ij,...jd->...id", p, vb)
            den = den * c + p.sum(dim=-1)
            m = m_new
        if step < world - 1:
            for req in sends + recvs:
                req.wait()
            kb, vb = kn, vn
    return num / den[..., None]
"""

RIGHT = {
    "isend-irecv": RING,
    "parity-send-recv": PARITY,
    "batch-isend-irecv": BATCHED,
    "einsum-online": EINSUM,
}


@pytest.mark.parametrize("name", list(RIGHT))
def test_right_rings_pass(name, capsys):
    assert_accepted(check_ring_attention, learner(RIGHT[name], "ring_attention"), capsys)


WRONG = [
    (
        "mask-every-block",
        [("is_causal=is_causal and src == rank", "is_causal=is_causal")],
        "applies the causal mask to every block by its local positions",
    ),
    (
        "future-not-skipped",
        [("if is_causal and src > rank:", "if False:")],
        "does not skip the blocks of later ranks",
    ),
    (
        "average",
        [("out, lse = merge_attention(out, lse, o, l)", "out = (out + o) / 2")],
        "averages the blocks' partial outputs",
    ),
    (
        "wrong-source",
        [("src = (rank - step) % world", "src = (rank + step) % world")],
        "attributes the block received at step s to the wrong rank",
    ),
    (
        "source-one-step-behind",
        [("src = (rank - step) % world", "src = (rank - 1 - step) % world  # the block that just arrived")],
        "attributes the block received at step s to the wrong rank, (r − s − 1) mod R",
    ),
    (
        "wrong-neighbour",
        [
            (
                "dist.irecv(k_new, prv), dist.irecv(v_new, prv)",
                "dist.irecv(k_new, nxt), dist.irecv(v_new, nxt)",
            )
        ],
        "Each rank sends to and receives from the same neighbour",
    ),
    (
        "diagonal-whole",
        [("is_causal=is_causal and src == rank", "is_causal=False")],
        "sees the rank's own block (the diagonal one) whole when is_causal",
    ),
    (
        "causal-ignored",
        [
            ("if is_causal and src > rank:", "if False:"),
            ("is_causal=is_causal and src == rank", "is_causal=False"),
        ],
        "ignores is_causal",
    ),
    (
        "always-causal",
        [
            ("if is_causal and src > rank:", "if src > rank:"),
            ("is_causal=is_causal and src == rank", "is_causal=src == rank"),
        ],
        "applies the causal mask although is_causal=False",
    ),
    (
        "skipped-block-not-passed-on",
        [
            (
                "    for step in range(world):\n        if step < world - 1:",
                "    for step in range(world):\n        if is_causal and (rank - step) % world > rank:\n            continue\n        if step < world - 1:",
            )
        ],
        "every rank must pass on a block at each of the R − 1 exchanges, also a block it skips",
    ),
    (
        "no-wait",
        [("            for r in reqs:\n                r.wait()\n", "")],
        "before waiting on that request",
    ),
    (
        "raises-on-one-rank",
        [
            (
                "    return out\n",
                "    if rank == world - 1:\n        raise ValueError(f'rank {rank} is done')\n    return out\n",
            )
        ],
        "raised ValueError on rank 1 of 2 at line",
    ),
    (
        "never-merged",
        [("                out, lse = merge_attention(out, lse, o, l)", "                pass")],
        "the blocks it received were never merged",
    ),
    (
        "all-gather",
        [
            (
                "    for step in range(world):",
                "    ks = [torch.empty_like(k) for _ in range(world)]\n    dist.all_gather(ks, k.contiguous())\n    for step in range(world):",
            )
        ],
        "calls dist.all_gather",
    ),
    (
        "values-kept",
        [("partial_attention(q, k_cur, v_cur, ", "partial_attention(q, k_cur, v, ")],
        "does not pass the values on with the keys",
    ),
    (
        "keys-kept",
        [("k_cur, v_cur = k_new, v_new", "v_cur = v_new")],
        "does not pass the keys on with the values",
    ),
    (
        "v-buffer-like-k",
        [("v_new = torch.empty_like(v_cur)", "v_new = torch.empty_like(k_cur)")],
        "goes into a buffer of shape (2, 3, 5, 6), but rank 1 sent a tensor of shape (2, 3, 5, 4)",
    ),
]


@pytest.mark.parametrize(("name", "edits", "phrase"), WRONG, ids=[w[0] for w in WRONG])
def test_wrong_rings_are_named(name, edits, phrase, capsys):
    assert_rejected(check_ring_attention, learner(RING, "ring_attention", *edits), phrase, capsys)


def test_every_rank_sending_first_with_blocking_sends_is_named(capsys):
    wrong = learner(PARITY, "ring_attention", ("if rank % 2 == 0:", "if True:"))
    assert_rejected(check_ring_attention, wrong, "Every rank is inside a blocking dist.send", capsys)


def test_an_unknown_mistake_is_read_rank_by_rank(capsys):
    """Rank 0 never merges what it receives (no known slip): said as which blocks rank 0's output covers."""
    wrong = learner(
        RING, "ring_attention", ("            if out is None:", "            if out is None or rank == 0:")
    )
    assert_rejected(check_ring_attention, wrong, "rank 0's output is attention over block 1 whole", capsys)


def test_the_unwritten_exercise_is_said_to_be_unwritten(capsys):
    stub = learner(
        "def ring_attention(q, k, v, is_causal=False):\n    raise NotImplementedError\n", "ring_attention"
    )
    assert_rejected(check_ring_attention, stub, "`ring_attention` is not implemented yet", capsys)


def test_a_right_ring_over_the_learners_wrong_merge_blames_the_merge(capsys):
    """The learner's ring calls their own merge_attention (Exercise 1), which forgets to reweigh part b."""
    own_merge = """
def merge_attention(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + out_b, lse
"""
    source = RING.replace(
        "from attn_course.merging import merge_attention, partial_attention",
        "from attn_course.merging import partial_attention",
    )
    ring = learner(own_merge + source, "ring_attention")
    assert_rejected(
        check_ring_attention, ring, "with the course's `merge_attention` in place of yours it passes", capsys
    )


def test_a_stub_the_ring_calls_is_named(capsys):
    stub = "def merge_attention(out_a, lse_a, out_b, lse_b):\n    raise NotImplementedError\n"
    source = RING.replace(
        "from attn_course.merging import merge_attention, partial_attention",
        "from attn_course.merging import partial_attention",
    )
    ring = learner(stub + source, "ring_attention")
    assert_rejected(
        check_ring_attention, ring, "with the course's `merge_attention` in place of yours it passes", capsys
    )


def test_a_deadlock_is_waited_out_once_for_the_same_code_and_shapes(monkeypatch):
    """The check's body runs again on inputs drawn afresh (to say what failed, after a quiet run): which
    sends wait on which does not depend on the values, so the same ring on the same shapes is not run
    into its deadlock a second time."""
    runs = []

    def deadlocked(fn, cases, idle):
        runs.append(len(cases[0]))
        raise ranks.Deadlock(
            "stands in for a deadlock", 0, [[] for _ in cases[0]], list(range(len(cases[0])))
        )

    monkeypatch.setattr(ring_checks.ranks, "run_cases", deadlocked)
    monkeypatch.setattr(ring_checks, "_RECENT", {})
    monkeypatch.setattr(ring_checks, "_failure", lambda found, candidate, world: RuntimeError(found))

    def ring(q, k, v, is_causal=False):
        return q

    for _ in range(2):  # inputs drawn afresh each time
        inputs = [ring_checks._inputs(case, 4) for case in ring_checks._CASES[4]]
        with pytest.raises(RuntimeError, match="stands in for a deadlock"):
            ring_checks._run(ring, 4, inputs)
    assert runs == [4]


def test_a_deadlock_is_said_without_trying_the_courses_earlier_exercises(monkeypatch):
    """A ring that calls the learner's own merge_attention is checked once more with the course's merge
    in its place (an earlier exercise may be at fault), but not when every waiting rank is blocked on a
    message: a function of tensors cannot cause that, and each such run waits out the deadlock again."""
    from blind_n_namespace import namespace
    from learner_mistakes_blind_n import HOLDOUT_N

    from attn_course.checks import _harness

    searched = []
    monkeypatch.setattr(_harness, "blamed_exercise", lambda *args: searched.append(args) or None)
    receives_from_the_right = next(m for m in HOLDOUT_N if m.idea.startswith("receives from rank + 1"))
    names = namespace(*receives_from_the_right[:1], *receives_from_the_right[2:])  # their merge too
    with pytest.raises(CheckFailed) as failure:
        names["check_ring_attention"](names["ring_attention"])
    assert "never finished" in str(failure.value) and failure.value.finding == "deadlock"
    assert searched == []
