"""Public checks for the notebook: ``run_check("1.2")``.

The notebook's ``grader.check("task_1_2")`` cells call ``run_check`` with
a task id ("1.1", "1.2", "2.1", "2.2", "2.3", "3.1", ...: the rubric's
item ids without their letter, so "2.3" runs items 2.3a and 2.3b). It runs
the grader's own checks of those items on the public cases, in this
process (``autograder.local``): the same values, the same comparisons, the
rubric's tolerance. The file ``transformer_lm/modeling_attention.py`` is
read afresh on every call, so saved edits are always picked up.

It prints one line per item and raises AssertionError, with the grader's
explanation, when an item fails. Values only: `make check` adds the PEP 8
and shape-comment deductions.
"""
from __future__ import annotations

from pathlib import Path

from autograder.config import GradingConfig, load_mistake_messages
from autograder.local import (SCOPE, check_values, item_text, items,
                              task_points)
from autograder.rubric import Rubric, load_rubric
from autograder.values import load_cases


def tasks(rubric: Rubric) -> tuple[str, ...]:
    """The task ids ``run_check`` accepts, in ``rubric``'s order."""
    return tuple(task_points(rubric))


def run_check(task_id: str, path: Path | str | None = None) -> None:
    """Check one task on the public cases (``path``: another module file
    instead of transformer_lm/modeling_attention.py); AssertionError if an
    item fails."""
    rubric = load_rubric()   # the grader's, read afresh like the module
    if task_id not in tasks(rubric):
        raise ValueError(f"unknown task {task_id!r}; one of "
                         f"{tasks(rubric)}")
    config = GradingConfig(rubric, load_cases(sets=("public",)),
                           load_mistake_messages())
    grade = check_values(config, path or Path(__file__).with_name(
        "modeling_attention.py"), task_id=task_id)
    if grade.internal_error:
        raise RuntimeError(f"the checker itself failed (not your code):\n"
                           f"{grade.internal_error}")
    results = items(grade)
    failed = [r for r in results if not r.outcome.passed]
    lines = "\n".join(item_text(r) for r in results)
    if failed:
        raise AssertionError(
            f"Task {task_id}: {len(failed)} of {len(results)} item"
            f"{'s' * (len(results) > 1)} failed on the public cases "
            f"({SCOPE}):\n{lines}")
    print(f"Task {task_id}: passed on the public cases ({SCOPE}).\n{lines}")
