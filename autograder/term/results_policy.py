"""The course's late policy and bonus setting on Gradescope: the
submission time and due dates come from
``/autograder/submission_metadata.json`` (Gradescope's: ``created_at``,
``assignment.due_date`` and, per student, ``users[].assignment.due_date``
where Gradescope holds an extension), the rule from the zip's
``course/policy.toml`` (its extensions left out: Gradescope's apply).

:func:`adjust` changes a results.json only by adding tests, so the score
stays the sum of the tests (Gradescope's contract): "Late submission"
(minus the penalty: a percent of the autograder's score) and, where the
rubric's bonus policy is ``capped``, "Bonus above the maximum".
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from autograder.term.policy import Policy

METADATA = "submission_metadata.json"
MAX_METADATA_BYTES = 5 * 1024 ** 2


def adjust(data: dict[str, Any], metadata: Path, policy: Policy | None,
           max_score: float, bonus_policy: str) -> dict[str, Any]:
    """``data`` (a results.json with a score) with the late penalty and
    the bonus cap as tests of their own."""
    tests = data.setdefault("tests", [])
    if policy is not None:
        tests.append(_late_test(data["score"], _read(metadata), policy))
    score = round(sum(t["score"] for t in tests), 6)
    if bonus_policy == "capped" and score > max_score:
        tests.append({"name": "Bonus above the maximum (capped)",
                      "score": round(max_score - score, 6),
                      "max_score": 0.0, "status": "passed",
                      "output": f"The course caps a total at "
                                f"{max_score:g}: a bonus never passes it.",
                      "visibility": "visible"})
    data["score"] = round(sum(t["score"] for t in tests), 6)
    return data


def _late_test(score: float, meta: dict[str, Any] | None,
               policy: Policy) -> dict[str, Any]:
    test = {"name": "Late submission", "score": 0.0, "max_score": 0.0,
            "status": "passed", "output_format": "md",
            "visibility": "visible"}
    submitted = _time(meta.get("created_at")) if meta else None
    if submitted is None:
        test["output"] = ("The submission time could not be read: no late "
                          "penalty was applied here (the course staff "
                          "apply it).")
        return test
    due = _due(meta) or policy.due
    days, percent = policy.lateness(submitted, due)
    when = f"submitted {submitted.isoformat()}, due " + (
        due.isoformat() if due else "(none)")
    if not days:
        test["output"] = f"On time ({when})."
        return test
    penalty = round(max(score, 0.0) * percent / 100, 4)
    test.update(score=-penalty, status="failed", output=(
        f"**-{penalty:g} points**: {days} day(s) late ({when}): "
        f"-{percent:g}% of your score; the rule: {policy.words()}."))
    return test


def _read(path: Path) -> dict[str, Any] | None:
    """The metadata, bounded; None where it is missing or unreadable."""
    try:
        if path.stat().st_size > MAX_METADATA_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _due(meta: dict[str, Any]) -> datetime | None:
    """The latest of the submitters' own due dates (an extension of one
    member is the group's), else the assignment's."""
    users = meta.get("users") if isinstance(meta.get("users"), list) else []
    own = [_time(u.get("assignment", {}).get("due_date"))
           for u in users if isinstance(u, dict)
           and isinstance(u.get("assignment"), dict)]
    own = [d for d in own if d is not None]
    if own:
        return max(own)
    assignment = meta.get("assignment")
    return _time(assignment.get("due_date")) \
        if isinstance(assignment, dict) else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.utcoffset() is not None else None


__all__ = ["METADATA", "adjust"]
