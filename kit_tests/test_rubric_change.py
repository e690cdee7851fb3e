"""make test-rubric-change (kit/generate/rubric_change.py): the edit it
makes in the copy's rubric, and what it copies. (The whole run, `make generate`
and the quick suite in a copy, is the make target itself: minutes.)"""
from __future__ import annotations

import difflib
import tomllib

import pytest

from autograder import homework
from autograder.rubric import parse_rubric
from kit.generate import rubric_change as rc
from kit_tests.rubrics import item_points


@pytest.mark.parametrize("item", ["2.2", "3.1c", "2.3b", "1.2"])
def test_one_point_changes_one_line(item):
    text = homework.current().rubric.read_text()
    assert rc.item_points(text, item) == item_points(item)
    changed = rc.change_point(text, item, item_points(item) + 1.5)
    diff = [line for line in difflib.unified_diff(
        text.splitlines(), changed.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(diff) == 2, diff
    rubric = parse_rubric(tomllib.loads(changed))
    assert item_points(item, rubric) == item_points(item) + 1.5
    # Every other item keeps its points.
    before = parse_rubric(tomllib.loads(text))
    assert [c.points for t in rubric.tasks for c in t.items
            if c.id != item] == [c.points for t in before.tasks
                                 for c in t.items if c.id != item]


def test_an_unknown_item_is_named():
    with pytest.raises(rc.RubricChangeError, match="'9.9'"):
        rc.change_point(homework.current().rubric.read_text(), "9.9", 2)


def test_the_copy_leaves_out_what_is_built_or_installed(tmp_path):
    root = tmp_path / "root"
    for name in ("autograder/rubric.toml", ".git/HEAD", ".venv/bin/python",
                 "kit/__pycache__/x.pyc", "grades/a/results.json",
                 "README.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    copy = rc.copy_checkout(root, tmp_path)
    found = {p.relative_to(copy).as_posix() for p in copy.rglob("*")
             if p.is_file()}
    assert found == {"autograder/rubric.toml", "README.md"}
