"""What grading produces: small dataclasses, from one exercise up to the whole run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attn_course.grading.points import POINTS


@dataclass(frozen=True)
class ExerciseResult:
    """The grade of one exercise of one learner."""

    exercise: str
    """The exercise NAME (as in `attn_course.reference.EXERCISES` and `check_NAME`)."""
    passed: bool
    """Whether the grader's own check accepted the learner's implementation."""
    points: int
    """Points awarded: the exercise's points when passed, else 0."""
    message: str
    """The check's pass line or failure message, or why the exercise could not be graded."""
    graded: bool = True
    """False when the course's check itself failed on it (a grader problem, not the learner's)."""

    @classmethod
    def failed(cls, exercise: str, message: str) -> ExerciseResult:
        """A zero for `exercise`, with the reason."""
        return cls(exercise, False, 0, message)

    @classmethod
    def not_graded(cls, exercise: str, message: str) -> ExerciseResult:
        """No points for `exercise` because the course's checker failed on it; the run reports it."""
        return cls(exercise, False, 0, message, graded=False)

    @classmethod
    def success(cls, exercise: str, message: str) -> ExerciseResult:
        """Full points for `exercise`."""
        return cls(exercise, True, POINTS[exercise], message)


STATUSES = ("graded", "timeout", "out_of_memory", "crashed", "invalid", "missing", "grader_error")
"""What can happen to a notebook: graded, or why not (grader_error is the grader's own failure)."""


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


@dataclass(frozen=True)
class LearnerResult:
    """Everything graded for one learner."""

    learner: str
    """The learner's folder name."""
    notebooks: tuple[NotebookResult, ...]
    """One result per course notebook in the gradebook, in course order."""
    problems: tuple[str, ...] = ()
    """Problems with the learner's folder that belong to no course notebook (unknown files, empty folder)."""

    def score(self, exercise: str) -> int:
        """Points for one exercise (0 when the learner has no result for it)."""
        return next((e.points for n in self.notebooks for e in n.exercises if e.exercise == exercise), 0)

    @property
    def total(self) -> int:
        """Points over all exercises."""
        return sum(e.points for n in self.notebooks for e in n.exercises)


@dataclass(frozen=True)
class GradeReport:
    """The result of grading a folder of submissions."""

    learners: tuple[LearnerResult, ...]
    """One per learner folder, sorted by name."""
    exercises: tuple[str, ...]
    """The gradebook's exercise columns, in course order."""
    maximum: int
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
    sandboxed: bool = True
    """Whether kernels ran in the file-system sandbox (False where the system has no Landlock)."""
