"""How much work a notebook's demonstrations do: the full run a learner sees, or a quick run.

The test suite and the grader set `ATTN_COURSE_QUICK=1`: they need every cell to run and every
check to be called, not a model trained to its best. Notebooks read it through `quick_run()`, so
the notebook that is tested is the notebook that is shipped, only with smaller budgets.

>>> quick_run({"ATTN_COURSE_QUICK": "1"}), quick_run({})
(True, False)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

QUICK_VARIABLE = "ATTN_COURSE_QUICK"
"""Environment variable that, set to 1, asks notebooks for their reduced budgets."""


def quick_run(environ: Mapping[str, str] | None = None) -> bool:
    """Whether notebooks should use their reduced budgets (`ATTN_COURSE_QUICK=1`)."""
    value = (os.environ if environ is None else environ).get(QUICK_VARIABLE, "")
    return value.strip().lower() in ("1", "true", "yes")
