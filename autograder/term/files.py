"""Reading a staff file (the policy, scores, adjustments, submission
times) as input like any other: every problem named with its file, line
and fix, and the file refused whole (:class:`StaffFileError`).
"""
from __future__ import annotations

import csv
import io
import math
import os
import stat
from datetime import datetime
from pathlib import Path

from autograder.files.user_files import kind_of, read_regular

MAX_BYTES = 10 * 1024 ** 2     # a staff file larger is refused
MAX_PROBLEMS = 20              # listed in one error


class StaffFileError(ValueError):
    """A staff file is refused whole; ``str()`` lists each problem as
    ``path:line: problem: fix``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        self.good: list = []   # a marks file's rows without a problem
        shown = problems[:MAX_PROBLEMS]
        more = len(problems) - len(shown)
        super().__init__("\n  ".join(
            ["a staff file is refused whole (nothing of it applied):",
             *shown, *([f"... and {more} more"] if more else [])]))


def problem(path: Path, line: int | None, what: str, fix: str) -> str:
    """One problem as the error lists it."""
    where = f"{path}:{line}" if line else str(path)
    return f"{where}: {what}: {fix}"


def present(path: Path) -> bool:
    """Whether the course has this file: False where nothing is there,
    True for a regular file (or a link to one); StaffFileError for
    anything else (a folder, a FIFO, a broken link), never skipped in
    silence, since the decisions in it would then be lost."""
    if not os.path.lexists(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise StaffFileError([problem(path, None, exc.strerror or str(exc),
                                      "fix or remove the link")]) from None
    if not stat.S_ISREG(mode):
        raise StaffFileError([problem(path, None, f"{kind_of(mode)}, not "
                                      f"a file", "put the file there")])
    return True


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a byte-order mark allowed), bounded; read
    only once it is known to be a regular file (a link to one is followed:
    a course folder kept in a repository), so a FIFO never blocks."""
    try:
        data = read_regular(path, MAX_BYTES, follow_links=True)
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StaffFileError([problem(path, None, f"not UTF-8 ({exc})",
                                      "save it as UTF-8 CSV")]) from None
    except ValueError:      # read_regular: more than MAX_BYTES
        raise StaffFileError([problem(path, None, f"larger than "
                                      f"{MAX_BYTES} bytes",
                                      "is it the right file?")]) from None
    except OSError as exc:
        raise StaffFileError([problem(path, None, exc.strerror or str(exc),
                                      "fix the file's permissions")]
                             ) from None


def read_csv(path: Path, columns: tuple[str, ...],
             optional: tuple[str, ...] = ()
             ) -> list[tuple[int, dict[str, str]]]:
    """(line, row) of every non-empty row of a CSV staff file whose
    header holds ``columns`` (and may hold ``optional``), each cell
    stripped; StaffFileError on another header."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in columns if c not in header]
        unknown = [h for h in header if h not in (*columns, *optional)]
        if missing or unknown or len(set(header)) != len(header):
            raise StaffFileError([problem(
                path, 1, f"the header is {','.join(header) or '(empty)'}",
                f"the first line must be {','.join(columns + optional)}")])
        rows = []
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) > len(header):
                raise StaffFileError([problem(
                    path, line, f"{len(cells)} cells under a header of "
                    f"{len(header)}", "quote a cell holding a comma")])
            cells += [""] * (len(header) - len(cells))
            rows.append((line, {h: c.strip() for h, c in
                                zip(header, cells)}))
        return rows
    except csv.Error as exc:
        raise StaffFileError([problem(path, reader.line_num, str(exc),
                                      "save it as plain CSV")]) from None


def parse_time(text: str) -> datetime:
    """An ISO 8601 time with its zone (``2026-11-20T23:59:00-08:00``,
    ``...Z``); ValueError naming the fix otherwise."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a time: write it as "
                         f"2026-11-20T23:59:00-08:00") from None
    return require_zone(when, text)


def require_zone(when: object, shown: str) -> datetime:
    """``when`` if it is a time with a zone; ValueError naming the fix."""
    if not isinstance(when, datetime):
        raise ValueError(f"{shown} is a date without a time: write "
                         f"2026-11-20T23:59:00-08:00")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{shown} has no time zone: add its offset, as "
                         f"in 2026-11-20T23:59:00-08:00 (or Z for UTC)")
    return when


def parse_points(text: str) -> float:
    """A finite number of points; ValueError otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of points") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number of points")
    return value


__all__ = ["StaffFileError", "parse_points", "parse_time", "present",
           "problem", "read_csv", "read_text", "require_zone"]
