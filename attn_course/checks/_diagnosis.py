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
2. `mutant`: the right computation changed once gives the learner's result; said alone, or after a
   property where the learner's code holds what the change makes (run before the property, whose
   reading may call the learner's code again).
3. `property`: the check's own reading of what property fails (rows summing off 1, a block's offset);
   said first when there is one.
4. `repair`: the learner's own line changed once passes the whole check; run where no property was
   read and no mutant found, or where the mutant's step is not one of the learner's.
5. `misplaced-arguments`, `equal-argument`, `non-finite`, `where-wrong`: what is observed, first
   found first, when nothing above named the idea.

A result may be a tuple of tensors (the gradients dq, dk, dv: `Failure.parts` names them). The same
layers run on it, in the same order: a known mistake gives the whole tuple, a mutant and a repair
aim at the first wrong part, and `where-wrong` is the check's own locating of which parts are wrong
and where (`Failure.locate`), said beside the learner's misplaced arguments or line.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from attn_course.checks._calls import misplaced_in
from attn_course.checks._mutants import last_candidate, name_by_mutation
from attn_course.checks._nan_origin import nan_origin
from attn_course.checks._repairs import confirmed, foreign_step, name_by_repair, unconfirmed, unquoted

if TYPE_CHECKING:
    from attn_course.checks._harness import CheckFailed, Mistake


@dataclass(frozen=True)
class Failure:
    """One failed comparison: everything a layer may read, passed to each explicitly."""

    actual: Any
    """What the learner's code gave: a tensor, or a tuple of tensors named by `parts`."""
    expected: Any
    """What the right computation gives, of the same kind."""
    what: str
    """What was compared, as the message opens ("Your softmax(x, dim=-1)")."""
    called: str
    """How it was called, as the message ends ("\\n(Called as ...)"), or ""."""
    close: Callable[[torch.Tensor, torch.Tensor], bool]
    """Whether two results agree (for a tuple, two of its parts)."""
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
    nonfinite_hint: str | Mapping[str, str] = ""
    """Why learners get NaN or inf here; or, keyed by the operation that made the first NaN ("sub" for
    −inf − (−inf), "div", "softmax", ...), the hint true of that origin only, "" for any other."""
    own_line_with_property: bool = False
    """Show the learner's line changed once after a property too (where the check's readings are coarse,
    as rotary_window_attention's, which sees keys after a query but not a mask_mod's parameters swapped)."""
    parts: tuple[str, ...] = ()
    """For a tuple of results, the name of each part ("dq", "dk", "dv"); () where the result is a tensor."""
    owned: tuple[int, ...] = ()
    """For a tuple: the parts the code under check computes (every part when empty); only they are
    compared (a Triton kernel of notebook 09 computes dq, or dk and dv)."""
    locate: Callable[[], str] | None = None
    """For a tuple: which parts are wrong and where, in words (`where-wrong`), or None for the first
    wrong part's `describe_error`."""
    candidate: Any = None
    """The learner's function or class, read for misplaced arguments; None for the one called last."""
    first_slip_only: bool = False
    """Name the first known mistake that gives the learner's result, without trying the rest: for a table
    ordered most specific first whose every simulation is costly (notebook 09's tiled backwards, whose
    FlashAttentionFunction wiring comes before the slips of the backward it calls)."""
    unnamed_hint: str = ""
    """For a tuple: what to look at ("\n..."), said where no known mistake matched and neither the
    learner's misplaced arguments nor their line changed once is shown."""

    def indices(self) -> tuple[int, ...]:
        """The compared parts of a tuple (() for a tensor)."""
        return self.owned or tuple(range(len(self.parts)))

    def agree(self, actual: Any, expected: Any) -> bool:
        """Whether two results agree: the tensors, or every compared part of the tuples."""
        if not self.parts:
            return self.close(actual, expected)
        return all(self.close(actual[i], expected[i]) for i in self.indices())

    def first_wrong(self) -> int | None:
        """The first compared part of a tuple where the learner's result is wrong (None for a tensor)."""
        wrong = (i for i in self.indices() if not self.close(self.actual[i], self.expected[i]))
        return next(wrong, None)


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


def _same_shape(failure: Failure, wrong: Any) -> bool:
    """Whether a mistake's result is shaped like the right one (each compared part of a tuple)."""
    expected = failure.expected
    if not failure.parts:
        return isinstance(wrong, torch.Tensor) and wrong.shape == expected.shape
    return (
        isinstance(wrong, tuple | list)
        and len(wrong) == len(expected)
        and all(
            isinstance(wrong[i], torch.Tensor) and wrong[i].shape == expected[i].shape
            for i in failure.indices()
        )
    )


def _known_mistakes(failure: Failure, found: Found) -> Finding | None:
    expected = failure.expected
    reference_finite = (
        ~torch.isnan(expected.detach().cpu()) if not failure.parts and expected.is_floating_point() else None
    )
    matching: list[str] = []
    for mistake in failure.mistakes:
        try:
            with torch.no_grad():
                wrong = mistake.implementation(*failure.args, **failure.kwargs)
        except Exception:  # noqa: BLE001 - a mistake that cannot even run on these inputs is not this one
            continue
        if not _same_shape(failure, wrong):
            continue
        if failure.nan_means_unknown and reference_finite is not None:
            if (torch.isnan(wrong.detach().cpu()) & reference_finite).any():
                continue
        if not failure.agree(wrong, expected) and failure.agree(failure.actual, wrong):
            matching.append(mistake.message)
            if failure.first_slip_only:
                break
    slips = tuple(dict.fromkeys(matching))
    return Finding("known-mistake", "", slips) if slips else None


def _property(failure: Failure, found: Found) -> Finding | None:
    if failure.diagnose is None:
        return None
    # A diagnosis may call the learner's code again: in a context of its own, the check's last call stays.
    text = contextvars.copy_context().run(failure.diagnose, failure.actual, failure.expected)
    return Finding("property", text) if text else None


def _compared(failure: Failure) -> tuple[torch.Tensor, torch.Tensor, str] | None:
    """(learner's, right, "") for a tensor; for a tuple its first wrong part and "gives the wrong dq: "."""
    if not failure.parts:
        return failure.actual, failure.expected, ""
    i = failure.first_wrong()
    if i is None:
        return None
    return failure.actual[i], failure.expected[i], f"gives the wrong {failure.parts[i]}: it "


def _mutant(failure: Failure, found: Found) -> Finding | None:
    compared = _compared(failure)
    if compared is None:
        return None
    actual, expected, opening = compared
    derived = name_by_mutation(actual, expected, failure.close)
    if derived and unconfirmed(derived):
        return None  # the learner's own line, as the reference writes it, did not make this change
    return Finding("mutant", opening + unquoted(derived), (derived,)) if derived else None


def _repair(failure: Failure, found: Found) -> Finding | None:
    compared = _compared(failure)
    text = name_by_repair(compared[1], failure.close) if compared is not None else None
    return Finding("repair", text) if text else None


def _misplaced_arguments(failure: Failure, found: Found) -> Finding | None:
    candidate = failure.candidate or last_candidate()
    text = misplaced_in(candidate) if candidate is not None else ""
    return Finding("misplaced-arguments", f"is wrong. {text}", (text,)) if text else None


def _equal_argument(failure: Failure, found: Found) -> Finding | None:
    from attn_course.checks._harness import equal_argument

    if failure.parts:
        return None  # a tensor's observation
    text = equal_argument(failure.actual, failure.expected)
    return Finding("equal-argument", text) if text else None


def _inputs_finite(failure: Failure) -> bool:
    """Whether every float tensor the learner's code was given is finite (False where none is known: the
    message then says nothing of the inputs)."""
    from attn_course.checks._mutants import call_arguments

    given = (*failure.args, *failure.kwargs.values(), *call_arguments().values())
    tensors = [t for t in given if isinstance(t, torch.Tensor) and t.is_floating_point()]
    tensors = [t for t in tensors if t.device.type != "meta"]
    return bool(tensors) and all(bool(torch.isfinite(t).all()) for t in tensors)


def _non_finite(failure: Failure, found: Found) -> Finding | None:
    from attn_course.checks._harness import library_dirs, where_nonfinite

    actual, expected = failure.actual, failure.expected
    if failure.parts or not (
        actual.is_floating_point() and not torch.isfinite(actual).all() and torch.isfinite(expected).all()
    ):
        return None
    bad = "NaN" if torch.isnan(actual).any() else "inf"
    origin, operation = nan_origin(library_dirs()) if bad == "NaN" else ("", "")
    hint = "" if operation == "unwritten" else failure.nonfinite_hint  # no operation made it: no cause
    if not isinstance(hint, str):  # a cause is said only where the NaN was born as it says
        hint = hint.get(operation, hint.get("", ""))
    finite_inputs = " (the inputs are finite)" if _inputs_finite(failure) else ""
    text = (
        f"contains {bad} values where the right answer is finite{finite_inputs}: "
        f"{where_nonfinite(actual)}." + (f" {origin}" if origin else "") + (f" {hint}" if hint else "")
    )
    return Finding("non-finite", text)


def _where_wrong(failure: Failure, found: Found) -> Finding | None:
    from attn_course.checks._harness import describe_error

    if failure.locate is not None:
        return Finding("where-wrong", failure.locate())
    compared = _compared(failure)
    if compared is None:
        return None
    actual, expected, opening = compared
    text = opening.removesuffix("it ") if opening else f"{_verb(failure.what)} wrong: "
    return Finding("where-wrong", text + describe_error(actual, expected))


_PLURALS = {"scores", "weights", "logits", "probabilities", "outputs", "gradients", "keys", "values"}


def _verb(what: str) -> str:
    """'are' after a plural result ("Your scores"), else 'is'."""
    words = what.rstrip(" ,.`").split()
    return "are" if words and words[-1].strip("`") in _PLURALS else "is"


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
    Layer(  # a tuple's parts are located beside the learner's misplaced arguments
        "where-wrong",
        _where_wrong,
        lambda failure, found: not _named(found) and (bool(failure.parts) or not _observed(found)),
    ),
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


_SHAPE = re.compile(r"\(\d+(?:, \d+)*,?\)")


def _said_already(called: str, what: str) -> bool:
    """Whether the "(Called as ...)" tail repeats what the message's opening says: every shape it
    shows is in the opening already (an opening that names the call with its shapes says it once)."""
    shapes = _SHAPE.findall(called)
    return bool(shapes) and all(shape in what for shape in shapes)


def render(failure: Failure, found: Found) -> str:
    """The learner's message: what was compared, the primary finding, its supplements, how it was called."""
    from attn_course.checks._harness import slips_message

    what, called = failure.what, failure.called
    if _said_already(called, what):
        called = ""  # the call described once
    if "known-mistake" in found:
        return slips_message(what, found["known-mistake"].evidence, called)
    mutant, repair = found.get("mutant"), found.get("repair")
    if "property" in found:  # the check's own reading first; a mutant the learner's code is known to make
        # says how. Any other is not said: a change of the right computation that gives the same result is
        # not the learner's when their code holds nowhere what it makes (another name whose value agrees).
        if mutant and not confirmed(mutant.evidence[0]):
            mutant = None
        after = f"\nIt {mutant.text}" if mutant else f"\n{repair.text}" if repair else ""
        return f"{what} {found['property'].text}{after}{called}"
    if failure.parts:  # a tuple: the mutant or which parts are wrong, then the learner's names or line
        misplaced = found.get("misplaced-arguments")
        head = mutant or found["where-wrong"]
        after = f"\n{misplaced.evidence[0]}" if misplaced else f"\n{repair.text}" if repair else ""
        return f"{what} {head.text}{after or failure.unnamed_hint}{called}"
    if mutant:  # in the learner's own line too, where the reference's step is not one of theirs
        return f"{what} {mutant.text}" + (f"\n{repair.text}" if repair else "") + called
    tail = f"\n{repair.text}{called}" if repair else called  # the learner's own line, after what is wrong
    return f"{what} {found[primary(found)].text}{tail}"


def fail(failure: Failure, only: Sequence[str] | None = None) -> NoReturn:
    """Diagnose `failure` (the layers of `only`, in `LAYERS`' order); raise `CheckFailed` with the message."""
    from attn_course.checks._harness import CheckFailed

    found = diagnose_failure(failure, only)
    slips = found["known-mistake"].evidence if "known-mistake" in found else ()
    raise CheckFailed(
        render(failure, found), slips=slips, framing=(failure.what, failure.called), finding=primary(found)
    )


def narrow_slips(
    failure: CheckFailed, cases: Sequence[tuple[Sequence[Mistake], Any, Callable[[], Any]]]
) -> CheckFailed:
    """`failure` with only the slips that also give the learner's result on every other case.

    Each case is (its mistakes, bound to its inputs, its expected result, a call that gives the learner's
    result there). A
    slip is kept where the mistake of the same message gives what the learner gives in every case
    (the right answer where the learner's is right); with one left it is named, with none the
    failure stays as it was.
    """
    from attn_course.checks._harness import CheckFailed, is_close, slips_message

    if len(failure.slips) < 2:
        return failure
    kept = list(failure.slips)
    for mistakes, expected, learners in cases:
        if len(kept) == 1:
            break  # the others are refuted: no need to run the rest
        try:
            actual = learners()
        except Exception:  # noqa: BLE001 - a case the learner's code cannot run says nothing here
            continue
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
            continue
        for message in list(kept):
            gives = not any(mistake.message == message for mistake in mistakes)  # no evidence here
            for mistake in mistakes:
                if mistake.message != message:
                    continue
                try:
                    with torch.no_grad():
                        wrong = mistake.implementation()
                except Exception:  # noqa: BLE001 - a simulation that cannot run here is not evidence
                    continue
                gives = gives or (
                    isinstance(wrong, torch.Tensor)
                    and wrong.shape == actual.shape
                    and is_close(actual, wrong)
                )
            if not gives:
                kept.remove(message)
    if not kept or kept == list(failure.slips):
        return failure
    what, where = failure.framing
    return CheckFailed(
        slips_message(what, kept, where), failure.upstream, tuple(kept), failure.framing, failure.finding
    )
