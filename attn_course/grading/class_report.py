"""The class report: what the whole class handed in, got right and got wrong, by mistake.

`attn-course grade` writes it beside the gradebook, as `report.json` (for scripts) and
`report.html` (one self-contained page: styles and the score histogram inline, nothing fetched):

- per notebook, the paperwork in its own row: handed in, not handed in, misnamed or in a
  subfolder, not a notebook, timed out, out of memory or crashed, the grader's own failure;
- per exercise, the share of those who handed its notebook in that passed it, and how many left it
  unattempted ("not implemented yet") or were right but failed through an earlier exercise;
- each mistake grouped by its idea across exercises (`idea`): a known mistake the check named (the
  finding "known-mistake", by the words of the course's list of mistakes, which read the same in
  every exercise), else by its finding and its message named whole (numbers kept), else by the
  message alone; with its count, the exercises it was met in, every wording the checks gave it, and
  the learners who made it, each linked to their feedback;
- the exercises nobody passed, a histogram of the scores, each learner linked to their feedback,
  with the wall and CPU time each of their notebooks took (so report.json and report.html differ
  from run to run; the gradebook and the feedback do not).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

from attn_course.grading.report import FEEDBACK
from attn_course.grading.results import NO_WORK, ExerciseResult, GradeReport, NotebookResult

REPORT_HTML = "report.html"
REPORT_JSON = "report.json"

PAPERWORK = (
    ("handed in", ("graded", "timeout", "out_of_memory", "crashed")),
    ("not handed in", ("missing",)),
    ("misnamed or in a subfolder", ("misnamed", "subfolder")),
    ("not a notebook", ("invalid",)),
    ("timed out", ("timeout",)),
    ("out of memory or crashed", ("out_of_memory", "crashed")),
    ("grader error", ("grader_error",)),
)
"""The report's administrative columns, each with the notebook statuses it counts."""


def mistake(message: str) -> str:
    r"""A failure message named whole: every line of it, its whitespace made single spaces.

    >>> mistake("Your attention_backward forgets the 1/√d scale in dK:\n  dK = dSᵀ Q / √d.")
    'Your attention_backward forgets the 1/√d scale in dK: dK = dSᵀ Q / √d.'
    """
    return " ".join(message.split()) or "no message"


def idea(exercise: ExerciseResult) -> tuple[str, str]:
    """(key, words) of a mistake's idea: the report groups mistakes by key and names a group by words.

    A known mistake (the check's finding "known-mistake") is its slips, the course's own words for
    it, whatever the exercise and the call it was met on; any other finding ("property", "mutant",
    ... name kinds of evidence, not ideas) keeps its whole message, as does a failure with no finding.

    >>> idea(ExerciseResult.failed("attention", "Your attention(3, 5) is aligned top-left. (Called as ...)",
    ...      "known-mistake", ("is aligned top-left",)))
    ('known-mistake: is aligned top-left', 'is aligned top-left')
    >>> idea(ExerciseResult.failed("attention", "Rows do not sum to 1.", "property"))
    ('property: Rows do not sum to 1.', 'Rows do not sum to 1.')
    """
    if exercise.finding == "known-mistake" and exercise.slips:
        words = " Or: ".join(mistake(slip) for slip in exercise.slips)
        return f"{exercise.finding}: {words}", words
    words = mistake(exercise.message)
    return (f"{exercise.finding}: {words}" if exercise.finding else words), words


def not_attempted(exercise: ExerciseResult) -> bool:
    """Whether the learner left the exercise as handed out (its check says it is not implemented yet)."""
    return exercise.message.startswith(f"`{exercise.exercise}` is not implemented yet")


def is_mistake(notebook: NotebookResult, exercise: ExerciseResult) -> bool:
    """Whether a result is a mistake of the learner's (not paperwork: nothing handed in, a stop, the
    grader's failure, an exercise left unattempted)."""
    return (
        notebook.status not in NO_WORK
        and not exercise.passed
        and exercise.reached
        and exercise.graded
        and not not_attempted(exercise)
    )


def _feedback(learner: str) -> str:
    return f"{FEEDBACK}/{learner}.html"


def report_data(report: GradeReport) -> dict[str, Any]:
    """The class report as JSON-able data (what report.json holds)."""
    learners = report.learners
    count = len(learners)
    stems = [n.stem for n in learners[0].notebooks] if learners else []
    notebooks = []
    for stem in stems:
        statuses = [n.status for r in learners for n in r.notebooks if n.stem == stem]
        row: dict[str, Any] = {"notebook": stem, "learners": count}
        row.update({label: sum(s in kinds for s in statuses) for label, kinds in PAPERWORK})
        notebooks.append(row)
    exercises = []
    groups: dict[str, dict[str, Any]] = {}
    for name in report.exercises:
        results = [
            (r.learner, n, e)
            for r in learners
            for n in r.notebooks
            for e in n.exercises
            if e.exercise == name
        ]
        handed_in = [(learner, n, e) for learner, n, e in results if n.status not in NO_WORK]
        passed = sum(1 for _, _, e in handed_in if e.passed)
        exercises.append(
            {
                "exercise": name,
                "notebook": results[0][1].stem if results else "",
                "handed_in": len(handed_in),
                "passed": passed,
                "share": passed / len(handed_in) if handed_in else 0.0,
                "not_attempted": sum(1 for _, _, e in handed_in if not_attempted(e)),
                "through_earlier": sum(1 for _, _, e in handed_in if e.upstream),
            }
        )
        for learner, notebook, exercise in handed_in:
            if is_mistake(notebook, exercise):
                key, words = idea(exercise)
                group = groups.setdefault(
                    key,
                    {"mistake": words, "finding": exercise.finding, "exercises": [], "made_by": []},
                )
                if name not in group["exercises"]:
                    group["exercises"].append(name)
                group["made_by"].append(
                    {
                        "learner": learner,
                        "exercise": name,
                        "feedback": _feedback(learner),
                        "message": mistake(exercise.message),
                    }
                )
    mistakes = sorted(groups.values(), key=lambda g: (-len(g["made_by"]), g["mistake"]))
    for group in mistakes:
        group["count"] = len(group["made_by"])
        group["learners"] = sorted({m["learner"] for m in group["made_by"]})
        group["messages"] = sorted({m["message"] for m in group["made_by"]})
    totals = [r.total for r in learners]
    handed = [r.total for r in learners if r.handed_in]
    return {
        "learners": count,
        "handed_in": len(handed),
        "maximum": report.maximum,
        "mean": sum(handed) / len(handed) if handed else 0.0,
        "notebooks": notebooks,
        "exercises": exercises,
        "mistakes": mistakes,
        "nobody_passed": [e["exercise"] for e in exercises if e["handed_in"] and not e["passed"]],
        "histogram": [
            {"score": s, "learners": sum(1 for t in totals if math.floor(t) == s)}
            for s in range(math.ceil(report.maximum) + 1)
        ],
        "class": [
            {
                "learner": r.learner,
                "total": r.total,
                "handed_in": r.handed_in,
                "status": r.status_text,
                "feedback": _feedback(r.learner),
                "notebooks": [
                    {
                        "notebook": n.stem,
                        "status": n.status_text,
                        "points": n.subtotal,
                        "seconds": round(n.seconds, 1),
                        "cpu": round(n.cpu, 1),
                    }
                    for n in r.notebooks
                ],
            }
            for r in learners
        ],
    }


def histogram_png(data: dict[str, Any]) -> bytes:
    """The score histogram as PNG bytes (the same bytes for the same scores)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(6.4, 2.8), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    scores = [bar["score"] for bar in data["histogram"]]
    ax.bar(scores, [bar["learners"] for bar in data["histogram"]], color="#3b6ea8", width=0.8)
    ax.set_xlabel(f"score (out of {data['maximum']})")
    ax.set_ylabel("learners")
    ax.set_xticks(scores)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.spines[["top", "right"]].set_visible(False)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 62em; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; }
table { border-collapse: collapse; width: 100%; } td, th { padding: .35em .6em; vertical-align: top; }
th { text-align: left; border-bottom: 2px solid #ccd; } tr + tr td { border-top: 1px solid #e4e4ea; }
.bar { background: #e6e9f2; width: 8em; height: .8em; display: inline-block; margin-right: .4em; }
.bar span { background: #3b6ea8; height: 100%; display: block; }
.none { color: #a31515; font-weight: 600; } ul { margin: 0; padding-left: 1.1em; } .muted { color: #666; }
"""


def report_html(data: dict[str, Any]) -> str:
    """The class report as one self-contained HTML page."""
    e = html.escape

    def link(learner: str, feedback: str) -> str:
        return f'<a href="{e(quote(feedback))}">{e(learner)}</a>'

    png = base64.b64encode(histogram_png(data)).decode("ascii")
    labels = [label for label, _ in PAPERWORK]
    paperwork = "".join(
        f"<tr><td>{e(n['notebook'])}</td>" + "".join(f"<td>{n[label]}</td>" for label in labels) + "</tr>"
        for n in data["notebooks"]
    )
    rows = []
    for ex in data["exercises"]:
        width = round(100 * ex["share"])
        passed_class = ' class="none"' if ex["exercise"] in data["nobody_passed"] else ""
        notes = []
        if ex["not_attempted"]:
            notes.append(f"{ex['not_attempted']} not attempted")
        if ex["through_earlier"]:
            notes.append(
                f"{ex['through_earlier']} right but failed through an earlier exercise (points kept)"
            )
        rows.append(
            f'<tr><td><code>{e(ex["exercise"])}</code><br><span class="muted">{e(ex["notebook"])}</span></td>'
            f'<td{passed_class}><span class="bar"><span style="width:{width}%"></span></span>'
            f"{ex['passed']} of {ex['handed_in']} who handed it in</td>"
            f'<td class="muted">{e("; ".join(notes))}</td></tr>'
        )

    def wordings(group: dict[str, Any]) -> str:
        if group["messages"] == [group["mistake"]]:
            return ""
        items = "".join(f"<li>{e(message)}</li>" for message in group["messages"])
        summary = f"<summary>as the checks said it ({len(group['messages'])})</summary>"
        return f"<details>{summary}<ul>{items}</ul></details>"

    mistakes = "".join(
        f"<tr><td>{m['count']}</td><td>{e(m['mistake'])}"
        + (f' <span class="muted">({e(m["finding"])})</span>' if m["finding"] else "")
        + wordings(m)
        + f"</td><td>{', '.join(f'<code>{e(x)}</code>' for x in m['exercises'])}</td><td>"
        + ", ".join(
            link(made["learner"], made["feedback"])
            + (f' <span class="muted">({e(made["exercise"])})</span>' if len(m["exercises"]) > 1 else "")
            for made in m["made_by"]
        )
        + "</td></tr>"
        for m in data["mistakes"]
    )
    nobody = (
        '<p class="none">Nobody passed: '
        + ", ".join(f"<code>{e(n)}</code>" for n in data["nobody_passed"])
        + "</p>"
        if data["nobody_passed"]
        else "<p>Every exercise was passed by someone who handed it in.</p>"
    )
    learners = "".join(
        f"<tr><td>{link(c['learner'], c['feedback'])}</td>"
        f"<td>{c['total']:g} / {data['maximum']:g}</td><td>{e(c['status'])}</td><td>"
        + "<br>".join(
            f"{e(n['notebook'])}: {n['seconds']:g} s, {n['cpu']:g} s CPU"
            for n in c["notebooks"]
            if n["seconds"] or n["cpu"]
        )
        + "</td></tr>"
        for c in data["class"]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Class report</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>Class report</h1><p>{data['learners']} learner(s), {data['handed_in']} of whom handed "
        f"something in; their mean score {data['mean']:.2f} / {data['maximum']:g}.</p>\n"
        "<h2>Notebooks handed in</h2><table><tr><th>notebook</th>"
        + "".join(f"<th>{e(label)}</th>" for label in labels)
        + "</tr>"
        + paperwork
        + f"</table>\n<h2>Exercises</h2>{nobody}\n"
        "<table><tr><th>exercise</th><th>passed</th><th>besides</th></tr>"
        + "".join(rows)
        + "</table>\n<h2>Mistakes</h2>"
        + (
            "<table><tr><th>count</th><th>mistake, by its idea (the check's finding)</th><th>in</th>"
            "<th>made by</th></tr>" + mistakes + "</table>"
            if mistakes
            else "<p>No mistakes among the work handed in.</p>"
        )
        + "\n<h2>Scores</h2>"
        f'<img alt="histogram of the scores" src="data:image/png;base64,{png}">\n'
        "<h2>Learners</h2><table><tr><th>learner</th><th>score</th><th>status</th>"
        "<th>time per notebook (wall, CPU)</th></tr>" + learners + "</table>\n</body></html>\n"
    )


def write_class_report(report: GradeReport, folder: Path) -> tuple[Path, Path]:
    """Write `folder/report.json` and `folder/report.html`; their paths."""
    data = report_data(report)
    as_json, as_html = folder / REPORT_JSON, folder / REPORT_HTML
    as_json.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    as_html.write_text(report_html(data), encoding="utf-8")
    return as_json, as_html
