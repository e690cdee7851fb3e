"""The course's late policy (``course/policy.toml``): the due date, the
grace, the penalty per day late and its cap, each student's own due date;
and where the grades go (``[exports] canvas_column``: the header of the
assignment's column in the course's Canvas gradebook, so that an import
fills that assignment instead of creating a new one).

A penalty is a percent of the points earned: ``percent_per_day`` for each
day or part of a day after the due time (a submission within the grace is
on time), at most ``cap_percent`` in all. Times carry their zone.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from autograder.term.files import (StaffFileError, present, problem,
                                   read_text, require_zone)

POLICY_FILE = "policy.toml"
SECTIONS = {"deadline": {"due", "grace_minutes"},
            "late": {"percent_per_day", "cap_percent"},
            "extensions": None,     # any student key
            "exports": {"canvas_column"}}
MAX_COLUMN = 255          # characters of a gradebook column header
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Policy:
    """The late policy; ``extensions``: a student key as written (a
    submission name, id, SID or email) -> (its own due date, the line)."""

    due: datetime | None = None
    grace: timedelta = timedelta(0)
    percent_per_day: float = 0.0
    cap_percent: float = 100.0
    extensions: dict[str, tuple[datetime, int]] = field(default_factory=dict)
    canvas_column: str = ""     # "" : the kit names the column

    def lateness(self, submitted: datetime, due: datetime | None = None
                 ) -> tuple[int, float]:
        """(days late, penalty percent) of a submission at ``submitted``
        against ``due`` (default the policy's): 0 within the grace, else
        each day or part of a day after the due time, capped."""
        due = due or self.due
        if due is None or submitted - due <= self.grace:
            return 0, 0.0
        days = math.ceil((submitted - due) / DAY)
        return days, min(self.cap_percent, days * self.percent_per_day)

    def words(self) -> str:
        """The rule in a sentence (feedback and the Gradescope test)."""
        grace = (f", {self.grace.total_seconds() / 60:g} minutes' grace"
                 if self.grace else "")
        return (f"{self.percent_per_day:g}% of the points earned per day "
                f"or part of a day late{grace}, at most "
                f"{self.cap_percent:g}%")

    def shipped(self) -> str:
        """The policy as ``policy.toml`` text without the extensions (the
        Gradescope zip's copy: Gradescope holds its own per student)."""
        lines = ["# Shipped by `make autograder` from the course's "
                 "policy.toml (its extensions left out:",
                 "# Gradescope's own per-student due dates apply).",
                 "", "[deadline]"]
        if self.due is not None:
            lines.append(f"due = {self.due.isoformat()}")
        lines += [f"grace_minutes = {self.grace.total_seconds() / 60:g}",
                  "", "[late]",
                  f"percent_per_day = {self.percent_per_day:g}",
                  f"cap_percent = {self.cap_percent:g}", ""]
        return "\n".join(lines)


def load_policy(path: Path) -> Policy | None:
    """The policy of ``path``, None where there is no such file;
    StaffFileError naming the line and the fix otherwise."""
    if not present(path):
        return None
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StaffFileError([problem(path, None, str(exc),
                                      "fix the TOML there")]) from None
    problems: list[str] = []

    def bad(key: str, what: str, fix: str) -> None:
        problems.append(problem(path, _line_of(text, key), what, fix))

    for section, value in data.items():
        if section not in SECTIONS or not isinstance(value, dict):
            bad(section, f"unknown section [{section}]",
                f"write [{'], ['.join(SECTIONS)}]")
            continue
        for key in value:
            if SECTIONS[section] is not None and key not in SECTIONS[section]:
                bad(key, f"unknown key {key!r} in [{section}]",
                    f"write {', '.join(sorted(SECTIONS[section]))}")
    deadline, late = data.get("deadline", {}), data.get("late", {})
    due = _time(deadline.get("due"), "due", bad)
    grace = _number(deadline.get("grace_minutes", 0), "grace_minutes", bad)
    per_day = _number(late.get("percent_per_day", 0), "percent_per_day",
                      bad, top=100)
    cap = _number(late.get("cap_percent", 100), "cap_percent", bad, top=100)
    if per_day and due is None:
        bad("percent_per_day", "a late penalty without a due date",
            "add due = 2026-11-20T23:59:00-08:00 under [deadline]")
    extensions = {}
    for key, when in (data.get("extensions") or {}).items():
        own = _time(when, key, bad)
        if own is not None:
            extensions[key.strip()] = (own, _line_of(text, key) or 0)
    column = _column(data.get("exports", {}).get("canvas_column", ""), bad)
    if problems:
        raise StaffFileError(problems)
    return Policy(due, timedelta(minutes=grace or 0), per_day or 0.0,
                  100.0 if cap is None else cap, extensions, column)


def _column(value: object, bad) -> str:
    if isinstance(value, str) and value.strip() and len(value) <= \
            MAX_COLUMN and value.isprintable():
        return value.strip()
    if value != "":
        bad("canvas_column", f"canvas_column = {value!r}",
            "write the assignment's column header as the Canvas gradebook "
            "export shows it, e.g. \"Homework 3 (87568490)\" (one line)")
    return ""


def _time(value: object, key: str, bad) -> datetime | None:
    if value is None:
        return None
    try:
        return require_zone(value, f"{key} = {value}")
    except ValueError as exc:
        bad(key, str(exc).split(": ", 1)[0], str(exc).split(": ", 1)[-1])
        return None


def _number(value: object, key: str, bad, top: float | None = None
            ) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0 \
            or (top is not None and value > top):
        bad(key, f"{key} = {value!r}",
            f"write a number from 0{f' to {top:g}' if top else ''}")
        return None
    return float(value)


def _line_of(text: str, key: str) -> int | None:
    """The line where ``key`` is written (TOML keeps no positions)."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip().lstrip("[").strip()
        for written in (key, f'"{key}"', f"'{key}'"):
            rest = stripped[len(written):].lstrip() \
                if stripped.startswith(written) else ""
            if rest.startswith(("=", "]")):
                return number
    return None


__all__ = ["POLICY_FILE", "Policy", "load_policy"]
