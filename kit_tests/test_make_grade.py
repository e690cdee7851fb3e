"""`make grade`'s paths: a folder's entries are read when the grading line
runs, so the default folder of examples, written by the recipe's first
line, is graded entry by entry on the first run of a fresh checkout too
(make expands a whole recipe before it runs a line)."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Stands for the interpreter: writes two examples when asked for them and
# prints the grader's arguments one per bracket; every other call passes.
STUB = """#!/bin/bash
if [ "$2" = kit.corpus.examples ]; then
  mkdir -p build/examples && touch "build/examples/a b.py" build/examples/c.py
elif [ "$2" = autograder ]; then printf '[%s]' "${@:3}"; fi
"""


def _grade_arguments(folder: Path, *assignments: str) -> str:
    done = subprocess.run(
        ["make", "-s", "-f", str(ROOT / "Makefile"), "grade", "PY=./stub",
         *assignments], capture_output=True, text=True, cwd=folder,
        timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_default_examples_are_graded_one_by_one_on_a_first_run(
        tmp_path):
    (tmp_path / "stub").write_text(STUB)
    (tmp_path / "stub").chmod(0o755)
    (tmp_path / "requirements.txt").write_text("")
    assert not (tmp_path / "build").exists()
    assert _grade_arguments(tmp_path) == (
        "[grade][--out][grades][build/examples/a b.py][build/examples/c.py]")
    # a zip, or a folder with no entries, is one path, passed as named
    (tmp_path / "empty").mkdir()
    assert _grade_arguments(tmp_path, "SUBMISSIONS=export.zip",
                            "COMPARE=old") == (
        "[grade][--out][grades][--compare][old][export.zip]")
    assert _grade_arguments(tmp_path, "SUBMISSIONS=empty", "OUT=g2") == (
        "[grade][--out][g2][empty]")
