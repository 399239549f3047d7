"""The checks of notebook 11's paged KV cache reject mistakes written as learners write them, and accept
right answers."""

# ruff: noqa: E501  (tables of learner cases)
from __future__ import annotations

import pytest
import torch
from check_assertions import assert_accepted, assert_rejected
from einops import rearrange
from learner_code import APPEND, APPEND_DIVMOD, GATHER, GATHER_LOOP, learner

from attn_course import reference
from attn_course.checks import CheckFailed, check_append_kv, check_gather_kv


def not_implemented(*args, **kwargs):
    raise NotImplementedError


def gather(*edits):
    return learner(GATHER, "gather_kv", *edits)


def append(*edits):
    return learner(APPEND, "append_kv", *edits)


# ---------------------------------------------------------------------------------------------
# Right answers in other styles


def gather_index_select(pool_keys, pool_values, block_table, length):
    index = torch.tensor(block_table, device=pool_keys.device)
    n, (_, h, s, d) = len(block_table), pool_keys.shape
    keys = pool_keys.index_select(0, index).transpose(0, 1).reshape(h, n * s, d)
    values = pool_values.index_select(0, index).transpose(0, 1).reshape(h, n * s, d)
    return keys[:, :length], values[:, :length]


def gather_per_position(pool_keys, pool_values, block_table, length):
    s = pool_keys.shape[2]
    keys = torch.stack([pool_keys[block_table[t // s], :, t % s] for t in range(length)], dim=1)
    values = torch.stack([pool_values[block_table[t // s], :, t % s] for t in range(length)], dim=1)
    return keys, values


def gather_einops_tensor_index(pool_keys, pool_values, block_table, length):
    index = torch.as_tensor(block_table, dtype=torch.long)
    keys, values = (rearrange(p[index], "n h s d -> h (n s) d")[:, :length] for p in (pool_keys, pool_values))
    return keys, values


def append_clone_then_write(cache, seq, k, v):
    """Copy-on-write by a cloned block written back; counts kept by hand."""
    pool = cache.pool
    length, size = cache.lengths[seq], pool.block_size
    if len(cache.tables[seq]) * size == length:
        cache.tables[seq].append(pool.allocate())
    last = cache.tables[seq][-1]
    if pool.refcount[last] != 1:
        fresh = pool.allocate()
        pool.keys[fresh], pool.values[fresh] = pool.keys[last].clone(), pool.values[last].clone()
        pool.refcount[last] -= 1
        cache.tables[seq][-1] = fresh
    pool.keys[cache.tables[seq][-1], :, length % size, :] = k
    pool.values[cache.tables[seq][-1], :, length % size, :] = v
    cache.lengths[seq] = length + 1


def gather_into_zeros(pool_keys, pool_values, block_table, length):
    _, h, s, d = pool_keys.shape
    keys, values = torch.zeros(h, length, d), torch.zeros(h, length, d)
    for t in range(length):
        keys[:, t] = pool_keys[block_table[t // s], :, t % s]
        values[:, t] = pool_values[block_table[t // s], :, t % s]
    return keys, values


def gather_into_zeros_like(pool_keys, pool_values, block_table, length):
    _, h, s, d = pool_keys.shape
    keys = torch.zeros(h, length, d, dtype=pool_keys.dtype)
    values = torch.zeros(h, length, d, dtype=pool_values.dtype)
    for t in range(length):
        keys[:, t] = pool_keys[block_table[t // s], :, t % s]
        values[:, t] = pool_values[block_table[t // s], :, t % s]
    return keys, values


CORRECT = [
    pytest.param(check_gather_kv, reference.gather_kv, id="gather-reference"),
    pytest.param(check_gather_kv, gather(), id="gather-learner"),
    pytest.param(check_gather_kv, learner(GATHER_LOOP, "gather_kv"), id="gather-loop-cat"),
    pytest.param(check_gather_kv, gather_index_select, id="gather-index-select"),
    pytest.param(check_gather_kv, gather_per_position, id="gather-per-position"),
    pytest.param(check_gather_kv, gather_einops_tensor_index, id="gather-einops-tensor-index"),
    pytest.param(check_append_kv, reference.append_kv, id="append-reference"),
    pytest.param(check_append_kv, append(), id="append-learner"),
    pytest.param(check_append_kv, learner(APPEND_DIVMOD, "append_kv"), id="append-divmod"),
    pytest.param(check_append_kv, append_clone_then_write, id="append-clone-then-write"),
]


# ---------------------------------------------------------------------------------------------
# Mistakes, each a text edit of the right learner solution


WRONG = [
    pytest.param(check_gather_kv, not_implemented, "not implemented yet", id="gather-stub"),
    pytest.param(
        check_gather_kv,
        gather(
            ("pool_keys[block_table]", "pool_keys[sorted(block_table)]"),
            ("pool_values[block_table]", "pool_values[sorted(block_table)]"),
        ),
        "reads the blocks in the pool's order",
        id="gather-sorted-table",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            ("pool_keys[block_table]", "pool_keys[: len(block_table)]"),
            ("pool_values[block_table]", "pool_values[: len(block_table)]"),
        ),
        "reads the blocks in the pool's order",
        id="gather-first-blocks",
    ),
    pytest.param(
        check_gather_kv,
        gather(("return keys[:, :length], values[:, :length]", "return keys, values")),
        "cut the result to the first `length` positions",
        id="gather-not-cut",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            ('"n h s d -> h (n s) d")\n    values', '"n h s d -> (n s) h d")\n    values'),
            ('"n h s d -> h (n s) d")\n    return', '"n h s d -> (n s) h d")\n    return'),
            ("return keys[:, :length], values[:, :length]", "return keys[:length], values[:length]"),
        ),
        "puts time before the heads",
        id="gather-head-axis-transposed",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                'keys = rearrange(blocks_k, "n h s d -> h (n s) d")',
                "keys = blocks_k.reshape(blocks_k.shape[1], -1, blocks_k.shape[3])",
            ),
            (
                'values = rearrange(blocks_v, "n h s d -> h (n s) d")',
                "values = blocks_v.reshape(blocks_v.shape[1], -1, blocks_v.shape[3])",
            ),
        ),
        "mixes heads and blocks",
        id="gather-reshape-without-moving-heads",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                'keys = rearrange(blocks_k, "n h s d -> h (n s) d")',
                'keys = rearrange(blocks_k, "n h s d -> h (s n) d")',
            ),
            (
                'values = rearrange(blocks_v, "n h s d -> h (n s) d")',
                'values = rearrange(blocks_v, "n h s d -> h (s n) d")',
            ),
        ),
        "(s n) instead of (n s)",
        id="gather-slot-major",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                'keys = rearrange(blocks_k, "n h s d -> h (n s) d")',
                "keys = blocks_k.permute(1, 2, 0, 3).flatten(1, 2)",
            ),
        ),
        "in the wrong order in its keys (its values are right), (s n) instead of (n s)",
        id="gather-keys-alone-slot-major-by-permute",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                'values = rearrange(blocks_v, "n h s d -> h (n s) d")',
                "values = torch.reshape(blocks_v, (blocks_v.size(1), -1, blocks_v.size(3)))",
            ),
        ),
        "in its values (its keys are right), which mixes heads and blocks",
        id="gather-values-alone-reshaped-keeping-heads-in-place",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                'keys = rearrange(blocks_k, "n h s d -> h (n s) d")',
                "keys = blocks_k.permute(1, 2, 0, 3).flatten(1, 2)",
            ),
            (
                'values = rearrange(blocks_v, "n h s d -> h (n s) d")',
                "values = blocks_v.reshape(blocks_v.shape[1], -1, blocks_v.shape[3])",
            ),
        ),
        "(s n) instead of (n s): position t is slot t % block_size of the t // block_size-th block, so the "
        "block index is the slower one, rearrange(blocks, 'n h s d -> h (n s) d'). And it reshapes the "
        "gathered blocks (n, H, block_size, d) straight into (H, n·block_size, d) in its values",
        id="gather-keys-slot-major-values-reshaped",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            ("return keys[:, :length], values[:, :length]", "return values[:, :length], keys[:, :length]")
        ),
        "return the keys first",
        id="gather-keys-values-swapped",
    ),
    pytest.param(
        check_gather_kv,
        gather(("blocks_v = pool_values[block_table]", "blocks_v = pool_keys[block_table]")),
        "returns the keys as the values too",
        id="gather-keys-twice",
    ),
    pytest.param(
        check_gather_kv,
        gather(("blocks_k = pool_keys[block_table]", "blocks_k = pool_keys[block_table[::-1]]")),
        "but block_table",
        id="gather-unknown-block-order",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                'keys = rearrange(blocks_k, "n h s d -> h (n s) d")',
                'keys = rearrange(blocks_k.flip(1), "n h s d -> h (n s) d")',
            )
        ),
        "moves the heads",
        id="gather-unknown-heads-reversed",
    ),
    pytest.param(
        check_gather_kv,
        gather(
            (
                "return keys[:, :length], values[:, :length]",
                "return keys[:, :length] * 1.5, values[:, :length]",
            )
        ),
        "numbers found nowhere in the pools",
        id="gather-unknown-computed",
    ),
    pytest.param(
        check_gather_kv, gather_into_zeros, "must have the inputs' dtype", id="gather-zeros-default-dtype"
    ),
    pytest.param(
        check_gather_kv,
        gather_into_zeros_like,
        "Make every new tensor on the inputs' device",
        id="gather-zeros-default-device",
    ),
    pytest.param(check_append_kv, not_implemented, "not implemented yet", id="append-stub"),
    pytest.param(
        check_append_kv,
        append(("slot = length % pool.block_size", "slot = length")),
        "the slot of the new position in its block is length % block_size",
        id="append-slot-is-length",
    ),
    pytest.param(
        check_append_kv,
        append(("if slot == 0:", "if len(table) * pool.block_size <= length + 1:")),
        "allocates a new block one position early",
        id="append-allocates-early",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "    slot = length % pool.block_size\n    if slot == 0:",
                "    slot = length % pool.block_size\n    if (length + 1) % pool.block_size == 0:",
            )
        ),
        "passes this check written `if length % pool.block_size == 0:`",
        id="append-allocates-early-never-first",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "table.append(pool.allocate())",
                "table.append(pool.free[-1])\n        pool.refcount[table[-1]] = 1",
            )
        ),
        "a block is free exactly when no table holds it",
        id="append-block-left-in-free-list",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "pool.keys[block, :, slot] = k\n    pool.values[block, :, slot] = v",
                "pool.keys[block, slot] = k\n    pool.values[block, slot] = v",
            )
        ),
        "its slot index lands on the head axis",
        id="append-head-axis-transposed",
    ),
    pytest.param(
        check_append_kv,
        append(("if slot == 0:", "if length > len(table) * pool.block_size or not table:")),
        "allocates a new block too late",
        id="append-allocates-late",
    ),
    pytest.param(
        check_append_kv,
        append(("    elif pool.refcount[table[-1]] > 1:", "    elif False:")),
        "copy-on-write",
        id="append-no-copy-on-write",
    ),
    pytest.param(
        check_append_kv,
        append(("        pool.release(table[-1])\n", "")),
        "must drop the old block's count by one",
        id="append-cow-keeps-count",
    ),
    pytest.param(
        check_append_kv,
        append(("        table[-1] = new_block\n", "")),
        "still points at block",
        id="append-cow-table-not-updated",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "        pool.release(table[-1])\n        table[-1] = new_block\n",
                "        table[-1] = new_block\n        pool.release(table[-1])\n",
            )
        ),
        "must drop the old block's count by one",
        id="append-cow-releases-the-copy",
    ),
    pytest.param(
        check_append_kv,
        append(
            ("pool.keys[new_block] = pool.keys[table[-1]]", "pool.keys[table[-1]] = pool.keys[new_block]"),
            (
                "pool.values[new_block] = pool.values[table[-1]]",
                "pool.values[table[-1]] = pool.values[new_block]",
            ),
        ),
        "the shared block 0 itself was written",
        id="append-cow-copies-the-wrong-way",
    ),
    pytest.param(
        check_append_kv,
        append(
            ("        pool.keys[new_block] = pool.keys[table[-1]]\n", ""),
            ("        pool.values[new_block] = pool.values[table[-1]]\n", ""),
        ),
        "the new block must first get the keys and values the shared block held",
        id="append-cow-without-copy",
    ),
    pytest.param(
        check_append_kv,
        append(("        pool.values[new_block] = pool.values[table[-1]]\n", "")),
        "the new block must first get the values the shared block held",
        id="append-cow-copies-keys-only",
    ),
    pytest.param(
        check_append_kv,
        append(("elif pool.refcount[table[-1]] > 1:", "elif pool.refcount[table[-1]] >= 1:")),
        "copy a block only when it is shared (count > 1)",
        id="append-copies-every-time",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "    if slot == 0:\n        table.append(pool.allocate())\n    elif pool.refcount[table[-1]] > 1:",
                "    if table and pool.refcount[table[-1]] > 1:",
            ),
            (
                "    block = table[-1]\n",
                "    if slot == 0:\n        table.append(pool.allocate())\n    block = table[-1]\n",
            ),
        ),
        "The blocks before it are full and never written again",
        id="append-copies-a-full-shared-block",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "    elif pool.refcount[table[-1]] > 1:",
                "    block = table[-1]\n    if slot and pool.refcount[block] > 1:",
            ),
            ("    block = table[-1]\n    pool.keys[block, :, slot] = k", "    pool.keys[block, :, slot] = k"),
        ),
        "not into the copy",
        id="append-cow-writes-the-old-block",
    ),
    pytest.param(
        check_append_kv,
        append(("table.append(pool.allocate())", "table.append(pool.free.pop())")),
        "which sets the count to 1",
        id="append-block-taken-without-count",
    ),
    pytest.param(
        check_append_kv,
        append(("    cache.lengths[seq] = length + 1\n", "")),
        "Count the new position",
        id="append-length-not-counted",
    ),
    pytest.param(
        check_append_kv,
        append(
            (
                "pool.keys[block, :, slot] = k\n    pool.values[block, :, slot] = v",
                "pool.keys[block, :, slot] = v\n    pool.values[block, :, slot] = k",
            )
        ),
        "stores k in cache.pool.values",
        id="append-keys-values-swapped",
    ),
    pytest.param(
        check_append_kv,
        append(("    block = table[-1]\n", "    block = table[0]\n")),
        "the block tables[seq][-1]",
        id="append-writes-first-block",
    ),
]


@pytest.mark.parametrize(("check", "candidate"), CORRECT)
def test_accepts_right_answers(check, candidate, capsys):
    assert_accepted(check, candidate, capsys)


@pytest.mark.parametrize(("check", "candidate", "phrase"), WRONG)
def test_names_each_mistake(check, candidate, phrase, capsys):
    assert_rejected(check, candidate, phrase, capsys)


def test_a_fork_written_without_copy_says_which_sequence_and_position_changed():
    wrong = append(("    elif pool.refcount[table[-1]] > 1:", "    elif False:"))
    with pytest.raises(CheckFailed) as failure:
        check_append_kv(wrong)
    message = str(failure.value)
    assert "changes sequence b when appending to sequence a" in message
    assert "at position 5 (block 0, which the tables of b and a hold)" in message
