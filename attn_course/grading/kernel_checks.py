"""The grader's side inside a learner's kernel: find each exercise, refuse the reference, run the check.

The host (`execute`) checks each exercise as soon as the learner's cell that defines it has run,
so that a later hang, crash or memory kill loses no result already reached. Its first check cell
drops every `attn_course` module from `sys.modules`, imports this module and the checks afresh from
the installed package, keeps those fresh modules aside and puts the learner's back (`setup`), so
that whatever the learner did to `attn_course.checks` or `CheckFailed` does not count, and the rest
of the notebook runs on with the modules it had. Each later check swaps the fresh modules in for
its duration and puts back the learner's random-number state (`grade_exercises`). Each result is
printed on one line, after a marker holding a random nonce, new for every check cell, that the
learner's code never saw before that cell ran.

Imports only the standard library at import time: `attn_course.checks` and `.reference` are
imported by `setup`.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

MARKER = "ATTN-COURSE-GRADE"
_state: dict[str, Any] = {}


def emit(payload: dict[str, Any]) -> None:
    """Print one result line for the host: the marker, the nonce, then JSON."""
    print(f"{MARKER}-{_state.get('nonce', '')} {json.dumps(payload)}", flush=True)


def _trusted_prefixes(package_dir: Path) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {str(package_dir)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if key in paths:
            found.add(os.path.realpath(paths[key]))
            found.add(paths[key])
    return tuple(sorted(found))


_seen: dict[tuple[str, str, tuple[str, ...]], bool] = {}
"""(module name, its file, the trusted folders) -> whether it shadows an installed module: each
module is looked up once per kernel, not at every check (about 0.07 s for torch's 1,600 modules)."""


def _shadowed_modules(trusted: tuple[str, ...]) -> list[str]:
    """Modules loaded from outside the trusted folders whose names an installed package owns."""
    from importlib.machinery import PathFinder

    installed: list[str] | None = None
    shadowed = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or "." in name or not isinstance(file, str):
            continue
        key = (name, file, trusted)
        if key not in _seen:
            if os.path.realpath(file).startswith(trusted):
                _seen[key] = False
            else:
                if installed is None:
                    installed = [p for p in sys.path if p and os.path.realpath(p).startswith(trusted)]
                spec = PathFinder.find_spec(name, installed)
                # the installed module itself, reached through a link out of its folder (Debian and
                # Ubuntu's sitecustomize, /usr/lib/python3.X -> /etc/python3.X), replaces nothing
                origin = os.path.realpath(spec.origin or "") if spec is not None else None
                _seen[key] = origin is not None and origin != os.path.realpath(file)
        if _seen[key]:
            shadowed.append(name)
    return sorted(shadowed)


def setup(
    package_parent: str,
    nonce: str,
    learner_modules: dict[str, Any] | None = None,
    learner_path: list[str] | None = None,
) -> None:
    """Import the checks and references afresh from `package_parent`; report tampering.

    With `learner_modules` (the learner's `attn_course` modules the host's cell took out of
    `sys.modules`) and `learner_path` (their `sys.path`), the fresh modules are kept aside for
    `grade_exercises` and the learner's are put back.
    """
    _state["nonce"] = nonce
    package_dir = Path(package_parent, "attn_course").resolve()
    trusted = _trusted_prefixes(package_dir)
    problems = []
    try:
        checks = importlib.import_module("attn_course.checks")
        harness = importlib.import_module("attn_course.checks._harness")
        reference = importlib.import_module("attn_course.reference")
    except BaseException as error:  # the learner may have broken anything in the process
        emit({"ok": False, "problem": f"importing the checks failed ({type(error).__name__}: {error})"})
        return
    for name, module in list(sys.modules.items()):
        if name == "attn_course" or name.startswith("attn_course."):
            file = getattr(module, "__file__", None) or ""
            if not os.path.realpath(file).startswith(str(package_dir)):
                problems.append(f"module {name} does not come from the course package")
    shadowed = _shadowed_modules(trusted)
    if shadowed:
        problems.append("files in the folder replace installed modules: " + ", ".join(shadowed[:5]))
    order = [name for names in reference.EXERCISES.values() for name in names]
    _state.update(checks=checks, harness=harness, reference=reference, order=order, trusted=trusted)
    _state.update(problems=problems, kept=[])
    if learner_modules is not None:
        _state["modules"] = _take_course_modules()
        sys.modules.update(learner_modules)
        if learner_path is not None:
            sys.path[:] = learner_path
    emit({"ok": not problems, "problem": "; ".join(problems)})


def _take_course_modules() -> dict[str, Any]:
    """Remove every `attn_course` module from `sys.modules` and return them."""
    names = [n for n in sys.modules if n == "attn_course" or n.startswith("attn_course.")]
    return {name: sys.modules.pop(name) for name in names}


@contextlib.contextmanager
def _graders_world() -> Any:
    """The grader's fresh modules in `sys.modules`, and afterwards the learner's again, with their
    random-number generators, default dtype and grad mode as they were (the notebook runs on)."""
    fresh = _state.get("modules")
    learner = _take_course_modules() if fresh is not None else None
    if fresh is not None:
        sys.modules.update(fresh)
    saved = _random_state()
    try:
        yield
    finally:
        _restore_random_state(saved)
        if learner is not None:
            _state["modules"] = _take_course_modules()  # with any module a check imported
            sys.modules.update(learner)


def _random_state() -> dict[str, Any]:
    import random

    saved: dict[str, Any] = {"random": random.getstate()}
    torch = sys.modules.get("torch")
    if torch is not None:
        saved.update(torch=torch.random.get_rng_state(), dtype=torch.get_default_dtype(),
                     grad=torch.is_grad_enabled())  # fmt: skip
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        saved["numpy"] = numpy.random.get_state()
    return saved


def _restore_random_state(saved: dict[str, Any]) -> None:
    import random

    random.setstate(saved["random"])
    if "torch" in saved:
        torch = sys.modules["torch"]
        torch.random.set_rng_state(saved["torch"])
        torch.set_default_dtype(saved["dtype"])
        torch.set_grad_enabled(saved["grad"])
    if "numpy" in saved:
        sys.modules["numpy"].random.set_state(saved["numpy"])


def grade_exercises(
    names: list[str],
    namespace: dict[str, Any],
    nonce: str,
    same: dict[str, int] | None = None,
    cpu_limit: float = 0.0,
) -> None:
    """Grade each exercise of `names` from `namespace` (after `setup`), emitting with `nonce`.

    `same` maps exercises already graded to the id of the object graded: one still bound to that
    object is not checked again (emitted as `same`). Each check may spend `cpu_limit` seconds of
    CPU time (0: no limit of its own).
    """
    _state["nonce"] = nonce
    problems = list(_state.get("problems", []))
    shadowed = _shadowed_modules(_state["trusted"])
    if shadowed and not problems:
        problems.append("files in the folder replace installed modules: " + ", ".join(shadowed[:5]))
    for name in names:
        if problems:
            emit({"exercise": name, "refused": "; ".join(problems)})
        elif same and name in same and name in namespace and id(namespace[name]) == same[name]:
            emit({"exercise": name, "same": True})
        else:
            with _graders_world():
                grade_exercise(name, namespace, cpu_limit)


def _code_keys(obj: Any) -> set[tuple[str, int, str]]:
    """(file, first line, name) of the code a reference object runs: a function's, or a class's methods'.

    A Triton kernel (and the course's `CourseKernel` stand-in for one, once Triton is imported) runs
    the code of its Python function, `fn`.
    """
    if isinstance(obj, type):
        keys: set[tuple[str, int, str]] = set()
        for value in vars(obj).values():
            if isinstance(value, type):  # an autograd.Function's generated _backward_cls points back
                continue
            keys |= _code_keys(getattr(value, "__func__", value))
        return keys
    code = getattr(obj, "__code__", None)
    if code is None and getattr(obj, "fn", None) is not None:
        return _code_keys(obj.fn)
    return {(code.co_filename, code.co_firstlineno, code.co_name)} if code is not None else set()


def _unwrap(candidate: Any) -> list[Any]:
    """The candidate and what it wraps: partial's func, bound methods, __wrapped__, a callable's class."""
    seen: list[Any] = []
    todo = [candidate]
    while todo and len(seen) < 20:
        obj = todo.pop()
        if any(obj is s for s in seen):
            continue
        seen.append(obj)
        for attribute in ("func", "__func__", "__wrapped__"):
            inner = getattr(obj, attribute, None) if not isinstance(obj, type) else None
            if inner is not None:
                todo.append(inner)
        if not isinstance(obj, type) and not callable(getattr(obj, "__code__", None)) and callable(obj):
            if not hasattr(obj, "__code__"):
                todo.append(type(obj))
    return seen


def _class_key(cls: type) -> tuple[str, str]:
    return (getattr(cls, "__module__", ""), getattr(cls, "__qualname__", ""))


def reference_use(name: str, candidate: Any) -> str:
    """Why `candidate` is the reference of `name` (or of a later exercise), or "" when it is not."""
    reference = _state["reference"]
    forbidden = _state["order"][_state["order"].index(name) :]
    for other in forbidden:
        ref = getattr(reference, other)
        keys = _code_keys(ref)
        for obj in _unwrap(candidate):
            if obj is ref or (keys and _code_keys(obj) & keys and not isinstance(obj, type)):
                return _reference_message(name, other, "is")
            if isinstance(obj, type) and isinstance(ref, type):
                if any(_class_key(base) == _class_key(ref) for base in obj.__mro__):
                    return _reference_message(name, other, "is")
    return ""


def _reference_message(name: str, other: str, how: str) -> str:
    later = "" if other == name else f", the reference of the later exercise `{other}`,"
    return (
        f"`{name}` {how} the course's reference implementation (attn_course.reference.{other}){later} "
        "instead of your own code: it scores zero. Write the computation yourself."
    )


class _ReferenceWatch:
    """A profile hook that notes when the learner's code enters a forbidden reference's code."""

    def __init__(self, name: str, boundary: Any) -> None:
        reference = _state["reference"]
        self.name = name
        self.boundary = boundary
        self.keys: dict[tuple[str, int, str], str] = {}
        for other in _state["order"][_state["order"].index(name) :]:
            for key in _code_keys(getattr(reference, other)):
                self.keys[key] = other
        self.names = {key[2] for key in self.keys}
        self.trusted = _state["trusted"]
        self.entered = ""

    def _learner_frame_between(self, frame: Any) -> bool:
        frame = frame.f_back
        while frame is not None and frame.f_code is not self.boundary:
            file = frame.f_code.co_filename
            if not (file.startswith("<frozen") or os.path.realpath(file).startswith(self.trusted)):
                return True
            frame = frame.f_back
        return False

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or self.entered or frame.f_code.co_name not in self.names:
            return
        code = frame.f_code
        other = self.keys.get((code.co_filename, code.co_firstlineno, code.co_name))
        if other and self._learner_frame_between(frame):
            self.entered = other


class CheckTimeLimit(BaseException):
    """Raised inside the learner's code when one check has used its CPU time (`_cpu_limit`).

    A BaseException, so that neither the checks' nor the learner's `except Exception` swallows it.
    """


@contextlib.contextmanager
def _cpu_limit(seconds: float) -> Any:
    """Raise CheckTimeLimit once this process has spent `seconds` more CPU time (0: no limit).

    An interval timer of the process's CPU time (ITIMER_PROF, all threads) whose signal handler
    raises in the main thread at the next bytecode: a Python loop that never ends stops there, and
    the exercises after it are still graded. Code that stays inside one long C call is stopped by
    the notebook's own CPU limit instead.
    """
    usable = (
        seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return
    armed = [True]

    def stop(signum: int, frame: Any) -> None:
        if armed[0]:
            armed[0] = False
            raise CheckTimeLimit()

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _idea(failure: BaseException) -> dict[str, Any]:
    """The mistake's idea as the check found it: `finding`, the id of the diagnosis finding its message
    is about (`CheckFailed.finding`: "known-mistake", "property", ...), and `slips`, the known
    mistakes it named (`CheckFailed.slips`, each in the words of the course's list of mistakes)."""
    finding = getattr(failure, "finding", "")
    slips = getattr(failure, "slips", ())
    return {
        "finding": finding[:100] if isinstance(finding, str) else "",
        "slips": [s[:1000] for s in slips if isinstance(s, str)][:5]
        if isinstance(slips, (tuple, list))
        else [],
    }


def _run_check(
    check: Any, candidate: Any, watch: _ReferenceWatch, cpu_limit: float = 0.0
) -> tuple[bool, str, str, dict[str, Any]]:
    """(passed, message, upstream, idea): `upstream` names the earlier exercise whose learner version
    alone made the check fail (the check's `CheckFailed.upstream`), "" otherwise; `idea` the failure's
    finding and slips (`_idea`), empty unless the check failed on this exercise's own mistake."""
    checks = _state["checks"]
    upstream = ""
    idea: dict[str, Any] = {}
    output = io.StringIO()
    threading.setprofile(watch)
    sys.setprofile(watch)
    try:
        with contextlib.redirect_stdout(output), _cpu_limit(cpu_limit):
            check(candidate)
        passed, message = True, ""
    except CheckTimeLimit:
        passed, message = (
            False,
            (
                f"the grader's check of `{watch.name}` stopped your code after {cpu_limit:g} s of CPU "
                "time: it did not finish (a loop that never ends, or far more work than the exercise "
                "needs). The exercises after it were still graded."
            ),
        )
    except checks.CheckFailed as failure:
        passed, message = False, str(failure)
        upstream = getattr(failure, "upstream", "")
        order = _state["order"]
        earlier = order[: order.index(watch.name)] if watch.name in order else []
        upstream = upstream if isinstance(upstream, str) and upstream in earlier else ""
        idea = {} if upstream else _idea(failure)
    except checks.CheckerError:  # the checker's own fault: not graded, never the learner's zero
        raise
    except BaseException as error:  # the learner's code may raise anything, SystemExit included
        passed, message = False, f"calling your code raised {type(error).__name__}: {error}"
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    if passed:
        detail = _state["harness"].pass_detail(output.getvalue(), watch.name)
        message = detail or "all cases agree with the reference"
    return passed, message, upstream, idea


def grade_exercise(name: str, namespace: dict[str, Any], cpu_limit: float = 0.0) -> None:
    """Grade the learner's `name` from `namespace` with the fresh check_NAME, within `cpu_limit`
    seconds of CPU time (0: none of its own); emit the result."""
    if name not in namespace:
        emit({"exercise": name, "defined": False, "passed": False, "message": ""})
        return
    candidate = namespace[name]
    _state.setdefault("kept", []).append(candidate)  # alive, so that no later object takes its id
    graded = {"exercise": name, "defined": True, "id": id(candidate)}
    why = reference_use(name, candidate)
    if why:
        emit({**graded, "passed": False, "message": why})
        return
    check = getattr(_state["checks"], f"check_{name}")
    watch = _ReferenceWatch(name, _run_check.__code__)
    try:
        passed, message, upstream, idea = _run_check(check, candidate, watch, cpu_limit)
    except _state["checks"].CheckerError as error:
        emit({**graded, "passed": False, "not_graded": True, "message": str(error)})
        return
    if watch.entered:
        passed, message, upstream, idea = False, _reference_message(name, watch.entered, "calls"), "", {}
    # One mistake, one point: an exercise that passes with the course's version of the earlier
    # exercise it calls is right; it keeps its points and the check's message says which one failed.
    result = {**graded, "passed": passed or bool(upstream), "upstream": upstream, "message": message[:3000]}
    emit({**result, **idea})
