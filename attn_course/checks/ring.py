"""Check of notebook 11's ring attention: the learner's function run on real processes (gloo), 2 and 4 ranks.

The learner's `ring_attention` travels by value to R worker processes (`attn_course.ranks`), which
also record its calls of torch.distributed. A wrong result is read in-process, rank by rank: which key
blocks each rank's output is attention over, whole or causal, merged or averaged, or keys of one block
with the values of another (one of the two never passed on). A deadlock and an exception on one rank
are said with the ranks involved and the learner's line.
"""

from __future__ import annotations

import itertools
import linecache
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import torch
import torch.nn.functional as F

from attn_course import ranks
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    check,
    expect_close,
    expect_tensor,
    is_close,
    library_dirs,
)
from attn_course.merging import merge_attention, partial_attention

IDLE_SECONDS = 4.0
"""A case of the check takes milliseconds: this long without progress on any rank is a deadlock."""


@dataclass(frozen=True)
class _Case:
    """One run of the learner's ring: the batch axes, each rank's T/R, widths, dtype, causal or not."""

    batch: tuple[int, ...]
    block: int
    d: int
    d_v: int
    dtype: torch.dtype
    is_causal: bool

    def describe(self, world: int) -> str:
        shape = (*self.batch, self.block, self.d)
        kind = "float64" if self.dtype == torch.float64 else "float32"
        return (
            f"ring_attention(q, k, v, is_causal={self.is_causal}) on {world} ranks, each holding q and k of "
            f"shape {shape} and v of width {self.d_v}, {kind}"
        )


_CASES: dict[int, tuple[_Case, ...]] = {
    2: (
        _Case((2, 3), 5, 6, 4, torch.float64, False),
        _Case((2, 3), 5, 6, 4, torch.float64, True),
        _Case((3,), 7, 5, 5, torch.float32, True),
        _Case((), 3, 4, 6, torch.float64, False),
    ),
    4: (
        _Case((2, 3), 3, 6, 4, torch.float64, False),
        _Case((2, 3), 3, 6, 4, torch.float64, True),
        _Case((2,), 5, 5, 3, torch.float32, True),
        _Case((), 6, 4, 4, torch.float32, False),
    ),
}
"""Per world size: batch axes (two, one, none), T/R not a power of two, d_v unlike d, float32 and float64."""


def _inputs(case: _Case, world: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    t = case.block * world
    q = torch.randn(*case.batch, t, case.d, dtype=case.dtype)  # (..., T, d)
    k = torch.randn(*case.batch, t, case.d, dtype=case.dtype)  # (..., T, d)
    v = torch.randn(*case.batch, t, case.d_v, dtype=case.dtype)  # (..., T, d_v)
    return q, k, v


def _call_ring(ring: Callable[..., Any], q: Any, k: Any, v: Any, is_causal: bool) -> Any:
    """What the learner's function returns on this rank (run in each worker)."""
    return ring(q, k, v, is_causal=is_causal)


# ---------------------------------------------------------------------------------------------
# What a ring that sees some blocks, some causally, combined one way or another, gives


def _blocks(x: torch.Tensor, world: int) -> list[torch.Tensor]:
    return list(x.chunk(world, dim=-2))  # R × (..., T/R, ·)


def _seen(
    q: torch.Tensor, k: Sequence[torch.Tensor], v: Sequence[torch.Tensor], modes: Sequence[str], combine: str
) -> torch.Tensor:
    """One rank's output (..., T/R, d_v) over key blocks taken in this order, each by its mode ("skip",
    "full", "causal"), merged by lse or averaged ("mean", or "running": step by step)."""
    seen = [(kj, vj, m) for kj, vj, m in zip(k, v, modes, strict=True) if m != "skip"]
    parts = [partial_attention(q, kj, vj, is_causal=m == "causal") for kj, vj, m in seen]
    if not parts:
        return torch.zeros(*q.shape[:-1], v[0].shape[-1], dtype=q.dtype)
    if combine == "merge":
        out, lse = parts[0]
        for part in parts[1:]:
            out, lse = merge_attention(out, lse, *part)
        return out
    if combine == "mean":
        return torch.stack([out for out, _ in parts]).mean(dim=0)  # (..., T/R, d_v)
    out = parts[0][0]
    for part_out, _ in parts[1:]:
        out = (out + part_out) / 2
    return out


def _ring_of(
    rule: Callable[[int, int, int, bool], str], combine: str = "merge"
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, bool], torch.Tensor]:
    """The whole output (..., T, d_v) of a ring in which rank r treats block j as rule(r, j, R, causal)."""

    def ring(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world: int, is_causal: bool) -> torch.Tensor:
        qs, ks, vs = _blocks(q, world), _blocks(k, world), _blocks(v, world)
        outs = []
        for r in range(world):
            modes = [rule(r, j, world, is_causal) for j in range(world)]
            outs.append(_ordered(qs[r], ks, vs, modes, r, combine))
        return torch.cat(outs, dim=-2)  # (..., T, d_v)

    return ring


def _ordered(
    q: torch.Tensor, k: list[torch.Tensor], v: list[torch.Tensor], modes: list[str], rank: int, combine: str
) -> torch.Tensor:
    order = [(rank - s) % len(modes) for s in range(len(modes))]  # the ring's order: own block first
    return _seen(q, [k[j] for j in order], [v[j] for j in order], [modes[j] for j in order], combine)


def _one_passed_on(
    kept: str,
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, bool], torch.Tensor]:
    """The whole output (..., T, d_v) of a right ring in which the keys (`kept` "k") or the values ("v")
    never leave their rank: each block of the other is attended with the rank's own k or v."""

    def ring(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world: int, is_causal: bool) -> torch.Tensor:
        qs, ks, vs = _blocks(q, world), _blocks(k, world), _blocks(v, world)
        outs = []
        for r in range(world):
            order = [(r - s) % world for s in range(world)]  # own block first, as it arrives
            k_seen = [ks[r] if kept == "k" else ks[j] for j in order]
            v_seen = [vs[r] if kept == "v" else vs[j] for j in order]
            modes = [_right(r, j, world, is_causal) for j in order]
            outs.append(_seen(qs[r], k_seen, v_seen, modes, "merge"))
        return torch.cat(outs, dim=-2)  # (..., T, d_v)

    return ring


def _right(r: int, j: int, world: int, is_causal: bool) -> str:
    if not is_causal or j < r:
        return "full"
    return "causal" if j == r else "skip"


def _local_mask_past(r: int, j: int, world: int, is_causal: bool) -> str:
    return "causal" if is_causal and j <= r else _right(r, j, world, is_causal)


def _local_mask_all(r: int, j: int, world: int, is_causal: bool) -> str:
    return "causal" if is_causal else "full"


def _future_seen(r: int, j: int, world: int, is_causal: bool) -> str:
    return "full" if is_causal and j > r else _right(r, j, world, is_causal)


def _diagonal_whole(r: int, j: int, world: int, is_causal: bool) -> str:
    return "full" if is_causal and j == r else _right(r, j, world, is_causal)


def _causal_ignored(r: int, j: int, world: int, is_causal: bool) -> str:
    return "full"


def _source_taken_as(sign: int, offset: int) -> Callable[[int, int, int, bool], str]:
    """Modes of a ring that takes the block received at step s for rank (r + sign·s + offset) mod R."""

    def modes(r: int, j: int, world: int, is_causal: bool) -> str:
        step = (r - j) % world  # the block of rank j is in hand at this step
        return _right(r, (r + sign * step + offset) % world, world, is_causal)

    return modes


_WRONG_SOURCES = {"(r + s)": (1, 0), "(r + s + 1)": (1, 1), "(r − s − 1)": (-1, -1), "(r − s + 1)": (-1, 1)}
"""Formulas for the rank of the block in hand that learners write instead of (r − s) mod R."""


def _own_only(r: int, j: int, world: int, is_causal: bool) -> str:
    return _right(r, j, world, is_causal) if j == r else "skip"


def _always_causal(r: int, j: int, world: int, is_causal: bool) -> str:
    return _right(r, j, world, True)


_SOURCE_HINT = (
    "at step s the block in hand came from rank (r − s) mod R (it travels from r−1 to r), so "
    "source = (rank - step) % world"
)

_AVERAGE = (
    "averages the blocks' partial outputs (all at once, or step by step as out = (out + block_out) / 2) "
    "instead of merging them: each block's output is a softmax over its own keys only, and an average "
    "weighs every block alike whatever its scores. Merge them by their log-sum-exp (merge_attention), "
    "keeping the lse as you go."
)

_MISTAKES = [
    Mistake(
        "applies the causal mask to every block by its local positions (query i of the block sees key i "
        "of the block): only the diagonal block, the rank's own, needs a mask. A block from an earlier "
        "rank lies wholly in the past of every query here (see it whole); one from a later rank wholly "
        "in the future (skip it).",
        _ring_of(_local_mask_past),
    ),
    Mistake(
        "applies the causal mask to every block by its local positions (query i of the block sees key i "
        "of the block), and does not skip the blocks of later ranks: causality is about global "
        "positions. A block from an earlier rank is wholly in the past (see it whole), one from a later "
        "rank wholly in the future (skip it), and only the rank's own block is masked.",
        _ring_of(_local_mask_all),
    ),
    Mistake(
        "does not skip the blocks of later ranks when is_causal: their keys all lie in the future of "
        "this rank's queries (a query at position i may see keys j <= i), so they must add nothing.",
        _ring_of(_future_seen),
    ),
    Mistake(
        "sees the rank's own block (the diagonal one) whole when is_causal: query i of it may see its "
        "keys up to i only. Attend it with is_causal=True; earlier ranks' blocks are seen whole.",
        _ring_of(_diagonal_whole),
    ),
    Mistake(
        "ignores is_causal: with is_causal=True, skip the blocks of later ranks and mask the rank's own.",
        _ring_of(_causal_ignored),
    ),
    *(
        Mistake(
            f"attributes the block received at step s to the wrong rank, {formula} mod R, so it skips and "
            f"masks the wrong blocks: {_SOURCE_HINT}.",
            _ring_of(_source_taken_as(*sign_offset)),
        )
        for formula, sign_offset in _WRONG_SOURCES.items()
    ),
    Mistake(
        _AVERAGE,
        _ring_of(_right, "mean"),
    ),
    Mistake(
        _AVERAGE,
        _ring_of(_right, "running"),
    ),
    Mistake(
        "returns attention over each rank's own block only: the blocks it received were never merged "
        "into its output. Merge each block's partial result into the running (out, lse).",
        _ring_of(_own_only),
    ),
    Mistake(
        "applies the causal mask although is_causal=False: mask only when is_causal is true.",
        _ring_of(_always_causal),
    ),
    Mistake(
        "does not pass the values on with the keys: each rank attends the key block it received with "
        "its own value block, so the scores are against one rank's keys and the weighted sum is of "
        "another's values. A block is a pair: take the values that arrived with the keys (k_block, "
        "v_block = k_next, v_next) and attend them together.",
        _one_passed_on("v"),
    ),
    Mistake(
        "does not pass the keys on with the values: each rank attends its own key block with the value "
        "block it received, so the scores are against one rank's keys and the weighted sum is of "
        "another's values. A block is a pair: take the keys that arrived with the values (k_block, "
        "v_block = k_next, v_next) and attend them together.",
        _one_passed_on("k"),
    ),
]


# ---------------------------------------------------------------------------------------------
# The property: which blocks each rank's output is attention over


def _describe_modes(modes: Sequence[str], rank: int) -> str:
    whole = [j for j, m in enumerate(modes) if m == "full"]
    masked = [j for j, m in enumerate(modes) if m == "causal"]
    parts = []
    if whole:
        parts.append(f"block{'s' if len(whole) > 1 else ''} {_listed(whole)} whole")
    if masked:
        parts.append(f"block{'s' if len(masked) > 1 else ''} {_listed(masked)} with a causal mask")
    text = " and ".join(parts) or "no block"
    return text.replace(f"block {rank} ", f"block {rank} (its own) ")


def _listed(items: Sequence[int]) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _diagnose(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world: int, is_causal: bool
) -> Callable[[torch.Tensor, torch.Tensor], str | None]:
    """For each wrong rank, which key blocks its output is attention over (each whole or causal)."""

    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        qs, ks, vs = _blocks(q, world), _blocks(k, world), _blocks(v, world)
        outs, rights = _blocks(actual, world), _blocks(expected, world)
        said = []
        for r in range(world):
            if is_close(outs[r], rights[r]):
                continue
            right = [_right(r, j, world, is_causal) for j in range(world)]
            found = None
            for modes in itertools.product(("skip", "full", "causal"), repeat=world):
                if all(m == "skip" for m in modes):
                    continue
                if is_close(outs[r], _ordered(qs[r], ks, vs, list(modes), r, "merge")):
                    found = list(modes)
                    break
            if found is None:
                said.append(
                    f"rank {r}'s output is not attention over any of the blocks, each whole or causal, "
                    "merged by lse"
                )
            elif found == [m if j == r else "skip" for j, m in enumerate(found)]:
                said.append(
                    f"rank {r}'s output is attention over its own block only: the blocks it received "
                    "were never merged"
                )
            else:
                said.append(
                    f"rank {r}'s output is attention over {_describe_modes(found, r)}, but should be over "
                    f"{_describe_modes(right, r)}"
                )
        if not said:
            return None
        return "is wrong on some ranks: " + "; ".join(said) + "."

    return diagnose


# ---------------------------------------------------------------------------------------------
# Running the learner's function on the ranks, and what went wrong there


_RECENT: dict[bytes, tuple[float, Any]] = {}
"""The last few deadlocks, by the function and the cases' shapes and dtypes: (when, the Deadlock). The
check's body runs up to three times when the learner's ring calls their own merge_attention (quietly,
with the course's merge in its place, then to say what failed: see `_upstream`), each time on inputs
drawn afresh; which sends and receives wait on which does not depend on the values, so the same code
need not be waited out twice on the same shapes."""
_RECENT_RUNS = 8


def _run(candidate: Any, world: int, inputs: Sequence[tuple[torch.Tensor, ...]]) -> list[ranks.Outcome]:
    """The learner's ring on `world` ranks for each case's whole inputs; what each rank returned."""
    cases = []
    for (q, k, v), case in zip(inputs, _CASES[world], strict=True):
        blocks = zip(*(ranks_split(x, world) for x in (q, k, v)), strict=True)
        cases.append([(candidate, *block, case.is_causal) for block in blocks])
    try:
        cloudpickle.dumps((candidate, cases))  # what cannot travel to the ranks is said here
    except Exception as error:  # noqa: BLE001  (what cannot be pickled is said to the learner)
        raise CheckFailed(
            f"Your ring_attention cannot be sent to other processes ({type(error).__name__}: {error}): "
            "it must not use objects that cannot be pickled (open files, locks, generators)."
        ) from None
    shapes = [[tuple(_layout(x) for x in rank_args) for rank_args in case] for case in cases]
    structure = cloudpickle.dumps((candidate, shapes))
    when, found = _RECENT.get(structure, (float("-inf"), None))
    if time.monotonic() - when >= 60:
        try:
            found = ranks.run_cases(_call_ring, cases, idle=IDLE_SECONDS)
        except ranks.RanksFailed as failed:
            found = failed
        if isinstance(found, ranks.Deadlock):
            _RECENT[structure] = (time.monotonic(), found)
            while len(_RECENT) > _RECENT_RUNS:
                del _RECENT[next(iter(_RECENT))]  # the oldest
    if isinstance(found, ranks.RanksFailed):
        raise _failure(found, candidate, world)
    return list(found)


def _layout(x: Any) -> Any:
    """What a deadlock can depend on of one argument: a tensor's shape and dtype, anything else itself."""
    return (tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else x


def ranks_split(x: torch.Tensor, world: int) -> list[torch.Tensor]:
    return [block.contiguous() for block in x.chunk(world, dim=-2)]  # R × (..., T/R, ·)


def _failure(failed: ranks.RanksFailed, candidate: Any, world: int) -> CheckFailed:
    case = _CASES[world][failed.case]
    called = f"\n(Called as {case.describe(world)}.)"
    if isinstance(failed, ranks.RankRaised):
        first = failed.raised[0]
        if first.type_name == "NotImplementedError":
            stub = next((name for file, _, name in reversed(first.frames) if file == "<dynamic-code>"), "")
            calls = " (your ring_attention calls it)" if stub and stub != "ring_attention" else ""
            return CheckFailed(
                f"`{stub if calls else 'ring_attention'}` is not implemented yet{calls}: replace "
                "`raise NotImplementedError` with your code, run that cell, then run this check again."
            )
        others = [r.rank for r in failed.raised[1:]]
        also = f" (and on rank{'s' if len(others) > 1 else ''} {_listed(others)})" if others else ""
        waited = (
            f"; rank{'s' if len(failed.stranded) > 1 else ''} {_listed(failed.stranded)} then waited for it"
            if failed.stranded
            else ""
        )
        text = " ".join(first.message.split())[:400]
        hint = _mismatched_buffers(failed.events) or _raised_hint(first)
        return CheckFailed(
            f"Your ring_attention raised {first.type_name} on rank {first.rank} of {world}{also}"
            f"{_learner_line(first, candidate)}: {text}{waited}.{hint}{called}"
        )
    assert isinstance(failed, ranks.Deadlock)
    return CheckFailed(
        f"Your ring_attention never finished: {failed}.\n{_deadlock_hint(failed, world)}{called}",
        finding="deadlock" if _all_waiting_on_messages(failed) else "",
    )


def _all_waiting_on_messages(failed: ranks.Deadlock) -> bool:
    """Whether every rank still waiting was blocked in a send, a receive or a wait (none computing)."""
    return all(ranks.open_call(failed.events[rank]) is not None for rank in failed.waiting)


def _raised_hint(raised: ranks.Raised) -> str:
    if "contiguous" in raised.message:
        return (
            "\ngloo sends and receives contiguous tensors only: send k.contiguous(), and receive into "
            "torch.empty_like(...) of a contiguous tensor."
        )
    return ""


def _mismatched_buffers(events: list[list[ranks.Event]]) -> str:
    """The first receive into a buffer shaped unlike what its sender sent (sends and receives between
    two ranks pair up in order), said as a hint; "" where every pair matches."""
    for receiver, ev in enumerate(events):
        for sender in range(len(events)):
            sent = [e.shape for e in events[sender] if e.kind in ("send", "isend") and e.peer == receiver]
            got = [e.shape for e in ev if e.kind in ("recv", "irecv") and e.peer == sender and not e.ended]
            for index, (a, b) in enumerate(zip(sent, got, strict=False)):
                if a is not None and b is not None and a != b:
                    return (
                        f"\nRank {receiver}'s receive number {index + 1} from rank {sender} goes into a "
                        f"buffer of shape {b}, but rank {sender} sent a tensor of shape {a} there: receive "
                        "each block into a buffer shaped like it (v's blocks may be narrower than k's: "
                        "torch.empty_like(v_block))."
                    )
    return ""


def _deadlock_hint(failed: ranks.Deadlock, world: int) -> str:
    """What in the ranks' calls of torch.distributed explains the deadlock, where something does."""
    events = failed.events
    sends = [{e.peer for e in ev if e.kind in ("send", "isend")} for ev in events]
    receives = [{e.peer for e in ev if e.kind in ("recv", "irecv")} for ev in events]
    ring = "rank r must send to (r + 1) % R and receive from (r − 1) % R"
    for step in (1, -1):
        if world > 2 and all(sends[r] == receives[r] == {(r + step) % world} for r in range(world)):
            return (
                "Each rank sends to and receives from the same neighbour, rank r "
                f"{'+' if step > 0 else '−'} 1: "
                "on 2 ranks r + 1 and r − 1 are the same rank, which is why it passed there, but on "
                f"{world} ranks rank r's neighbour waits for a block from its other side. R{ring[1:]}."
            )
    for r in range(world):
        for peer in sorted(p for p in sends[r] if p is not None):
            if receives[peer] and r not in receives[peer] and None not in receives[peer]:
                return (
                    f"Rank {r} sends to rank {peer}, but rank {peer} receives from "
                    f"{_listed(sorted(p for p in receives[peer] if p is not None))} only: {ring}."
                )
    blocked = [ev[-1] for ev in (events[r] for r in failed.waiting) if ev]
    if len(blocked) == world and all(e.kind == "send" and not e.ended for e in blocked):
        return (
            "Every rank is inside a blocking dist.send: a send waits until its receiver takes the block, "
            "and every rank is sending, so none is receiving. Post the receive and the send together "
            "(dist.irecv and dist.isend, then wait on both), or let even ranks send first and odd ranks "
            "receive first."
        )
    for receiver in failed.waiting:
        for sender in range(world):
            sent = sum(e.kind in ("send", "isend") and e.peer == receiver for e in events[sender])
            posted = sum(e.kind in ("recv", "irecv") and e.peer == sender for e in events[receiver])
            if posted > sent and sender not in failed.waiting:
                return (
                    f"Rank {receiver} posted {posted} receives from rank {sender}, but rank {sender} sent "
                    f"it {sent} tensors and returned: every rank must pass on a block at each of the R − 1 "
                    "exchanges, also a block it skips (a later rank's, when causal), since the next rank "
                    f"may need it. {ring[0].upper()}{ring[1:]}."
                )
    return f"Every rank must make the same sends and receives, in matching order: {ring}."


def _learner_line(raised: ranks.Raised, candidate: Any) -> str:
    """' at line N of your code: `code`' for the last frame of the learner's own code, or ''."""
    codes = _learner_codes(candidate)
    for filename, lineno, name in reversed(raised.frames):
        if filename != "<dynamic-code>":
            if str(Path(filename).resolve()).startswith(library_dirs()) or not Path(filename).exists():
                continue
            original = filename
        else:
            found = [c for c in codes if c.co_name == name and lineno in _lines(c)]
            if not found:
                continue
            original = found[0].co_filename
        code = linecache.getline(original, lineno).strip()
        return f" at line {lineno} of your code: `{code}`" if code else f" at line {lineno} of your code"
    return ""


def _lines(code: types.CodeType) -> set[int]:
    return {line for _, _, line in code.co_lines() if line is not None}


def _learner_codes(candidate: Any) -> list[types.CodeType]:
    """The code objects of the learner's function and of the learner's functions it calls."""
    found: list[types.CodeType] = []
    todo: list[Any] = [candidate]
    seen: set[int] = set()
    while todo and len(seen) < 100:
        fn = todo.pop()
        if not isinstance(fn, types.FunctionType) or id(fn) in seen:
            continue
        seen.add(id(fn))
        filename = fn.__code__.co_filename
        if Path(filename).exists() and str(Path(filename).resolve()).startswith(library_dirs()):
            continue
        stack = [fn.__code__]
        while stack:
            code = stack.pop()
            found.append(code)
            stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        todo.extend(fn.__globals__.get(n) for n in _names(fn.__code__))
        todo.extend(cell.cell_contents for cell in fn.__closure__ or () if _filled(cell))
    return found


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _expect_ring_calls(outcomes: list[ranks.Outcome], world: int) -> None:
    """No collective that gathers the blocks, and no received buffer read before its request was waited on."""
    for index, outcome in enumerate(outcomes):
        for rank, events in enumerate(outcome.events):
            for event in events:
                if event.kind in ("all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
                                  "all_to_all", "all_to_all_single", "gather", "scatter"):  # fmt: skip
                    raise CheckFailed(
                        f"Your ring_attention calls dist.{event.kind} (on rank {rank} of {world}): every "
                        "rank then holds every key/value block at once, R times the memory. The ring's point "
                        "is that a rank holds two blocks at a time, the one it computes on and the one "
                        "arriving: pass the blocks round the ring with dist.isend and dist.irecv, rank r "
                        "sending to (r + 1) % R and receiving from (r − 1) % R."
                    )
                if event.kind == "read-pending":
                    raise CheckFailed(
                        f"Your ring_attention on rank {rank} of {world} uses the buffer of its irecv from "
                        f"rank {event.peer} before waiting on that request: the block may not have arrived "
                        "yet, so the result depends on timing. Call .wait() on the requests (the isends' "
                        "and the irecvs') before using what they received.\n"
                        f"(Called as {_CASES[world][index].describe(world)}.)"
                    )


def expected_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: _Case) -> torch.Tensor:
    """SDPA over the whole sequence, computed in float64, in the case's dtype: (..., T, d_v)."""
    right = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=case.is_causal)
    return right.to(case.dtype)


@check
def check_ring_attention(candidate: Callable[..., Any]) -> str:
    """On 2 and 4 real processes, causal and not, against SDPA over the whole sequence."""
    for world in (2, 4):
        inputs = [_inputs(case, world) for case in _CASES[world]]
        outcomes = _run(candidate, world, inputs)
        _expect_ring_calls(outcomes, world)
        for case, (q, k, v), outcome in zip(_CASES[world], inputs, outcomes, strict=True):
            for rank, out in enumerate(outcome.outputs):
                expect_tensor(
                    out,
                    (*case.batch, case.block, case.d_v),
                    f"Your ring_attention's output on rank {rank} (called as {case.describe(world)})",
                )
            actual = torch.cat(outcome.outputs, dim=-2)  # (..., T, d_v)
            expected = expected_of(q, k, v, case)  # (..., T, d_v)
            mismatched = _mismatched_buffers(outcome.events)
            if mismatched and not is_close(actual, expected):
                raise CheckFailed(
                    f"Your ring_attention is wrong.{mismatched}\n(Called as {case.describe(world)}.)"
                )
            expect_close(
                actual,
                expected,
                "Your ring_attention (its outputs joined over the ranks)",
                mistakes=_MISTAKES,
                args=(q, k, v, world, case.is_causal),
                diagnose=_diagnose(q, k, v, world, case.is_causal),
                called_as=case.describe(world),
                only=("known-mistake", "property", "non-finite", "where-wrong"),
            )
    return (
        "on 2 and 4 processes (gloo), causal and not, batch axes, float32 and float64, T/R not a power of "
        "two, the blocks passed round the ring"
    )
