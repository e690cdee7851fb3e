"""A submission's total, made from the autograder's score and what staff
decided, or left pending with the reason: never a plausible wrong total.

The order (docs/grading.md, "Running a term"): the autograder's score,
plus each question's points, plus the adjustments of rubric items, less
the late penalty (a percent of that subtotal), plus the adjustments of
the total; then the bonus policy (``capped``: at most the maximum) and
never below 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from autograder.term.course import Course
from autograder.term.marks import TOTAL, Mark

BONUS_WORDS = {"extra_credit": "extra credit: a total may pass the maximum",
               "capped": "capped: a total never passes the maximum"}


@dataclass
class Final:
    """One submission's total and its parts (None: not known)."""

    name: str
    autograded: float | None
    submitted_at: datetime | None = None
    due: datetime | None = None
    late_days: int | None = None      # None: no deadline, or no time
    penalty_percent: float = 0.0
    penalty: float | None = None
    questions: dict[str, Mark | None] = field(default_factory=dict)
    adjustments: list[Mark] = field(default_factory=list)
    total: float | None = None
    total_max: float = 0.0
    pending: list[str] = field(default_factory=list)

    @property
    def adjusted(self) -> float:
        return sum(m.points for m in self.adjustments)


def final(name: str, autograded: float | None, course: Course,
          max_score: float, bonus_policy: str,
          submitted_at: datetime | None = None) -> Final:
    """The total of submission ``name`` (``autograded``: its score, None
    where the grader failed; ``submitted_at``: its time from the export,
    which the course's submitted.csv overrides)."""
    questions = course.scored_questions
    out = Final(name, autograded,
                course.submitted.get(name, submitted_at),
                total_max=max_score + sum(course.question_points[q]
                                          for q in questions))
    scored = course.scores.get(name, {})
    out.questions = {q: scored.get(q) for q in questions}
    out.adjustments = list(course.adjustments.get(name, []))
    if autograded is None:
        out.pending.append("grader error")
    out.pending += [q for q, m in out.questions.items() if m is None]
    policy = course.policy
    if policy is not None:
        out.due = course.due.get(name) or policy.due
    if out.due is not None and out.submitted_at is None:
        out.pending.append("submission time")
    elif out.due is not None:
        out.late_days, out.penalty_percent = policy.lateness(
            out.submitted_at, out.due)
    if out.pending:
        return out
    subtotal = autograded + sum(m.points for m in out.questions.values()) \
        + sum(m.points for m in out.adjustments if m.target != TOTAL)
    if out.due is not None:
        out.penalty = round(max(subtotal, 0.0) * out.penalty_percent / 100,
                            4)
    total = subtotal - (out.penalty or 0.0) + sum(
        m.points for m in out.adjustments if m.target == TOTAL)
    if bonus_policy == "capped":
        total = min(total, out.total_max)
    out.total = round(max(total, 0.0), 4)
    return out


def item_problems(one: Final, course: Course,
                  earned: dict[str, float]) -> list[str]:
    """The adjustments of ``one`` that take a rubric item's score (its
    ``earned`` points, from its results) outside the item's range:
    ``path:line: problem: fix`` each (the points a regrade may give are
    the ones the item did not give)."""
    problems = []
    for mark in one.adjustments:
        if mark.target == TOTAL or mark.target not in earned or \
                mark.target not in course.item_range:
            continue
        low, high = course.item_range[mark.target]
        has = earned[mark.target]
        now = has + mark.points
        if not low - 1e-9 <= now <= high + 1e-9:
            fits = high - has if now > high else low - has
            problems.append(
                f"{mark.where}: {mark.points:+g} on item {mark.target} "
                f"takes {one.name}'s {has:g} to {now:g}, outside "
                f"{low:g} to {high:g}: write {fits:+g} at most (or adjust "
                f"{TOTAL})" if fits else
                f"{mark.where}: {mark.points:+g} on item {mark.target}: "
                f"{one.name} has {has:g}, its limit already: remove the "
                f"row (or adjust {TOTAL})")
    return problems


__all__ = ["BONUS_WORDS", "Final", "final", "item_problems"]
