"""What TAs mark by hand: question scores (``course/scores.csv``) and
adjustments (``course/adjustments.csv``), read and checked row by row
against the declared questions and the rubric (the students are checked
against the batch by ``course.load_course``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autograder.term.files import (StaffFileError, parse_points, present,
                                   problem, read_csv)

SCORES_FILE = "scores.csv"
ADJUSTMENTS_FILE = "adjustments.csv"
TOTAL = "total"     # an adjustment of the final total, not of an item


@dataclass(frozen=True)
class Mark:
    """One row of a marks file: the student as written, what it marks (a
    question, a rubric item or ``total``), the points, the words (a
    comment or a reason) and where it was written."""

    student: str
    target: str
    points: float
    words: str
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def load_scores(path: Path, question_points: dict[str, float]
                ) -> list[Mark]:
    """The rows of scores.csv (``student,question,points,comment``): a
    declared question with points, 0 to its points; one row per student
    and question."""
    def check(row: dict[str, str]) -> tuple[str, str]:
        question = row["question"]
        if question not in question_points:
            return "", (f"unknown question {question!r}: write one of "
                        f"{', '.join(question_points) or '(none declared)'}")
        top = question_points[question]
        if top <= 0:
            return "", (f"question {question} has no points: declare them "
                        f"in the notebook's source (+++ {{\"question\": "
                        f"\"{question}\", \"points\": 2}}), `make generate`")
        if not 0 <= float(row["points"]) <= top:
            return "", (f"{row['points']} points on {question}, worth "
                        f"{top:g}: write 0 to {top:g}")
        return question, ""
    return _load(path, ("student", "question", "points"), ("comment",),
                 check, "comment")


def load_adjustments(path: Path, item_points: dict[str, float]
                     ) -> list[Mark]:
    """The rows of adjustments.csv (``student,item,points,reason``): a
    rubric item, deduction or bonus id, or ``total``; points given (+) or
    taken (-), for an item at most its own points either way; a reason
    always; one row per student and item."""
    def check(row: dict[str, str]) -> tuple[str, str]:
        item, points = row["item"], float(row["points"])
        if not row["reason"]:
            return "", "no reason: write why (the student reads it)"
        if points == 0:
            return "", "0 points: remove the row or give the points"
        if item == TOTAL:
            return item, ""
        if item not in item_points:
            return "", (f"unknown item {item!r}: write a rubric id "
                        f"({', '.join(list(item_points)[:6])}, ...) or "
                        f"{TOTAL}")
        if abs(points) > item_points[item]:
            return "", (f"{points:g} points on item {item}, worth "
                        f"{item_points[item]:g}: at most that either way "
                        f"(use {TOTAL} for more)")
        return item, ""
    return _load(path, ("student", "item", "points", "reason"), (), check,
                 "reason")


def _load(path: Path, columns: tuple[str, ...], optional: tuple[str, ...],
          check, words: str) -> list[Mark]:
    if not present(path):
        return []
    target = columns[1]
    marks, problems, seen = [], [], {}
    for line, row in read_csv(path, columns, optional):
        if not row["student"]:
            problems.append(problem(path, line, "no student",
                                    "write a submission name, id, SID "
                                    "or email"))
            continue
        try:
            points = parse_points(row["points"])
        except ValueError as exc:
            problems.append(problem(path, line, str(exc),
                                    "write a number such as 1.5"))
            continue
        row["points"] = f"{points:g}"
        marked, why = check(row)
        if why:
            problems.append(problem(path, line, why.split(": ", 1)[0],
                                    why.split(": ", 1)[-1]))
            continue
        key = (row["student"].casefold(), marked)
        if key in seen:
            problems.append(problem(
                path, line, f"a second row for {row['student']} and "
                f"{marked} (the first is line {seen[key]})",
                "keep one row per student and " + target))
            continue
        seen[key] = line
        marks.append(Mark(row["student"], marked, points,
                          row.get(words, ""), path, line))
    if problems:
        error = StaffFileError(problems)
        error.good = marks   # checked against the batch too
        raise error
    return marks


__all__ = ["ADJUSTMENTS_FILE", "Mark", "SCORES_FILE", "TOTAL",
           "load_adjustments", "load_scores"]
