"""Code for a newer Python than the grader's
(autograder/submission/python_version.py, its table
autograder/python_features.toml): ``check`` warns a student on a newer
Python, naming both versions; the grader's feedback for a module that
failed to import names its own version; a student on the grader's
version sees nothing new."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from autograder.config import load_config
from autograder.grade import grade_source
from autograder.sandbox.protocol import IMPORT_ERROR, ProbeResult
from autograder.submission import python_version as pv
from kit_tests.reference_source import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "autograder" / "gradescope" / "setup.sh"
GRADER = pv.grader_version()
NEWER = (GRADER[0], GRADER[1] + 1)
TEXT = f"{GRADER[0]}.{GRADER[1]}"

# Each line a feature of the table's syntax rows, then lines that only
# look like one (a docstring, a variable named type).
SYNTAX = '''"""
type NotCode = int
"""
type Alias = list[int]
def first[T](items: list[T]) -> T:
    return items[0]
class Box[T]:
    pass
type = 3
'''


def test_the_table_names_the_oldest_python_the_grader_image_installs():
    versions = {int(m) for m in re.findall(r"\bpython3\.(\d+)\b",
                                           SETUP.read_text())}
    assert versions, "setup.sh names no python3.X package"
    assert GRADER == (3, min(versions))


def test_syntax_the_grader_cannot_parse_is_found_by_line():
    # This Python may not parse it either: the lines come from tokens.
    uses = pv.newer_uses(SYNTAX, GRADER)
    assert [u.line for u in uses] == [4, 5, 7]
    assert "type` alias" in uses[0].what
    assert all(u.since > GRADER for u in uses)


def test_a_student_on_the_graders_python_sees_nothing_new():
    assert pv.check_warnings(SYNTAX, GRADER) == []
    assert pv.check_warnings(FULL_REFERENCE, GRADER) == []


def test_a_student_on_a_newer_python_is_told_both_versions():
    [line] = pv.check_warnings(SYNTAX, NEWER)
    assert f"Python {NEWER[0]}.{NEWER[1]}" in line
    assert f"the grader runs Python {TEXT}" in line
    assert "line 4" in line and "line 2:" not in line


def test_code_for_this_python_gets_no_warning():
    assert pv.newer_uses(FULL_REFERENCE, GRADER) == []
    assert pv.check_warnings(FULL_REFERENCE, NEWER) == []


def test_the_graders_feedback_names_its_python_when_the_import_fails():
    config = load_config(None, None, sets=("public",))
    source = FULL_REFERENCE + "\ntype Alias = int\n"
    line = source.count("\n")

    def runner(source, filename, probes):
        return [ProbeResult(p.id, IMPORT_ERROR, f"SyntaxError: invalid "
                            f"syntax (line {line})") for p in probes]

    grade = grade_source(source, "modeling_attention.py", config, runner,
                         public_only=True)
    [note] = grade.notes
    assert note.startswith(f"the grader runs Python {TEXT}")
    assert f"line {line}: a `type` alias" in note
    plain = grade_source(FULL_REFERENCE, "modeling_attention.py", config,
                         runner, public_only=True)
    assert plain.notes == []


def _newer_python() -> str | None:
    """A Python newer than the grader's on PATH, if any."""
    for minor in range(GRADER[1] + 3, GRADER[1], -1):
        exe = shutil.which(f"python3.{minor}")
        if exe and subprocess.run([exe, "-c", "pass"],
                                  capture_output=True).returncode == 0:
            return exe
    return None


NAMES = '''import typing
from itertools import batched
import collections.abc as cabc


@typing.override
def size(x):
    return f"{x["a"]}" + f"{'ok'}" + f"""{x["b"]}"""


buffer = cabc.Buffer
'''


def test_newer_names_and_fstrings_on_a_newer_python():
    """Library names and PEP 701 f-strings need a Python that parses the
    code: run where a python3.12 or newer is on PATH."""
    exe = _newer_python()
    if exe is None:
        pytest.skip("no python3.12 or newer on PATH")
    code = ("import json, sys\n"
            "from autograder.submission import python_version as pv\n"
            "uses = pv.newer_uses(sys.stdin.read(), tuple(json.loads("
            "sys.argv[1])))\n"
            "print(json.dumps([[u.line, u.what] for u in uses]))\n")
    done = subprocess.run([exe, "-c", code, json.dumps(GRADER)],
                          input=NAMES, capture_output=True, text=True,
                          cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    found = {tuple(u) for u in json.loads(done.stdout)}
    assert found == {(2, "`itertools.batched`"), (6, "`typing.override`"),
                     (8, next(e["what"] for e in pv.load_features()["syntax"]
                              if e.get("detector") == "fstring")),
                     (11, "`collections.abc.Buffer`")}


def test_a_source_past_the_bound_is_not_searched():
    """Student code is hostile: the search is bounded by size."""
    assert pv.newer_uses("type Alias = int\n", GRADER)
    padded = "type Alias = int\n" + "#" * pv.MAX_SOURCE + "\n"
    assert pv.newer_uses(padded, GRADER) == []
