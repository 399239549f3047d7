"""A paged KV cache: fixed-size blocks from one shared pool, found through a block table per sequence.

Notebook 07's cache grows one contiguous tensor per sequence; a server that preallocates each request
to the longest length it may reach wastes every slot the request never fills. vLLM's PagedAttention
cuts the cache into blocks of `block_size` positions, all in one pool, and keeps per sequence a list of
the blocks it holds, in order (its block table), like a process's page table. A sequence wastes at most
the unfilled tail of its last block, and sequences that share a prompt share its blocks: a reference
count per block says how many tables hold it, and a sequence copies a shared block before it writes
into it (copy-on-write).

The pool's layout is (n_blocks, H, block_size, d): each block holds, per head, a (block_size, d) tile,
as notebook 07's cache holds (h, t, d) per sequence, so gathering a table is an indexing of the block
axis and a merge of (block, slot) into time.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange

from attn_course.exercise import exercise


class BlockPool:
    """Physical key and value blocks (n_blocks, H, block_size, d), a free list and a count per block.

    >>> pool = BlockPool(n_blocks=4, n_heads=2, block_size=3, d_head=5)
    >>> block = pool.allocate()
    >>> pool.keys.shape, block, pool.refcount[block], len(pool.free)
    (torch.Size([4, 2, 3, 5]), 0, 1, 3)
    >>> pool.release(block); pool.refcount[block], len(pool.free)
    (0, 4)

    Introduced in 11_attention_at_scale.
    """

    def __init__(
        self,
        n_blocks: int,
        n_heads: int,
        block_size: int,
        d_head: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (n_blocks, n_heads, block_size, d_head)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (n_blocks, H, block_size, d)
        self.values = torch.zeros(shape, dtype=dtype, device=device)  # (n_blocks, H, block_size, d)
        self.refcount = [0] * n_blocks
        """How many block tables hold each block (0: free)."""
        self.free = list(range(n_blocks - 1, -1, -1))
        """The blocks no table holds; `allocate` takes the last, so blocks go out as 0, 1, 2, …"""

    @property
    def block_size(self) -> int:
        """How many positions one block holds."""
        return self.keys.shape[-2]

    def allocate(self) -> int:
        """Take a free block: its count becomes 1."""
        if not self.free:
            raise RuntimeError(f"the pool's {len(self.refcount)} blocks are all in use: make a larger pool")
        block = self.free.pop()
        self.refcount[block] = 1
        return block

    def release(self, block: int) -> None:
        """Drop one table's hold on `block`; it is free again once no table holds it."""
        if self.refcount[block] <= 0:
            raise RuntimeError(f"block {block} is released but no table holds it")
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free.append(block)

    def block_nbytes(self) -> int:
        """Bytes of one block: its keys and values, all heads."""
        return 2 * self.keys[0].numel() * self.keys.element_size()

    def nbytes(self) -> int:
        """Bytes of the whole pool, free blocks included."""
        return self.block_nbytes() * len(self.refcount)


class PagedKVCache:
    """Sequences in a `BlockPool`: a block table and a length per sequence, forks sharing blocks.

    >>> cache = PagedKVCache(BlockPool(n_blocks=8, n_heads=2, block_size=4, d_head=3))
    >>> seq = cache.new_sequence()
    >>> for _ in range(5):
    ...     append_kv(cache, seq, torch.ones(2, 3), torch.ones(2, 3))
    >>> child = cache.fork(seq)
    >>> cache.tables[seq], cache.tables[child], cache.pool.refcount[:3]
    ([0, 1], [0, 1], [2, 2, 0])
    >>> append_kv(cache, child, torch.ones(2, 3), torch.ones(2, 3))  # block 1 is shared: copied first
    >>> cache.tables[child], cache.lengths[child], cache.pool.refcount[:3]
    ([0, 2], 6, [2, 1, 1])

    Introduced in 11_attention_at_scale.
    """

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.tables: dict[int, list[int]] = {}
        """Sequence id -> the physical blocks holding its positions, in order."""
        self.lengths: dict[int, int] = {}
        """Sequence id -> how many positions it holds."""
        self._next = 0

    def new_sequence(self) -> int:
        """Start an empty sequence; return its id."""
        seq, self._next = self._next, self._next + 1
        self.tables[seq], self.lengths[seq] = [], 0
        return seq

    def fork(self, parent: int) -> int:
        """A new sequence holding the parent's positions by sharing its blocks (each count goes up)."""
        child = self.new_sequence()
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]
        for block in self.tables[child]:
            self.pool.refcount[block] += 1
        return child

    def free(self, seq: int) -> None:
        """Forget a finished sequence: release each of its blocks."""
        for block in self.tables.pop(seq):
            self.pool.release(block)
        del self.lengths[seq]

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values, each (H, length, d), read through its table."""
        return gather_kv(self.pool.keys, self.pool.values, self.tables[seq], self.lengths[seq])

    def nbytes_held(self) -> int:
        """Bytes of the blocks some table holds (a shared block counted once)."""
        return self.pool.block_nbytes() * sum(1 for count in self.pool.refcount if count > 0)


@exercise("11_attention_at_scale", 4)
def gather_kv(
    pool_keys: torch.Tensor, pool_values: torch.Tensor, block_table: list[int], length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A sequence's keys and values, each (H, length, d), read from the pool through its block table.

    pool_keys, pool_values (n_blocks, H, block_size, d); `block_table` lists the physical blocks that
    hold positions 0 … block_size - 1, block_size … 2·block_size - 1, …; the last block is filled up
    to `length` only.

    >>> pool = torch.arange(4.0).reshape(4, 1, 1, 1).expand(4, 2, 3, 1)  # block b holds b everywhere
    >>> keys, values = gather_kv(pool, pool, [2, 0], length=5)
    >>> keys.shape, keys[0, :, 0].tolist()
    (torch.Size([2, 5, 1]), [2.0, 2.0, 2.0, 0.0, 0.0])

    Introduced in 11_attention_at_scale.
    """
    index = torch.tensor(block_table, dtype=torch.long, device=pool_keys.device)  # (n,)
    keys = rearrange(pool_keys[index], "n h s d -> h (n s) d")  # (H, n·block_size, d)
    values = rearrange(pool_values[index], "n h s d -> h (n s) d")  # (H, n·block_size, d)
    return keys[:, :length], values[:, :length]  # each (H, length, d)


@exercise("11_attention_at_scale", 5)
def append_kv(cache: PagedKVCache, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
    """Append one position's k and v, each (H, d), to sequence `seq` of `cache`.

    The position goes to slot length % block_size of the last block. A full last block (or an empty
    table) gets a new block from the pool; a last block that other tables hold too (count > 1) is
    first copied to a new block, which replaces it in this table (the old block loses one count).

    >>> cache = PagedKVCache(BlockPool(n_blocks=4, n_heads=2, block_size=2, d_head=3))
    >>> seq = cache.new_sequence()
    >>> for _ in range(3):
    ...     append_kv(cache, seq, torch.ones(2, 3), torch.ones(2, 3))
    >>> cache.tables[seq], cache.lengths[seq]
    ([0, 1], 3)

    Introduced in 11_attention_at_scale.
    """
    pool, table, length = cache.pool, cache.tables[seq], cache.lengths[seq]
    slot = length % pool.block_size
    if slot == 0:  # the last block is full, or there is none: a new one
        table.append(pool.allocate())
    elif pool.refcount[table[-1]] > 1:  # shared with another sequence: copy it before writing
        shared, copy = table[-1], pool.allocate()
        pool.keys[copy] = pool.keys[shared]  # (H, block_size, d)
        pool.values[copy] = pool.values[shared]  # (H, block_size, d)
        pool.release(shared)
        table[-1] = copy
    pool.keys[table[-1], :, slot] = k  # (H, d) into slot `slot` of every head
    pool.values[table[-1], :, slot] = v
    cache.lengths[seq] = length + 1


def blocks_needed(length: int, block_size: int) -> int:
    """How many blocks hold `length` positions: ceil(length / block_size).

    >>> blocks_needed(5, 4), blocks_needed(8, 4), blocks_needed(0, 4)
    (2, 2, 0)

    Introduced in 11_attention_at_scale.
    """
    return math.ceil(length / block_size)
