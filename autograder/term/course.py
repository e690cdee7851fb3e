"""The course folder read whole and checked against the batch.

:func:`load_course` reads every staff file of the folder (the policy,
scores, adjustments, local submission times) and resolves each student
named there to one submission of the batch (:class:`Roster`); any
problem in any file refuses the whole course, before anything is graded,
with the file, line and fix of each.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from autograder import homework
from autograder.rubric import Rubric
from autograder.term import marks
from autograder.term.files import (StaffFileError, parse_time, present,
                                   problem, read_csv)
from autograder.term.policy import POLICY_FILE, Policy, load_policy

COURSE_FOLDER = "course"        # beside homework.toml
SUBMITTED_FILE = "submitted.csv"


def default_folder() -> Path:
    """``course/`` beside the homework profile in use."""
    return homework.current().root / COURSE_FOLDER


def question_points(path: Path | None = None) -> dict[str, float]:
    """Question id -> its points (0: feedback only), in notebook order,
    from questions.toml (``questions`` and ``points``, which `make
    generate` writes from the notebook's source)."""
    path = Path(path or homework.current().questions)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise StaffFileError([problem(path, None, str(exc),
                                      "regenerate it with `make generate`")]
                             ) from None
    asked = data.get("questions", [])
    points = data.get("points", {})
    bad = [q for q, p in points.items() if q not in asked
           or isinstance(p, bool) or not isinstance(p, (int, float))
           or not math.isfinite(p) or p < 0]
    if bad or not isinstance(asked, list):
        raise StaffFileError([problem(
            path, None, f"points of {', '.join(bad) or 'questions'} are not "
            f"those of declared questions", "regenerate it with `make "
            f"generate`")])
    return {q: float(points.get(q, 0)) for q in asked}


@dataclass
class Roster:
    """Who handed in what: each submission of the batch by its name in
    grades.csv, with the other names a staff file may use for it (its
    export folder and id, each submitter's SID and email); ``missing``:
    submissions listed by an export without files."""

    names: list[str]
    aliases: dict[str, list[str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    index: dict[str, list[str]] = field(default_factory=dict, init=False,
                                        repr=False)

    def __post_init__(self) -> None:
        for name in [*self.names, *self.missing]:
            for alias in {a.casefold() for a in
                          [name, *self.aliases.get(name, [])] if a}:
                self.index.setdefault(alias, []).append(name)

    def resolve(self, key: str) -> list[str]:
        """The submissions ``key`` names (casefolded)."""
        return self.index.get(key.strip().casefold(), [])


@dataclass
class Course:
    """The staff's decisions, each resolved to a submission name."""

    folder: Path
    question_points: dict[str, float]
    policy: Policy | None = None
    scores: dict[str, dict[str, marks.Mark]] = field(default_factory=dict)
    adjustments: dict[str, list[marks.Mark]] = field(default_factory=dict)
    submitted: dict[str, datetime] = field(default_factory=dict)
    due: dict[str, datetime] = field(default_factory=dict)  # extensions
    # rubric id -> the range its score may take (an item or a bonus:
    # 0 to its points; a deduction: minus its points to 0)
    item_range: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """Whether anything is decided: a policy, a score, an adjustment,
        a time, or a question with points (then its score is pending)."""
        return bool(self.policy or self.scores or self.adjustments
                    or self.submitted or any(self.question_points.values()))

    @property
    def scored_questions(self) -> list[str]:
        return [q for q, p in self.question_points.items() if p > 0]


def load_course(folder: Path, rubric: Rubric, roster: Roster,
                questions: dict[str, float] | None = None) -> Course:
    """Every staff file of ``folder``, checked and resolved against the
    rubric, the declared questions and ``roster``; StaffFileError listing
    every problem (nothing is applied in part)."""
    folder = Path(folder)
    points = question_points() if questions is None else questions
    course = Course(folder, points)
    problems: list[str] = []
    try:
        course.policy = load_policy(folder / POLICY_FILE)
    except StaffFileError as exc:
        problems += exc.problems
    items = {c.id: abs(c.points) for c in rubric.checks()}
    deductions = {c.id for t in rubric.tasks for c in t.deductions}
    course.item_range = {i: (-p, 0.0) if i in deductions else (0.0, p)
                         for i, p in items.items()}
    readers = ((marks.SCORES_FILE, lambda p: marks.load_scores(p, points)),
               (marks.ADJUSTMENTS_FILE,
                lambda p: marks.load_adjustments(p, items)))
    for name, read in readers:
        try:
            rows = read(folder / name)
        except StaffFileError as exc:
            problems += exc.problems
            rows = exc.good
        for mark in rows:
            sub = _one(roster, mark.student, mark.path, mark.line, problems)
            if sub is None:
                continue
            if name == marks.SCORES_FILE:
                taken = course.scores.setdefault(sub, {})
            else:
                taken = {m.target: m for m in course.adjustments.get(sub, [])}
            if mark.target in taken:
                problems.append(problem(
                    mark.path, mark.line, f"{mark.student} is {sub}, "
                    f"already marked on {mark.target} at "
                    f"{taken[mark.target].where}", "keep one of the rows"))
            elif name == marks.SCORES_FILE:
                taken[mark.target] = mark
            else:
                course.adjustments.setdefault(sub, []).append(mark)
    _times(folder / SUBMITTED_FILE, roster, course, problems)
    if course.policy is not None:
        for key, (due, line) in course.policy.extensions.items():
            sub = _one(roster, key, folder / POLICY_FILE, line, problems)
            if sub is not None and sub in course.due:
                problems.append(problem(folder / POLICY_FILE, line,
                                        f"a second extension for {sub}",
                                        "keep one"))
            elif sub is not None:
                course.due[sub] = due
    if problems:
        raise StaffFileError(problems)
    return course


def _times(path: Path, roster: Roster, course: Course,
           problems: list[str]) -> None:
    if not present(path):
        return
    try:
        rows = read_csv(path, ("student", "submitted_at"))
    except StaffFileError as exc:
        problems += exc.problems
        return
    for line, row in rows:
        try:
            when = parse_time(row["submitted_at"])
        except ValueError as exc:
            problems.append(problem(path, line, *str(exc).split(": ", 1)))
            continue
        sub = _one(roster, row["student"], path, line, problems)
        if sub is not None and sub in course.submitted:
            problems.append(problem(path, line, f"a second time for {sub}",
                                    "keep one row per student"))
        elif sub is not None:
            course.submitted[sub] = when


def _one(roster: Roster, key: str, path: Path, line: int,
         problems: list[str]) -> str | None:
    """The one submission ``key`` names, or None with the problem."""
    found = roster.resolve(key)
    if len(found) == 1:
        return found[0]
    if not found:
        problems.append(problem(path, line, f"unknown student {key!r}",
                                "write a submission name, id, SID or "
                                "email of this batch"))
    else:
        problems.append(problem(path, line, f"{key!r} names "
                                f"{', '.join(found)}", "write a submission"
                                " id to say which"))
    return None


__all__ = ["COURSE_FOLDER", "Course", "Roster", "default_folder",
           "load_course", "question_points"]
