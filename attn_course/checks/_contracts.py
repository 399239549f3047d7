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

import contextlib
import math
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from attn_course.demos.memory import LargestTensor

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
class Memory:
    """The most memory a right answer needs: its largest tensor holds at most `factor` times the product
    of these axes' sizes (a check refuses more, as the grader, at the exercise's real sizes, runs out)."""

    axes: tuple[str, ...]
    factor: int = 1
    why: str = ""
    """What a right answer holds that large (the weights, one score per pair)."""

    def bound(self, sizes: dict[str, int], args: Sequence[Arg] = ()) -> int:
        """The most entries a right answer's largest tensor holds at these sizes (at least as many as
        each argument: a view or copy of an input is never too much)."""
        case = Case(tuple(sizes.items()))
        inputs = [math.prod(case.shape(arg)) for arg in args]
        return max([self.factor * math.prod(case.shape(Arg("bound", self.axes))), *inputs])


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
    memory: Memory | None = None
    """The memory a right answer needs, where a wrong one may need far more (n × n for n numbers)."""

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
        """The shape of `arg` in this case; an axis named "h·d" is h times d long."""
        return tuple(math.prod(self.size[part] for part in axis.split("·")) for axis in arg.axes)

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


# ---------------------------------------------------------------------------------------------
# A check's generated cases, run and compared with the course's reference


def contract_cases(contract: Contract, one_kind_each: bool = False) -> list[Case]:
    """The base case, then each other size, each other dtype and each view, one change at a time."""
    return [*size_cases(contract), *dtype_cases(contract), *view_cases(contract, one_kind_each=one_kind_each)]


def change_words(contract: Contract, case: Case, tensors: Sequence[torch.Tensor]) -> str:
    """The one thing `case` changes from the base, in words ("" for the base itself)."""
    if case.view is not None:
        index = [arg.name for arg in contract.args].index(case.view[0])
        return view_words(tensors[index], contract.args[index], case.view[1])
    if case.changed == "dtype":
        return f"{dtype_name(case.dtype)} inputs"
    if case.changed:
        axis = next(axis for axis in contract.axes if axis.name == case.changed)
        return f"{axis.name} = {case.size[axis.name]}" + (f" ({axis.why})" if axis.why else "")
    return ""


def dtype_name(dtype: torch.dtype) -> str:
    """float32, not torch.float32."""
    return str(dtype).removeprefix("torch.")


Functions = tuple[Callable[..., Any], Callable[..., Any]]
"""(the learner's function, the course's reference) for one case."""


@dataclass(frozen=True)
class Exercise:
    """How a check calls an exercise on a contract's case: which functions, with what else, and how to
    read what comes back."""

    name: str
    """The name the learner knows it by in messages ("attention", "MultiHeadAttention.forward")."""
    functions: Callable[[Case], Functions]
    """(learner's, reference) for a case: a layer in the case's dtype, or the same two functions."""
    extra: Callable[[Case, tuple[torch.Tensor, ...]], dict[str, Any]] = lambda case, tensors: {}
    """Keyword arguments besides the tensors (n_heads, a mask made on the inputs' device)."""
    unpack: Callable[[Any, tuple[torch.Tensor, ...]], Sequence[Any]] = lambda result, expected: (result,)
    """The returned tensors, in the contract's order, from the learner's result (checked as the check
    does)."""
    positional: int | None = None
    """How many of the contract's arguments are passed by position (the rest by name); None: all."""
    after: Callable[[Case], tuple[Any, ...]] = lambda case: ()
    """Positional arguments after those tensors (n_heads; t_q and t_k of a mask)."""
    alloc: Callable[[Case, Arg], Callable[..., torch.Tensor]] | None = None
    """How an argument's values are made (`alloc(*shape)`); None: seeded normal numbers in the case's
    dtype."""
    diagnose: Callable[[Case, Call], Callable[[torch.Tensor, torch.Tensor], str | None]] | None = None
    """The check's own reading of what property fails (for a case and its call), said before the case."""
    close: Callable[[torch.Tensor, torch.Tensor], bool] | None = None
    """Whether two results agree; None: `is_close`."""


def _as_tuple(result: Any) -> tuple[Any, ...]:
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def _arguments(contract: Contract, exercise: Exercise, case: Case, tensors: tuple[torch.Tensor, ...]) -> Call:
    """The call's positional and keyword arguments: tensors by position, then `after`, the rest by name."""
    n = len(tensors) if exercise.positional is None else exercise.positional
    named = {arg.name: tensor for arg, tensor in zip(contract.args[n:], tensors[n:], strict=True)}
    return (*tensors[:n], *exercise.after(case)), {**named, **exercise.extra(case, tensors)}


def _values(exercise: Exercise) -> Callable[[Case, Arg], Callable[..., torch.Tensor]]:
    """How the exercise's arguments are made: its own `alloc`, or seeded normal numbers."""
    from attn_course.checks._harness import randn

    return exercise.alloc or (lambda case, arg: lambda *shape: randn(*shape, dtype=case.dtype))


def expect_contract_cases(
    contract: Contract,
    exercise: Exercise,
    cases: Sequence[Case],
) -> int:
    """Run `cases` (the base first) and require what the contract says of every returned tensor.

    Each returned tensor has the reference's shape, lies on the inputs' device, has the dtype the contract
    names (the inputs' by default) and the reference's values; on the first case, the largest tensor made
    stays within the contract's `memory`. A failure says what one thing its case changed from the base.
    Returns how many cases ran.
    """
    from attn_course.checks._harness import CheckFailed, call, describe_args, expect_close, is_close

    make = _values(exercise)
    for number, case in enumerate(cases):
        tensors = tuple(make_arg(arg, case, make(case, arg)) for arg in contract.args)
        learner, reference = exercise.functions(case)
        args, kwargs = _arguments(contract, exercise, case, tensors)
        expected = _as_tuple(reference(*args, **kwargs))
        change = change_words(contract, case, tensors)
        sizes = ", ".join(f"{name}={size}" for name, size in case.sizes)
        seen = f"on {sizes}" + (f", {change}" if change else "")
        largest = LargestTensor()
        measured = number == 0 and contract.memory is not None
        try:
            with largest if measured else contextlib.nullcontext():
                result = call(exercise.name, learner, *args, **kwargs)
            got = exercise.unpack(result, expected)
        except CheckFailed as failure:
            if not change:
                raise
            raise CheckFailed(
                f"{failure}\nThe cases before passed; this one differs from them only in that it has "
                f"{change}."
            ) from None
        if contract.memory is not None and measured:
            _expect_memory(contract, case, largest, exercise.name)
        for returns, value, want in zip(contract.returns, got, expected, strict=False):
            what = f"Your `{returns.name}`"
            first = (contract.args[0].name, tensors[0].dtype) if tensors else ("x", want.dtype)
            _expect_layout(returns, value, want, first, what, seen, learner, (args, kwargs))
            called = f"{exercise.name}({describe_args(args, kwargs)}) on {sizes}"  # the change: said above
            index = contract.returns.index(returns)
            observe = _observer(exercise, learner, change, index, (args, kwargs), case.view is not None)
            if exercise.diagnose is not None:
                observe = _first_reading(exercise.diagnose(case, (args, kwargs)), observe, change)
            expect_close(
                value,
                want,
                what,
                called_as=called,
                close=exercise.close or is_close,
                diagnose=observe,
                only=("property",),
            )
    return len(cases)


Call = tuple[tuple[Any, ...], dict[str, Any]]
"""(positional, keyword) arguments of one call."""


def _expect_memory(contract: Contract, case: Case, largest: LargestTensor, name: str) -> None:
    """Refuse a call whose largest tensor holds more than a right answer needs."""
    from attn_course.checks._harness import CheckFailed

    memory = contract.memory
    assert memory is not None
    bound = memory.bound(case.size, contract.args)
    if largest.numel > bound:
        sizes = " × ".join(f"{axis} ({case.size[axis]})" for axis in memory.axes)
        raise CheckFailed(
            f"Your {name} on {case.describe()} makes a tensor of shape {largest.shape}, {largest.numel:,} "
            f"entries, where a right answer needs at most {bound:,}: {sizes}"
            + (f", {memory.why}" if memory.why else "")
            + ". At the sizes it is meant for, that runs the machine out of memory."
        )


def _expect_layout(
    returns: Returns,
    value: Any,
    want: torch.Tensor,
    first: tuple[str, torch.dtype],
    what: str,
    seen: str,
    learner: Callable[..., Any],
    called: Call,
) -> None:
    """Require `value` to have the reference's shape, the inputs' device and the contract's dtype."""
    from attn_course.checks._harness import CheckFailed, expect_tensor

    try:
        expect_tensor(value, want.shape, what, device=want.device, finite=False)
    except CheckFailed as failure:
        raise CheckFailed(f"{failure}\n(Seen {seen}.)") from None
    name, dtype = first
    wanted = dtype if returns.dtype == "inputs" else getattr(torch, returns.dtype)
    if value.dtype == wanted:
        return
    made = _first_unlike(learner, called, dtype=value.dtype)
    inputs = f"for {dtype_name(dtype)} inputs" if returns.dtype == "inputs" else ""
    rule = "the inputs' dtype" if returns.dtype == "inputs" else f"dtype {dtype_name(wanted)}"
    raise CheckFailed(
        f"{what} has dtype {dtype_name(value.dtype)}{' ' + inputs if inputs else ''}: it must have {rule} "
        f"(seen {seen})."
        + (f" The first {dtype_name(value.dtype)} tensor your code makes comes from {made}." if made else "")
        + (
            f" Make new tensors in {rule} (dtype={name}.dtype, torch.zeros_like({name}), "
            f"{name}.new_zeros(...)) and cast nothing to another dtype."
            if returns.dtype == "inputs"
            else f" Return it as torch.{dtype_name(wanted)}, without casting it to another dtype."
        )
    )


def _observer(
    exercise: Exercise,
    learner: Callable[..., Any],
    change: str,
    index: int,
    called: Call,
    is_view: bool,
) -> Callable[[torch.Tensor, torch.Tensor], str]:
    """A `diagnose` that says what is observed on a generated case: right for the same values made
    contiguous (tried, not assumed) or wrong on a case that differs from the passed ones in one thing."""
    from attn_course.checks._harness import describe_error, is_close

    def observe(actual: torch.Tensor, expected: torch.Tensor) -> str:
        if is_view:
            args, kwargs = called
            copies = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
            named = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            try:
                with torch.no_grad():
                    again = _as_tuple(exercise.unpack(learner(*copies, **named), (expected,)))[index]
            except Exception:  # noqa: BLE001 - no observation on contiguous copies then
                again = None
            if isinstance(again, torch.Tensor) and (exercise.close or is_close)(again, expected):
                return (
                    f"is right for the same values made contiguous, but wrong with {change} (the other "
                    "inputs contiguous): it depends on how that input lies in memory, which it must not. "
                    "Read it by its shape and axes only."
                )
        if not change:
            return f"is wrong: {describe_error(actual, expected)}"
        return (
            f"is wrong on a case that differs from those that passed only in that it has {change}: "
            f"{describe_error(actual, expected)}"
        )

    return observe


def _first_reading(
    own: Callable[[torch.Tensor, torch.Tensor], str | None],
    observe: Callable[[torch.Tensor, torch.Tensor], str],
    change: str,
) -> Callable[[torch.Tensor, torch.Tensor], str]:
    """The check's own reading where it has one (the case's one change said after it), else `observe`."""

    def reading(actual: torch.Tensor, expected: torch.Tensor) -> str:
        text = own(actual, expected)
        if not text:
            return observe(actual, expected)
        if not change:
            return text
        return f"{text} (The cases before passed; this one differs only in that it has {change}.)"

    return reading


_DEVICE_ERRORS = (
    "is not on the expected device",
    "Expected all tensors to be on the same device",
    "found at least two devices",
)
"""Errors that say a tensor of one device met one of another."""

_COPIES = ("__setitem__", "copy_", "index_put_", "index_copy_", "masked_scatter_")
"""Operations whose "Cannot copy out of meta tensor" is a meta tensor written into one of another device
(`.tolist()`, `.item()` and the like raise it too, for want of data: those are no mistake)."""


def _device_error(error: Exception, raised_by: str) -> bool:
    """Whether `error` says two devices met where a GPU would refuse it too (not merely that a meta tensor
    has no data, nor a CPU index or value in `x[index]` or `x[index] = value`, which CUDA takes)."""
    text = str(error)
    if any(phrase in text for phrase in _DEVICE_ERRORS):
        return raised_by not in ("__getitem__", "__setitem__")
    return "Cannot copy out of meta tensor" in text and raised_by in _COPIES


def expect_inputs_device(contract: Contract, exercise: Exercise, case: Case | None = None) -> bool:
    """Run once with every input on PyTorch's meta device (shapes, no data): every returned tensor must be
    there too, and nothing made on the default device may meet the inputs. What a GPU run would show, on
    any machine. Returns False where the course's own reference cannot run on meta tensors (no case)."""
    from attn_course.checks._harness import CheckFailed

    case = case or Case(tuple(contract.base_sizes().items()), contract.dtypes[0])
    make = _values(exercise)
    on_cpu = tuple(make_arg(arg, case, make(case, arg)) for arg in contract.args)
    if not _chooses_a_device(exercise.functions(case)[0], _arguments(contract, exercise, case, on_cpu)):
        return True  # every tensor it makes follows its inputs: nothing can land elsewhere
    tensors = tuple(tensor.to("meta") for tensor in on_cpu)
    learner, reference = exercise.functions(replace(case, changed="meta"))
    args, kwargs = _arguments(contract, exercise, case, tensors)
    try:
        reference(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the course's own code cannot run there: no case
        return False
    where = (
        f"with its inputs on another device than the CPU (PyTorch's meta device, tensors with shapes and "
        f"no data; {case.describe()})"
    )
    first = contract.args[0].name if contract.args else "x"
    mode = _FirstUnlike(device="meta")
    try:
        with mode:
            result = learner(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - only a meeting of two devices is the learner's mistake
        if not _device_error(error, mode.raised_by):
            return True
        text = str(error).strip().splitlines()[0]
        raise CheckFailed(
            f"Your {exercise.name} raised {type(error).__name__}: {text}, {where}"
            + _where_made(mode, "; ")
            + f". Make every new tensor on the inputs' device: device={first}.device, or "
            f"torch.zeros_like({first}), {first}.new_ones(...)."
        ) from None
    got = _as_tuple(result)
    for returns, value in zip(contract.returns, got, strict=False):
        if isinstance(value, torch.Tensor) and value.device.type != "meta" and returns.device == "inputs":
            raise CheckFailed(
                f"Your {exercise.name} returns its `{returns.name}` on {value.device.type} {where}: it must "
                "be on the inputs' device."
                + _where_made(mode, " ", ".")
                + f" Make every new tensor on the inputs' device: device={first}.device, or "
                f"torch.zeros_like({first})."
            )
    return True


_REACHED = "a tensor that the course's code made off that device, called without device=, first reaches"


def _where_made(mode: _FirstUnlike, before: str, after: str = "") -> str:
    """Where the tensor off the device came from, for a message: the one the failing operation met, else the
    first the learner's code made, else where one the course's code made first reached it; "" if unknown."""
    if mode.met and mode.met != mode.found:  # the first one made is not the one that met the inputs
        text = f"the tensor off that device that the failing operation was given comes from {mode.met}"
    elif mode.found:
        text = f"the first tensor your code makes off that device comes from {mode.found}"
    elif mode.reached:
        text = f"{_REACHED} {mode.reached}"
    else:
        return ""
    return before + (text[0].upper() + text[1:] if before == " " else text) + after


_FACTORIES = frozenset(
    "zeros ones empty full arange linspace logspace eye tensor as_tensor rand randn randint randperm "
    "tril_indices triu_indices zeros_like ones_like empty_like full_like".split()
)
"""Torch functions that make a tensor on the device they are given (the `_like` ones: their input's, or the
one given), the default device without one."""


class _ChoosesDevice(TorchFunctionMode):
    """Notes whether the learner's code makes a tensor on a device of its own choosing (a factory without
    device=, or .to, .cpu, .cuda): only then can a tensor land off the inputs' device."""

    def __init__(self) -> None:
        super().__init__()
        self.chose = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        given = (kwargs or {}).get("device")
        if (name in _FACTORIES and given is None and not name.endswith("_like")) or name in _MOVES:
            self.chose = True
        return func(*args, **(kwargs or {}))


_MOVES = frozenset({"to", "cpu", "cuda", "from_numpy"})


def _chooses_a_device(learner: Callable[..., Any], called: Call) -> bool:
    """Whether a CPU run of the learner's code makes a tensor on a device of its choosing (True too where
    it cannot tell): the meta run, dear on its first use in a process, runs only then."""
    args, kwargs = called
    mode = _ChoosesDevice()
    try:
        with torch.no_grad(), mode:
            learner(*args, **kwargs)
    except Exception:  # noqa: BLE001 - no saying: try on meta
        return True
    return mode.chose


class _FirstUnlike(TorchFunctionMode):
    """Notes the first torch call whose result is a tensor off the inputs' `device`, or a float tensor of
    the wrong `dtype` the learner's result came out in: which operation, and the learner's line."""

    def __init__(self, dtype: torch.dtype | None = None, device: str | None = None) -> None:
        super().__init__()
        self.dtype, self.device = dtype, device
        self.found = ""
        self.raised_by = ""
        """The operation that raised, innermost first ("__setitem__" for `cpu[i] = meta`)."""
        self.reached = ""
        """The first operation of the learner's code given a tensor off the device, where the course's code
        (called without device=) made it."""
        self.made: dict[int, tuple[torch.Tensor, str]] = {}
        """The tensors the learner's lines made off the device, by id: each with where it was made (where the
        first of its kind was, for one computed from another: `~keep` comes from where `keep` does)."""
        self.met = ""
        """Where the learner's code made the tensor off the device that the operation which raised got."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if (
            not self.found
            and not self.reached
            and self.device is not None
            and self._any_unlike((args, kwargs))
        ):
            if not _called_by_course():  # given a tensor the course's code made off the device
                self.reached = _op_words(func) + _learner_line()
        try:
            out = func(*args, **(kwargs or {}))
        except Exception:
            self.raised_by = self.raised_by or getattr(func, "__name__", "")
            met = [t for t in tree_flatten((args, kwargs or {}))[0] if id(t) in self.made]
            self.met = self.met or (self.made[id(met[0])][1] if met else "")
            raise
        unlike = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and self._is_unlike(t)]
        if unlike and not _called_by_course():  # the course's code moves what it makes itself
            inherited = [t for t in tree_flatten((args, kwargs or {}))[0] if id(t) in self.made]
            words = self.made[id(inherited[0])][1] if inherited else _op_words(func) + _learner_line()
            self.found = self.found or words
            if self.device is not None:
                self.made.update((id(t), (t, words)) for t in unlike)  # kept alive: ids stay theirs
        return out

    def _any_unlike(self, tree: Any) -> bool:
        return any(
            isinstance(tensor, torch.Tensor) and self._is_unlike(tensor) for tensor in tree_flatten(tree)[0]
        )

    def _is_unlike(self, tensor: torch.Tensor) -> bool:
        return tensor.dim() > 0 and self._unlike(tensor)

    def _unlike(self, tensor: torch.Tensor) -> bool:
        if self.device is not None and tensor.device.type != self.device:
            return True
        return self.dtype is not None and tensor.dtype == self.dtype


def _first_unlike(learner: Callable[..., Any], called: Call, dtype: torch.dtype) -> str:
    """Which call of the learner's first makes a tensor of `dtype` (the wrong one it returned), or ""."""
    args, kwargs = called
    mode = _FirstUnlike(dtype=dtype)
    try:
        with torch.no_grad(), mode:
            learner(*args, **kwargs)
    except Exception:  # noqa: BLE001 - it ran before; no observation if it does not now
        return ""
    return mode.found


def _called_by_course() -> bool:
    """Whether the torch call now running comes from the course's own code (a helper the learner called),
    not from the learner's lines: what a helper makes on the way, it moves where it belongs itself."""
    from attn_course.checks._harness import _PACKAGE_DIR, _TORCH_DIR

    for frame in reversed(traceback.extract_stack()[:-2]):  # innermost first, past this and its caller
        path = str(Path(frame.filename).resolve())
        if path.startswith(_TORCH_DIR):
            continue
        return path.startswith(_PACKAGE_DIR) and not path.startswith(_CHECKS_DIR)
    return False


_CHECKS_DIR = str(Path(__file__).resolve().parent)


def _op_words(func: Any) -> str:
    """`torch.zeros(...)`, `.float()`: how the learner spelt the call."""
    name = getattr(func, "__name__", "")
    if not name or name.startswith("__"):
        return "an operation"
    if getattr(torch.Tensor, name, None) is func:
        return f"`.{name}(…)`"
    return f"`torch.{name}(…)`"


def _learner_line() -> str:
    """' at line N of your code: `code`' for the innermost frame that is not a library's, or ""."""
    from attn_course.checks._harness import library_dirs

    dirs = library_dirs()
    frames = [f for f in traceback.extract_stack() if not str(Path(f.filename).resolve()).startswith(dirs)]
    if not frames:
        return ""
    last = frames[-1]
    code = (last.line or "").strip()
    return f" at line {last.lineno} of your code: `{code}`" if code else ""
