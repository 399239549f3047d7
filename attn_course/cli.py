"""The `attn-course` command: thin argument parsing over plain functions."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from attn_course import __version__
from attn_course.tooling.release import ReleaseError, WorkInTheWay, release

_BENCH_HELP = (
    "time naive, tiled and torch's fused attention (each SDPA backend) against T; print a table and "
    "write it as JSON, CSV and plots"
)
_WORKSPACE_HELP = (
    "copy the student notebooks you do not have yet into your working copy (my-work/); "
    "never overwrites a notebook there"
)
_GRADE_HELP = "grade a folder of submissions (one folder per learner) into a gradebook and feedback"
_CHECK_HELP = (
    "check notebooks before handing them in: run each as the grader will, print each exercise's result"
)
_EXPORT_HELP = "export the course for another grading platform (nbgrader, Gradescope)"


def _release(args: argparse.Namespace) -> int:
    try:
        results = release(args.solutions, args.notebooks, check=args.check, force=args.force)
    except WorkInTheWay as error:
        print(
            f"attn-course release: {error}\n"
            f"To keep that work, copy those notebooks out of {args.notebooks}/ first (learners work in "
            "my-work/, which `make lab` sets up; `attn-course workspace` makes it). To discard the work "
            "and write the release anyway: attn-course release --force",
            file=sys.stderr,
        )
        return 2
    except (ReleaseError, FileNotFoundError) as error:
        print(f"attn-course release: {error}", file=sys.stderr)
        return 2
    for result in results:
        if result.orphan == "own":
            print(f"{result.target}: not written by the release (no {result.source}): left alone")
            continue
        if result.orphan == "generated":
            done = "removed" if args.force else "left alone (--force removes it)"
            done = "out of date" if args.check else done
            print(f"{result.target}: written by an earlier release, {result.source} is gone: {done}")
            continue
        state = ("out of date" if args.check else "written") if result.changed else "up to date"
        print(f"{result.target}: {result.exercises} exercise region(s), {state}")
        if result.source_changed:
            print(f"{result.source}: header or outputs {'out of date' if args.check else 'rewritten'}")
    stale = [r for r in results if r.changed or r.source_changed]
    if args.check and stale:
        print("Notebooks are not what `attn-course release` writes: run it and commit.", file=sys.stderr)
        return 1
    return 0


def _workspace(args: argparse.Namespace) -> int:
    from attn_course.tooling.workspace import WorkspaceError, fresh_copy, set_up

    try:
        if args.fresh:
            for name in args.fresh:
                copied = fresh_copy(name, args.notebooks, args.into)
                kept = f" (your previous copy is now {copied.kept})" if copied.kept else ""
                print(f"{copied.target}: a fresh copy of {copied.source}{kept}")
            return 0
        copied_all = set_up(args.notebooks, args.into)
    except (WorkspaceError, OSError) as error:
        print(f"attn-course workspace: {error}", file=sys.stderr)
        return 2
    for copied in copied_all:
        print(f"{copied.target}: copied from {copied.source}")
    print(f"Your working copy is {args.into}/: work there; nothing the course runs overwrites it.")
    return 0


def _grade(args: argparse.Namespace) -> int:
    from attn_course.grading.answers import HandPointsError, read_hand_points
    from attn_course.grading.discover import SubmissionsError
    from attn_course.grading.grader import grade
    from attn_course.grading.overrides import OverridesError, read_overrides
    from attn_course.grading.points import PointsError, read_points
    from attn_course.grading.report import summary
    from attn_course.grading.roster import RosterError, read_roster

    try:
        points = read_points(args.points) if args.points else None
        roster = read_roster(args.roster) if args.roster else None
        overrides = read_overrides(args.overrides) if args.overrides else ()
        hand = read_hand_points(args.hand_points) if args.hand_points else None
    except (PointsError, RosterError, OverridesError, HandPointsError) as error:
        print(f"attn-course grade: {error}", file=sys.stderr)
        return 2
    try:
        report = grade(
            args.submissions,
            args.out,
            jobs=args.jobs,
            timeout=args.timeout,
            memory_gib=args.memory,
            progress=True,
            scheduler=args.scheduler,
            points=points,
            roster=roster,
            check_timeout=args.check_timeout,
            overrides=overrides,
            accept_misnamed=args.accept_misnamed,
            only=tuple(args.only or ()),
            keep_executed=args.keep_executed,
            hand_points=hand,
        )
    except (SubmissionsError, OSError) as error:
        print(f"attn-course grade: {error}", file=sys.stderr)
        return 2
    print(summary(report))
    return 1 if report.failures else 0


def _check(args: argparse.Namespace) -> int:
    from attn_course.grading.discover import SubmissionsError
    from attn_course.grading.selfcheck import all_passed, check_notebooks, report_text

    try:
        results = check_notebooks(args.notebooks, timeout=args.timeout, memory_gib=args.memory)
    except SubmissionsError as error:
        print(f"attn-course check: {error}", file=sys.stderr)
        return 2
    print(report_text(args.notebooks, results))
    return 0 if all_passed(results) else 1


def _export_nbgrader(args: argparse.Namespace) -> int:
    from attn_course.grading.discover import SubmissionsError
    from attn_course.grading.nbgrader_export import export_nbgrader

    if args.answer_points < 0:
        print("attn-course export nbgrader: --answer-points must be 0 or more", file=sys.stderr)
        return 2
    try:
        done = export_nbgrader(
            args.solutions,
            args.course,
            args.notebooks,
            timeout=args.timeout,
            answer_points=args.answer_points,
        )
    except SubmissionsError as error:
        print(f"attn-course export nbgrader: {error}", file=sys.stderr)
        return 2
    print(
        f"Wrote {len(done.assignments)} assignment(s) with {done.tests} autograder test(s) to {done.course}"
    )
    if done.answers:
        print(
            f"and {done.answers} written answer(s), read and graded by hand in formgrader "
            f"({args.answer_points:g} point(s) each)"
        )
    names = ", ".join(done.assignments)
    print(f"Next: cd {done.course} && nbgrader generate_assignment ASSIGNMENT (one of: {names})")
    return 0


def _export_gradescope(args: argparse.Namespace) -> int:
    from attn_course.grading.discover import SubmissionsError
    from attn_course.grading.gradescope import export_gradescope

    try:
        done = export_gradescope(args.zip, args.notebooks, timeout=args.timeout, memory_gib=args.memory)
    except SubmissionsError as error:
        print(f"attn-course export gradescope: {error}", file=sys.stderr)
        return 2
    print(f"Wrote {done.zip}: an autograder for {', '.join(done.notebooks)}. Upload it to Gradescope.")
    return 0


def _bench(args: argparse.Namespace) -> int:
    import torch

    from attn_course.demos.attention_bench import default_bench_config, run_and_save

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = default_bench_config(device, quick=args.quick, with_triton=True)
    chosen = {
        "dtypes": args.dtype,
        "lengths": args.lengths,
        "head_dims": args.head_dims,
        "causal": {"yes": (True,), "no": (False,), "both": (False, True)}.get(args.causal or ""),
        "batch": args.batch,
        "heads": args.heads,
        "block_size": args.block_size,
        "repeats": args.repeats,
        "threads": args.threads,
        "providers": args.providers,
        "backward": args.backward or None,
    }
    changes: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in chosen.items() if v is not None
    }
    config = dataclasses.replace(config, **changes)
    try:
        run_and_save(config, args.out)
    except (ValueError, RuntimeError) as error:
        print(f"attn-course bench: {error}", file=sys.stderr)
        return 2
    return 0


_Number = TypeVar("_Number", int, float)


def _positive(kind: type[_Number]) -> Callable[[str], _Number]:
    def parse(text: str) -> _Number:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=_positive(float), default=180.0, metavar="SECONDS",
                        help="CPU seconds (per torch thread) for a notebook's cells, again for its checks; "
                        "a busy machine does not count (default 180; wall-clock backstop 5x)")  # fmt: skip
    parser.add_argument("--memory", type=_positive(float), default=4.0, metavar="GIB",
                        help="memory limit of each notebook's kernel in GiB (default 4)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of attn-course."""
    parser = argparse.ArgumentParser(prog="attn-course", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="write notebooks/ (student versions) from solutions/")
    rel.add_argument("--solutions", type=Path, default=Path("solutions"))
    rel.add_argument("--notebooks", type=Path, default=Path("notebooks"))
    rel.add_argument("--check", action="store_true", help="only check that notebooks/ is current")
    rel.add_argument("--force", action="store_true",
                     help="overwrite work in notebooks/ that no release wrote, and remove student notebooks "
                     "whose solution is gone")  # fmt: skip
    rel.set_defaults(run=_release)
    wor = commands.add_parser("workspace", help=_WORKSPACE_HELP, description=_WORKSPACE_HELP)
    wor.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="the student notebooks")
    wor.add_argument("--into", type=Path, default=Path("my-work"), metavar="DIR",
                     help="your working copy (default: my-work)")  # fmt: skip
    wor.add_argument("--fresh", nargs="+", metavar="NOTEBOOK",
                     help="a fresh copy of these notebooks (name or number, e.g. 03); your copy is kept "
                     "beside it as NAME.old-<date>-<time>.ipynb")  # fmt: skip
    wor.set_defaults(run=_workspace)
    gra = commands.add_parser("grade", help=_GRADE_HELP, description=_GRADE_HELP)
    gra.add_argument("submissions", type=Path, metavar="SUBMISSIONS", help="one folder per learner")
    gra.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="gradebook.csv, feedback/ and the class report report.html")  # fmt: skip
    gra.add_argument("--jobs", type=_positive(int), default=2, help="notebooks graded at once (default 2)")
    gra.add_argument("--timeout", type=_positive(float), default=180.0, metavar="SECONDS",
                     help="CPU seconds (per torch thread) for each notebook's cells, again for its checks; "
                     "a busy machine does not count (default 180; wall-clock backstop 5x)")  # fmt: skip
    gra.add_argument("--check-timeout", type=float, default=60.0, metavar="SECONDS",
                     help="CPU seconds (per torch thread) one exercise's check may spend: a loop there "
                     "costs this, later exercises are still graded (default 60; 0: none)")  # fmt: skip
    gra.add_argument("--memory", type=_positive(float), default=4.0, metavar="GIB",
                     help="memory limit of each notebook's kernel in GiB (default 4)")  # fmt: skip
    gra.add_argument("--scheduler", metavar="ADDRESS",
                     help="grade on a Dask cluster at this scheduler address (tcp://host:8786)")  # fmt: skip
    gra.add_argument("--points", type=Path, metavar="FILE",
                     help="CSV of exercise,points for exercises worth other than 1 point")  # fmt: skip
    gra.add_argument("--roster", type=Path, metavar="FILE",
                     help="CSV class list: a `learner` column of folder names (others copied to lms.csv), "
                     "or one name per line; learners with no folder appear as not handed in")  # fmt: skip
    gra.add_argument("--overrides", type=Path, metavar="FILE",
                     help="CSV learner,exercise,points,note: points you set for one learner, "
                     "applied on every run")  # fmt: skip
    gra.add_argument("--accept-misnamed", action="store_true",
                     help="grade a notebook found misnamed or in a subfolder (saying so), "
                     "instead of leaving it ungraded")  # fmt: skip
    gra.add_argument("--only", nargs="+", metavar="LEARNER",
                     help="regrade only these learner folders into the gradebook of --out (the others "
                     "keep their results from the run before)")  # fmt: skip
    gra.add_argument("--keep-executed", action="store_true",
                     help="write each executed notebook, outputs included, to OUT/executed/")  # fmt: skip
    gra.add_argument("--hand-points", type=Path, metavar="FILE",
                     help="answers.csv with points entered for the written answers "
                     "(added to the gradebook)")  # fmt: skip
    gra.set_defaults(run=_grade)
    che = commands.add_parser("check", help=_CHECK_HELP, description=_CHECK_HELP)
    che.add_argument("notebooks", type=Path, nargs="+", metavar="NOTEBOOK", help="e.g. 02_scaling.ipynb")
    _limit_options(che)
    che.set_defaults(run=_check)
    exp = commands.add_parser("export", help=_EXPORT_HELP, description=_EXPORT_HELP)
    platforms = exp.add_subparsers(dest="platform", required=True)
    nbg = platforms.add_parser("nbgrader", help="write an nbgrader course: one assignment per notebook")
    nbg.add_argument("course", type=Path, metavar="COURSE_DIR", help="the nbgrader course folder to write")
    nbg.add_argument("--solutions", type=Path, default=Path("solutions"), help="default: solutions")
    nbg.add_argument("--notebooks", nargs="+", metavar="NAME", help="e.g. 02_scaling (default: all)")
    nbg.add_argument("--timeout", type=_positive(float), default=180.0, metavar="SECONDS",
                     help="nbgrader's time limit for each cell (default 180)")  # fmt: skip
    nbg.add_argument("--answer-points", type=float, default=0.0, metavar="POINTS",
                     help="points of each written answer in formgrader (default 0: nbgrader's total is "
                          "`grade`'s; 1 gives them what `grade --hand-points` gives)")  # fmt: skip
    nbg.set_defaults(run=_export_nbgrader)
    gsc = platforms.add_parser("gradescope", help="write a Gradescope autograder zip")
    gsc.add_argument("zip", type=Path, metavar="OUT.zip", help="the autograder zip to write")
    gsc.add_argument("--notebooks", nargs="+", metavar="NAME", help="notebooks to grade (default: all)")
    _limit_options(gsc)
    gsc.set_defaults(run=_export_gradescope)
    ben = commands.add_parser("bench", help=_BENCH_HELP, description=_BENCH_HELP)
    ben.add_argument("--device", help="cpu or cuda (default: cuda where there is one)")
    ben.add_argument("--dtype", nargs="+", choices=["float32", "float16", "bfloat16"],
                     help="default: float32 on cpu, float16 and bfloat16 (if supported) on cuda")  # fmt: skip
    ben.add_argument("--lengths", nargs="+", type=_positive(int), metavar="T",
                     help="sequence lengths (default: 256 to 4096 on cpu, to 16384 on cuda)")  # fmt: skip
    ben.add_argument("--head-dims", nargs="+", type=_positive(int), metavar="D", help="default: 64 128")
    ben.add_argument("--causal", choices=["yes", "no", "both"], help="default: both")
    ben.add_argument("--batch", type=_positive(int), help="default: 1")
    ben.add_argument("--heads", type=_positive(int), help="default: 8")
    ben.add_argument("--block-size", type=_positive(int), help="block size of the tiled version")
    ben.add_argument("--repeats", type=_positive(int), help="timed calls after warm-up (default 5)")
    ben.add_argument("--threads", type=_positive(int), help="CPU threads (default: torch's setting)")
    ben.add_argument("--providers", nargs="+", metavar="NAME",
                     help="naive, tiled, sdpa (every backend), sdpa-<flash|efficient|cudnn|math>, triton "
                     "(default: naive tiled sdpa, and triton on cuda)")  # fmt: skip
    ben.add_argument("--backward", action="store_true",
                     help="time each provider's backward pass (notebook 09): autograd through naive "
                     "attention and SDPA, the tiled flash_attention_backward, triton on cuda")  # fmt: skip
    ben.add_argument("--quick", action="store_true", help="a tiny run: T 256 and 512, d 64, one repeat")
    ben.add_argument("--out", type=Path, default=Path("bench-results"), metavar="DIR",
                     help="folder for the JSON, CSV and plots (default: bench-results)")  # fmt: skip
    ben.set_defaults(run=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `attn-course` command."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
