"""The term's totals written beside the grades: grades.csv's appended
columns and each submission's ``final.md``, every file whole
(autograder/files/atomic.py)."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from autograder.files import atomic
from autograder.files.user_files import read_regular
from autograder.report import layout
from autograder.term.course import Course
from autograder.term.files import StaffFileError
from autograder.term.totals import BONUS_WORDS, Final, final, item_problems
from autograder.text import csvsafe, mdsafe

FINAL_NAME = "final.md"
# grades.csv's appended columns, the questions' between penalty and
# adjustments
BEFORE = ["submitted_at", "late_days", "late_penalty"]
AFTER = ["adjustments", "total", "total_max", "pending"]


def term_columns(course: Course) -> list[str]:
    """The columns the term appends to grades.csv."""
    return [*BEFORE, *course.scored_questions, *AFTER]


def apply(out: Path, course: Course, max_score: float, bonus_policy: str,
          times: dict[str, datetime] | None = None) -> dict[str, Final]:
    """Append the term's columns to OUT/grades.csv and write each
    submission's final.md; ``times``: submission name -> its time from an
    export. Returns name -> Final."""
    grades = out / "grades.csv"
    rows = csvsafe.read_rows(grades)
    if not rows:
        return {}
    header, body = rows[0], rows[1:]
    if BEFORE[0] in header:   # applied before (`term OUT`): applied anew
        cut = header.index(BEFORE[0])
        header, body = header[:cut], [row[:cut] for row in body]
        if not course.active:
            csvsafe.write_rows(grades, [header, *body])
    if not course.active:
        remove_finals(out)
        return {}
    at_score = header.index("score")
    finals = {}
    problems: list[str] = []
    for row in body:
        name = row[0]
        score = row[at_score]
        one = final(name, float(score) if score != "" else None, course,
                    max_score, bonus_policy, (times or {}).get(name))
        finals[name] = one
        if one.adjustments:
            problems += item_problems(one, course, _earned(out, name))
    if problems:   # refused whole, before anything is written
        raise StaffFileError(problems)
    new_rows = [[*header, *term_columns(course)]]
    for row in body:
        one = finals[row[0]]
        new_rows.append([*(c if h in _TEXT else _number(c)
                           for h, c in zip(header, row)),
                         *_cells(one, course)])
        atomic.write_text(layout.submission_dir(out, row[0]) / FINAL_NAME,
                          final_markdown(one, course, bonus_policy,
                                         _submitters(header, row)))
    csvsafe.write_rows(grades, new_rows)
    return finals


def _earned(out: Path, name: str) -> dict[str, float]:
    """Rubric id -> the points a submission's results give it ({} where
    they cannot be read: nothing to check an adjustment against)."""
    try:   # a regular file, bounded, as the class report reads it
        data = json.loads(read_regular(
            layout.submission_dir(out, name) / "results.json",
            layout.MAX_RESULTS_BYTES))
        return {str(t["number"]): float(t["score"])
                for t in data.get("tests", []) if "number" in t}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


# grades.csv's text columns (the others are numbers, read back as such:
# csvsafe writes a number as one, a text as text)
def remove_finals(out: Path) -> None:
    """Remove every final.md of OUT (the course decides nothing now: an
    old total must not stay beside the grades)."""
    for folder in layout.submission_dirs(out, FINAL_NAME).values():
        try:
            (folder / FINAL_NAME).unlink()
        except OSError as exc:
            raise atomic.OutputError(folder / FINAL_NAME, exc) from None


_TEXT = {"submission", "submission_id", "name", "email", "sid",
         layout.PATH_COLUMN}


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _cells(one: Final, course: Course) -> list[object]:
    def blank(value):
        return "" if value is None else value
    return [one.submitted_at.isoformat() if one.submitted_at else "",
            blank(one.late_days), blank(one.penalty),
            *("" if m is None else m.points for m in one.questions.values()),
            one.adjusted, blank(one.total), one.total_max,
            "; ".join(one.pending)]


def _submitters(header: list[str], row: list[str]) -> str:
    """Who a submission is, where an export's columns say it (grades.csv's
    name and email, written by the export's annotation), else ""."""
    cells = dict(zip(header, row))
    names, emails = (cells.get(column, "").split("; ")
                     for column in ("name", "email"))
    if len(names) != len(emails):   # (the export writes one per person)
        return ", ".join(n for n in names if n.strip())
    return ", ".join(f"{n} ({e})" if e.strip() else n
                     for n, e in zip(names, emails) if n.strip() or
                     e.strip())


def final_markdown(one: Final, course: Course, bonus_policy: str,
                   who: str = "") -> str:
    """The student's final grade: every part, then where the
    autograder's feedback is. ``who``: the submitters' names and
    emails (an export's), said under the heading."""
    total = (f"**Total: {one.total:g} / {one.total_max:g}**"
             if one.total is not None else
             f"**Total: pending ({', '.join(one.pending)})** of "
             f"{one.total_max:g}")
    lines = [f"# Final grade: {mdsafe.inline(one.name, 200)}", "",
             *([f"Submitted by {_cell(who)}.", ""] if who else []), total,
             "", f"Bonus policy: {BONUS_WORDS[bonus_policy]}.", "",
             "| part | points | note |", "| --- | --- | --- |",
             f"| autograder | {_shown(one.autograded)} | see feedback.md |"]
    for question, mark in one.questions.items():
        worth = course.question_points[question]
        lines.append(
            f"| {question} | pending / {worth:g} | not scored yet |"
            if mark is None else
            f"| {question} | {mark.points:g} / {worth:g} | "
            f"{_cell(mark.words)} |")
    if one.due is not None:
        when = one.submitted_at.isoformat() if one.submitted_at else \
            "unknown"
        late = ("on time" if one.late_days == 0 else "time unknown"
                if one.late_days is None else
                f"{one.late_days} day(s) late: -{one.penalty_percent:g}%"
                f" ({course.policy.words()})")
        lines.append(f"| late penalty | {_shown(one.penalty, '-')} | "
                     f"submitted {when}, due {one.due.isoformat()}: "
                     f"{late} |")
    for mark in one.adjustments:
        lines.append(f"| adjustment ({mark.target}) | {mark.points:+g} | "
                     f"{_cell(mark.words)} |")
    return "\n".join(lines) + "\n"


def _shown(value: float | None, sign: str = "") -> str:
    return "pending" if value is None else f"{sign}{value:g}" if value \
        else "0"


def _cell(text: str) -> str:
    # staff text in a table cell: escaped, one line, no column break
    return mdsafe.inline(text, 500).replace("|", "\\|").replace("\n", " ")


__all__ = ["FINAL_NAME", "apply", "final_markdown", "remove_finals",
           "term_columns"]
