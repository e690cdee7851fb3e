"""Change a point as an instructor would, in a copy, and run the suite there
(`make test-rubric-change`).

The README tells an instructor that changing a point is one edit of
``autograder/rubric.toml`` followed by ``make generate``. This checks that
promise end to end: the checkout is copied to a temporary folder, one
item's points are changed in the copy's rubric, ``make generate`` and the
quick suite (``make test``) run there with this interpreter (``PY=``), and
the exit status says whether the suite stayed green. The checkout itself
is never touched.

    python -m kit.generate.rubric_change     # 2.2 gets one point more
    python -m kit.generate.rubric_change --item 3.1c --points 2
    python -m kit.generate.rubric_change -- -x -k facts  # pytest arguments
                                         # instead of the quick suite
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder import homework

ROOT = Path(__file__).resolve().parents[2]
# Not copied: built, installed or cached things (.gitignore's), and git.
IGNORED = (".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache", "dist",
           "build", "grades", "*.egg-info", ".ipynb_checkpoints")


class RubricChangeError(RuntimeError):
    """The rubric has no such item, or its points cannot be edited."""


def _points_pattern(item: str) -> re.Pattern:
    # The item's table: its id line, then key lines up to its points.
    return re.compile(rf'(id = "{re.escape(item)}"\n(?:[\w-]+ = .*\n)*?'
                      rf'points = )([0-9]+(?:\.[0-9]+)?)([ \t]*(?:#.*)?\n)')


def item_points(text: str, item: str) -> float:
    """The points rubric text ``text`` gives item ``item``."""
    found = _points_pattern(item).search(text)
    if found is None:
        raise RubricChangeError(f"rubric.toml: no `points = ...` line for "
                                f"item {item!r}")
    return float(found.group(2))


def change_point(text: str, item: str, points: float) -> str:
    """``text`` (rubric.toml) with item ``item``'s points set to
    ``points``: one textual edit, as an instructor makes it."""
    item_points(text, item)   # raises if absent
    return _points_pattern(item).sub(
        lambda m: f"{m.group(1)}{points:g}{m.group(3)}", text, count=1)


def copy_checkout(root: Path, into: Path) -> Path:
    """A copy of the checkout ``root`` (without what IGNORED names)."""
    target = into / "kit-copy"
    shutil.copytree(root, target, ignore=shutil.ignore_patterns(*IGNORED),
                    symlinks=True)
    return target


def run_timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Run ``command``; its seconds; raises CalledProcessError if it
    fails (its output went to ours)."""
    print(f"$ {' '.join(command)}   (in {cwd})", flush=True)
    start = time.monotonic()
    subprocess.run(command, cwd=cwd, env=env, check=True)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    """Copy, change a point, generate, test; 0 when the suite is green."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.generate.rubric_change",
        description="Change one point of the rubric in a copy of the "
                    "checkout, run `make generate` and the quick suite "
                    "there: the suite must stay green.")
    parser.add_argument("--item", default="2.2",
                        help="the rubric item to change (default 2.2)")
    parser.add_argument("--points", type=float, default=None,
                        help="its new points (default: one more)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the copy (its path is printed)")
    parser.add_argument("pytest_args", nargs="*",
                        help="after --: pytest arguments to run instead of "
                             "`make test`")
    args = parser.parse_args(argv)
    hw = homework.staff()
    rubric = hw.rubric.relative_to(hw.root)   # in the checkout's copy

    text = (ROOT / rubric).read_text()
    before = item_points(text, args.item)
    after = before + 1 if args.points is None else args.points
    if after == before:
        parser.error(f"item {args.item} already has {before:g} points")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "MAKEFLAGS")}
    make = ["make", f"PY={sys.executable}"]
    workdir = Path(tempfile.mkdtemp(prefix="rubric-change-"))
    start = time.monotonic()
    try:
        copy = copy_checkout(ROOT, workdir)
        (copy / rubric).write_text(change_point(text, args.item, after))
        print(f"item {args.item}: {before:g} -> {after:g} points in "
              f"{copy / rubric}", flush=True)
        generate = run_timed([*make, "generate"], copy, env)
        if args.pytest_args:
            tests = run_timed(
                [sys.executable, "-m", "pytest", *args.pytest_args],
                copy, {**env, "PYTHONPATH": str(copy)})
        else:
            tests = run_timed([*make, "test"], copy, env)
    except subprocess.CalledProcessError as exc:
        print(f"RED: `{' '.join(map(str, exc.cmd))}` failed (exit "
              f"{exc.returncode}) after item {args.item} was given "
              f"{after:g} points in a copy of the rubric: a test or a "
              f"generated file assumes the shipped rubric's points",
              file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"the copy: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"GREEN: item {args.item} at {after:g} points: make generate "
          f"{generate:.0f} s, tests {tests:.0f} s, "
          f"{time.monotonic() - start:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
