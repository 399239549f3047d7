"""One diagnosis pipeline for a wrong result: an ordered list of layers, findings as data, one renderer.

When a learner's result differs from the right one, `diagnose_failure` runs the layers of `LAYERS` in
order on one `Failure` record, passed explicitly. Each layer has one signature, `(failure, found) ->
Finding | None`, where `found` holds what the layers before it found, and a rule saying when it runs.
A finding is data: an id naming the idea (tests may assert it), its text and its evidence. `render`
alone turns the findings into the learner's message. A check may narrow the list (`only=`), never
reorder it.

The order, and why:
1. `known-mistake`: a named slip of the check's table gives exactly the learner's result (all of the
   slips that do, when several do: each is said, none asserted).
2. `mutant`: the right computation changed once gives the learner's result; said after a property,
   or alone (run before the property, whose reading may call the learner's code again).
3. `property`: the check's own reading of what property fails (rows summing off 1, a block's offset);
   said first when there is one.
4. `repair`: the learner's own line changed once passes the whole check; run where no property was
   read and no mutant found, or where the mutant's step is not one of the learner's.
5. `misplaced-arguments`, `equal-argument`, `non-finite`, `where-wrong`: what is observed, first
   found first, when nothing above named the idea.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from attn_course.checks._calls import misplaced_in
from attn_course.checks._mutants import last_candidate, name_by_mutation
from attn_course.checks._nan_origin import nan_origin
from attn_course.checks._repairs import foreign_step, name_by_repair, unquoted


@dataclass(frozen=True)
class Failure:
    """One failed comparison: everything a layer may read, passed to each explicitly."""

    actual: torch.Tensor
    """What the learner's code gave."""
    expected: torch.Tensor
    """What the right computation gives."""
    what: str
    """What was compared, as the message opens ("Your softmax(x, dim=-1)")."""
    called: str
    """How it was called, as the message ends ("\\n(Called as ...)"), or ""."""
    close: Callable[[torch.Tensor, torch.Tensor], bool]
    """Whether two results agree."""
    mistakes: Sequence[Any] = ()
    """The check's known mistakes (`Mistake`), each computing what that slip gives."""
    args: Sequence[Any] = ()
    """The arguments a mistake's implementation is called with."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the same."""
    nan_means_unknown: bool = False
    """Skip a mistake whose simulation gives NaN where the right answer has none."""
    diagnose: Callable[[torch.Tensor, torch.Tensor], str | None] | None = None
    """The check's own reading of what property fails, or None."""
    nonfinite_hint: str = ""
    """Why learners get NaN or inf here."""
    own_line_with_property: bool = False
    """Show the learner's line changed once after a property too (where the check's readings are coarse,
    as rotary_window_attention's, which sees keys after a query but not a mask_mod's parameters swapped)."""


@dataclass(frozen=True)
class Finding:
    """What one layer found: the idea's id, its words, and the evidence behind them."""

    id: str
    """The idea, stable for tests: "known-mistake", "property", "mutant", "repair", ..."""
    text: str
    """The words, as the renderer places them."""
    evidence: tuple[str, ...] = ()
    """What supports it (for a known mistake, every slip that gives the learner's result)."""


Found = dict[str, Finding]

_NAMING = ("known-mistake", "property", "mutant")
"""The findings that name an idea; the message is about the first found, in this order."""
_OBSERVING = ("misplaced-arguments", "equal-argument", "non-finite", "where-wrong")
"""The findings that say what is observed, when nothing named the idea."""
_PRIMARY_ORDER = _NAMING + _OBSERVING


@dataclass(frozen=True)
class Layer:
    """One step of the pipeline: its id, what it runs, and when it runs given what came before."""

    id: str
    run: Callable[[Failure, Found], Finding | None]
    runs_when: Callable[[Failure, Found], bool]


def _known_mistakes(failure: Failure, found: Found) -> Finding | None:
    expected = failure.expected
    reference_finite = ~torch.isnan(expected.detach().cpu()) if expected.is_floating_point() else None
    matching: list[str] = []
    for mistake in failure.mistakes:
        try:
            with torch.no_grad():
                wrong = mistake.implementation(*failure.args, **failure.kwargs)
        except Exception:  # noqa: BLE001 - a mistake that cannot even run on these inputs is not this one
            continue
        if not isinstance(wrong, torch.Tensor) or wrong.shape != expected.shape:
            continue
        if failure.nan_means_unknown and reference_finite is not None:
            if (torch.isnan(wrong.detach().cpu()) & reference_finite).any():
                continue
        if not failure.close(wrong, expected) and failure.close(failure.actual, wrong):
            matching.append(mistake.message)
    slips = tuple(dict.fromkeys(matching))
    return Finding("known-mistake", "", slips) if slips else None


def _property(failure: Failure, found: Found) -> Finding | None:
    if failure.diagnose is None:
        return None
    # A diagnosis may call the learner's code again: in a context of its own, the check's last call stays.
    text = contextvars.copy_context().run(failure.diagnose, failure.actual, failure.expected)
    return Finding("property", text) if text else None


def _mutant(failure: Failure, found: Found) -> Finding | None:
    derived = name_by_mutation(failure.actual, failure.expected, failure.close)
    return Finding("mutant", unquoted(derived), (derived,)) if derived else None


def _repair(failure: Failure, found: Found) -> Finding | None:
    text = name_by_repair(failure.expected, failure.close)
    return Finding("repair", text) if text else None


def _misplaced_arguments(failure: Failure, found: Found) -> Finding | None:
    candidate = last_candidate()
    text = misplaced_in(candidate) if candidate is not None else ""
    return Finding("misplaced-arguments", f"is wrong. {text}") if text else None


def _equal_argument(failure: Failure, found: Found) -> Finding | None:
    from attn_course.checks._harness import equal_argument

    text = equal_argument(failure.actual, failure.expected)
    return Finding("equal-argument", text) if text else None


def _non_finite(failure: Failure, found: Found) -> Finding | None:
    from attn_course.checks._harness import library_dirs, where_nonfinite

    actual, expected = failure.actual, failure.expected
    if not (
        actual.is_floating_point() and not torch.isfinite(actual).all() and torch.isfinite(expected).all()
    ):
        return None
    bad = "NaN" if torch.isnan(actual).any() else "inf"
    origin = nan_origin(library_dirs()) if bad == "NaN" else ""
    text = (
        f"contains {bad} values where the right answer is finite (the inputs are finite): "
        f"{where_nonfinite(actual)}."
        + (f" {origin}" if origin else "")
        + (f" {failure.nonfinite_hint}" if failure.nonfinite_hint else "")
    )
    return Finding("non-finite", text)


def _where_wrong(failure: Failure, found: Found) -> Finding | None:
    from attn_course.checks._harness import describe_error

    return Finding("where-wrong", f"is wrong: {describe_error(failure.actual, failure.expected)}")


def _named(found: Found) -> bool:
    """Whether a layer already named the idea (a slip, a property or a mutant)."""
    return any(key in found for key in _NAMING)


def _observed(found: Found) -> bool:
    """Whether an observation layer already spoke."""
    return any(key in found for key in _OBSERVING)


def _repair_runs(failure: Failure, found: Found) -> bool:
    if "known-mistake" in found or ("property" in found and not failure.own_line_with_property):
        return False
    mutant = found.get("mutant")
    return mutant is None or foreign_step(mutant.evidence[0])  # a step the learner's code lacks


LAYERS: tuple[Layer, ...] = (
    Layer("known-mistake", _known_mistakes, lambda failure, found: True),
    Layer("mutant", _mutant, lambda failure, found: "known-mistake" not in found),
    Layer("property", _property, lambda failure, found: "known-mistake" not in found),
    Layer("repair", _repair, _repair_runs),
    Layer("misplaced-arguments", _misplaced_arguments, lambda failure, found: not _named(found)),
    Layer(
        "equal-argument", _equal_argument, lambda failure, found: not _named(found) and not _observed(found)
    ),
    Layer("non-finite", _non_finite, lambda failure, found: not _named(found) and not _observed(found)),
    Layer("where-wrong", _where_wrong, lambda failure, found: not _named(found) and not _observed(found)),
)
"""The order of diagnosis, written once."""


def diagnose_failure(failure: Failure, only: Sequence[str] | None = None) -> Found:
    """Run the layers (those named in `only`, in `LAYERS`' order) on `failure`; what each found, by id."""
    found: Found = {}
    for layer in LAYERS:
        if (only is None or layer.id in only) and layer.runs_when(failure, found):
            finding = layer.run(failure, found)
            if finding is not None:
                found[layer.id] = finding
    return found


def primary(found: Found) -> str:
    """The id of the finding the message is about: a slip, a property, a mutant, then what is observed."""
    return next(key for key in _PRIMARY_ORDER if key in found)


def render(failure: Failure, found: Found) -> str:
    """The learner's message: what was compared, the primary finding, its supplements, how it was called."""
    from attn_course.checks._harness import slips_message

    what, called = failure.what, failure.called
    if "known-mistake" in found:
        return slips_message(what, found["known-mistake"].evidence, called)
    mutant, repair = found.get("mutant"), found.get("repair")
    if "property" in found:  # the check's own reading first; a one-change mutant that gives the same says how
        after = f"\nIt {mutant.text}" if mutant else f"\n{repair.text}" if repair else ""
        return f"{what} {found['property'].text}{after}{called}"
    if mutant:  # in the learner's own line too, where the reference's step is not one of theirs
        return f"{what} {mutant.text}" + (f"\n{repair.text}" if repair else "") + called
    tail = f"\n{repair.text}{called}" if repair else called  # the learner's own line, after what is wrong
    return f"{what} {found[primary(found)].text}{tail}"
