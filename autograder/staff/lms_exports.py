"""The grades of a Gradescope export, out to the gradebooks, in the
formats they document: one row per student, each with the total, the
maximum and the bonus policy (``[grading] bonus``).

- ``gradescope_scores.csv``: Name, SID, Email, Score, Submission ID, Max
  Points, Bonus Policy;
- ``canvas_grades.csv``: Canvas's gradebook import: Student, ID, SIS User
  ID, SIS Login ID, Section, one assignment column, and under the header
  the ``Points Possible`` row; a student is matched by SIS User ID (the
  SID). Canvas fills an existing assignment whose column header (its name
  and id, "Homework 3 (87568490)") the file repeats, and creates a new one
  for any other header: the course's ``[exports] canvas_column`` names
  the existing one, else the header is new (the maximum and the bonus
  policy in its name);
- ``moodle_grades.csv``: Moodle's CSV grade import: Full name, Email
  address, ID number, Grade, Feedback (map Email address to useremail).

A score is the term's total where a course applies (blank while pending),
else the autograder's score (blank where the grader failed); a student
listed without files has a blank score: no grade, never a 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder.term.totals import BONUS_WORDS
from autograder.text import csvsafe

GRADESCOPE_CSV = "gradescope_scores.csv"
CANVAS_CSV = "canvas_grades.csv"
MOODLE_CSV = "moodle_grades.csv"
POLICY_SHORT = {"extra_credit": "extra credit", "capped": "capped"}


@dataclass(frozen=True)
class Row:
    """One student's line in every export."""

    name: str
    sid: str
    email: str
    submission_id: str
    score: float | str       # "" : no grade
    maximum: float
    note: str                # why there is no grade, or ""


def student_rows(out: Path, export: Any, maximum: float,
                 finals: dict[str, Any]) -> list[Row]:
    """Every submitter of the export, with the grade of their submission
    (``finals``: the term's totals, or empty: grades.csv's score)."""
    header, rows = csvsafe.read_dicts(out / "grades.csv")
    found = []
    for row in rows:
        name = row["submission"]
        one = finals.get(name)
        score: float | str = row.get("score", "")
        note = "" if score != "" else "grader error"
        if one is not None:
            maximum_here = one.total_max
            score = "" if one.total is None else one.total
            note = "; ".join(one.pending)
        else:
            maximum_here = maximum
            score = float(score) if score != "" else ""
        folder = export.folders.get(name, name)
        for person in export.submitters.get(folder, []):
            found.append(Row(person.name, person.sid, person.email,
                             row.get("submission_id", ""), score,
                             maximum_here, note))
    graded = {export.folders.get(r["submission"], r["submission"])
              for r in rows}
    total_max = max([r.maximum for r in found] or [maximum])
    for folder, people in export.submitters.items():
        if folder not in graded:
            found += [Row(p.name, p.sid, p.email,
                          folder.removeprefix("submission_"), "", total_max,
                          "no files in the export") for p in people]
    return sorted(found, key=lambda r: (r.name, r.email))


def write_all(out: Path, export: Any, maximum: float, bonus_policy: str,
              title: str, finals: dict[str, Any], canvas_column: str = ""
              ) -> str:
    """Write the three exports into ``out``; a line for the terminal.
    ``canvas_column``: the Canvas assignment's own column header ("": a
    new column, named from ``title``)."""
    rows = student_rows(out, export, maximum, finals)
    policy = POLICY_SHORT[bonus_policy]
    words = BONUS_WORDS[bonus_policy]
    csvsafe.write_rows(out / GRADESCOPE_CSV, [
        ["Name", "SID", "Email", "Score", "Submission ID", "Max Points",
         "Bonus Policy"],
        *([r.name, r.sid, r.email, r.score, r.submission_id, r.maximum,
           words] for r in rows)])
    top = max([r.maximum for r in rows] or [maximum])
    column = canvas_column or f"{title} (out of {top:g}; bonus {policy})"
    csvsafe.write_rows(out / CANVAS_CSV, [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column],
        ["Points Possible", "", "", "", "", top],
        *([r.name, "", r.sid, "", "", r.score] for r in rows)])
    csvsafe.write_rows(out / MOODLE_CSV, [
        ["Full name", "Email address", "ID number", "Grade", "Feedback"],
        *([r.name, r.email, r.sid, r.score, _feedback(r, words)]
          for r in rows)])
    blank = sum(r.score == "" for r in rows)
    above = sum(r.score != "" and r.score > r.maximum for r in rows)
    where = (f"Canvas column {canvas_column!r}" if canvas_column else
             f"a new Canvas assignment {column!r} (set [exports] "
             f"canvas_column in policy.toml to fill an existing one)")
    return (f"exports: {GRADESCOPE_CSV}, {CANVAS_CSV}, {MOODLE_CSV} in "
            f"{out} ({len(rows)} students, out of {top:g}, bonus {policy}"
            + (f"; {blank} without a grade yet" if blank else "")
            + f"; {where})" + (
                f"\nwarning: {above} of the grades above the maximum "
                f"({top:g}): Moodle's import refuses the whole"
                f" of {MOODLE_CSV} unless the site allows grades above the "
                f"maximum (Site administration > Grades > General settings"
                f" > Unlimited grades)" if above else ""))


def _feedback(row: Row, words: str) -> str:
    if row.score == "":
        return f"No grade yet ({row.note}). Out of {row.maximum:g}; {words}."
    return f"{row.score:g} out of {row.maximum:g}; bonus {words}."


__all__ = ["CANVAS_CSV", "GRADESCOPE_CSV", "MOODLE_CSV", "Row",
           "student_rows", "write_all"]
