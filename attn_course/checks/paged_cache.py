"""Checks for notebook 11's paged KV cache: reading a sequence through its block table, and appending."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from einops import rearrange

from attn_course import reference
from attn_course.checks._contracts import (
    Arg,
    Axis,
    Case,
    Contract,
    Exercise,
    Returns,
    contract_cases,
    expect_contract_cases,
    expect_inputs_device,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    expect_close,
    expect_tensor,
    randn,
)
from attn_course.paged_cache import BlockPool, PagedKVCache, blocks_needed

# ---------------------------------------------------------------------------------------------
# gather_kv

GATHER_CONTRACT = Contract(
    "gather_kv",
    args=(
        Arg("pool_keys", ("N", "H", "S", "d"), views=("transposed", "sliced"), swap=(1, 2), slice_axis=0),
        Arg("pool_values", ("N", "H", "S", "d"), views=("transposed", "sliced"), swap=(1, 2), slice_axis=0),
    ),
    axes=(
        Axis("N", (12,)),
        Axis("H", (3, 1), "a single head"),
        Axis("S", (4, 1, 16), "blocks of one position, and one block longer than the sequence"),
        Axis("d", (5,), "a head width that is not a power of two"),
        Axis("L", (7, 8, 1), "a length that fills its last block, and a single position"),
    ),
    returns=(Returns("keys", ("H", "L", "d")), Returns("values", ("H", "L", "d"))),
    dtypes=(torch.float32, torch.float64, torch.float16),
    notes=("block_table holds ceil(L / S) distinct blocks out of the pool's order: 7, 0, 5, 10, …",),
)
"""Exercise 4 of 11: a pool stored (N, S, H, d) and read as (N, H, S, d) (transposed), or a slice of a
larger pool; block sizes of 1 and longer than the sequence; any float dtype, kept; the pool's device."""


def _table(n_blocks: int, length: int, block_size: int) -> list[int]:
    """ceil(length / block_size) distinct blocks in an order unlike the pool's: 7, 0, 5, 10, 3, … of 12."""
    return [(5 * i + 7) % n_blocks for i in range(blocks_needed(length, block_size))]


_GATHER_CASES = [
    # (n_blocks, H, block_size, d, block_table, length, why)
    (6, 2, 4, 3, [4, 1, 3], 10, "a table out of the pool's order, the last block partly filled"),
    (8, 3, 1, 5, [7, 2, 5, 0], 4, "blocks of one position"),
    (3, 2, 8, 4, [2], 5, "one block, longer than the sequence"),
    (5, 3, 2, 4, [3, 0, 4], 6, "the last block full"),
    (7, 2, 3, 5, [6, 5, 4, 3, 2, 1, 0], 20, "the whole pool, in reverse"),
]

_GATHER_HINT = (
    "gather_kv(pool_keys, pool_values, block_table, length) reads the blocks of block_table from the "
    "pools (n_blocks, H, block_size, d) and returns (keys, values), each (H, length, d)."
)

_TABLE_ORDER = (
    "reads the blocks in the pool's order (the first len(block_table) blocks, or the table sorted) instead "
    "of the table's: position t lives in block block_table[t // block_size], in whatever order the pool "
    "handed blocks out. Index the pool with the table itself: pool_keys[block_table]."
)
_SWAPPED = "returns (values, keys): return the keys first, as (keys, values)."
_KEYS_TWICE = "returns the keys as the values too: gather pool_values through the same table."


def _gather_as(
    order: Callable[[list[int]], list[int]], merge: str
) -> Callable[[torch.Tensor, torch.Tensor, list[int], int], torch.Tensor]:
    """A gather that picks its blocks by `order(table)` and merges them by `merge` (stacked keys, values)."""

    def gather(pool_k: torch.Tensor, pool_v: torch.Tensor, table: list[int], length: int) -> torch.Tensor:
        def one(pool: torch.Tensor) -> torch.Tensor:
            blocks = pool[order(list(table))]  # (n, H, S, d)
            if merge == "reshape":
                n, h, s, d = blocks.shape
                return blocks.reshape(h, n * s, d)[:, :length]  # (H, length, d), heads and blocks mixed
            return rearrange(blocks, f"n h s d -> {merge}")[:, :length]  # (H, length, d)

        return torch.stack([one(pool_k), one(pool_v)])  # (2, H, length, d)

    return gather


def _gather_mistakes() -> list[Mistake]:
    right = "h (n s) d"
    swapped = _gather_as(lambda t: t, right)
    return [
        Mistake(_TABLE_ORDER, _gather_as(sorted, right)),
        Mistake(_TABLE_ORDER, _gather_as(lambda t: list(range(len(t))), right)),
        Mistake(_MERGES["reshape"].format(which=""), _gather_as(lambda t: t, "reshape")),
        Mistake(_MERGES["(s n)"].format(which=""), _gather_as(lambda t: t, "h (s n) d")),
        Mistake(_SWAPPED, lambda k, v, t, n: swapped(k, v, t, n).flip(0)),
        Mistake(_KEYS_TWICE, lambda k, v, t, n: swapped(k, k, t, n)),
    ]


def _source(pools: Sequence[torch.Tensor], vector: torch.Tensor) -> tuple[int, int, int, int] | None:
    """(pool, block, head, slot) of the one d-vector of the pools equal to `vector`, or None."""
    for p, pool in enumerate(pools):
        found = (pool == vector).all(dim=-1).nonzero()  # (m, 3): block, head, slot of each equal one
        if len(found):
            block, head, slot = (int(i) for i in found[0])
            return p, block, head, slot
    return None


def _diagnose_gather(
    pool_k: torch.Tensor, pool_v: torch.Tensor, table: list[int], length: int, actual: Any, expected: Any
) -> str | None:
    """Where each returned position was read from in the pools, against where the table says it lives."""
    pools, names = (pool_k, pool_v), ("pool_keys", "pool_values")
    block_size = pool_k.shape[-2]
    if merged := _misread_merge(pools, table, length, actual):
        return merged
    for part, name in enumerate(("keys", "values")):
        got = actual[part]  # (H, length, d)
        for t in range(length):
            right_block, right_slot = table[t // block_size], t % block_size
            for h in range(got.shape[0]):
                source = _source(pools, got[h, t])
                where = f"its {name}[{h}, {t}] (head {h}, position {t})"
                if source is None:
                    return (
                        f"returns numbers found nowhere in the pools: {where}. Gather the stored vectors "
                        "as they are, without computing new ones."
                    )
                p, block, head, slot = source
                if p != part:
                    return (
                        f"reads its {name} from {names[p]}: {where} is a vector of {names[p]}. Read the keys "
                        "from pool_keys and the values from pool_values."
                    )
                if head != h:
                    return (
                        f"moves the heads: {where} is head {head} of the pool. Keep the head axis as "
                        "it is, (H, length, d): merge only blocks and slots into time."
                    )
                if (block, slot) != (right_block, right_slot):
                    return (
                        f"reads position {t} from block {block}, slot {slot}, but block_table {table} puts "
                        f"it in block {right_block} = block_table[{t} // {block_size}], slot {right_slot} = "
                        f"{t} % {block_size}. Position t lives in block block_table[t // block_size], slot "
                        "t % block_size."
                    )
    return None


_MERGES = {
    "(s n)": (
        "merges block and slot into time in the wrong order{which}, (s n) instead of (n s): position t is "
        "slot t % block_size of the t // block_size-th block, so the block index is the slower one, "
        "rearrange(blocks, 'n h s d -> h (n s) d')."
    ),
    "reshape": (
        "reshapes the gathered blocks (n, H, block_size, d) straight into (H, n·block_size, d){which}, "
        "which mixes heads and blocks: move the head axis first, rearrange(blocks, 'n h s d -> h (n s) d')."
    ),
}
"""How a merge into time reads the pool wrong, {which} saying where when not in both keys and values."""


def _merged(pool: torch.Tensor, table: list[int], length: int, merge: str) -> torch.Tensor:
    """The pool's blocks of `table` merged into time as `merge` does: (H, length, d)."""
    blocks = pool[list(table)]  # (n, H, S, d)
    if merge == "reshape":
        n, h, s, d = blocks.shape
        return blocks.reshape(h, n * s, d)[:, :length]  # (H, length, d): heads and blocks mixed
    return rearrange(blocks, "n h s d -> h (s n) d")[:, :length]  # (H, length, d): slot the slower axis


def _misread_merge(
    pools: tuple[torch.Tensor, torch.Tensor], table: list[int], length: int, actual: Any
) -> str | None:
    """A merge of blocks and slots into time whose reading of the pool is a known wrong one (slot the
    slower axis; heads and blocks mixed by a reshape), in the keys or the values alone or in both."""
    wrong: dict[str, list[str]] = {}
    for part, name in enumerate(("keys", "values")):
        got = actual[part]  # (H, length, d)
        if torch.equal(got, reference.gather_kv(pools[0], pools[1], table, length)[part]):
            continue
        for merge in _MERGES:
            want = _merged(pools[part], table, length, merge)  # (H, length, d)
            if got.shape == want.shape and torch.equal(got, want):
                wrong.setdefault(merge, []).append(name)
                break
        else:
            return None  # this part is wrong some other way: where it reads from says what
    if not wrong:
        return None
    if len(wrong) == 1 and len(next(iter(wrong.values()))) == 2:
        return next(_MERGES[m].format(which="") for m in wrong)
    said = []
    for merge, parts in wrong.items():
        right = "" if len(wrong) == 2 else f" (its {'values' if parts == ['keys'] else 'keys'} are right)"
        said.append(_MERGES[merge].format(which=f" in its {parts[0]}{right}"))
    return " And it ".join(said)


def _expect_pair(result: Any, shown: str) -> tuple[Any, Any]:
    if isinstance(result, torch.Tensor) or not isinstance(result, tuple | list) or len(result) != 2:
        what = (
            f"one tensor of shape {tuple(result.shape)}" if isinstance(result, torch.Tensor) else repr(result)
        )
        raise CheckFailed(f"{shown} should return a tuple (keys, values), but returned {what:.100}.")
    return result[0], result[1]


def _gather_hints(n: int, h: int, s: int, d: int, length: int) -> dict[tuple[int, ...], str]:
    hints = {
        (h, n * s, d): (
            f"It returns all {n} blocks' {n * s} slots: the last block is filled only up to length; "
            "cut the result to the first `length` positions."
        ),
        (length, h, d): "It puts time before the heads: the result is (H, length, d), as the pool's heads.",
        (n * s, h, d): "It puts time before the heads and keeps every slot: (H, length, d) is expected.",
        (n, h, s, d): "Merge the blocks and their slots into one time axis: (n, H, s, d) -> (H, n·s, d).",
        (h, n, s, d): "Merge the blocks and their slots into one time axis: (H, n, s, d) -> (H, n·s, d).",
    }
    hints.pop((h, length, d), None)
    return hints


@check
def check_gather_kv(candidate: Callable[..., Any]) -> str:
    """Block tables out of the pool's order, partial last blocks, blocks of 1 and longer than the sequence."""
    for n_blocks, h, s, d, table, length, why in _GATHER_CASES:
        pool_k, pool_v = randn(n_blocks, h, s, d), randn(n_blocks, h, s, d)  # (N, H, S, d) each
        shown = f"gather_kv(pool_keys, pool_values, block_table={table}, length={length})"
        about = f"with pools of shape {(n_blocks, h, s, d)} ({why})"
        result = call("gather_kv", candidate, pool_k, pool_v, list(table), length, hint=_GATHER_HINT)
        keys, values = _expect_pair(result, f"Your {shown}")
        want_k, want_v = reference.gather_kv(pool_k, pool_v, table, length)  # (H, length, d) each
        hints = _gather_hints(len(table), h, s, d, length)
        keys = expect_tensor(keys, want_k.shape, f"The keys of your {shown}", hints=hints)
        values = expect_tensor(values, want_v.shape, f"The values of your {shown}", hints=hints)
        expect_close(
            torch.stack([keys, values]),  # (2, H, length, d)
            torch.stack([want_k, want_v]),
            f"Your {shown} {about}",
            mistakes=_gather_mistakes(),
            args=(pool_k, pool_v, table, length),
            diagnose=functools.partial(_diagnose_gather, pool_k, pool_v, table, length),
            called_as="",
            only=("known-mistake", "property", "where-wrong"),
        )
    generated = _gather_contract(candidate)
    return (
        f"{len(_GATHER_CASES)} block tables (out of the pool's order, blocks of 1 and longer than the "
        f"sequence, partial and full last blocks) and {generated} cases from the exercise's contract"
    )


def _gather_contract(candidate: Callable[..., Any]) -> int:
    def table_and_length(case: Case) -> tuple[list[int], int]:
        size = case.size
        return _table(size["N"], size["L"], size["S"]), size["L"]

    exercise = Exercise(
        "gather_kv",
        lambda case: (candidate, reference.gather_kv),
        unpack=lambda result, expected: tuple(result) if isinstance(result, tuple | list) else (result,),
        after=table_and_length,
    )
    ran = expect_contract_cases(
        GATHER_CONTRACT, exercise, contract_cases(GATHER_CONTRACT, one_kind_each=True)
    )
    return ran + expect_inputs_device(GATHER_CONTRACT, exercise)


# ---------------------------------------------------------------------------------------------
# append_kv


@dataclass(frozen=True)
class _Scenario:
    """Sequences appended to, forked and freed in one pool, step by step."""

    block_size: int
    n_blocks: int
    steps: tuple[str, ...]
    """Each "new a", "append a", "fork a b" (b a fork of a) or "free a"; "append a 5" appends 5 times."""
    why: str


_H, _D = 2, 3
"""Heads and head width of the append check: unlike each other, every block size and the pools' sizes."""

_SCENARIOS = (
    _Scenario(
        4, 16,
        ("new a", "new b", "new c", *("append a", "append b", "append c") * 3, "append c 6", "append a 2",
         "free b", "append a 4", "append c 3"),
        "three sequences interleaved across block boundaries, one freed and its blocks taken again",
    ),
    _Scenario(
        1, 16,
        ("new a", "append a 3", "new b", "append b", "append a", "append b", "fork a c", "append c 2",
         "append a", "free a", "append c"),
        "blocks of one position, a fork at a full block",
    ),
    _Scenario(
        8, 6,
        ("new a", "append a 5", "fork a b", "append b 2", "append a 2", "free b", "append a", "free a"),
        "a block longer than the sequences, a fork that appends first",
    ),
    _Scenario(
        4, 16,
        ("new a", "append a 6", "fork a c", "append a", "append c 3", "append a 2", "fork c d", "append d",
         "append c", "free c", "append d 4", "free a", "free d"),
        "forks inside a partly filled block, the parent appending first, then a fork of a fork",
    ),
)  # fmt: skip


def _ops(scenario: _Scenario) -> list[tuple[str, ...]]:
    """The scenario's steps, one append each."""
    ops: list[tuple[str, ...]] = []
    for step in scenario.steps:
        kind, *names = step.split()
        if kind == "append" and len(names) == 2:
            ops += [("append", names[0])] * int(names[1])
        else:
            ops.append((kind, *names))
    return ops


_APPEND_HINT = (
    "append_kv(cache, seq, k, v) gets k and v of shape (H, d) for one new position of sequence seq: it "
    "writes them into slot cache.lengths[seq] % block_size of the last block of cache.tables[seq], taking "
    "blocks with cache.pool.allocate()."
)


class _Replay:
    """A scenario played on a course PagedKVCache with some append, beside notebook 07's KVCache."""

    def __init__(self, scenario: _Scenario, tokens: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.scenario = scenario
        self.cache = PagedKVCache(BlockPool(scenario.n_blocks, _H, scenario.block_size, _D, torch.float64))
        self.oracle = reference.KVCache()  # "layer" = sequence id: one contiguous cache per sequence
        self.ids: dict[str, int] = {}
        self.tokens = tokens  # the (k, v) of each op

    def history(self, name: str) -> torch.Tensor:
        """The contiguous cache's keys and values of a sequence, stacked: (2, H, length, d)."""
        seq = self.ids[name]
        if self.oracle.length(seq) == 0:
            return torch.zeros(2, _H, 0, _D, dtype=torch.float64)
        keys, values = self.oracle.keys[seq][0], self.oracle.values[seq][0]  # (H, length, d) each
        return torch.stack([keys, values])  # (2, H, length, d)

    def step(self, index: int, op: tuple[str, ...], append: Callable[..., Any]) -> None:
        kind, name = op[0], op[1]
        if kind == "new":
            self.ids[name] = self.cache.new_sequence()
        elif kind == "fork":
            self.ids[op[2]] = self.cache.fork(self.ids[name])
            past = self.history(name)  # (2, H, length, d)
            if past.shape[-2]:
                self.oracle.append(self.ids[op[2]], past[0][None], past[1][None])
        elif kind == "free":
            self.cache.free(self.ids.pop(name))
        else:
            k, v = self.tokens[index]  # (H, d) each
            append(self.cache, self.ids[name], k, v)
            self.oracle.append(self.ids[name], k[None, :, None], v[None, :, None])  # (1, H, 1, d) each


def _replayed(
    scenario: _Scenario, tokens: list[tuple[torch.Tensor, torch.Tensor]], upto: int, name: str,
    append: Callable[..., Any],
) -> torch.Tensor:  # fmt: skip
    """What sequence `name` holds after steps 0 … upto played with `append`: (2, H, length, d)."""
    replay = _Replay(scenario, tokens)
    for index, op in enumerate(_ops(scenario)[: upto + 1]):
        replay.step(index, op, append)
    return torch.stack(replay.cache.gather(replay.ids[name]))  # (2, H, length, d)


def _swapped_append(cache: PagedKVCache, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
    reference.append_kv(cache, seq, v, k)


def _where(cache: PagedKVCache, vector: torch.Tensor) -> tuple[int, int] | None:
    """(block, slot) of the pool's keys where `vector` (H, d) was written, or None."""
    pool = cache.pool.keys  # (N, H, S, d)
    found = (pool == vector[None, :, None]).all(dim=-1).all(dim=1).nonzero()  # (m, 2): block, slot
    return (int(found[0][0]), int(found[0][1])) if len(found) else None


def _holders(cache: PagedKVCache, names: dict[str, int]) -> dict[int, list[str]]:
    """Block -> the sequences whose tables hold it (a name once per time it is held)."""
    held: dict[int, list[str]] = {}
    for name, seq in names.items():
        for block in cache.tables[seq]:
            held.setdefault(block, []).append(name)
    return held


def _expect_lengths(cache: PagedKVCache, replay: _Replay, names: dict[str, int], after: str) -> None:
    for name, seq in names.items():
        want = replay.oracle.length(seq)
        got = cache.lengths.get(seq)
        if got != want:
            hint = (
                " Count the new position: cache.lengths[seq] += 1 (after writing it: the slot is the old "
                "length % block_size)."
                if got == want - 1
                else ""
            )
            raise CheckFailed(
                f"After {after}, cache.lengths of sequence {name} is {got}, {want} expected.{hint}"
            )


def _expect_tables(cache: PagedKVCache, names: dict[str, int], after: str) -> None:
    block_size = cache.pool.block_size
    for name, seq in names.items():
        length, table = cache.lengths[seq], cache.tables[seq]
        need = blocks_needed(length, block_size)
        if len(table) == need:
            continue
        rule = (
            "A sequence needs a new block only when its last block is full or it has none: when "
            "length % block_size == 0 before the append."
        )
        if len(table) > need:
            raise CheckFailed(
                f"After {after}, sequence {name} holds {len(table)} blocks {table} for {length} positions, "
                f"but ceil({length} / {block_size}) = {need} hold them: it allocates a new block one "
                f"position early, or more than once. {rule}"
            )
        raise CheckFailed(
            f"After {after}, sequence {name} holds {len(table)} blocks {table} for {length} positions, "
            f"ceil({length} / {block_size}) = {need} expected: it allocates a new block too late (the "
            f"position goes into a block that is already full). {rule}"
        )


def _tables(n: int) -> str:
    return "1 table holds" if n == 1 else f"{n} tables hold"


def _expect_counts(
    cache: PagedKVCache, names: dict[str, int], after: str, copied: tuple[str, int] | None
) -> None:
    """Each block's count is how many tables hold it; the free list is exactly the blocks none holds.

    `copied`: (sequence, its last block before the append) where that append had to copy a shared block.
    """
    pool = cache.pool
    held = _holders(cache, names)
    if copied is not None:
        name, old = copied
        table = cache.tables[names[name]]
        orphans = [b for b, count in enumerate(pool.refcount) if count > 0 and b not in held]
        if table and table[-1] == old and orphans:
            raise CheckFailed(
                f"After {after}, a copy of sequence {name}'s shared last block {old} was taken (block "
                f"{orphans[0]}, held by no table), but the table {table} still points at block {old}, "
                "which the other sequences keep reading: copy-on-write copies the block, then puts the "
                "copy in the table (cache.tables[seq][-1] = copy) and writes into the copy."
            )
        if table and table[-1] != old and pool.refcount[old] == len(held.get(old, [])) + 1:
            raise CheckFailed(
                f"After {after}, sequence {name} copied its shared block {old} to block {table[-1]}, but "
                f"block {old} still has count {pool.refcount[old]} while {_tables(len(held.get(old, [])))} "
                f"it: copy-on-write must drop the old block's count by one (cache.pool.release(old)), "
                "or it is never returned to the free list."
            )
    free = pool.free
    twice = sorted({b for b in free if free.count(b) > 1})
    if twice:
        raise CheckFailed(f"After {after}, block {twice[0]} is in cache.pool.free twice.")
    for block, count in enumerate(pool.refcount):
        holders = held.get(block, [])
        if count != len(holders):
            who = f"the tables of {', '.join(holders)} hold it" if holders else "no table holds it"
            why = (
                " Take new blocks with cache.pool.allocate(), which sets the count to 1."
                if count == 0
                else " Each table holding a block counts once: a copy-on-write releases the old block "
                "once, and counts nothing else."
            )
            raise CheckFailed(f"After {after}, block {block} has count {count}, but {who}.{why}")
        if (count == 0) != (block in free):
            state = "is in the free list" if block in free else "is not in the free list"
            raise CheckFailed(
                f"After {after}, block {block} has count {count} and {state}: a block is free exactly when "
                "no table holds it. Take blocks with cache.pool.allocate() and give them back with "
                "cache.pool.release(block)."
            )


def _expect_table_change(
    table: list[int], name: str, old: list[int], length: int, count: int, block_size: int, after: str
) -> None:
    """An append adds a block at the end (a full last block) or replaces the last (a shared one), no more.

    `old`, `length` and `count`: the sequence's table, its length and its last block's count before."""
    if length % block_size == 0 or count > 1:
        if table[:-1] == old[: len(table) - 1]:
            return
        raise CheckFailed(
            f"After {after}, sequence {name}'s table changed from {old} to {table}: an append adds a block "
            "at the end (when the last is full) or replaces the last (when it is shared, by its copy). "
            "The blocks before it are full and never written again, so they are neither copied nor moved, "
            "even when other tables hold them too."
        )
    if table != old:
        raise CheckFailed(
            f"After {after}, sequence {name}'s table changed from {old} to {table}, although its last block "
            f"{old[-1]} had room (slot {length % block_size} of {block_size}) and no other table held it "
            f"(count {count}): copy a block only when it is shared (count > 1); a block the sequence "
            "holds alone is written in place."
        )


def _diagnose_tokens(
    cache: PagedKVCache,
    names: dict[str, int],
    name: str,
    appended: str | None,
    new_key: torch.Tensor | None,
    copied: tuple[str, int] | None,
    actual: torch.Tensor,
    expected: torch.Tensor,
) -> str | None:
    """Which positions of sequence `name` differ from notebook 07's cache, and what that shows.

    `copied`: (the sequence appended to, its last block before) where that append had to copy a shared
    block."""
    keys_wrong = ~torch.isclose(actual[0], expected[0]).all(dim=-1).all(dim=0)  # (length,)
    values_wrong = ~torch.isclose(actual[1], expected[1]).all(dim=-1).all(dim=0)  # (length,)
    wrong = (keys_wrong | values_wrong).nonzero().flatten().tolist()
    if not wrong:
        return None
    block_size, table = cache.pool.block_size, cache.tables[names[name]]
    first = wrong[0]
    block = table[first // block_size]
    parts = (
        "keys and values"
        if keys_wrong[first] and values_wrong[first]
        else "keys"
        if keys_wrong[first]
        else "values"
    )
    if appended is not None and appended != name:
        sharing = [other for other, seq in names.items() if other != name and block in cache.tables[seq]]
        shared = (
            f" (block {block}, which the tables of {name} and {', '.join(sharing)} hold)" if sharing else ""
        )
        moved = copied is not None and cache.tables[names[appended]][-1] != copied[1]
        if moved and copied is not None and block == copied[1]:
            return (
                f"changes sequence {name} when appending to sequence {appended}: {name}'s {parts} at "
                f"position {first}{shared} changed, although {appended}'s table now points at a new block "
                f"{cache.tables[names[appended]][-1]}: the shared block {block} itself was written. The copy "
                "goes from the shared block into the new one (pool.keys[copy] = pool.keys[shared], and "
                "the values), never the other way; then the new position is written into the copy."
            )
        return (
            f"changes sequence {name} when appending to sequence {appended}: {name}'s {parts} at position "
            f"{first}{shared} are no longer the ones appended to {name}. A block that other tables hold "
            "too (count > 1) must be copied before a write: copy-on-write, take a new block, copy the "
            "shared one into it, release the shared one and put the copy in the table, then write."
        )
    if new_key is not None and appended == name:
        last = expected.shape[-2] - 1
        start = last - last % block_size  # the first position of the last block
        if copied is not None and set(wrong) <= set(range(start, last)):
            return (
                f"loses sequence {name}'s {parts} at position{'s' if len(wrong) > 1 else ''} "
                f"{', '.join(map(str, wrong))} when it copies its shared block {copied[1]} to block "
                f"{table[-1]} (copy-on-write): the new block must first get the {parts} the shared block "
                "held, pool.keys[copy] = pool.keys[shared] and pool.values[copy] = pool.values[shared], "
                "before the new position is written into it."
            )
        where = _where(cache, new_key)
        right = (table[last // block_size], last % block_size) if table else None
        if copied is not None and where is not None and where[0] == copied[1] and table[-1] != copied[1]:
            return (
                f"writes position {last} of sequence {name} into the shared block {copied[1]} it has just "
                f"copied, not into the copy, block {table[-1]}, which the table now holds: after "
                "copy-on-write, write the new position into the copy (tables[seq][-1])."
            )
        if where is not None and where != right:
            return (
                f"writes position {last} of sequence {name} into block {where[0]}, slot {where[1]}, but it "
                f"belongs in slot {last} % {block_size} = {last % block_size} of the last block of the table "
                f"{table}, block {table[-1]}: the slot is length % block_size, the block tables[seq][-1]."
            )
        if where is None and keys_wrong[last]:
            return (
                f"does not store the new key of sequence {name} (position {last}) anywhere in "
                "cache.pool.keys: write k into pool.keys[block, :, slot] and v into pool.values."
            )
    spans = ", ".join(str(t) for t in wrong[:6]) + (" …" if len(wrong) > 6 else "")
    return (
        f"holds other {parts} than notebook 07's cache for sequence {name} at positions {spans} (the first "
        f"in block {block}, slot {first % block_size})."
    )


@check
def check_append_kv(candidate: Callable[..., Any]) -> str:
    """Scenarios of interleaved sequences, forks and frees, each step against notebook 07's KVCache."""
    steps = 0
    for scenario in _SCENARIOS:
        ops = _ops(scenario)
        tokens = [(randn(_H, _D), randn(_H, _D)) for _ in ops]  # (H, d) each
        replay = _Replay(scenario, tokens)
        cache, done = replay.cache, []
        for index, op in enumerate(ops):
            kind, name = op[0], op[1]
            copied, before = None, None
            if kind == "append":
                seq = replay.ids[name]
                table, length = cache.tables[seq], cache.lengths[seq]
                before = (list(table), length, cache.pool.refcount[table[-1]] if table else 0)
                if length % scenario.block_size and cache.pool.refcount[table[-1]] > 1:
                    copied = (name, table[-1])

            def learners(
                cache: PagedKVCache,
                seq: int,
                k: torch.Tensor,
                v: torch.Tensor,
                scenario: _Scenario = scenario,
            ) -> None:
                shown_call = f"append_kv(cache, seq={seq}, k, v) with k, v of shape {(_H, _D)}"
                try:
                    call("append_kv", candidate, cache, seq, k, v, hint=_APPEND_HINT)
                except CheckFailed as failure:
                    raise _write_failure(failure, scenario, shown_call) from None

            replay.step(index, op, learners)
            done.append(" ".join(op))
            after = _after(done, scenario)
            names = dict(replay.ids)
            _expect_lengths(cache, replay, names, after)
            _expect_tables(cache, names, after)
            _expect_counts(cache, names, after, copied)
            if before is not None:
                _expect_table_change(
                    cache.tables[replay.ids[name]], name, *before, scenario.block_size, after
                )
            for other in names:
                expected = replay.history(other)  # (2, H, length, d)
                table, length = cache.tables[names[other]], cache.lengths[names[other]]
                actual = torch.stack(reference.gather_kv(cache.pool.keys, cache.pool.values, table, length))
                appended = name if kind == "append" else None
                new_key = tokens[index][0] if kind == "append" else None
                mistakes = [
                    Mistake(
                        "stores k in cache.pool.values and v in cache.pool.keys: write k into the keys.",
                        functools.partial(_replayed, scenario, tokens, index, other, _swapped_append),
                    )
                ]
                expect_close(
                    actual,
                    expected,
                    f"After {after}, your cache (read through its block tables, keys and values stacked)",
                    mistakes=mistakes,
                    diagnose=functools.partial(
                        _diagnose_tokens, cache, names, other, appended, new_key, copied
                    ),
                    called_as="",
                    only=("known-mistake", "property", "where-wrong"),
                )
            steps += 1
        if not replay.ids and len(cache.pool.free) != scenario.n_blocks:
            raise CheckFailed(
                f"After every sequence of {_after(done, scenario)} was freed, only {len(cache.pool.free)} of "
                f"the pool's {scenario.n_blocks} blocks are free."
            )
    return (
        f"{len(_SCENARIOS)} scenarios, {steps} steps (sequences interleaved, blocks of 1, 4 and 8 positions, "
        "forks with copy-on-write, frees), each against notebook 07's KVCache, counts and free list"
    )


def _after(done: list[str], scenario: _Scenario) -> str:
    """The steps so far, appends to one sequence run together: "new a, append a ×3, fork a c"."""
    runs: list[list[Any]] = []
    for step in done:
        if runs and runs[-1][0] == step:
            runs[-1][1] += 1
        else:
            runs.append([step, 1])
    text = ", ".join(step if n == 1 else f"{step} ×{n}" for step, n in runs)
    return f"[{text}] with block_size={scenario.block_size}"


def _write_failure(failure: CheckFailed, scenario: _Scenario, shown: str) -> CheckFailed:
    """An index past a block's last slot, or a slot indexing the head axis, said as what it is."""
    bound = re.search(r"index (\d+) is out of bounds for dimension \d+ with size (\d+)", str(failure))
    if bound and int(bound[2]) == scenario.block_size and int(bound[1]) >= scenario.block_size:
        return CheckFailed(
            f"Your {shown} writes at slot {bound[1]} of a block of {scenario.block_size} slots: the slot "
            "of the new position in its block is length % block_size, not the length itself.\n" + str(failure)
        )
    target = re.search(r"Target sizes: \[(\d+), (\d+)\]", str(failure))
    if target and (int(target[1]), int(target[2])) == (scenario.block_size, _D) and scenario.block_size != _H:
        return CheckFailed(
            f"Your {shown} writes k (H, d) = {(_H, _D)} into a ({scenario.block_size}, {_D}) piece of a "
            "block, (block_size, d): its slot index lands on the head axis. A pool is (n_blocks, H, "
            "block_size, d): the slot is the third index, pool.keys[block, :, slot] = k.\n" + str(failure)
        )
    return failure
