"""The `attn-course` command: thin argument parsing over plain functions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attn_course.release import MarkerError, release


def _release(args: argparse.Namespace) -> int:
    try:
        results = release(args.solutions, args.notebooks, check=args.check)
    except (MarkerError, FileNotFoundError) as error:
        print(f"attn-course release: {error}", file=sys.stderr)
        return 2
    for result in results:
        state = ("out of date" if args.check else "written") if result.changed else "up to date"
        print(f"{result.target}: {result.exercises} exercise region(s), {state}")
    stale = [r for r in results if r.changed]
    if args.check and stale:
        print(
            "Student notebooks are not what `attn-course release` writes: run it and commit.", file=sys.stderr
        )
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of attn-course."""
    parser = argparse.ArgumentParser(prog="attn-course", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="write notebooks/ (student versions) from solutions/")
    rel.add_argument("--solutions", type=Path, default=Path("solutions"))
    rel.add_argument("--notebooks", type=Path, default=Path("notebooks"))
    rel.add_argument("--check", action="store_true", help="only check that notebooks/ is current")
    rel.set_defaults(run=_release)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `attn-course` command."""
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
