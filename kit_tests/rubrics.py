"""Copies of the grader's rubric with one fact changed, as an instructor
would change it (one edit: the total follows)."""
from __future__ import annotations

import tomllib

from autograder.rubric import DEFAULT_RUBRIC, Rubric, parse_rubric


def rubric_with(item: str, points: float) -> Rubric:
    """The rubric with item ``item``'s points set to ``points``."""
    data = tomllib.loads(DEFAULT_RUBRIC.read_text())
    assert "max_score" not in data["grading"], \
        "the total is derived from the items: a second place to edit"
    found = [entry for task in data["task"] for entry in task["item"]
             if entry["id"] == item]
    assert found, f"no item {item} in the rubric"
    found[0]["points"] = points
    return parse_rubric(data)
