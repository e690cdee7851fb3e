"""Public checks for the notebook: ``check("1.2")``, ``run_check("1.2")``.

The notebook's check cells call ``check`` with a task id ("1.1", "1.2",
"2.3", ...: the rubric's item ids without their letter, so "2.3" runs
items 2.3a and 2.3b). It runs the grader's own checks of those items on
the public cases, in this process (``autograder.local``): the same
values, the same comparisons, the rubric's tolerance. The students'
module (the homework profile's ``[module] file``) is read afresh on every
call, so saved edits are always picked up. Any homework's notebook uses
this one module: what it checks comes from the profile and the rubric.

``check`` returns the task's verdict, shown once as the cell's output
(which items passed, and for each failing one what differs, where, by how
much, and the common mistake it looks like), its lines wrapped at word
boundaries: JupyterLab breaks long output lines anywhere, mid-word
included. ``run_check`` (otter's ``grader.check`` tests, scripts) prints
the same verdict when the task passes and raises AssertionError with it
when an item fails. Values only: `make check` adds the PEP 8 and
shape-comment deductions.
"""
from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass
from pathlib import Path

from autograder import homework
from autograder.config import GradingConfig, load_mistake_messages
from autograder.local import (SCOPE, check_values, item_text, items,
                              task_points)
from autograder.rubric import Rubric, load_rubric
from autograder.values import load_cases


def tasks(rubric: Rubric) -> tuple[str, ...]:
    """The task ids ``run_check`` accepts, in ``rubric``'s order."""
    return tuple(task_points(rubric))


# Verdict lines are wrapped to this many characters: narrower than a
# notebook's output area on a laptop screen, so no front end re-wraps them.
WIDTH = 78


def wrap(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` broken at spaces
    (never inside a word; a word longer than a line stays whole); a
    continued item or bullet line is indented under its first word."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        indent = line[:len(line) - len(body)]
        hang = "  " if body.startswith(("- ", "✔ ", "✘ ")) else ""
        out.append(textwrap.fill(
            body, width, initial_indent=indent,
            subsequent_indent=indent + hang, break_long_words=False,
            break_on_hyphens=False) if len(line) > width else line)
    return "\n".join(out)


@dataclass(frozen=True)
class Verdict:
    """One task's verdict on the public cases, as a check cell shows it:
    plain text in a terminal, the same text in a word-wrapping block in
    a notebook."""
    task_id: str
    passed: bool
    text: str

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:   # what a notebook shows as text/plain
        return self.text

    def _repr_html_(self) -> str:
        return ('<pre style="white-space: pre-wrap; word-break: normal; '
                'overflow-wrap: break-word; margin: 0">'
                f"{html.escape(self.text)}</pre>")


def verdict(task_id: str, path: Path | str | None = None) -> Verdict:
    """Check one task on the public cases (``path``: another module file
    instead of the profile's students' module); ValueError for a task the
    rubric does not have, RuntimeError if the checker itself fails."""
    rubric = load_rubric()   # the grader's, read afresh like the module
    if task_id not in tasks(rubric):
        raise ValueError(f"unknown task {task_id!r}; one of "
                         f"{tasks(rubric)}")
    config = GradingConfig(rubric, load_cases(sets=("public",)),
                           load_mistake_messages())
    grade = check_values(config, path or homework.current().module,
                         task_id=task_id)
    if grade.internal_error:
        raise RuntimeError(f"the checker itself failed (not your code):\n"
                           f"{grade.internal_error}")
    results = items(grade)
    failed = [r for r in results if not r.outcome.passed]
    lines = "\n".join(item_text(r) for r in results)
    if failed:
        return Verdict(task_id, False, wrap(
            f"Task {task_id}: {len(failed)} of {len(results)} item"
            f"{'s' * (len(results) > 1)} failed on the public cases\n"
            f"({SCOPE}):\n{lines}"))
    return Verdict(task_id, True, wrap(
        f"Task {task_id}: passed on the public cases\n({SCOPE}).\n{lines}"))


def check(task_id: str, path: Path | str | None = None) -> Verdict:
    """The notebook's check cell: the verdict of one task, to be shown as
    the cell's output (it never raises for a failing item, so a "Run All"
    goes on to the next task)."""
    return verdict(task_id, path)


def run_check(task_id: str, path: Path | str | None = None) -> None:
    """Check one task on the public cases: print its verdict if it passes,
    raise AssertionError with it if an item fails."""
    result = verdict(task_id, path)
    if not result.passed:
        raise AssertionError(result.text)
    print(result.text)
