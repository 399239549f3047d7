"""The written answers ("Your answer" cells), collected per question across the class.

Each learner's answer cell of question NN.K is found by its metadata (`questions.answer_label`) or,
where an editor dropped the metadata (Colab), by its opening words `**Your answer (NN.K):**`. What
the learner wrote follows the prompt; a prompt left as handed out counts as no answer.
`attn-course grade` writes `answers.html` (per question, every learner's answer side by side, each
linked to their feedback) and `answers.csv` (learner, question, answer, and an empty `points`
column for hand grading). They are never auto-graded.
"""

from __future__ import annotations

import csv
import html
import re
from pathlib import Path
from urllib.parse import quote

import nbformat

from attn_course.grading.discover import Learner
from attn_course.grading.report import FEEDBACK
from attn_course.questions import answer_label, answer_prompt

ANSWERS_HTML = "answers.html"
ANSWERS_CSV = "answers.csv"
_LABEL = re.compile(r"^\d\d\.\d+$")
_PROMPT = re.compile(r"^\s*\*\*Your answer \((?P<label>\d\d\.\d+)\):\*\*")


class HandPointsError(ValueError):
    """A hand-points file that cannot be used; the message names the file and the line."""


def read_hand_points(path: Path) -> dict[str, dict[str, float]]:
    """The points entered in an answers.csv (`learner,question,answer,points`), per question, per
    learner; rows whose points are blank are skipped. HandPointsError names a bad line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise HandPointsError(f"cannot read the hand points {path}: {error}") from error
    rows = list(csv.reader(text.splitlines()))
    if not rows or [c.strip().lower() for c in rows[0][:4]] != ["learner", "question", "answer", "points"]:
        raise HandPointsError(f"{path}: the first line must be learner,question,answer,points (answers.csv)")
    points: dict[str, dict[str, float]] = {}
    for number, row in enumerate(rows[1:], start=2):
        learner, question, _, value = ([c.strip() for c in row] + ["", "", "", ""])[:4]
        if not value:
            continue
        try:
            worth = float(value)
        except ValueError:
            raise HandPointsError(f"{path}, line {number}: {value!r} is not a number of points") from None
        if not learner or not _LABEL.match(question) or not 0 <= worth < float("inf"):
            raise HandPointsError(
                f"{path}, line {number}: expected a learner, a question NN.K and points ≥ 0"
            )
        points.setdefault(question, {})[learner] = int(worth) if worth.is_integer() else worth
    return points


def written_answers(data: bytes) -> dict[str, str]:
    """The learner's answer per question label in the notebook `data` ("" where left as handed out)."""
    try:
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception:  # not a notebook: the grader reports it elsewhere
        return {}
    found: dict[str, str] = {}
    for cell in notebook.cells:
        if cell.get("cell_type") != "markdown":
            continue
        match = _PROMPT.match(cell.source)
        label = answer_label(cell) or (match.group("label") if match else None)
        if label is None or label in found:
            continue
        text = cell.source.strip()
        for prefix in (answer_prompt(label), f"**Your answer ({label}):**"):
            if text.startswith(prefix):
                text = text[len(prefix) :].strip()
                break
        found[label] = text
    return found


def collect_answers(learners: list[Learner]) -> dict[str, list[tuple[str, str]]]:
    """Per question label, in course order, each learner's (name, answer) for the notebooks handed in."""
    by_question: dict[str, list[tuple[str, str]]] = {}
    for learner in sorted(learners, key=lambda learner: learner.name):
        for submission in learner.submissions:
            if submission.problem:
                continue
            for label, text in written_answers(submission.data).items():
                by_question.setdefault(label, []).append((learner.name, text))
    return {
        label: by_question[label]
        for label in sorted(by_question, key=lambda x: tuple(map(int, x.split("."))))
    }


def write_answers(answers: dict[str, list[tuple[str, str]]], folder: Path) -> None:
    """Write `answers.html` and `answers.csv` into `folder`."""
    e = html.escape
    sections = []
    for label, given in answers.items():
        rows = "".join(
            f'<tr><td><a href="{e(quote(f"{FEEDBACK}/{name}.html"))}">{e(name)}</a></td>'
            f"<td>{e(text) if text else '<span class=muted>no answer</span>'}</td></tr>"
            for name, text in given
        )
        answered = sum(1 for _, text in given if text)
        sections.append(
            f"<h2>Question {e(label)}</h2><p>{answered} of {len(given)} answered.</p>"
            f"<table><tr><th>learner</th><th>answer</th></tr>{rows}</table>"
        )
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Written answers</title>'
        "<style>body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 62em; }"
        " td, th { padding: .35em .6em; vertical-align: top; text-align: left; white-space: pre-wrap; }"
        " .muted { color: #666; }</style></head><body>\n<h1>Written answers</h1>"
        "<p>Graded by hand: enter points in answers.csv.</p>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
    (folder / ANSWERS_HTML).write_text(page, encoding="utf-8")
    with (folder / ANSWERS_CSV).open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(["learner", "question", "answer", "points"])
        for label, given in answers.items():
            writer.writerows([name, label, text, ""] for name, text in given)
