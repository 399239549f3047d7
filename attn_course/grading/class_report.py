"""The class report: what the whole class got right and wrong, by exercise and by named mistake.

`attn-course grade` writes it beside the gradebook, as `report.json` (for scripts) and
`report.html` (one self-contained page: styles and the score histogram inline, nothing fetched):
per exercise the share of the class that passed it and its most common mistakes, named as the
checks name them ("11 of 30: Your attention_backward forgets the 1/√d scale in dQ"), the exercises
nobody passed, a histogram of the scores, and each learner linked to their feedback file.

Mistakes are grouped by the first sentence of the check's message, with the arguments of the call
it describes (in parentheses) and the numbers left out, so that the same slip met on different
cases counts once per learner.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from attn_course.grading.report import FEEDBACK
from attn_course.grading.results import GradeReport

REPORT_HTML = "report.html"
REPORT_JSON = "report.json"
MISTAKES_SHOWN = 5
"""Named mistakes listed per exercise, most common first."""


def mistake(message: str) -> str:
    """The idea of a failure message: its first sentence, without the call's arguments.

    >>> mistake("Your attention_backward(q (2, 3, 6, 8), k (2, 6, 8)) forgets the 1/√d scale in dQ: ...")
    'Your attention_backward forgets the 1/√d scale in dQ'
    >>> mistake("not reached: the notebook timed out after 15 s of CPU time")
    'not reached'
    """
    line = message.strip().splitlines()[0] if message.strip() else "no message"
    previous = None
    while previous != line:  # nested parentheses, innermost first
        previous, line = line, re.sub(r"\s*\([^()]*\)", "", line)
    line = re.split(r"(?<=[^.])\.\s|:\s|;\s", line, maxsplit=1)[0]
    return " ".join(line.rstrip(".:; ").split()) or "no message"


def _key(idea: str) -> str:
    return re.sub(r"\d+(?:\.\d+)?(?:e-?\d+)?", "N", idea.lower())


def report_data(report: GradeReport) -> dict[str, Any]:
    """The class report as JSON-able data (what report.json holds)."""
    learners = report.learners
    count = len(learners)
    exercises = []
    for name in report.exercises:
        stem = next(
            (n.stem for r in learners for n in r.notebooks if any(e.exercise == name for e in n.exercises)),
            "",
        )
        results = [
            (r.learner, e) for r in learners for n in r.notebooks for e in n.exercises if e.exercise == name
        ]
        passed = sum(1 for _, e in results if e.passed)
        groups: dict[str, list[str]] = {}
        shown: dict[str, Counter[str]] = {}
        for learner, e in results:
            if e.passed:
                continue
            idea = mistake(e.message)
            groups.setdefault(_key(idea), []).append(learner)
            shown.setdefault(_key(idea), Counter())[idea] += 1
        ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
        exercises.append(
            {
                "exercise": name,
                "notebook": stem,
                "passed": passed,
                "learners": count,
                "share": passed / count if count else 0.0,
                "mistakes": [
                    {
                        "mistake": shown[key].most_common(1)[0][0],
                        "count": len(names),
                        "learners": sorted(names),
                    }
                    for key, names in ranked
                ],
            }
        )
    totals = [r.total for r in learners]
    return {
        "learners": count,
        "maximum": report.maximum,
        "mean": sum(totals) / count if count else 0.0,
        "exercises": exercises,
        "nobody_passed": [e["exercise"] for e in exercises if count and not e["passed"]],
        "histogram": [
            {"score": s, "learners": sum(1 for t in totals if math.floor(t) == s)}
            for s in range(math.ceil(report.maximum) + 1)
        ],
        "class": [
            {
                "learner": r.learner,
                "total": r.total,
                "status": r.status_text,
                "feedback": f"{FEEDBACK}/{r.learner}.md",
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
    png = base64.b64encode(histogram_png(data)).decode("ascii")
    rows = []
    for ex in data["exercises"]:
        width = round(100 * ex["share"])
        mistakes = "".join(
            f"<li>{m['count']} of {ex['learners']}: {e(m['mistake'])}</li>"
            for m in ex["mistakes"][:MISTAKES_SHOWN]
        )
        more = len(ex["mistakes"]) - MISTAKES_SHOWN
        if more > 0:
            mistakes += f'<li class="muted">and {more} other mistake(s): see report.json</li>'
        passed_class = ' class="none"' if ex["exercise"] in data["nobody_passed"] else ""
        rows.append(
            f'<tr><td><code>{e(ex["exercise"])}</code><br><span class="muted">{e(ex["notebook"])}</span></td>'
            f'<td{passed_class}><span class="bar"><span style="width:{width}%"></span></span>'
            f"{ex['passed']} of {ex['learners']}</td><td><ul>{mistakes}</ul></td></tr>"
        )
    nobody = (
        '<p class="none">Nobody passed: '
        + ", ".join(f"<code>{e(n)}</code>" for n in data["nobody_passed"])
        + "</p>"
        if data["nobody_passed"]
        else "<p>Every exercise was passed by someone.</p>"
    )
    learners = "".join(
        f'<tr><td><a href="{e(quote(c["feedback"]))}">{e(c["learner"])}</a></td>'
        f"<td>{c['total']} / {data['maximum']}</td><td>{e(c['status'])}</td></tr>"
        for c in data["class"]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Class report</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>Class report</h1><p>{data['learners']} learner(s), mean score {data['mean']:.2f} / "
        f"{data['maximum']}.</p>\n<h2>Exercises</h2>{nobody}\n"
        "<table><tr><th>exercise</th><th>passed</th><th>most common mistakes</th></tr>"
        + "".join(rows)
        + "</table>\n<h2>Scores</h2>"
        f'<img alt="histogram of the scores" src="data:image/png;base64,{png}">\n'
        "<h2>Learners</h2><table><tr><th>learner</th><th>score</th><th>status</th></tr>"
        + learners
        + "</table>\n</body></html>\n"
    )


def write_class_report(report: GradeReport, folder: Path) -> tuple[Path, Path]:
    """Write `folder/report.json` and `folder/report.html`; their paths."""
    data = report_data(report)
    as_json, as_html = folder / REPORT_JSON, folder / REPORT_HTML
    as_json.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    as_html.write_text(report_html(data), encoding="utf-8")
    return as_json, as_html
