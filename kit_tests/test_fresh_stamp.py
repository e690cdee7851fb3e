"""The generated-files check is skipped only for the very inputs of its
last clean answer (kit_tests/fresh_stamp.py)."""
from __future__ import annotations

from kit_tests.fresh_stamp import inputs_digest, stale_unless_unchanged


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
