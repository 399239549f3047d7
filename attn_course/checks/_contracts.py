"""What an exercise must accept and return, as data, and the cases a check generates from it.

A `Contract` names an exercise's tensor arguments by their axes (`("B", "H", "T_q", "d")`), the
sizes of each axis worth trying (one block, one block and one, two blocks and one; a head dim that
is not a power of two), the dtypes it must accept, which arguments may be views and of which kind,
and what it returns. A check then tries what the contract allows and no hand-picked case happens to:

>>> contract = Contract(
...     "toy", args=(Arg("x", ("T", "d"), views=("sliced",)),),
...     axes=(Axis("T", (8, 9)), Axis("d", (4,))), returns=(Returns("out", ("T", "d")),))
>>> [case.describe() for case in size_cases(contract)]
['T=8, d=4', 'T=9, d=4']
>>> [case.describe() for case in view_cases(contract)]
['T=8, d=4, x a slice of a longer tensor']

Each generated case changes one thing from the contract's first sizes: one axis's size, or one
argument made a view (the others left contiguous), so a failure says which input, and how laid out,
the learner's code reads wrongly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

import torch

ViewKind = Literal["transposed", "sliced", "expanded"]
"""How an argument may be laid out unlike a fresh contiguous tensor of its shape:

- "transposed": transposed then transposed back, `x.transpose(1, 2)` of a (B, T, H, d) tensor (rows
  H·d apart, heads d apart), as a multi-head layer makes q, k and v;
- "sliced": a slice of a longer tensor along one axis (`x[:, :, :T]` of a (B, H, T + 3, d) one);
- "expanded": a size-1 axis expanded (`x.expand(B, ...)`), stride 0 along it, as a KV cache shared
  by a batch or grouped heads give it.
"""

VIEW_KINDS: tuple[ViewKind, ...] = ("transposed", "sliced", "expanded")


@dataclass(frozen=True)
class Axis:
    """One named axis and the sizes of it worth trying; the first is the one the other cases use."""

    name: str
    sizes: tuple[int, ...]
    why: str = ""
    """What the sizes after the first probe (block + 1, not a power of two, ...)."""


@dataclass(frozen=True)
class Arg:
    """One tensor argument: its axes by name and the views it may be passed as."""

    name: str
    axes: tuple[str, ...]
    views: tuple[ViewKind, ...] = ()
    """The layouts besides contiguous that the exercise allows for this argument, each independently."""
    swap: tuple[int, int] = (1, 2)
    """The axes a "transposed" view has swapped in memory."""
    slice_axis: int = -2
    """The axis a "sliced" view is a slice of a longer tensor along."""
    expand_axis: int = 0
    """The axis a "expanded" view has stride 0 along."""


@dataclass(frozen=True)
class Returns:
    """One returned tensor: its axes, dtype, device and whether it must be contiguous."""

    name: str
    axes: tuple[str, ...]
    dtype: str = "inputs"
    """"inputs" (the inputs' dtype) or a torch dtype's name ("float32")."""
    device: str = "inputs"
    """Always the inputs' device: a tensor made on the default device fails on a GPU."""
    contiguous: bool = False
    """Whether it must be contiguous, as where a kernel indexes it as pid * T + row."""


@dataclass(frozen=True)
class Contract:
    """An exercise's inputs and outputs: what its check may pass and must get back."""

    exercise: str
    args: tuple[Arg, ...]
    axes: tuple[Axis, ...]
    returns: tuple[Returns, ...]
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    """The dtypes it must accept; the first is the one the other cases use."""
    notes: tuple[str, ...] = ()
    """Further demands in words (the causal mask's alignment, rows with no key)."""

    def base_sizes(self) -> dict[str, int]:
        """The first size of every axis."""
        return {axis.name: axis.sizes[0] for axis in self.axes}

    def arg(self, name: str) -> Arg:
        """The argument called `name`."""
        return next(arg for arg in self.args if arg.name == name)


@dataclass(frozen=True)
class Case:
    """One generated input: the size of every axis, a dtype, and at most one argument made a view."""

    sizes: tuple[tuple[str, int], ...]
    dtype: torch.dtype = torch.float32
    view: tuple[str, ViewKind] | None = None
    """(argument, kind): that argument alone is passed as a view."""
    changed: str = ""
    """What this case changes from the base (an axis's name, "dtype", or the view's argument)."""

    @property
    def size(self) -> dict[str, int]:
        """The sizes by axis name."""
        return dict(self.sizes)

    def shape(self, arg: Arg) -> tuple[int, ...]:
        """The shape of `arg` in this case."""
        return tuple(self.size[axis] for axis in arg.axes)

    def describe(self) -> str:
        """The case in words, for messages: `B=1, H=2, T_q=33, ..., k a transposed view`."""
        text = ", ".join(f"{name}={size}" for name, size in self.sizes)
        if self.dtype != torch.float32:
            text += f", {str(self.dtype).removeprefix('torch.')} inputs"
        if self.view is not None:
            text += f", {self.view[0]} {VIEW_WORDS[self.view[1]]}"
        return text


VIEW_WORDS: dict[ViewKind, str] = {
    "transposed": "a transposed view",
    "sliced": "a slice of a longer tensor",
    "expanded": "an expanded view",
}


def size_cases(contract: Contract, only: tuple[str, ...] | None = None) -> Iterator[Case]:
    """The base case, then each axis's other sizes one at a time (`only`: just these axes)."""
    base = contract.base_sizes()
    yield Case(tuple(base.items()), contract.dtypes[0])
    for axis in contract.axes:
        if only is not None and axis.name not in only:
            continue
        for size in axis.sizes[1:]:
            sizes = {**base, axis.name: size}
            yield Case(tuple(sizes.items()), contract.dtypes[0], changed=axis.name)


def dtype_cases(contract: Contract) -> Iterator[Case]:
    """The base sizes in each dtype after the first."""
    base = tuple(contract.base_sizes().items())
    for dtype in contract.dtypes[1:]:
        yield Case(base, dtype, changed="dtype")


def view_cases(
    contract: Contract, sizes: dict[str, int] | None = None, one_kind_each: bool = False
) -> Iterator[Case]:
    """For each argument and each view it allows, one case with that argument alone a view.

    With `one_kind_each` (where a case is dear), each argument is tried as one of its views only, the
    kinds taken in turn from argument to argument so that every kind is tried on some argument.
    """
    chosen = tuple((sizes or contract.base_sizes()).items())
    for index, arg in enumerate(contract.args):
        kinds = arg.views[index % len(arg.views) :][:1] if one_kind_each and arg.views else arg.views
        for kind in kinds:
            yield Case(chosen, contract.dtypes[0], view=(arg.name, kind), changed=arg.name)


def with_sizes(case: Case, **sizes: int) -> Case:
    """`case` with some axes resized."""
    return replace(case, sizes=tuple({**case.size, **sizes}.items()))


def make_arg(arg: Arg, case: Case, alloc: Callable[..., torch.Tensor]) -> torch.Tensor:
    """`arg`'s tensor for `case`: `alloc(*shape)` (a fresh contiguous tensor), or the view the case asks.

    The view has `arg`'s shape and the values `alloc` gave its storage.

    >>> arg = Arg("k", ("B", "H", "T", "d"))
    >>> case = Case((("B", 2), ("H", 3), ("T", 5), ("d", 4)))
    >>> for kind in VIEW_KINDS:
    ...     x = make_arg(arg, replace(case, view=("k", kind)), torch.randn)
    ...     print(kind, tuple(x.shape), x.stride())
    transposed (2, 3, 5, 4) (60, 4, 12, 1)
    sliced (2, 3, 5, 4) (96, 32, 4, 1)
    expanded (2, 3, 5, 4) (0, 20, 4, 1)
    """
    shape = case.shape(arg)
    kind = case.view[1] if case.view is not None and case.view[0] == arg.name else None
    if kind is None:
        return alloc(*shape)
    if kind == "transposed":
        i, j = (axis % len(shape) for axis in arg.swap)
        stored = list(shape)
        stored[i], stored[j] = shape[j], shape[i]
        return alloc(*stored).transpose(i, j)
    if kind == "sliced":
        axis = arg.slice_axis % len(shape)
        longer = list(shape)
        longer[axis] += 3
        return alloc(*longer).narrow(axis, 0, shape[axis])
    axis = arg.expand_axis % len(shape)
    one = list(shape)
    one[axis] = 1
    return alloc(*one).expand(*shape)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of `shape`."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def read_as(x: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """What a kernel reads when it walks x's shape from x's first element with these strides.

    Raises RuntimeError when those strides reach past x's storage (the kernel would read outside
    the tensor; the check's trace names that instead).
    """
    reach = x.storage_offset() + sum((n - 1) * s for n, s in zip(x.shape, strides, strict=True))
    if reach >= x.untyped_storage().nbytes() // x.element_size():
        raise RuntimeError("these strides reach past the tensor's storage")
    return torch.as_strided(x, x.shape, strides)


def view_words(x: torch.Tensor, arg: Arg, kind: ViewKind) -> str:
    """How `x`, `arg` passed as a `kind` view, lies in memory, for a message."""
    names = arg.axes
    if kind == "transposed":
        i, j = (axis % len(names) for axis in arg.swap)
        stored = list(names)
        stored[i], stored[j] = names[j], names[i]
        how = f"`{arg.name}` passed as a transposed view, ({', '.join(stored)}).transpose({i}, {j})"
    elif kind == "sliced":
        axis = arg.slice_axis % len(names)
        how = f"`{arg.name}` passed as a slice of a longer tensor along {names[axis]}"
    else:
        axis = arg.expand_axis % len(names)
        how = f"`{arg.name}` passed as an expanded view (stride 0 along {names[axis]})"
    return f"{how}, strides {tuple(x.stride())}"


def is_power_of_two(n: int) -> bool:
    """Whether n is 1, 2, 4, ...: what tl.arange takes."""
    return n >= 1 and n & (n - 1) == 0


def next_power_of_two(n: int) -> int:
    """The least power of two at least n."""
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))
