"""Where the learner's first NaN was born: the line of their code and the operation that made it.

A NaN in a result says little by itself: in a tiled softmax it comes either from exp(−inf − (−inf))
(a row whose running maximum is still −inf) or from 0/0 (a row that met no key at all), and the
fixes differ. The check's last call is run again under a torch function mode that watches every
operation; the first whose result holds NaN while none of its inputs did is where it was born.

Memory that `torch.empty` (or `empty_like`, `new_empty`, …) hands out holds whatever was there
before, NaN bit patterns included, so on that run it is filled with NaN: an allocation is never
where a NaN is born and every run reads the same. Where no torch operation made the NaN, a run with
that memory filled with 0 instead tells whether unwritten elements hold it (then it is said to be
that) or something the mode cannot see made it (a Triton kernel, numpy: then nothing is said).
"""

from __future__ import annotations

import linecache
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from attn_course.checks import _mutants

_WHY = {
    "sub": "−inf − (−inf): what is subtracted is itself −inf there",
    "add": "inf + (−inf), a masked score meeting an opposite infinity",
    "div": "0/0, a row whose sum is 0 (it attended no key, or every exponential in it underflowed to 0)",
    "div-inf": "inf/inf, a sum of exponentials that overflowed (exp of scores not shifted by their maximum)",
    "sub-inf": "inf − inf, exponentials that overflowed",
    "mul": "0 · inf, an infinity scaled by 0",
    "matmul": "0 · inf inside a product: an infinity among the weights or the values",
    "log": "the log of a negative number",
    "sqrt": "the square root of a negative number",
    "softmax": "a softmax over a row whose every score is −inf (a row that attends no key) or that "
    "holds +inf",
}

_UNINITIALISED = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"}
"""Operations whose result is memory nobody wrote yet (`_Origin` fills it with NaN)."""


class _Origin(TorchFunctionMode):
    """Remembers the first operation whose result has NaN while its inputs have none."""

    def __init__(self, library_dirs: tuple[str, ...], fill: float = math.nan) -> None:
        super().__init__()
        self.library_dirs = library_dirs
        self.fill = fill
        """What every `torch.empty` (or kin) is filled with on this run."""
        self.found: tuple[str, int, str, str] | None = None
        self.allocated: tuple[str, int, str, str] | None = None
        """The first `torch.empty` (or kin) of the learner's code."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if _plain(getattr(func, "__name__", "")) in _UNINITIALISED:
            if isinstance(result, torch.Tensor) and result.is_floating_point():
                with torch.no_grad():
                    result.fill_(self.fill)
                self.allocated = self.allocated or self._where("unwritten")
            return result
        inputs = list(_tensors(args, kwargs))
        if self.found is None and _has_nan(result) and not any(_has_nan(a) for a in inputs):
            operation = _plain(getattr(func, "__name__", str(func)))
            positive_inf = any(a.is_floating_point() and bool((a == math.inf).any()) for a in inputs)
            if operation in {"div", "sub"} and positive_inf:
                operation += "-inf"
            self.found = self._where(operation)
        return result

    def _where(self, operation: str) -> tuple[str, int, str, str] | None:
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not str(Path(filename).resolve()).startswith(self.library_dirs):
                code = linecache.getline(filename, frame.f_lineno).strip()
                return operation, frame.f_lineno, code, filename
            frame = frame.f_back  # type: ignore[assignment]
        return None


_SPELLINGS = {"truediv": "div", "true_divide": "div", "divide": "div", "subtract": "sub", "multiply": "mul",
              "einsum": "matmul", "bmm": "matmul", "mm": "matmul"}  # fmt: skip


def _plain(operation: str) -> str:
    """'sub' for __sub__, __rsub__, sub_, subtract; 'div' for __truediv__; 'matmul' for einsum."""
    name = operation.strip("_")
    if name.startswith("r") and (name[1:] in _WHY or name[1:] in _SPELLINGS):
        name = name[1:]
    return _SPELLINGS.get(name, name)


def _has_nan(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and bool(torch.isnan(value).any())


def _tensors(args: Any, kwargs: Any) -> Iterator[torch.Tensor]:
    for value in [*args, *(kwargs or {}).values()]:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def first_nan(
    function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], library_dirs: tuple[str, ...]
) -> tuple[str, int, str, str] | None:
    """(operation, line, code, file) of the first NaN that function(*args, **kwargs) makes, or None."""
    origin = _Origin(library_dirs)
    try:
        with origin:
            result, _ = _mutants._call(function, args, kwargs)
        if origin.found is None and origin.allocated is not None and _holds_nan(result):
            # No torch operation made a NaN. Unwritten elements explain it only if the NaN goes away when
            # torch.empty's memory holds 0 instead (a Triton kernel or numpy can make a NaN unseen here).
            zeroed = _Origin(library_dirs, fill=0.0)
            with zeroed:
                again, _ = _mutants._call(function, args, kwargs)
            if again is not None and not _holds_nan(again):
                return origin.allocated
    except Exception:  # noqa: BLE001 - a reading that only adds to a message must never fail the check
        return None
    return origin.found


def _holds_nan(result: Any) -> bool:
    """Whether a result (a tensor, or a tuple or list of them) holds a NaN."""
    values = result if isinstance(result, tuple | list) else (result,)
    return any(_has_nan(value) for value in values)


def nan_origin(library_dirs: tuple[str, ...]) -> tuple[str, str]:
    """('The first NaN is made at line N of your code, `…`: why', the operation), from the check's last
    call, or ("", "") where it is not found."""
    last, candidate = _mutants._LAST_CALL.get(), _mutants.last_candidate()
    if last is None or candidate is None or not callable(candidate):
        return "", ""
    found = first_nan(candidate, last[1], last[2], library_dirs)
    if found is None:
        return "", ""
    operation, line, code, _ = found
    shown = f", `{code}`" if code else ""
    if operation == "unwritten":
        return (
            f"No operation of your code makes a NaN: it is in elements that nothing wrote of the tensor "
            f"made at line {line}{shown}, which holds whatever was in memory until it is written."
        ), operation
    why = _WHY.get(operation, "")
    return f"The first NaN is made at line {line} of your code{shown}" + (
        f": {why}." if why else "."
    ), operation
