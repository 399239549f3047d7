"""Where the learner's own lines cut a tensor along its first axis: a slice or an index of axis 0
(x[a:b], x[i], x[s, :]), or split, chunk, tensor_split, unbind or narrow on dim 0 (split's default).

Recorded while the learner's function runs (a TorchFunctionMode), so any spelling is seen; only calls
made directly by the learner's code count, not those inside the course's functions or torch.
"""

from __future__ import annotations

import functools
import linecache
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from attn_course.checks._harness import library_dirs

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_SPLITS = ("split", "chunk", "tensor_split", "unbind", "split_with_sizes")


@dataclass(frozen=True)
class Cut:
    """One cut of a watched tensor along its first axis, on one of the learner's lines."""

    shape: tuple[int, ...]
    """The shape of the tensor cut."""
    how: str
    """"slices", "indexes", "splits" or "narrows"."""
    lineno: int
    code: str
    """The learner's line, stripped ("" where its source is not known)."""


@functools.lru_cache(maxsize=512)
def _is_torch(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(_TORCH_DIR)


@functools.lru_cache(maxsize=512)
def _is_library(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(library_dirs())


def _first_axis(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """How this call cuts its tensor along axis 0 ("" where it does not)."""
    name = getattr(func, "__name__", "")
    tensor = args[0]
    if name == "__getitem__" and len(args) > 1:
        index = args[1]
        first = index[0] if isinstance(index, tuple) and index else index
        if isinstance(first, slice):
            return "" if first == slice(None) else "slices"
        if isinstance(first, int) and not isinstance(first, bool):
            return "indexes"
        return ""
    if name in _SPLITS:
        dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
        return "splits" if isinstance(dim, int) and dim % tensor.dim() == 0 else ""
    if name == "narrow":
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        return "narrows" if isinstance(dim, int) and dim % tensor.dim() == 0 else ""
    return ""


class _Cuts(TorchFunctionMode):
    """Notes each cut along axis 0 of a tensor of one of `shapes`, made on a line of the learner's."""

    def __init__(self, shapes: set[tuple[int, ...]]) -> None:
        super().__init__()
        self.shapes = shapes
        self.cuts: list[Cut] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if args and isinstance(args[0], torch.Tensor) and tuple(args[0].shape) in self.shapes:
            how = _first_axis(func, args, kwargs)
            if how:
                self._note(tuple(args[0].shape), how)
        return func(*args, **kwargs)

    def _note(self, shape: tuple[int, ...], how: str) -> None:
        frame = sys._getframe(2)  # the caller of __torch_function__'s caller
        while frame is not None and _is_torch(frame.f_code.co_filename):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None or _is_library(frame.f_code.co_filename):
            return  # inside the course's code (or nobody's): not the learner's own cut
        code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        cut = Cut(shape, how, frame.f_lineno, code)
        if cut not in self.cuts:
            self.cuts.append(cut)


def first_axis_cuts(run: Callable[[], Any], shapes: Sequence[tuple[int, ...]]) -> list[Cut]:
    """The learner's cuts along axis 0 of tensors of these shapes while `run()` runs (it may raise)."""
    mode = _Cuts({tuple(s) for s in shapes})
    try:
        with torch.no_grad(), mode:
            run()
    except Exception:  # noqa: BLE001 - what ran until it raised is what was cut
        pass
    return mode.cuts
