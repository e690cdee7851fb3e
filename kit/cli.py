"""The staff commands as one command: ``python -m kit COMMAND`` in a
checkout (the Makefile's release targets run it), ``homework-kit
COMMAND`` once the kit is installed with pip (pyproject.toml's console
scripts; ``homework-grader`` is ``python -m autograder``).

``--homework DIR`` (before the command) names the homework's folder, one
holding ``homework.toml``, anywhere (a course's own repository): it sets
``$HOMEWORK`` for the command, as ``make ... HOMEWORK=DIR`` does. A
profile the command cannot use is said in one line naming the key and
the fix (exit 2), never a traceback: the profile is read here, at the
entry point, before a command that builds from it runs (no module reads
it on import).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

# command -> (module, function, what it does). Each function takes argv.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "generate": ("kit.generate.__main__", "main",
                 "regenerate what the reference, rubric, cases and "
                 "catalogue make (--check: list what is stale)"),
    "release": ("kit.release.student", "main",
                "build and verify dist/[HOMEWORK/]student.zip"),
    "autograder": ("kit.release.gradescope", "main",
                   "build and verify dist/[HOMEWORK/]autograder.zip for "
                   "Gradescope"),
    "new-edition": ("kit.generate.new_edition", "main",
                    "redraw the hidden cases' seeds and sizes"),
    "new-homework": ("kit.new_homework", "main",
                     "write a new homework's folder from the template"),
}
# The commands that build from an existing homework's profile.
READ_PROFILE = ("generate", "release", "autograder")
# The commands that ship generated files: refused while any is stale (the
# Makefile's release targets check first too; installed, this is the
# only check).
SHIPS = ("release", "autograder")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="homework-kit",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="commands: " + "; ".join(
            f"{name}: {what}" for name, (_, _, what) in COMMANDS.items()))
    parser.add_argument("--homework", type=Path, metavar="DIR",
                        help="the homework's folder (holding homework.toml;"
                             " default: $HOMEWORK, else the checkout's)")
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="the command's own arguments (COMMAND --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one staff command; a profile it cannot use: one line, exit 2."""
    from autograder import homework
    from autograder.homework import HomeworkError
    args = _parser().parse_args(argv)
    if args.homework is not None:
        os.environ["HOMEWORK"] = str(args.homework.resolve())
    module, function, _ = COMMANDS[args.command]
    try:
        if args.command in READ_PROFILE:
            homework.current()   # a profile it cannot use: one line
        if args.command in SHIPS and _stale():
            print(f"error: {args.command} ships generated files that are "
                  f"older than what generates them (listed above): run "
                  f"`homework-kit generate` (in a checkout: `make "
                  f"generate`) first", file=sys.stderr)
            return 1
        run = getattr(importlib.import_module(module), function)
        return int(run(args.args) or 0)
    except HomeworkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _stale() -> bool:
    """Whether a generated file is stale (each said on stderr)."""
    from kit.generate import stale
    lines = stale(None)
    for line in lines:
        print(f"stale: {line}", file=sys.stderr)
    return bool(lines)


def grader_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """``homework-grader``'s arguments split into the homework's folder
    (a leading ``--homework DIR``, as ``homework-kit`` takes it; None
    without one) and the grader's own arguments."""
    if argv[:1] == ["--homework"] and len(argv) > 1:
        return argv[1], argv[2:]
    if argv and argv[0].startswith("--homework="):
        return argv[0].split("=", 1)[1], argv[1:]
    return None, list(argv)


def grader() -> None:
    """``homework-grader [--homework DIR] ARGS``: ``python -m autograder
    ARGS`` in this interpreter (its re-execution in a clean environment
    included), with ``$HOMEWORK`` set to DIR if named."""
    folder, rest = grader_argv(sys.argv[1:])
    if folder is not None:
        os.environ["HOMEWORK"] = str(Path(folder).expanduser().resolve())
    os.execv(sys.executable, [sys.executable, "-m", "autograder", *rest])


def console() -> None:
    """``homework-kit``'s entry point."""
    sys.exit(main())
