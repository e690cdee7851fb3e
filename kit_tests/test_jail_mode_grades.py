"""The same grade in every jail mode: groups of the variant
catalogue graded by ``kit_tests/grade_in_mode.py`` in every mode this
machine can build (as root and as a test user, with and without
namespaces) must score alike, entry by entry. A mode the machine cannot
build is a skip with its reason; fewer than two modes, nothing to compare.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from kit import variants
from kit_tests.test_attacks import as_test_user
from kit_tests.test_attacks_jail import MODES, _skip_reason

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("hostile", "styles")
is_root = os.geteuid() == 0


def _grade(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1"}
    if mode.endswith("no-namespaces"):
        env["AUTOGRADER_NO_NAMESPACES"] = "1"
    command = [sys.executable, "-m", "kit_tests.grade_in_mode", *GROUPS]
    cwd = Path(tempfile.mkdtemp(prefix="mode-grades-"))
    cwd.chmod(0o755)
    try:
        if mode.startswith("user") and is_root:
            command = as_test_user(command, cwd)
        done = subprocess.run(command, env=env, capture_output=True,
                              text=True, timeout=1200, cwd=cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def graded() -> dict[str, dict]:
    """Mode -> what grade_in_mode printed, for every mode buildable here."""
    found = {}
    for mode in MODES:
        if _skip_reason(mode) is None:
            found[mode] = _grade(mode)
    return found


def test_every_mode_gives_the_same_grades(graded):
    if len(graded) < 2:
        pytest.skip(f"only {list(graded)} can be built here")
    first, *others = graded
    want = {k: v for k, v in graded[first].items() if k != "_layers"}
    assert want, "no entry was graded"
    for mode in others:
        got = {k: v for k, v in graded[mode].items() if k != "_layers"}
        differ = {k: (want[k], got.get(k)) for k in want
                  if got.get(k) != want[k]}
        assert not differ, (f"{mode} ({graded[mode]['_layers']}) grades "
                            f"differently from {first} "
                            f"({graded[first]['_layers']}): {differ}")


def test_writing_a_file_costs_the_bonus_only_in_every_mode(graded):
    # Where the grader once charged 16 points without a mount namespace.
    entry = variants.load_all()["hostile/writes_files"]
    expected = variants.expect(entry, load_rubric(),
                               variants.mistake_items())
    for mode, found in graded.items():
        assert set(found["hostile/writes_files"]["lost"]) == \
            expected.lost, (mode, found["_layers"])
        assert not found["hostile/writes_files"]["internal_error"], mode
