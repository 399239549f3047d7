"""Test-wide setup: notebooks run with their reduced budgets (see attn_course.budget).

Kernels started by nbval, nbclient and the grader inherit this process's environment.
`make bench` times the notebooks at their full budgets.
"""

import os

from attn_course.budget import QUICK_VARIABLE

os.environ[QUICK_VARIABLE] = "1"
