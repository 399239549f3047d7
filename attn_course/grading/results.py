"""What grading produces: small dataclasses, from one exercise up to the whole run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_course.grading.points import POINTS
from attn_course.grading.roster import Roster


@dataclass(frozen=True)
class ExerciseResult:
    """The grade of one exercise of one learner."""

    exercise: str
    """The exercise NAME (as in `attn_course.reference.EXERCISES` and `check_NAME`)."""
    passed: bool
    """Whether the grader's own check accepted the learner's implementation."""
    points: float
    """Points awarded: the exercise's points when passed, else 0 (an int unless a points file says 0.5)."""
    message: str
    """The check's pass line or failure message, or why the exercise could not be graded."""
    graded: bool = True
    """False when the course's check itself failed on it (a grader problem, not the learner's)."""
    reached: bool = True
    """False when the notebook stopped (time, memory, crash) before the exercise's check finished."""
    upstream: str = ""
    """The earlier exercise (by NAME) whose learner version alone made this one's check fail: this
    exercise is right (it passes with the course's version of that one) and keeps its points; "" else."""
    override: str = ""
    """The instructor's note when an overrides file set this exercise's points ("" otherwise)."""
    stopped: bool = False
    """True when the notebook stopped while this exercise's check ran (the learner's code it called
    looped, crashed or ran out of memory): the check never finished, so the exercise is not reached."""
    finding: str = ""
    """The id of the check's diagnosis finding the failure message is about (`CheckFailed.finding`:
    "known-mistake", "property", "mutant", ...); "" where the check gave none or it passed."""
    slips: tuple[str, ...] = ()
    """With the finding "known-mistake", the known mistakes the check named (`CheckFailed.slips`), in
    the words of the course's list of mistakes: the idea of the mistake, the same across exercises."""

    @classmethod
    def failed(
        cls, exercise: str, message: str, finding: str = "", slips: tuple[str, ...] = ()
    ) -> ExerciseResult:
        """A zero for `exercise`, with the reason (and the check's finding and slips, where it gave them)."""
        return cls(exercise, False, 0, message, finding=finding, slips=slips)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExerciseResult:
        """The result `dataclasses.asdict` gave, back from JSON (whose lists stand for tuples)."""
        return cls(**{**data, "slips": tuple(data.get("slips", ()))})

    @classmethod
    def not_graded(cls, exercise: str, message: str) -> ExerciseResult:
        """No points for `exercise` because the course's checker failed on it; the run reports it."""
        return cls(exercise, False, 0, message, graded=False)

    @classmethod
    def not_reached(cls, exercise: str, message: str) -> ExerciseResult:
        """A zero for `exercise`: the notebook stopped before its check ran."""
        return cls(exercise, False, 0, message, reached=False)

    @classmethod
    def stopped_in_check(cls, exercise: str, message: str) -> ExerciseResult:
        """A zero for `exercise`: the notebook stopped while its check ran; `message` says why."""
        return cls(exercise, False, 0, message, reached=False, stopped=True)

    @classmethod
    def success(cls, exercise: str, message: str, upstream: str = "") -> ExerciseResult:
        """Full points for `exercise`; with `upstream`, right but failed through that earlier exercise."""
        return cls(exercise, True, POINTS[exercise], message, upstream=upstream)


STATUSES = (
    "graded", "timeout", "out_of_memory", "crashed", "invalid", "missing", "misnamed", "subfolder",
    "grader_error",
)  # fmt: skip
"""What can happen to a notebook: graded, or why not (grader_error is the grader's own failure)."""

STOPPED = ("timeout", "out_of_memory", "crashed")
"""Statuses of a notebook that started and stopped early (exercises checked before keep their result)."""

NO_WORK = ("missing", "misnamed", "subfolder", "invalid", "grader_error")
"""Statuses of a notebook with no work graded (not handed in as the course's notebook, not a notebook,
or the grader's own failure): blank in the gradebook, where a real 0 is 0."""

STATUS_WORDS = {
    "graded": "graded", "timeout": "timed out", "out_of_memory": "out of memory", "crashed": "crashed",
    "invalid": "not a notebook", "missing": "not handed in", "misnamed": "misnamed",
    "subfolder": "in a subfolder", "grader_error": "grader error",
}  # fmt: skip
"""Each status in words, as the gradebook's status column and the feedback say it."""


@dataclass(frozen=True)
class NotebookResult:
    """The outcome of one learner's notebook."""

    stem: str
    """The course notebook, by stem (for example "02_scaling")."""
    status: str
    """One of STATUSES."""
    problem: str
    """Empty when graded; else why the notebook could not be run or graded, in the learner's terms."""
    exercises: tuple[ExerciseResult, ...]
    """One result per exercise of the notebook, in the notebook's order."""
    seconds: float = 0.0
    """Wall time spent on it (not written to the gradebook)."""
    cpu: float = 0.0
    """CPU seconds its kernel spent in cells, where /proc tells (not written to the gradebook)."""
    found_as: str = ""
    """The file graded, relative to the learner's folder, when it was accepted under another name or
    in a subfolder (`--accept-misnamed`); "" otherwise."""

    @property
    def reached(self) -> int:
        """How many exercises were checked to the end (all of them unless the notebook stopped early;
        an exercise whose check was running when it stopped is not one of them)."""
        return (
            sum(1 for e in self.exercises if e.reached)
            if self.status in STOPPED or self.status == "graded"
            else 0
        )

    @property
    def subtotal(self) -> float | None:
        """Points over its exercises; None when no work was graded (`NO_WORK`: blank, not 0)."""
        if self.status in NO_WORK and not any(e.override for e in self.exercises):
            return None
        return sum(e.points for e in self.exercises)

    @property
    def status_text(self) -> str:
        """The status in words: graded, partly graded (timed out), timed out, not handed in, ...

        A notebook that stopped after every exercise's check finished is graded; one that stopped
        after some (or in the last exercise's check), partly graded.
        """
        if self.found_as and self.status == "graded":
            return "graded (found misnamed or in a subfolder)"
        if self.status in STOPPED:
            if self.exercises and self.reached == len(self.exercises):
                return "graded"
            if self.reached:
                return f"partly graded ({STATUS_WORDS[self.status]})"
        return STATUS_WORDS.get(self.status, self.status.replace("_", " "))


@dataclass(frozen=True)
class LearnerResult:
    """Everything graded for one learner."""

    learner: str
    """The learner's folder name."""
    notebooks: tuple[NotebookResult, ...]
    """One result per course notebook in the gradebook, in course order."""
    problems: tuple[str, ...] = ()
    """Problems with the learner's folder that belong to no course notebook (unknown files, empty folder)."""

    def score(self, exercise: str) -> float:
        """Points for one exercise (0 when the learner has no result for it)."""
        return next((e.points for n in self.notebooks for e in n.exercises if e.exercise == exercise), 0)

    def graded_score(self, exercise: str) -> float | None:
        """Points for one exercise; None when its notebook has no work graded (`NO_WORK`) or no result."""
        for notebook in self.notebooks:
            for result in notebook.exercises:
                if result.exercise == exercise:
                    return None if notebook.subtotal is None else result.points
        return None

    @property
    def total(self) -> float:
        """Points over all exercises."""
        return sum(e.points for n in self.notebooks for e in n.exercises)

    @property
    def handed_in(self) -> bool:
        """Whether any of the learner's notebooks has work graded (else the gradebook's total is blank)."""
        return any(n.subtotal is not None for n in self.notebooks)

    @property
    def status_text(self) -> str:
        """The gradebook's status: its notebooks' one status in words, else each notebook's."""
        texts = [n.status_text for n in self.notebooks]
        if len(set(texts)) <= 1:
            return texts[0] if texts else "not handed in"
        return "; ".join(f"{n.stem}: {text}" for n, text in zip(self.notebooks, texts, strict=True))


@dataclass(frozen=True)
class GradeReport:
    """The result of grading a folder of submissions."""

    learners: tuple[LearnerResult, ...]
    """One per learner folder, sorted by name."""
    exercises: tuple[str, ...]
    """The gradebook's exercise columns, in course order."""
    maximum: float
    """The most points a learner could score on these exercises."""
    problems: tuple[str, ...] = ()
    """Problems with SUBMISSIONS itself (stray files at its top level)."""
    gradebook: Path | None = None
    """Where the gradebook was written."""
    feedback: Path | None = None
    """The folder of feedback files."""
    seconds: float = 0.0
    """Wall time of the whole run."""
    failures: tuple[str, ...] = field(default=())
    """Notebooks the grader itself could not grade (its own failure, not the learner's)."""
    points: dict[str, float] = field(default_factory=dict)
    """What each exercise of the gradebook is worth (the points file's, else `points.POINTS`)."""
    written: dict[str, dict[str, float]] = field(default_factory=dict)
    """Hand points of the written answers, per question label ("03.1"), per learner (`--hand-points`)."""
    roster: Roster | None = None
    """The class list given with `--roster` (its learners are in `learners`, handed in or not)."""
    sandboxed: bool = True
    """Whether kernels ran in the file-system sandbox (False where the system has no Landlock)."""
