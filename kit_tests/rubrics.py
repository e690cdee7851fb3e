"""Copies of the grader's rubric with one fact changed, as an instructor
would change it (one edit: the total follows)."""
from __future__ import annotations

import re
import tomllib

from autograder import homework
from autograder.rubric import Rubric, parse_rubric


def rubric_with(item: str, points: float) -> Rubric:
    """The rubric with item ``item``'s points set to ``points``."""
    data = tomllib.loads(homework.current().rubric.read_text())
    assert "max_score" not in data["grading"], \
        "the total is derived from the items: a second place to edit"
    found = [entry for task in data["task"] for entry in task["item"]
             if entry["id"] == item]
    assert found, f"no item {item} in the rubric"
    found[0]["points"] = points
    return parse_rubric(data)


# What the tests derive from the rubric they run against: no test assumes
# a point value of the shipped rubric (an instructor who changes one and
# runs `make generate` keeps a green suite; kit/generate/rubric_change.py
# checks it).

def item_points(item: str, rubric: Rubric | None = None) -> float:
    """Item ``item``'s points in ``rubric`` (default: the live one)."""
    rubric = rubric or parse_rubric(tomllib.loads(
        homework.current().rubric.read_text()))
    found = [c.points for t in rubric.tasks for c in t.items if c.id == item]
    assert found, f"no item {item} in the rubric"
    return found[0]


def notebook_task_points(task: str, rubric: Rubric | None = None) -> float:
    """The points of notebook task ``task`` ("2.3": items 2.3a and 2.3b;
    "3.1": 3.1, 3.1c, 3.1d), summed here from the rubric's items."""
    rubric = rubric or parse_rubric(tomllib.loads(
        homework.current().rubric.read_text()))
    pattern = re.compile(rf"{re.escape(task)}[a-z]?")
    return sum(c.points for t in rubric.tasks for c in t.items
               if pattern.fullmatch(c.id))


def other_points(item: str) -> float:
    """A value the live rubric does not give item ``item``."""
    return item_points(item) + 1


def points_words(points: float) -> str:
    """``1 point``, ``2 points``, ``0.5 points``: how documents say it."""
    return f"{points:g} point{'s' * (points != 1)}"


def rubric_text_with(item: str, points: float) -> str:
    """The live rubric's text with item ``item``'s points set to
    ``points``, by one textual edit (as an instructor makes it)."""
    text = homework.current().rubric.read_text()
    pattern = re.compile(rf'(id = "{re.escape(item)}"\n(?:\w+ = .*\n)*?'
                         rf'points = )[0-9.]+\n')
    assert pattern.search(text), f"no points of item {item} in the rubric"
    return pattern.sub(lambda m: f"{m.group(1)}{points:g}\n", text, count=1)


def live_task_methods() -> dict[str, tuple[str, ...]]:
    """The live rubric's task methods, as ``GradingConfig.task_methods``
    gives them to the checks (class -> methods)."""
    rubric = parse_rubric(tomllib.loads(
        homework.current().rubric.read_text()))
    return {task.cls: task.methods for task in rubric.tasks}
