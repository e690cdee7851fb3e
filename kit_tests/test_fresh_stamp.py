"""The generated-files check is skipped only for the very inputs of its
last clean answer (kit_tests/fresh_stamp.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import homework
from kit.generate.rubric_change import copy_checkout
from kit_tests.fresh_stamp import inputs_digest, stale_unless_unchanged

ROOT = Path(__file__).resolve().parents[1]


def _checkout(tmp_path):
    root = tmp_path / "kit"
    (root / "autograder").mkdir(parents=True)
    (root / "autograder" / "rubric.toml").write_text("points = 1\n")
    (root / "kit_tests").mkdir()
    return root


def _counting(answer):
    calls = []

    def check():
        calls.append(1)
        return list(answer)
    return check, calls


def test_a_clean_answer_is_remembered_until_a_byte_changes(tmp_path):
    root = _checkout(tmp_path)
    stamp = root / "build" / ".generated-fresh"
    check, calls = _counting([])
    assert stale_unless_unchanged(check, stamp, root) == []
    assert stale_unless_unchanged(check, stamp, root) == []
    assert len(calls) == 1
    (root / "autograder" / "rubric.toml").write_text("points = 2\n")
    assert stale_unless_unchanged(check, stamp, root) == []
    assert len(calls) == 2


def test_a_stale_answer_is_never_remembered(tmp_path):
    root = _checkout(tmp_path)
    stamp = root / "build" / ".generated-fresh"
    check, calls = _counting(["skeleton: run `make skeleton`"])
    for _ in range(2):
        assert stale_unless_unchanged(check, stamp, root) == [
            "skeleton: run `make skeleton`"]
    assert len(calls) == 2 and not stamp.exists()


def test_files_added_count_and_tests_and_builds_do_not(tmp_path):
    root = _checkout(tmp_path)
    before = inputs_digest(root)
    (root / "kit_tests" / "test_new.py").write_text("x = 1\n")
    (root / "build").mkdir()
    (root / "build" / "out.txt").write_text("built\n")
    assert inputs_digest(root) == before
    (root / "autograder" / "new.toml").write_text("")
    assert inputs_digest(root) != before


@pytest.mark.e2e   # pytest in its own process on a copy of the checkout
@pytest.mark.parametrize("parallel", [[], ["-n", "2", "--dist", "loadfile"]],
                         ids=["one process", "parallel"])
def test_a_stale_file_stops_the_run_before_any_test(tmp_path, parallel):
    copy = copy_checkout(ROOT, tmp_path)
    skeleton = homework.load(copy).module
    skeleton.write_text(skeleton.read_text() + "# edited by hand\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "kit_tests/test_wire.py", "-q",
         "-p", "no:cacheprovider", *parallel], cwd=copy,
        env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "generated files are stale:" in out
    assert f"{skeleton} is stale: run `make skeleton`" in out
    assert " passed" not in out and "Traceback" not in out, out
