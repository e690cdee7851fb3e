"""``python -m kit.generate [--check | --list] [NAME...]``: write, check or
list the generators (kit/generate/__init__.py), all of them in order or
the ones named."""
from __future__ import annotations

import argparse
import sys

from autograder.homework import HomeworkError
from kit.generate import GENERATORS, ROOT, UnknownGenerator, select, stale

DESCRIPTION = ("Write, check or list the generated files of the homework "
               "in use (HOMEWORK=homeworks/NAME picks another): all of "
               "them in order, or the generators named.")


def _list(chosen) -> None:
    for g in chosen:
        writes = ", ".join(str(p.relative_to(ROOT)) for p in g.writes())
        print(f"{g.name:15} reads {g.reads}\n{'':15} writes {writes}")


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when written (or in step), 1 when stale or a generator
    failed, 2 on an unknown name."""
    parser = argparse.ArgumentParser(prog="python -m kit.generate",
                                     description=DESCRIPTION)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="generators to run (default: all, in order: "
                             + ", ".join(g.name for g in GENERATORS) + ")")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="write nothing; list every stale output and "
                           "the command that refreshes it; exit 1 if any")
    mode.add_argument("--list", action="store_true",
                      help="what each generator reads and writes")
    args = parser.parse_args(argv)
    try:
        chosen = select(args.names or None)
    except UnknownGenerator as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        _list(chosen)
        return 0
    if args.check:
        lines = stale(args.names or None)
        for line in lines:
            print(f"stale: {line}", file=sys.stderr)
        if lines:
            print("(`make generate` runs them all)", file=sys.stderr)
        else:
            print("up to date: " + ", ".join(g.name for g in chosen))
        return 1 if lines else 0
    for g in chosen:
        status = g.write()
        if status:
            return status
    return 0


def run(argv: list[str] | None = None) -> int:
    """``main``, with a homework profile that cannot be used (a missing
    file, say: create the generated ones empty first) said in one line
    (exit 2), not a traceback."""
    try:
        return main(argv)
    except HomeworkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
