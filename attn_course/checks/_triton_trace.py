"""Watch interpreted Triton kernels: every launch, and which program read or wrote which elements.

Under `TRITON_INTERPRET=1` a kernel runs in Python, one program after another, and every
`tl.load` and `tl.store` reaches `interpreter_builder.create_masked_load` / `create_masked_store`
with an array of addresses and a mask. `KernelTrace` wraps both while it is active, maps each
address to the kernel argument (tensor) it falls in, and records the access per program. An
access outside every tensor argument is recorded and then masked off, so that a learner's
unmasked load or store becomes a message instead of a read of freed memory or a crash.

The checks of notebook 08 use it to say which program touched what: a ragged tail read past the
end, output elements never written, a causal loop that visits blocks above the diagonal.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class TensorArgument:
    """One tensor argument of a launch: its parameter name and the bytes it spans."""

    name: str
    """The kernel's parameter name, e.g. "k_ptr"."""
    start: int
    """Address of its first element."""
    end: int
    """One past the address of its last element."""
    itemsize: int
    """Bytes per element."""
    numel: int
    """Elements it has."""


@dataclass
class Launch:
    """One kernel launch: its name, grid and tensor arguments."""

    kernel: str
    grid: tuple[int, int, int] = (1, 1, 1)
    tensors: list[TensorArgument] = field(default_factory=list)


@dataclass(frozen=True)
class Access:
    """One tl.load or tl.store by one program: the elements it touched in one tensor argument."""

    launch: int
    """Index into KernelTrace.launches."""
    program: tuple[int, int, int]
    """The program's (axis 0, axis 1, axis 2) ids."""
    store: bool
    """A store (True) or a load (False)."""
    tensor: str
    """The argument's name."""
    start: int
    """That argument's first address: elements below are (address - start) // itemsize."""
    elements: np.ndarray
    """Element offsets from the argument's first element, of the unmasked lanes (flattened)."""
    block_shape: tuple[int, ...]
    """The shape of the pointer block (all lanes, masked or not)."""
    atomic: bool = False
    """An atomic read-modify-write (tl.atomic_add and the like): a store that adds to what is there."""


@dataclass(frozen=True)
class OutOfBounds:
    """An unmasked lane of a load or store whose address lies in no tensor argument."""

    launch: int
    program: tuple[int, int, int]
    store: bool
    lanes: int
    """How many lanes of that access were outside."""
    nearest: str | None
    """The argument whose end is closest below the first bad address (None if none)."""
    elements_past_end: int | None
    """How many elements past that argument's end the first bad address lies."""


def trace_available() -> bool:
    """Whether this Triton has the interpreter hooks KernelTrace needs."""
    try:
        from triton.runtime.interpreter import GridExecutor, interpreter_builder
    except Exception:
        return False
    return all(
        hasattr(interpreter_builder, name) for name in ("create_masked_load", "create_masked_store")
    ) and hasattr(GridExecutor, "_init_args_hst")


class KernelTrace:
    """Context manager recording launches and memory accesses of interpreted kernels."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.accesses: list[Access] = []
        self.out_of_bounds: list[OutOfBounds] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> KernelTrace:
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        executor = interpreter.GridExecutor
        load, store = builder.create_masked_load, builder.create_masked_store
        rmw = getattr(builder, "create_atomic_rmw", None)
        init_args, set_grid_dim = executor._init_args_hst, builder.set_grid_dim
        self._saved = {"builder": builder, "executor": executor, "init_args": init_args}

        def traced_init_args(grid_executor: Any, args_dev: Any, kwargs: Any) -> Any:
            args_hst, kwargs_hst = init_args(grid_executor, args_dev, kwargs)
            try:
                bound = inspect.getcallargs(grid_executor.fn, *args_hst, **kwargs_hst)
            except TypeError:
                bound = {}
            self.launches.append(Launch(grid_executor.fn.__name__, tensors=_tensor_arguments(bound)))
            return args_hst, kwargs_hst

        def traced_set_grid_dim(nx: int, ny: int, nz: int) -> Any:
            if self.launches:
                self.launches[-1].grid = (int(nx), int(ny), int(nz))
            return set_grid_dim(nx, ny, nz)

        def traced_load(ptrs: Any, mask: Any, other: Any, *rest: Any) -> Any:
            return load(ptrs, self._record(builder, ptrs, mask, store=False), other, *rest)

        def traced_store(ptrs: Any, value: Any, mask: Any, *rest: Any) -> Any:
            return store(ptrs, value, self._record(builder, ptrs, mask, store=True), *rest)

        def traced_rmw(op: Any, ptrs: Any, value: Any, mask: Any, *rest: Any) -> Any:
            assert rmw is not None  # installed only where the interpreter has it
            return rmw(op, ptrs, value, self._record(builder, ptrs, mask, store=True, atomic=True), *rest)

        builder.create_masked_load = traced_load
        builder.create_masked_store = traced_store
        if rmw is not None:
            builder.create_atomic_rmw = traced_rmw
        builder.set_grid_dim = traced_set_grid_dim
        executor._init_args_hst = traced_init_args
        return self

    def __exit__(self, *exc: object) -> None:
        builder = self._saved["builder"]
        for name in ("create_masked_load", "create_masked_store", "create_atomic_rmw", "set_grid_dim"):
            builder.__dict__.pop(name, None)
        self._saved["executor"]._init_args_hst = self._saved["init_args"]

    def _record(self, builder: Any, ptrs: Any, mask: Any, store: bool, atomic: bool = False) -> Any:
        """Record one access; return the mask with lanes outside every tensor turned off."""
        if not self.launches:
            return mask
        launch = len(self.launches) - 1
        x, y, z = (int(i) for i in getattr(builder, "grid_idx", (0, 0, 0)))  # the interpreter's 3 axes
        program = (x, y, z)
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        lanes = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        active = addresses[lanes]
        placed = np.zeros(active.shape, dtype=bool)
        for tensor in self.launches[launch].tensors:
            inside = (active >= tensor.start) & (active < tensor.end)
            if inside.any():
                offsets = ((active[inside] - np.uint64(tensor.start)) // np.uint64(tensor.itemsize)).astype(
                    np.int64
                )
                self.accesses.append(
                    Access(
                        launch, program, store, tensor.name, tensor.start, offsets, addresses.shape, atomic
                    )
                )
                placed |= inside
        if placed.all():
            return mask
        first_bad = int(active[~placed][0])
        below = [t for t in self.launches[launch].tensors if t.end <= first_bad]
        nearest = max(below, key=lambda t: t.end, default=None)
        self.out_of_bounds.append(
            OutOfBounds(
                launch,
                program,
                store,
                int((~placed).sum()),
                nearest.name if nearest else None,
                (first_bad - nearest.end) // nearest.itemsize + 1 if nearest else None,
            )
        )
        safe = lanes.copy()
        safe[lanes] = placed
        return type(mask)(safe, mask.dtype)

    def touched(self, tensor: torch.Tensor, *, store: bool) -> np.ndarray:
        """Element offsets (from tensor's first element) that any program stored to, or loaded from, it."""
        parts = [a.elements for a in self.accesses if a.store == store and a.start == tensor.data_ptr()]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def accesses_to(self, tensor: torch.Tensor, *, store: bool) -> list[Access]:
        """The accesses (loads or stores) that fell in `tensor`."""
        return [a for a in self.accesses if a.store == store and a.start == tensor.data_ptr()]


def _tensor_arguments(bound: dict[str, Any]) -> list[TensorArgument]:
    tensors = []
    for name, value in bound.items():
        value = getattr(value, "base", value)  # TensorWrapper (reinterpreted dtypes)
        if isinstance(value, torch.Tensor) and value.numel() > 0:
            itemsize = value.element_size()
            last = sum((size - 1) * stride for size, stride in zip(value.shape, value.stride(), strict=True))
            start = value.data_ptr()
            tensors.append(
                TensorArgument(name, start, start + (last + 1) * itemsize, itemsize, value.numel())
            )
    return tensors
