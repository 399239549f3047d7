"""Why a result has the wrong shape: which axes were merged, split, swapped, lost or sized from what.

A wrong shape is a fact about the learner's code that torch states only as two tuples. This module
reads the two tuples as a regrouping of the right one (two axes merged, one split, one reduced
away, a size-1 axis too many, the axes in another order) and reads each wrong size against the
numbers the call was given (`t`, `lengths.max()`, `x.shape[-2]`), so that a message can say
"axis 1 has 2, which is `lengths.max()`, where it should have 3, which is `t`".
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch


def number_sources(arguments: Mapping[str, Any]) -> dict[int, list[str]]:
    """Each positive whole number the call's arguments hold, with the expressions that give it."""
    sources: dict[int, list[str]] = {}

    def add(value: int, text: str) -> None:
        if value > 0 and text not in sources.setdefault(value, []):
            sources[value].append(text)

    for name, value in arguments.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            add(value, f"`{name}`")
        elif isinstance(value, torch.Tensor):
            for axis in range(value.dim()):
                add(int(value.shape[axis]), f"`{name}.shape[{axis - value.dim()}]`")
            if not value.is_floating_point() and value.dtype != torch.bool and 0 < value.numel() <= 64:
                add(int(value.max()), f"`{name}.max()`")
                add(int(value.min()), f"`{name}.min()`")
    return sources


def explain_shape(
    actual: tuple[int, ...], expected: tuple[int, ...], arguments: Mapping[str, Any] | None = None
) -> str:
    """How `actual` departs from `expected`, in words ("" where no reading fits)."""
    sources = number_sources(arguments or {})
    if actual == expected:
        return ""
    if len(actual) == len(expected) and sorted(actual) == sorted(expected):
        return (
            f"The right sizes in another order: the axes are transposed or permuted ({_shape(actual)} "
            f"where {_shape(expected)} is right): a transpose or permute is missing, extra, or on other axes."
        )
    if len(actual) == len(expected) - 1:
        for i, j in itertools.combinations(range(len(expected)), 2):
            merged = [s for k, s in enumerate(expected) if k not in (i, j)]
            for position in range(len(merged) + 1):
                if tuple([*merged[:position], expected[i] * expected[j], *merged[position:]]) == actual:
                    return (
                        f"Two axes of the right shape, {expected[i]} (axis {i}) and {expected[j]} "
                        f"(axis {j}), "
                        f"are merged into one of {expected[i] * expected[j]}: keep them apart (a reshape or "
                        "rearrange that folds one into the other, heads into the batch for example)."
                    )
        for i in range(len(expected)):
            if tuple(s for k, s in enumerate(expected) if k != i) == actual:
                return (
                    f"Axis {i} of the right shape, of size {expected[i]}, is missing: reduced away (a sum, "
                    "mean or max over it, a reduction without keepdim=True) or indexed out."
                )
    if len(actual) == len(expected) + 1:
        for i in range(len(actual)):
            if actual[i] == 1 and tuple(s for k, s in enumerate(actual) if k != i) == expected:
                return (
                    f"An extra axis of size 1 at position {i}: a reduction with keepdim=True, or an "
                    "unsqueeze or None index too many, where the result has no such axis."
                )
        for i in range(len(actual) - 1):
            rest = actual[:i] + actual[i + 2 :]
            if rest == expected[:i] + expected[i + 1 :] and actual[i] * actual[i + 1] == expected[i]:
                return (
                    f"Axis {i} of the right shape, of size {expected[i]}, is split into {actual[i]} × "
                    f"{actual[i + 1]}: those belong merged into one axis (merge the heads back, (h d))."
                )
    if len(actual) == len(expected):
        notes = [
            _size_note(axis, a, e, sources)
            for axis, (a, e) in enumerate(zip(actual, expected, strict=True))
            if a != e
        ]
        notes = [n for n in notes if n]
        if notes:
            return " ".join(notes)
    return ""


def _size_note(axis: int, got: int, want: int, sources: dict[int, list[str]]) -> str:
    """Why axis `axis` may have `got` where `want` is right."""
    got_from, want_from = sources.get(got, []), sources.get(want, [])
    where = f"Axis {axis} has {got}"
    if got == 0 or want == 0:
        return f"{where} where it should have {want}: a size computed as 0 (a division the wrong way round?)."
    parts = want // got if want % got == 0 else 0
    if parts > 1 and parts in sources:
        return (
            f"{where}, 1/{parts} of the {want} it should have ({parts} is {_either(sources[parts])}): one of "
            f"{parts} parts, or the {parts} parts summed or averaged, where they belong side by side "
            "(all the heads concatenated, or all of q, k and v)."
        )
    if factor := _factor_note(where, got, want, sources):
        return factor
    if got_from and not set(got_from) & set(want_from):
        right = f", which is {_either(want_from)}" if want_from else ""
        return (
            f"{where}, which is {_either(got_from)}, where it should have {want}{right}: "
            "that size is taken from the wrong tensor, axis or argument."
        )
    if want % got == 0 and want // got > 1:
        return (
            f"{where}, 1/{want // got} of the {want} it should have: one of {want // got} equal parts "
            "(one head of several, or one of q, k and v) where all of them belong."
        )
    if got % want == 0 and got // want > 1:
        return (
            f"{where}, {got // want} times the {want} it should have: parts concatenated that belong apart."
        )
    if abs(got - want) == 1:
        right = f" ({_either(want_from)})" if want_from else ""
        return f"{where} where it should have {want}{right}: a size or range off by one."
    return ""


def _factor_note(where: str, got: int, want: int, sources: dict[int, list[str]]) -> str:
    """'Axis 1 has 9 = 3 × 3 where 6 = 3 × 2 is right: the factor 2 (`n_rep`) is 3 (`x.shape[-3]`)'."""
    for common in sorted(sources, reverse=True):
        if common < 2 or want % common or got % common:
            continue
        right, wrong = want // common, got // common
        if right != wrong and right in sources and wrong in sources and wrong > 1:
            return (
                f"{where} = {common} × {wrong}, where it should have {want} = {common} × {right}: the factor "
                f"{right} ({_either(sources[right])}) is {wrong} there, as {_either(sources[wrong])} is: "
                "is that count taken from the wrong argument or axis?"
            )
    return ""


def _either(texts: list[str]) -> str:
    plain_first = sorted(texts, key=lambda text: "." in text)  # `n_rep` before `x.shape[-4]`
    return " or ".join(plain_first[:2])


def _shape(sizes: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in sizes) + ("," if len(sizes) == 1 else "") + ")"
