"""The checkout's Makefile recipes, run with a stub interpreter (no
grading): which paths `make grade` passes, and that the releases refuse
stale generated files."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Stands for the interpreter: writes two examples when asked for them,
# prints the grader's arguments one per bracket, finds every generated file
# stale when asked about them all (`STALE=1`) and says when a release
# module runs; every other call passes.
STUB = """#!/bin/bash
if [ "$2" = kit.corpus.examples ]; then
  mkdir -p build/examples && touch "build/examples/a b.py" build/examples/c.py
elif [ "$2" = autograder ]; then printf '[%s]' "${@:3}"
elif [ "$2 $3 $4" = "kit.generate --check " ] && [ -n "$STALE" ]; then
  echo "stale: the notebook: run make build-notebook" >&2; exit 1
elif [[ "$2" = kit.release.* ]]; then echo "built by $2"
elif [ "$2" = kit ]; then echo "built by kit $3"; fi
"""


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "stub").write_text(STUB)
    (tmp_path / "stub").chmod(0o755)
    (tmp_path / "requirements.txt").write_text("")
    return tmp_path


def _make(folder: Path, *args: str, stale: bool = False
          ) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "-f", str(ROOT / "Makefile"), "PY=./stub", *args],
        capture_output=True, text=True, cwd=folder, timeout=60,
        env={"PATH": "/usr/bin:/bin", **({"STALE": "1"} if stale else {})})


def _grade_arguments(folder: Path, *assignments: str) -> str:
    """The grader's arguments; the command shown first names what staff
    gave (a folder's entries as FOLDER/*)."""
    done = _make(folder, "grade", *assignments)
    assert done.returncode == 0, done.stderr
    shown, arguments = done.stdout.splitlines()
    given = "".join(f"[{w}]" for w in shown.split()[3:])
    assert given == arguments.replace(
        "[build/examples/a b.py][build/examples/c.py]", "[build/examples/*]")
    return arguments


def test_the_default_examples_are_graded_one_by_one_on_a_first_run(folder):
    # make expands a whole recipe before its first line writes the
    # examples: the folder's entries are globbed when the grading line runs
    assert not (folder / "build").exists()
    assert _grade_arguments(folder) == (
        "[grade][--out][grades][build/examples/a b.py][build/examples/c.py]")
    # a zip, or a folder with no entries, is one path, passed as named
    (folder / "empty").mkdir()
    assert _grade_arguments(folder, "SUBMISSIONS=export.zip",
                            "COMPARE=old") == (
        "[grade][--out][grades][--compare][old][export.zip]")
    assert _grade_arguments(folder, "SUBMISSIONS=empty", "OUT=g2") == (
        "[grade][--out][g2][empty]")


@pytest.mark.parametrize("target", ["release", "autograder", "demo"])
def test_a_release_refuses_any_stale_generated_file(folder, target):
    # a point changed without `make generate` leaves the notebook saying
    # the old points: the values are fresh, the release must not be built
    refused = _make(folder, target, stale=True)
    assert refused.returncode != 0
    assert "stale: the notebook: run make build-notebook" in refused.stderr
    assert "built by" not in refused.stdout
    built = _make(folder, target)
    assert built.returncode == 0, built.stderr
    assert "built by kit" in built.stdout
