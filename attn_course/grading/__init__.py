"""Instructor grading: run submitted notebooks in fresh kernels and grade them with the course's checks.

`attn-course grade SUBMISSIONS --out DIR` (or `attn_course.grading.grader.grade`) writes a
gradebook and one feedback file per learner. One module per job: `points` (what each exercise is
worth), `discover` (which learners and notebooks there are), `execute` (one notebook in a fresh,
limited kernel), `kernel_factory` (kernels forked from one that imported torch once),
`kernel_checks` (the grader's side inside that kernel), `results` (what came out),
`report` (gradebook, feedback, summary), `tasks` (one notebook as a task, and the local runner),
`grader` (all of it, in parallel, here or on Dask).
Elsewhere: `selfcheck` (a learner's `attn-course check`), `dask_runner` (grading on a Dask
cluster), `nbgrader_export` and `gradescope` (the course on those platforms; `nbgrader_autograde`
makes nbgrader's autograde grade as `attn-course grade` does). The grading
benchmarks are contributors' tools outside the package: tools/grading_bench.py and grading_bench_dask.py.

This package imports nothing heavy on purpose: `kernel_checks` is imported inside learners' kernels.
"""
