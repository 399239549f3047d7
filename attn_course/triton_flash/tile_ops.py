"""Count what an interpreted FlashAttention kernel does to its tiles of scores: speed-ups, measured on a CPU.

Under `TRITON_INTERPRET=1` every `tl` operation of a kernel reaches the interpreter's builder
(`create_dot`, `create_select`, `create_fmul`, `create_exp`, ...). While a `TileOps` is active it
wraps them: a `tl.dot` whose operands come from no score tile starts a new one (S = Q Kᵀ), and every
value computed from a tile is traced back to it, so that for each tile it counts

- whether it was **masked**: a `tl.where` on it, or a tensor holding -inf added to it;
- its **multiplications**: `*` or `/` of the tile by anything (the scale, log2(e));
- its **exponentials**, natural (`tl.exp`, which a GPU computes as exp2(x · log2 e)) and base 2.

A `tl.dot` with a tile-derived operand (P V) ends the trail: what it returns is the accumulator's.
Reductions (`tl.max`, `tl.sum`) run outside the builder, so the running max and sum are not
traced either. The counts are what the kernel asks for, whatever the machine: on a GPU each
masked tile costs comparisons and selects of BLOCK_M × BLOCK_N elements, and each multiplication
one more instruction per score.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TileCounts", "TileOps", "count_tile_ops", "tiles_needing_a_mask"]


@dataclass
class _Tile:
    """What one tile of scores went through."""

    shape: tuple[int, int]
    masked: bool = False
    multiplications: int = 0
    natural_exps: int = 0
    base2_exps: int = 0


@dataclass
class TileCounts:
    """The score tiles of the launches made while counting, and what was done to them."""

    tiles: list[_Tile] = field(default_factory=list)

    @property
    def computed(self) -> int:
        """Score tiles computed (tl.dot of queries and keys)."""
        return len(self.tiles)

    @property
    def masked(self) -> int:
        """Score tiles a mask was applied to."""
        return sum(tile.masked for tile in self.tiles)

    @property
    def multiplications_per_score(self) -> float:
        """Multiplications (or divisions) per score element, on average over the tiles."""
        return sum(t.multiplications for t in self.tiles) / max(1, len(self.tiles))

    @property
    def natural_exps_per_score(self) -> float:
        """Natural exponentials (tl.exp) per score element."""
        return sum(t.natural_exps for t in self.tiles) / max(1, len(self.tiles))

    @property
    def base2_exps_per_score(self) -> float:
        """Base-2 exponentials (tl.exp2) per score element."""
        return sum(t.base2_exps for t in self.tiles) / max(1, len(self.tiles))

    @property
    def gpu_multiplications_per_score(self) -> float:
        """Multiplications per score on a GPU, where tl.exp(x) is exp2(x · log2 e): one more each."""
        return self.multiplications_per_score + self.natural_exps_per_score

    @property
    def block_shape(self) -> tuple[int, int] | None:
        """(BLOCK_M, BLOCK_N) of the first tile, None if none was computed."""
        return self.tiles[0].shape if self.tiles else None


_MULTIPLY = {"create_fmul", "create_fdiv", "create_mul", "create_precise_divf"}
_ADD = {"create_fadd", "create_fsub"}
_SKIP = {"create_masked_load", "create_masked_store", "create_load", "create_store", "create_atomic_rmw"}


class TileOps:
    """Context manager: count what interpreted kernels do to each tile of scores (see the module)."""

    def __init__(self) -> None:
        self.counts = TileCounts()
        self._tile_of: dict[int, int] = {}  # id(TensorHandle) -> index into counts.tiles
        self._alive: list[Any] = []  # keeps traced handles alive, so that their ids stay theirs
        self._builder: Any = None

    def __enter__(self) -> TileOps:
        from triton.runtime.interpreter import interpreter_builder

        self._builder = interpreter_builder
        for name in dir(type(interpreter_builder)):
            if name.startswith("create_") and name not in _SKIP:
                original = getattr(interpreter_builder, name)
                if callable(original):
                    setattr(interpreter_builder, name, self._wrap(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for name in [n for n in vars(self._builder) if n.startswith("create_") and n not in _SKIP]:
            if getattr(vars(self._builder)[name], "_tile_ops", None) is self:
                delattr(self._builder, name)
        self._tile_of.clear()
        self._alive.clear()

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            handles = [a for a in args if hasattr(a, "data") and hasattr(a, "dtype")]
            sources = [self._tile_of[id(h)] for h in handles if id(h) in self._tile_of]
            if name == "create_dot":
                if not sources:  # queries times keys: a new score tile
                    a, b = handles[0], handles[1]
                    shape = (int(a.data.shape[-2]), int(b.data.shape[-1]))
                    self.counts.tiles.append(_Tile(shape))
                    self._trace(result, len(self.counts.tiles) - 1)
                return result  # P V: the accumulator's, not traced
            if not sources:
                return result
            tile = self.counts.tiles[sources[0]]
            if name == "create_select":
                tile.masked = True
            elif name in _MULTIPLY:
                tile.multiplications += 1
            elif name == "create_exp":
                tile.natural_exps += 1
            elif name == "create_exp2":
                tile.base2_exps += 1
            elif name in _ADD:
                others = [h for h in handles if id(h) not in self._tile_of]
                tile.masked |= any(_holds_minus_infinity(h) for h in others)
            if hasattr(result, "data"):
                self._trace(result, sources[0])
            return result

        counted._tile_ops = self  # type: ignore[attr-defined]
        return counted

    def _trace(self, handle: Any, tile: int) -> None:
        self._tile_of[id(handle)] = tile
        self._alive.append(handle)


def _holds_minus_infinity(handle: Any) -> bool:
    """Whether an interpreter tensor holds -inf (or a large negative stand-in for it) anywhere."""
    import numpy as np

    data = np.asarray(handle.data)
    return bool(data.dtype.kind == "f" and data.size and (data < -1e30).any())


def count_tile_ops(attend: Callable[..., Any], *args: Any, **kwargs: Any) -> TileCounts:
    """Call `attend(*args, **kwargs)` (its kernels interpreted) and count what it did to its score tiles."""
    with TileOps() as ops:
        attend(*args, **kwargs)
    return ops.counts


def tiles_needing_a_mask(t_q: int, t_k: int, block_m: int, block_n: int, causal: bool) -> tuple[int, int]:
    """(tiles a causal-bounded loop computes, those of them where some query may not see some key).

    Query block r ends its loop at one past its last row's last visible key (T_k without the causal
    mask); a tile needs a mask if one of its keys lies past T_k or, causal, after its first query's
    position i + T_k - T_q.
    """
    offset = t_k - t_q
    computed = needing = 0
    for r in range(math.ceil(t_q / block_m)):
        first_query = r * block_m
        stop = min(t_k, (r + 1) * block_m + offset) if causal else t_k
        for start in range(0, max(stop, 0), block_n):
            computed += 1
            last_key = start + block_n - 1
            needing += last_key >= t_k or (causal and last_key > first_query + offset)
    return computed, needing
