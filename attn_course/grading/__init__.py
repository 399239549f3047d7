"""Instructor grading: run submitted notebooks in fresh kernels and grade them with the course's checks.

`attn-course grade SUBMISSIONS --out DIR` (or `attn_course.grading.grader.grade`) writes a
gradebook and one feedback file per learner. One module per job: `points` (what each exercise is
worth), `discover` (which learners and notebooks there are), `execute` (one notebook in a fresh,
limited kernel), `inkernel` (the grader's side inside that kernel), `results` (what came out),
`report` (gradebook, feedback, summary), `grader` (all of it, in parallel), `bench` (how fast).
Elsewhere: `selfcheck` (a learner's `attn-course check`), `dask_runner` and `bench_dask` (grading
on a Dask cluster), `nbgrader_export` and `gradescope` (the course on those platforms).

This package imports nothing heavy on purpose: `inkernel` is imported inside learners' kernels.
"""
