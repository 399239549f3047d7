"""Test-wide setup: notebooks run with their reduced budgets (see attn_course.budget).

Triton kernels run through Triton's interpreter on the CPU, also on a machine with a GPU, so that
the tests of notebook 08 and its checks run the same everywhere (set before triton is imported).
Kernels started by nbval, nbclient and the grader inherit this process's environment.
`make bench` times the notebooks at their full budgets.
"""

import os

from attn_course.budget import QUICK_VARIABLE

os.environ[QUICK_VARIABLE] = "1"
os.environ["TRITON_INTERPRET"] = "1"
