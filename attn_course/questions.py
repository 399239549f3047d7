"""Written questions and exercise marks in the notebooks: how to find them (release, grading, tests).

A question is a Markdown cell whose metadata is `{"attn_course": {"question": "NN.K"}}` and whose text
starts with `**Question NN.K · predict.**` (or `· derive.`) and ends with the worked answer hidden in
`<details><summary>Show the answer</summary> … </details>`. Right after it comes the learner's answer
cell, `{"attn_course": {"answer": "NN.K"}}`, whose text is `answer_prompt("NN.K")` in solution and
student notebooks alike. The answers are graded by hand, never by the checks.

The Markdown cell right before each exercise's code cell holds its mark,
`**Exercise · core · about 10 minutes**` (level `warm-up`, `core` or `stretch`).

>>> answer_prompt("01.2")
'**Your answer (01.2):** *write it here before you open the answer.*'
>>> exercise_mark("### Exercise 1\\n\\n**Exercise · warm-up · about 5 minutes**\\n\\nWrite it.")
('warm-up', 5)
"""

from __future__ import annotations

import re
from typing import Any

QUESTION_KEY, ANSWER_KEY = "question", "answer"
"""The keys under a cell's `attn_course` metadata that mark a question and its answer cell."""
LEVELS = ("warm-up", "core", "stretch")
MARK = re.compile(r"\*\*Exercise · (warm-up|core|stretch) · about (\d+) minutes\*\*")
"""An exercise's mark: its level and the minutes it takes."""
QUESTION_START = re.compile(r"\A\*\*Question (?P<label>\d\d\.\d+) · (?P<kind>predict|derive)\.\*\*")
HIDDEN_ANSWER = re.compile(
    r"<details><summary>Show the answer</summary>\n\n(?P<answer>.*?)\n\n</details>\s*\Z", re.S
)
"""The worked answer at the end of a question cell, hidden until the learner opens it."""


def answer_prompt(label: str) -> str:
    """The text of the answer cell of question `label` ("NN.K"), the same in every version."""
    return f"**Your answer ({label}):** *write it here before you open the answer.*"


def _label(cell: Any, key: str) -> str | None:
    meta = cell.get("metadata", {}).get("attn_course")
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def question_label(cell: Any) -> str | None:
    """ "NN.K" if `cell` is a question cell, else None."""
    return _label(cell, QUESTION_KEY) if cell.get("cell_type") == "markdown" else None


def answer_label(cell: Any) -> str | None:
    """ "NN.K" if `cell` is a learner's answer cell, else None."""
    return _label(cell, ANSWER_KEY) if cell.get("cell_type") == "markdown" else None


def answer_cells(notebook: Any) -> list[tuple[int, str]]:
    """(index, "NN.K") of every answer cell of `notebook`, in order."""
    return [(i, label) for i, cell in enumerate(notebook.cells) if (label := answer_label(cell))]


def exercise_mark(source: str) -> tuple[str, int] | None:
    """(level, minutes) of the exercise mark in a Markdown cell's source, or None."""
    found = MARK.search(source)
    return (found[1], int(found[2])) if found else None
