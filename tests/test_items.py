"""Your implementation on the public test cases, one test per graded item.

Each test is the grader's own check of that item (the same code, the same
public values, the rubric's tolerance in autograder/rubric.toml), run in
this process. These tests check values only; `make check` adds the PEP 8
and shape-comment deductions and the bonus, and the hidden cases are graded
after you submit. Test another file with::

    HOMEWORK_IMPL=my_attempt.py pytest tests
"""
from __future__ import annotations

import pytest

from autograder.grade import GradeResult
from autograder.local import item_text, items, value_rubric
from autograder.rubric import load_rubric

ITEMS = [item.id for task in value_rubric(load_rubric()).tasks
         for item in task.items]


@pytest.mark.parametrize("item_id", ITEMS)
def test_item(graded: GradeResult, item_id: str):
    """The item passes on every public case (all-or-nothing, as graded)."""
    (result,) = [r for r in items(graded) if r.check.id == item_id]
    if not result.outcome.passed:
        pytest.fail(item_text(result), pytrace=False)
