"""Generate the student skeleton from the reference (`make skeleton`).

Every region between ``# YOUR CODE STARTS HERE`` and ``# YOUR CODE ENDS HERE``
of the reference is replaced by a single ``raise NotImplementedError(...)``
that names the region's task (from the nearest ``# Task X.Y`` header above)
and what to do (the header's first clause). Header comments, markers,
docstrings and all given code are kept verbatim, so the skeleton is fully
determined by the reference: ``stale`` reports drift. The points in the
task headers ("# Task 1.2 (3 points, +1 bonus ...") are written from
autograder/rubric.toml into both files: change a point there only.
``make skeleton`` (``python -m kit.generate skeleton [--check]``) runs it.
"""
from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from pathlib import Path

from autograder import homework
from autograder.submission.regions import (END_MARKER, START_MARKER, Region,
                                           find_regions)
from autograder.local import points_text, task_points
from autograder.rubric import Rubric, load_rubric

ROOT = Path(__file__).resolve().parents[2]

MAX_LINE = 79  # pycodestyle's default
# Shorter code (after removing its comment) is trivia such as ")" or
# "return x" that also occurs in any implementation: not a leak.
MIN_SOLUTION_CHARS = 12
_HEADER = re.compile(
    r"#\s*Task\s+(?P<task>\d+(?:\.\d+)?)\s*(?:\([^)]*\))?\s*:?\s*(?P<text>.*)",
    re.IGNORECASE)


# "# Task 1.2 (3 points, +1 bonus ...": the numbers come from the rubric.
_POINTS = re.compile(r"(?P<head>#\s*Task\s+(?P<task>\d+(?:\.\d+)?)\s*\()"
                     r"(?P<points>\d+(?:\.\d+)?) points?"
                     r"(?:, \+(?P<bonus>\d+(?:\.\d+)?) bonus)?")


def sync_points(source: str, rubric: Rubric) -> str:
    """``source`` with every task header's points (and bonus) as the
    rubric says: the rubric is the one place a point is written."""
    def fix(match: re.Match) -> str:
        task = match.group("task")
        if task not in task_points(rubric):
            return match.group(0)
        return match.group("head") + points_text(task, rubric)
    return _POINTS.sub(fix, source)


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _checked_regions(source: str) -> list[Region]:
    """find_regions, but insisting on matched markers and a task header:
    the skeleton must never silently swallow given code."""
    lines = source.splitlines()
    regions = find_regions(source)
    starts = sum(line.strip() == START_MARKER for line in lines)
    ends = sum(line.strip() == END_MARKER for line in lines)
    if starts != ends or starts != len(regions):
        raise ValueError(f"unbalanced markers: {starts} x {START_MARKER!r}, "
                         f"{ends} x {END_MARKER!r}")
    for region in regions:
        # find_regions numbers content lines; the markers sit just outside.
        start_marker, end_marker = region.start - 2, region.end
        if lines[start_marker].strip() != START_MARKER or \
                end_marker >= len(lines) or \
                lines[end_marker].strip() != END_MARKER:
            raise ValueError(f"line {region.start - 1}: {START_MARKER!r} "
                             f"without a matching {END_MARKER!r}")
        if not region.task:
            raise ValueError(f"line {region.start - 1}: region without a "
                             f"'# Task X.Y' header comment above it")
    return regions


def _task_summary(lines: list[str], region: Region) -> str:
    """The first clause of the region's task header, e.g. "create the
    query, key and value projections as attributes q, k and v"."""
    marker = region.start - 2
    header = next(i for i in range(marker, -1, -1)
                  if (m := _HEADER.search(lines[i].strip()))
                  and lines[i].strip().startswith("#")
                  and m.group("task") == region.task)
    words = [_HEADER.search(lines[header].strip()).group("text")]
    for line in lines[header + 1:marker]:
        if not line.strip().startswith("#"):
            break
        words.append(line.strip().lstrip("#").strip())
    text = " ".join(w for w in words if w).replace("``", "")
    # Up to the first sentence end or colon; "nn.Linear" has no space after
    # its dot, so it does not end the clause.
    return re.split(r"[.:](?:\s|$)", text, maxsplit=1)[0].strip()


def _raise_lines(task: str, summary: str, indent: str) -> list[str]:
    """``raise NotImplementedError("Task X.Y not implemented yet: ...")``,
    wrapped into adjacent string literals to stay within MAX_LINE."""
    message = f"Task {task} not implemented yet"
    if summary:
        message += f": {summary}"

    def literal(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    one_line = f"{indent}raise NotImplementedError({literal(message)})"
    if len(one_line) <= MAX_LINE:
        return [one_line]
    inner = indent + " " * 4
    width = MAX_LINE - len(inner) - 2  # the two quotes
    pieces = textwrap.wrap(message, width=width - 1, break_long_words=False,
                           break_on_hyphens=False)
    # Keep the space at the end of every piece but the last, so that the
    # concatenated literals give back the message.
    body = [inner + literal(p + " ") for p in pieces[:-1]]
    body.append(inner + literal(pieces[-1]))
    return [f"{indent}raise NotImplementedError("] + body + [f"{indent})"]


def generate_skeleton(reference_source: str,
                      rubric: Rubric | None = None) -> str:
    """The student skeleton of ``reference_source``: every marked region
    replaced by a raise naming its task, every task header's points taken
    from ``rubric`` (default: the grader's). Raises ValueError on unmatched
    markers or a region without a task header, SyntaxError if either the
    reference or the result does not parse."""
    return unwritten(sync_points(reference_source, rubric or load_rubric()))


def unwritten(reference_source: str,
              tasks: set[str] | None = None) -> str:
    """``reference_source`` with the marked regions of ``tasks`` (default:
    all) replaced by the skeleton's raise: the skeleton, or the reference
    with only some tasks left to write (what the notebook build runs to
    find which tasks a check needs)."""
    lines = reference_source.splitlines()
    for region in reversed(_checked_regions(reference_source)):
        if tasks is not None and region.task not in tasks:
            continue
        indent = _indent(lines[region.start - 2])
        summary = _task_summary(lines, region)
        lines[region.start - 1:region.end] = _raise_lines(
            region.task, summary, indent)
    skeleton = "\n".join(lines) + "\n"
    ast.parse(skeleton)
    return skeleton


def _code_without_comments(source: str) -> dict[int, str]:
    """Line number -> the line with its comment removed and stripped."""
    lines = source.splitlines()
    code = {i: line for i, line in enumerate(lines, 1)}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for token in tokens:
        if token.type == tokenize.COMMENT:
            row, col = token.start
            code[row] = code[row][:col]
    return {i: text.strip() for i, text in code.items()}


def solution_lines(reference_source: str) -> list[tuple[int, str]]:
    """The non-trivial code lines inside the reference's regions, as
    ``(line number, code without comment)``, in file order.

    Skipped: blank and comment lines, trivia with fewer than
    MIN_SOLUTION_CHARS non-space characters (``)``, ``return x``), and lines
    that also occur as given code outside the regions (they ship anyway, so
    finding them in a release is not a leak).
    """
    code = _code_without_comments(reference_source)
    regions = _checked_regions(reference_source)
    inside = {n for r in regions for n in range(r.start, r.end + 1)}
    given = {text for n, text in code.items() if n not in inside}
    found = []
    for number in sorted(inside):
        text = code[number]
        if len("".join(text.split())) < MIN_SOLUTION_CHARS or text in given:
            continue
        found.append((number, text))
    return found


def stale(reference_path: Path | None = None, output: Path | None = None,
          rubric=None) -> str | None:
    """What is out of step, with what to run, or None: the reference's
    task headers against the rubric, or ``output`` against a fresh
    generation (defaults: the homework in use's reference and module)."""
    reference_path = reference_path or homework.staff().reference
    output = output or homework.current().module
    reference = reference_path.read_text()
    if sync_points(reference, rubric or load_rubric()) != reference:
        return (f"{reference_path}: its task headers' points differ from "
                f"autograder/rubric.toml: run `make skeleton`")
    current = output.read_text() if output.exists() else ""
    if current != generate_skeleton(reference):
        return f"{output} is stale: run `make skeleton`"
    return None


def write(reference: Path | None = None, output: Path | None = None) -> int:
    """Write the skeleton from ``reference``, and the rubric's points into
    both; 0 (the generators' ``write`` status). Defaults: the homework in
    use's reference and module."""
    reference = reference or homework.staff().reference
    output = output or homework.current().module
    text = reference.read_text()
    synced = sync_points(text, load_rubric())
    if synced != text:
        reference.write_text(synced)
        print(f"updated the points in {reference} from the rubric")
    output.write_text(generate_skeleton(text))
    print(f"wrote {output}")
    return 0
