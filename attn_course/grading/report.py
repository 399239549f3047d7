"""What the instructor gets: gradebook.csv, one feedback file per learner, a progress bar and a summary."""

from __future__ import annotations

import csv
import html
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import TextIO

from attn_course.grading.results import STOPPED, GradeReport, LearnerResult, NotebookResult

GRADEBOOK = "gradebook.csv"
LMS = "lms.csv"
FEEDBACK = "feedback"


def number(points: float | None) -> str:
    """Points as the gradebook writes them: "" for no work graded, "1", "0.5"."""
    return "" if points is None else f"{points:g}"


WRITTEN_POINTS = 1
"""What each written answer is worth in the gradebook's max (as nbgrader's export makes them)."""


def hand_points(report: GradeReport, learner: str) -> float | None:
    """The learner's hand points over the written answers (None when none were entered)."""
    given = [by[learner] for by in report.written.values() if learner in by]
    return sum(given) if given else None


def _total(report: GradeReport, learner: LearnerResult) -> str:
    """The gradebook's total: the autograded points and the hand points; blank when there is neither."""
    hand = hand_points(report, learner.learner)
    if not learner.handed_in and hand is None:
        return ""
    return number((learner.total if learner.handed_in else 0) + (hand or 0))


def gradebook_rows(report: GradeReport) -> list[list[str]]:
    """The gradebook as rows: a header, then one row per learner: learner, exercises…, each notebook's
    points and status, total, max, status (graded, partly graded (timed out), timed out, not handed
    in, not a notebook, ...). A score is blank where no work was graded (not handed in, misnamed, in a
    subfolder, not a notebook, the grader's failure), 0 for a real 0."""
    stems = _stems(report)
    header = ["learner", *report.exercises]
    for stem in stems:
        header += [f"{stem} points", f"{stem} status"]
    questions = sorted(report.written, key=lambda q: tuple(int(x) for x in q.split(".")))
    header += [f"written {q}" for q in questions]
    rows = [[*header, "total", "max", "status"]]
    maximum = number(report.maximum + WRITTEN_POINTS * len(questions))
    for learner in report.learners:
        scores = [number(learner.graded_score(name)) for name in report.exercises]
        for notebook in learner.notebooks:
            scores += [number(notebook.subtotal), notebook.status_text]
        scores += [number(report.written[q].get(learner.learner)) for q in questions]
        rows.append([learner.learner, *scores, _total(report, learner), maximum, learner.status_text])
    return rows


def _stems(report: GradeReport) -> list[str]:
    """The gradebook's notebooks, in course order."""
    return [n.stem for n in report.learners[0].notebooks] if report.learners else []


def write_gradebook(report: GradeReport, path: Path) -> None:
    """Write the gradebook as UTF-8 CSV (no timestamps: the same submissions give the same bytes)."""
    with path.open("w", encoding="utf-8", newline="") as file:
        csv.writer(file, lineterminator="\n").writerows(gradebook_rows(report))


LMS_TOTAL = "attn-course total"
"""The LMS export's column of each learner's total."""


def lms_rows(report: GradeReport) -> list[list[str]]:
    """The gradebook in the form Canvas's and Moodle's CSV grade import read: the roster's own columns
    (for Canvas `Student`, `ID`, `SIS User ID`, `SIS Login ID`, `Section`, which it matches learners
    by; for Moodle the column picked as "Map from", such as `email`), else `Student` (the folder
    name); then one column per notebook, headed by its stem (an assignment of that name), and
    `attn-course total`. Blank where nothing was handed in, so an import leaves that grade empty.
    A folder not on a roster with columns is left out (the LMS could not match it)."""
    roster = report.roster
    columns = list(roster.columns) if roster is not None and roster.columns else ["Student"]
    stems = _stems(report)
    written = ["written answers"] if report.written else []
    rows = [[*columns, *stems, *written, LMS_TOTAL]]
    for learner in report.learners:
        if roster is not None and roster.columns:
            if learner.learner not in roster.learners:
                continue  # no identity the LMS could match (the summary names the folder)
            identity = list(roster.identity(learner.learner))
        else:
            identity = [learner.learner]
        subtotals = [number(n.subtotal) for n in learner.notebooks]
        if written:
            subtotals.append(number(hand_points(report, learner.learner)))
        rows.append([*identity, *subtotals, _total(report, learner)])
    return rows


def write_lms(report: GradeReport, path: Path) -> None:
    """Write the LMS export (`lms_rows`) as UTF-8 CSV with CRLF line ends, as spreadsheets write it."""
    with path.open("w", encoding="utf-8", newline="") as file:
        csv.writer(file, lineterminator="\r\n").writerows(lms_rows(report))


def _indent(text: str) -> str:
    return text.strip().replace("\n", "\n  ")


def _notebook_section(result: NotebookResult) -> list[str]:
    scored = sum(e.points for e in result.exercises)
    lines = [f"## {result.stem}.ipynb: {scored:g} point(s)", "", f"Status: {result.status_text}.", ""]
    if result.found_as:
        lines += [
            f"Graded from `{result.found_as}`, accepted by your instructor: hand it in as "
            f"`{result.stem}.ipynb` at the top of your folder next time.",
            "",
        ]
    overridden = [
        f"- `{e.exercise}` {e.points:g} point(s), set by your instructor: {_indent(e.override)}"
        for e in result.exercises
        if e.override
    ]
    stopped = result.status in STOPPED and (result.reached or any(e.stopped for e in result.exercises))
    if result.problem and not stopped:
        lines += [f"**Not graded**: {_indent(result.problem)}.", ""]
        rest = [f"- `{e.exercise}` **not graded**: 0 points" for e in result.exercises if not e.override]
        return lines + overridden + rest + [""]
    if result.problem:
        lines += [f"**Stopped**: {_indent(result.problem)}. What was checked before keeps its points.", ""]
    for exercise in result.exercises:
        if exercise.override:
            lines.append(overridden.pop(0))
            continue
        if exercise.stopped:
            lines.append(
                f"- `{exercise.exercise}` **stopped while checked**: 0 points: {_indent(exercise.message)}"
            )
            continue
        if not exercise.reached:
            lines.append(f"- `{exercise.exercise}` **not reached**: 0 points")
            continue
        if exercise.upstream:
            state = f"right; failed through your `{exercise.upstream}`"
            lines.append(f"- `{exercise.exercise}` {state}: {_indent(exercise.message)}")
            continue
        state = "passed" if exercise.passed else "**not passed**" if exercise.graded else "**not graded**"
        lines.append(f"- `{exercise.exercise}` {state}: {_indent(exercise.message)}")
    return [*lines, ""]


def feedback_text(learner: LearnerResult, maximum: float, written: dict[str, float] | None = None) -> str:
    """One learner's feedback in Markdown: per notebook, each exercise passed or the check's message;
    with `written` (hand points per question), a line for the written answers."""
    lines = [f"# Feedback for {learner.learner}", "", f"Score: {learner.total:g} / {maximum:g}", ""]
    if written:
        given = ", ".join(f"{q}: {p:g}" for q, p in sorted(written.items()))
        lines += [f"Written answers, graded by hand: {sum(written.values()):g} point(s) ({given}).", ""]
    for result in learner.notebooks:
        lines += _notebook_section(result)
    if learner.problems:
        lines += ["## Other problems with your folder", ""]
        lines += [f"- {_indent(problem)}" for problem in learner.problems] + [""]
    return "\n".join(lines)


_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|(?<![\w*])\*([^*\n]+)\*(?![\w*])")


def _inline(text: str) -> str:
    """Escaped text with the feedback's Markdown spans (`code`, **bold**, *italic*) as HTML."""
    out, at = [], 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[at : match.start()]))
        code, bold, italic = match.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{_inline(bold)}</strong>")
        else:
            out.append(f"<em>{html.escape(italic)}</em>")
        at = match.end()
    return "".join(out) + html.escape(text[at:])


def feedback_html(markdown: str, title: str) -> str:
    """The feedback's Markdown (`feedback_text`: headings, paragraphs, one level of list items with
    indented continuation lines) as one self-contained HTML page."""
    body: list[str] = []
    items: list[str] = []

    def close_list() -> None:
        if items:
            body.append("<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>")
            items.clear()

    for line in markdown.splitlines():
        if line.startswith("  ") and items:  # a list item's continuation
            items[-1] += "<br>" + _inline(line.strip())
        elif line.startswith("- "):
            items.append(_inline(line[2:]))
        else:
            close_list()
            if line.startswith("## "):
                body.append(f"<h2>{_inline(line[3:])}</h2>")
            elif line.startswith("# "):
                body.append(f"<h1>{_inline(line[2:])}</h1>")
            elif line.strip():
                body.append(f"<p>{_inline(line)}</p>")
    close_list()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>body {{ font: 15px/1.5 system-ui, sans-serif; "
        "margin: 2em auto; max-width: 52em; padding: 0 1em; } li { margin: .4em 0; } "
        "code { background: #f1f1f4; padding: 0 .2em; }</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write_feedback(report: GradeReport, folder: Path) -> None:
    """Replace `folder` with one `<learner>.md` per learner, and the same as a self-contained
    `<learner>.html` (what the class report links to: a browser shows Markdown as raw text)."""
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for learner in report.learners:
        written = {q: by[learner.learner] for q, by in report.written.items() if learner.learner in by}
        text = feedback_text(learner, report.maximum, written)
        (folder / f"{learner.learner}.md").write_text(text, encoding="utf-8")
        page = feedback_html(text, f"Feedback for {learner.learner}")
        (folder / f"{learner.learner}.html").write_text(page, encoding="utf-8")


def problems(report: GradeReport) -> list[str]:
    """Every notebook- or folder-level problem, as 'learner: problem' lines."""
    found = list(report.problems)
    for learner in report.learners:
        found += [f"{learner.learner}: {p}" for p in learner.problems]
        found += [
            f"{learner.learner}: {n.stem}.ipynb {n.status_text}: {n.problem}"
            for n in learner.notebooks
            if n.problem and n.status != "missing"
        ]
    return found


def summary(report: GradeReport, most_failed: int = 5) -> str:
    """The table printed at the end: learners, mean score, the exercises most often failed, problems."""
    count = len(report.learners)
    mean = sum(learner.total for learner in report.learners) / count if count else 0.0
    lines = [
        f"Graded {count} learner(s) in {report.seconds:.1f} s.",
        f"Mean score: {mean:.2f} / {report.maximum:g}",
    ]
    failed = Counter(
        name for learner in report.learners for name in report.exercises if learner.graded_score(name) == 0
    )  # those who handed the notebook in and scored 0 on it (no work handed in is counted elsewhere)
    if failed:
        width = max(len("exercise"), *(len(name) for name in failed))
        lines += ["", f"{'exercise':<{width}}  failed by", f"{'-' * width}  ---------"]
        ranked = sorted(failed.items(), key=lambda item: (-item[1], report.exercises.index(item[0])))
        handed = Counter(
            name
            for learner in report.learners
            for name in report.exercises
            if learner.graded_score(name) is not None
        )
        lines += [f"{name:<{width}}  {n} / {handed[name]}" for name, n in ranked[:most_failed]]
    found = problems(report)
    if found:
        lines += ["", f"Problems ({len(found)}):"] + [f"  - {_indent(p)}" for p in found]
    if report.failures:
        lines += ["", "The grader itself failed on:"] + [f"  - {f}" for f in report.failures]
    if not report.sandboxed:
        lines += ["", "Note: this system has no Landlock, so notebooks ran without the file-system sandbox: "
                  "a notebook could read or change files outside its folder by absolute path."]  # fmt: skip
    if report.gradebook is not None:
        lines += ["", f"Gradebook: {report.gradebook}", f"Feedback:  {report.feedback}/",
                  f"Report:    {report.gradebook.with_name('report.html')}"]  # fmt: skip
    return "\n".join(lines)


class ProgressBar:
    """A one-line text progress bar: `[#####.....] 3/10 notebooks`."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self._draw()

    def _draw(self) -> None:
        filled = self.width * self.done // self.total if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if self.done >= self.total else ""
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} notebooks{end}")
        self.stream.flush()

    def advance(self) -> None:
        """One more notebook done."""
        self.done += 1
        self._draw()
