"""The checks' simulators remembered: the same inputs and variant give back the result computed before.

A check's known-mistake layer simulates dozens of tiled loops in Python (tens of milliseconds each) on
inputs that a seeded generator makes, so the same simulation recurs whenever a check runs again in a
process: a learner re-running a cell, the test suite running thousands of wrong programs. Simulators
are pure functions of their arguments, so `remembered` keys a result by the arguments' values (a
tensor by its shape, dtype and bytes) and hands back a copy. Anything it cannot key (a tensor on
another device, one that carries a gradient, an object it does not know) is simply computed.

>>> calls = []
>>> @remembered
... def double(x: torch.Tensor, *, factor: int = 2) -> torch.Tensor:
...     calls.append(1)
...     return x * factor
>>> a = double(torch.ones(3))
>>> b = double(torch.ones(3))
>>> len(calls), torch.equal(a, b), a is b
(1, True, False)
>>> _ = double(torch.ones(3), factor=3)
>>> len(calls)
2
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

CAPACITY = 512
"""Results kept per simulator; the oldest goes first."""

LARGEST = 1 << 16
"""Tensors of more elements are not hashed: the checks' cases are small."""


class _Unkeyable(Exception):
    """An argument `remembered` cannot key by value."""


def _key(value: Any) -> Hashable:
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.requires_grad or value.numel() > LARGEST:
            raise _Unkeyable
        data = value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return ("tensor", tuple(value.shape), str(value.dtype), hashlib.blake2b(data).digest())
    if value is None or isinstance(value, bool | int | float | str):
        return (type(value).__name__, value)
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_key(item) for item in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise _Unkeyable
        return (type(value).__qualname__, _key(dataclasses.astuple(value)))
    raise _Unkeyable


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple | list):
        return type(value)(_copy(item) for item in value)
    return value


def remembered(simulate: F) -> F:
    """`simulate`, with its results kept by the values of its arguments (see the module's text)."""
    kept: OrderedDict[Hashable, Any] = OrderedDict()

    @functools.wraps(simulate)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            key = (_key(args), _key(sorted(kwargs.items())), str(torch.get_default_dtype()))
        except _Unkeyable:
            return simulate(*args, **kwargs)
        if key in kept:
            kept.move_to_end(key)
            return _copy(kept[key])
        result = simulate(*args, **kwargs)
        kept[key] = _copy(result)
        if len(kept) > CAPACITY:
            kept.popitem(last=False)
        return result

    return wrapper  # type: ignore[return-value]
